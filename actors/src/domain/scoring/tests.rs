//! Fusion, composite scores, session sharing, stated times and diversification, on
//! candidates made by hand; bounds and totality as properties.

use super::*;
use chrono::Duration;
use proptest::prelude::*;

fn ranking() -> Ranking {
    Ranking::fixture()
}

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-06-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn candidate(memory_type: MemoryType, n: u128, signal: f64) -> Candidate {
    Candidate {
        subject: Some(format!("s{n}")),
        predicate: Some("p".into()),
        scope: Some("global".into()),
        permanence: Some("permanent".into()),
        validity: Some("active".into()),
        signal,
        ..Candidate::fixture(memory_type, n, t0())
    }
}

/// Episode `n` as the lists scored it.
fn episode(n: u128, relevance: f64) -> Scored {
    Scored {
        candidate: candidate(MemoryType::Episode, n, 0.0),
        scores: ComponentScores {
            relevance,
            ..ComponentScores::blank()
        },
    }
}

/// Episode `n`'s neighbours: (neighbour, distance in turns).
fn near(n: u128, links: &[(u128, u32)]) -> SessionNeighbours {
    SessionNeighbours {
        id: Uuid::from_u128(n),
        near: links
            .iter()
            .map(|(m, d)| (Uuid::from_u128(*m), *d))
            .collect(),
    }
}

/// The scores of candidate `n` among `scored`.
fn scores_of(scored: &[Scored], n: u128) -> &ComponentScores {
    &scored
        .iter()
        .find(|s| s.candidate.id.as_u128() == n)
        .unwrap()
        .scores
}

#[test]
fn rrf_rewards_agreement_and_is_bounded_by_two_over_k_plus_one() {
    let (a, b, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
    let fused = rrf(&[a, b], &[a, c], 60.0);
    assert!((fused[&a] - 2.0 / 61.0).abs() < 1e-12);
    assert!((fused[&b] - 1.0 / 62.0).abs() < 1e-12);
    assert!(fused[&a] > fused[&b] && (fused[&b] - fused[&c]).abs() < 1e-12);
}

#[test]
fn recency_halves_every_half_life() {
    assert!((recency(t0(), t0(), 7.0) - 1.0).abs() < 1e-12);
    assert!((recency(t0(), t0() + Duration::days(7), 7.0) - 0.5).abs() < 1e-9);
    assert!((recency(t0(), t0() + Duration::days(14), 7.0) - 0.25).abs() < 1e-9);
}

#[test]
fn composite_uses_the_configured_weights() {
    let r = ranking();
    let hits = r.rank(
        SearchMode::Semantic,
        vec![candidate(MemoryType::Fact, 1, 0.5)],
        vec![],
        t0(),
    );
    // 0.4 * 0.5 + 0.3 * 0.5 + 0.2 * 1 + 0.1 * 1
    assert!((hits[0].score - 0.65).abs() < 1e-12, "{}", hits[0].score);
    assert_eq!(hits[0].scores.semantic_rank, Some(1));
}

/// A stated time (May) keeps the score of an episode of May (one stored in June that
/// happened in May too) and of a fact true in May (superseded since), halves those of an
/// episode and a fact of June, and leaves a rule made in June alone.
#[test]
fn a_stated_time_halves_what_lies_outside_it_but_rules() {
    let may = |d| t0() - Duration::days(31) + Duration::days(d);
    let mut r = ranking();
    r.stated_time = Some((
        TimeWindow::Span {
            since: Some(may(0)),
            until: Some(may(31) - Duration::microseconds(1)),
        },
        0.5,
    ));
    let at = |memory_type, n, created: DateTime<Utc>| Candidate {
        created_at: created,
        valid_from: (memory_type == MemoryType::Fact).then_some(created),
        ..candidate(memory_type, n, 0.5)
    };
    let mut superseded = at(MemoryType::Fact, 3, may(2));
    superseded.valid_until = Some(may(40));
    // Stored in June, imported as having happened in May: it is May's.
    let mut imported = at(MemoryType::Episode, 6, may(35));
    imported.occurred_at = Some(may(5));
    let candidates = vec![
        at(MemoryType::Episode, 1, may(10)),
        at(MemoryType::Episode, 2, may(35)),
        superseded,
        at(MemoryType::Fact, 4, may(33)),
        at(MemoryType::Rule, 5, may(33)),
        imported,
    ];
    let hits = r.rank(SearchMode::Semantic, candidates, vec![], t0());
    let weight = |n: u128| {
        let hit = hits.iter().find(|h| h.candidate.id.as_u128() == n).unwrap();
        hit.scores.time_weight
    };
    assert_eq!(
        [1, 2, 3, 4, 5, 6].map(weight),
        [1.0, 0.5, 1.0, 0.5, 1.0, 1.0],
        "{hits:?}"
    );
}

#[test]
fn maturity_weights_the_rule_score() {
    let r = ranking();
    let mut proven = candidate(MemoryType::Rule, 1, 0.5);
    proven.maturity = Some("proven".into());
    let mut fresh = candidate(MemoryType::Rule, 2, 0.5);
    fresh.maturity = Some("candidate".into());
    let hits = r.rank(SearchMode::Semantic, vec![proven, fresh], vec![], t0());
    assert_eq!(hits[0].candidate.id, Uuid::from_u128(1));
    assert!((hits[0].score / hits[1].score - 1.15 / 0.7).abs() < 1e-9);
}

#[test]
fn ties_break_on_created_at_then_id() {
    let r = ranking();
    let mut old = candidate(MemoryType::Fact, 9, 0.5);
    old.created_at = t0() - Duration::days(1);
    let a = candidate(MemoryType::Fact, 2, 0.5);
    let b = candidate(MemoryType::Fact, 1, 0.5);
    let hits = r.rank(SearchMode::Semantic, vec![old, a, b], vec![], t0());
    let ids: Vec<u128> = hits.iter().map(|h| h.candidate.id.as_u128()).collect();
    assert_eq!(ids, vec![1, 2, 9]);
}

#[test]
fn keyword_relevance_is_relative_to_the_best_rank() {
    let r = ranking();
    let hits = r.rank(
        SearchMode::Keyword,
        vec![],
        vec![
            candidate(MemoryType::Fact, 1, 0.8),
            candidate(MemoryType::Fact, 2, 0.2),
        ],
        t0(),
    );
    assert_eq!(hits[0].scores.relevance, 1.0);
    assert!((hits[1].scores.relevance - 0.25).abs() < 1e-12);
}

#[test]
fn one_cluster_cannot_take_the_whole_top_k() {
    let r = ranking();
    let mut list: Vec<Candidate> = (0..6)
        .map(|i| {
            let mut c = candidate(MemoryType::Fact, i, 0.9 - i as f64 * 0.01);
            c.subject = Some("user".into());
            c
        })
        .collect();
    list.push(candidate(MemoryType::Fact, 100, 0.5));
    let hits = r.diversify(r.rank(SearchMode::Semantic, list, vec![], t0()), 4);
    let ids: Vec<u128> = hits.iter().map(|h| h.candidate.id.as_u128()).collect();
    // Cap = 2 of the top 4: the other subject moves up, the rest follow, none dropped.
    assert_eq!(ids, vec![0, 1, 100, 2, 3, 4, 5]);
}

#[test]
fn relative_score_fusion_weighs_normalised_lists() {
    let mut r = ranking();
    r.fusion = Fusion::RelativeScore;
    r.semantic_weight = 0.4;
    let scored = r.relevance(
        SearchMode::Hybrid,
        vec![
            candidate(MemoryType::Fact, 1, 0.9),
            candidate(MemoryType::Fact, 2, 0.5),
        ],
        vec![
            candidate(MemoryType::Fact, 2, 12.0),
            candidate(MemoryType::Fact, 3, 4.0),
        ],
    );
    let rel = |n: u128| scores_of(&scored, n).relevance;
    // 1: best semantic, absent from keyword. 2: worst semantic, best keyword. 3: worst keyword.
    assert!((rel(1) - 0.4).abs() < 1e-12);
    assert!((rel(2) - 0.6).abs() < 1e-12);
    assert!(rel(3).abs() < 1e-12);
}

#[test]
fn session_neighbours_share_relevance() {
    let r = ranking();
    let mut scored = vec![episode(1, 1.0), episode(2, 0.2)];
    let neighbours = vec![near(1, &[(2, 1), (3, 1)]), near(2, &[(1, 1)])];
    r.with_session_neighbours(
        &mut scored,
        &neighbours,
        vec![candidate(MemoryType::Episode, 3, 0.0)],
    );
    let rel = |n: u128| scores_of(&scored, n).relevance;
    assert!((rel(1) - (1.0 + 0.4 * 0.2) / 1.4).abs() < 1e-12);
    assert!(
        (rel(2) - (0.2 + 0.4 * 1.0) / 1.4).abs() < 1e-12,
        "lifted by its relevant neighbour"
    );
    assert!(
        (rel(3) - 0.4 / 1.4).abs() < 1e-12,
        "a neighbour no list found joins"
    );
    assert!(scored.iter().all(|s| s.scores.relevance <= 1.0));
}

#[test]
fn a_neighbour_further_away_shares_less() {
    let r = Ranking::fixture(); // decay 0.75
    // 1 found at 1.0; 2 beside it at 0.1 and 3 two turns from it at 0.1; 4 two turns
    // from 1 and found by no list.
    let mut scored = vec![episode(1, 1.0), episode(2, 0.1), episode(3, 0.1)];
    let neighbours = vec![
        near(1, &[(2, 1), (4, 2)]),
        near(2, &[(1, 1)]),
        near(3, &[(2, 1), (1, 2)]),
    ];
    r.with_session_neighbours(
        &mut scored,
        &neighbours,
        vec![candidate(MemoryType::Episode, 4, 0.0)],
    );
    let shared = |n: u128| scores_of(&scored, n).session_neighbour.unwrap();
    assert!((shared(2) - 1.0).abs() < 1e-12);
    assert!(
        (shared(3) - 0.75).abs() < 1e-12,
        "the best, weighed by distance"
    );
    assert!(
        (shared(4) - 0.75).abs() < 1e-12,
        "joins with the weighed share"
    );
    assert!(shared(2) > shared(3));
}

proptest! {
    #[test]
    fn scores_are_bounded_and_order_is_total(
        signals in proptest::collection::vec(0.0f64..1.0, 1..30),
        importance in proptest::collection::vec(0.0f64..=10.0, 30),
        days in proptest::collection::vec(0i64..400, 30),
    ) {
        let r = ranking();
        let list: Vec<Candidate> = signals.iter().enumerate().map(|(i, s)| {
            let mut c = candidate(MemoryType::Fact, i as u128, *s);
            c.importance = importance[i];
            c.last_referenced_at = t0() - Duration::days(days[i]);
            c.decay_rate = 0.008;
            c.last_confirmed_at = t0() - Duration::days(days[i]);
            c
        }).collect();
        let keyword: Vec<Candidate> = list.iter().rev().cloned().collect();
        let hits = r.rank(SearchMode::Hybrid, list.clone(), keyword, t0());
        prop_assert_eq!(hits.len(), list.len());
        for h in &hits {
            prop_assert!(h.score >= 0.0 && h.score <= 1.0 + 1e-9);
            for c in [h.scores.relevance, h.scores.importance, h.scores.recency, h.scores.confidence] {
                prop_assert!((0.0..=1.0).contains(&c));
            }
        }
        for w in hits.windows(2) {
            prop_assert_ne!(order(&w[0], &w[1]), Ordering::Greater);
        }
    }

    #[test]
    fn rrf_relevance_never_exceeds_one(n in 1usize..50, m in 1usize..50) {
        let a: Vec<Uuid> = (0..n as u128).map(Uuid::from_u128).collect();
        let b: Vec<Uuid> = (0..m as u128).map(Uuid::from_u128).collect();
        let max = 2.0 / 61.0;
        for v in rrf(&a, &b, 60.0).values() {
            prop_assert!(*v <= max + 1e-12);
        }
    }

    #[test]
    fn diversify_keeps_every_hit(subjects in proptest::collection::vec(0u8..3, 1..40), limit in 1usize..20) {
        let r = ranking();
        let list: Vec<Candidate> = subjects.iter().enumerate().map(|(i, s)| {
            let mut c = candidate(MemoryType::Fact, i as u128, 1.0 - i as f64 / 100.0);
            c.subject = Some(format!("s{s}"));
            c
        }).collect();
        let ranked = r.rank(SearchMode::Semantic, list, vec![], t0());
        let mut before: Vec<Uuid> = ranked.iter().map(|h| h.candidate.id).collect();
        let diversified = r.diversify(ranked, limit);
        let mut after: Vec<Uuid> = diversified.iter().map(|h| h.candidate.id).collect();
        before.sort();
        after.sort();
        prop_assert_eq!(before, after);
    }
}
