//! When a cached count is fresh, served while it is recounted behind the read, or waited for:
//! by its age against the trust window and by how far the corpus moved since.

use super::*;

#[test]
fn counts_are_served_fresh_then_stale_for_as_long_again_then_not() {
    let window = trusted_for(20_000.0);
    assert_eq!(window, Duration::seconds(20));
    let at = |secs| freshness(Duration::seconds(secs), window, 0.0);
    assert_eq!(at(0), Freshness::Fresh);
    assert_eq!(at(19), Freshness::Fresh);
    assert_eq!(at(20), Freshness::Stale);
    assert_eq!(at(39), Freshness::Stale);
    assert_eq!(at(40), Freshness::Expired);
    // The window never passes MAX_AGE, and a small corpus has at least a second.
    assert_eq!(trusted_for(1e9), MAX_AGE);
    assert_eq!(trusted_for(3.0), Duration::seconds(1));
}

#[test]
fn a_word_count_goes_stale_as_the_corpus_moves_and_expires_with_age() {
    let window = Duration::seconds(10);
    let young = Duration::seconds(1);
    assert_eq!(freshness(young, window, DRIFT), Freshness::Fresh);
    assert_eq!(freshness(young, window, 1.5 * DRIFT), Freshness::Stale);
    // A tenant that doubled since: served once more, recounted behind the read.
    assert_eq!(freshness(young, window, 1.0), Freshness::Stale);
    // Age and drift together: stale on both counts is still stale, not more.
    assert_eq!(
        freshness(Duration::seconds(15), window, 1.5 * DRIFT),
        Freshness::Stale
    );
    assert_eq!(
        freshness(Duration::seconds(25), window, 0.0),
        Freshness::Expired
    );
}
