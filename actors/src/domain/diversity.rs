//! Near-duplicates: two facts or two rules that say the same thing in nearly the same words
//! ("Always confirm before sending an email", "Always confirm before sending emails"). The
//! second adds nothing to a top-k or a context block but takes a place: it moves below
//! everything else (demoted, never dropped). Clusters (`scoring::Ranking::diversify`) keep
//! one subject or session from crowding the top; this keeps one statement from appearing
//! twice, whatever its subject: it is how rules, which have no subject, are diversified.
//!
//! Resemblance is the Jaccard index of the texts' word sets, no model: numbers whole, words
//! of cased alphabets (Latin, Cyrillic, Greek, ...) by their first five letters and only
//! from three letters on, so that inflections and articles ("an email", "emails") do not
//! hide a restatement; words of other scripts whole. Episodes are left alone: they are
//! records of what happened, and two alike are two events.

use std::collections::HashSet;

use super::memory_type::MemoryType;
use super::search::Hit;

/// The word-set resemblance from which two memories of one type say the same thing. High
/// enough that a different value is not one: "prefers tea" / "prefers coffee" 0.33, "March
/// 3" / "March 30" in a five-word fact 0.6, one word of ten swapped 0.82.
pub const SAME_THING: f64 = 0.85;

/// How much of a cased word counts: enough to tell words apart, not their endings.
const STEM_CHARS: usize = 5;

/// `hits` in order, except that a fact or rule resembling one placed before it (within the
/// first `window` places, where a reader looks) moves to the end.
pub fn demote_near_duplicates(hits: Vec<Hit>, window: usize) -> Vec<Hit> {
    let mut placed: Vec<(MemoryType, HashSet<String>)> = Vec::new();
    let (mut kept, mut demoted) = (Vec::with_capacity(hits.len()), Vec::new());
    for hit in hits {
        let memory_type = hit.candidate.memory_type();
        if kept.len() >= window || memory_type == MemoryType::Episode {
            kept.push(hit);
            continue;
        }
        let words = words(&hit.candidate.content);
        if placed
            .iter()
            .any(|(t, seen)| *t == memory_type && resemblance(seen, &words) >= SAME_THING)
        {
            demoted.push(hit);
        } else {
            placed.push((memory_type, words));
            kept.push(hit);
        }
    }
    kept.extend(demoted);
    kept
}

/// A text's distinct words as resemblance compares them (module doc).
fn words(text: &str) -> HashSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .filter_map(|w| {
            let w = w.to_lowercase();
            let cased = w.chars().all(|c| c.is_lowercase() || c.is_numeric())
                && !w.chars().all(char::is_numeric);
            match (cased, w.chars().count()) {
                (true, 0..=2) => None,
                (true, _) => Some(w.chars().take(STEM_CHARS).collect()),
                (false, _) => Some(w),
            }
        })
        .collect()
}

/// The Jaccard index of two word sets; 0 when either has no word to compare (a text of
/// short words only says too little to call it a restatement).
fn resemblance(a: &HashSet<String>, b: &HashSet<String>) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    a.intersection(b).count() as f64 / a.union(b).count() as f64
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::domain::search::{Candidate, ComponentScores};

    fn hit(memory_type: MemoryType, n: u128, content: &str) -> Hit {
        let at = Utc.with_ymd_and_hms(2026, 5, 1, 9, 0, 0).unwrap();
        Hit {
            candidate: Candidate {
                content: content.into(),
                ..Candidate::fixture(memory_type, n, at)
            },
            score: 1.0 - n as f64 / 100.0,
            scores: ComponentScores::blank(),
        }
    }

    fn ids(hits: &[Hit]) -> Vec<u128> {
        hits.iter().map(|h| h.candidate.id.as_u128()).collect()
    }

    #[test]
    fn a_restated_rule_moves_below_a_different_one() {
        let hits = vec![
            hit(
                MemoryType::Rule,
                1,
                "Always confirm before sending an email.",
            ),
            hit(MemoryType::Rule, 2, "Always confirm before sending emails"),
            hit(MemoryType::Rule, 3, "Never call the user before nine."),
        ];
        assert_eq!(ids(&demote_near_duplicates(hits, 10)), vec![1, 3, 2]);
    }

    #[test]
    fn different_values_and_different_types_are_not_duplicates() {
        let hits = vec![
            hit(MemoryType::Fact, 1, "Prefers tea"),
            hit(MemoryType::Fact, 2, "Prefers coffee"),
            hit(MemoryType::Fact, 6, "User's birthday is March 3"),
            hit(MemoryType::Fact, 7, "User's birthday is March 30"),
            hit(MemoryType::Rule, 3, "Prefers tea"),
            hit(MemoryType::Episode, 4, "ok thanks"),
            hit(MemoryType::Episode, 5, "ok thanks"),
        ];
        assert_eq!(
            ids(&demote_near_duplicates(hits, 10)),
            vec![1, 2, 6, 7, 3, 4, 5]
        );
    }

    #[test]
    fn beyond_the_window_the_order_stands() {
        let hits = vec![
            hit(MemoryType::Fact, 1, "Lives in Berlin"),
            hit(MemoryType::Fact, 2, "Works from home"),
            hit(MemoryType::Fact, 3, "lives in berlin!"),
        ];
        assert_eq!(ids(&demote_near_duplicates(hits, 2)), vec![1, 2, 3]);
    }

    #[test]
    fn words_ignore_case_punctuation_endings_and_short_words() {
        let set = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<HashSet<_>>();
        assert_eq!(
            words("Grüße, GRÜSSE; Приветствую мир at 42 x2"),
            set(&["grüße", "grüss", "приве", "мир", "42"]),
            "short words go, numbers stay"
        );
        // A script without case keeps its words whole: no five-character "stem" of a
        // sentence written without spaces.
        assert_eq!(words("我喜欢喝茶 我喜欢喝咖啡").len(), 2);
    }
}
