//! The second stage (memory_butler.md §6.5): the first stage's most relevant candidates read
//! again against the query, token by token (`embedder::token_vectors`), and their relevance
//! blended with how well each covers the query. It reorders within its candidate set only:
//! the set's relevances are redrawn inside the range they spanned, so nothing outside the
//! set moves and nothing inside leaves it.

use std::collections::HashMap;

use serde::Deserialize;
use uuid::Uuid;

use super::scoring::min_max;
use super::search::{Scored, SessionNeighbours};

/// `[retrieval.rerank]`: whether searches have a second stage, over how many candidates,
/// how much it counts and how long a search waits for it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RerankConfig {
    pub enabled: bool,
    /// The first stage's most relevant candidates it reads (sealed facts aside: their text
    /// is not there to read).
    pub candidates: usize,
    /// Share of the second stage's measure in a candidate's new relevance (0 to 1); the
    /// rest is its first-stage relevance, both min-max normalised over the set.
    pub weight: f64,
    /// How long a read waits for it before keeping the first stage's order.
    pub timeout_ms: u64,
    /// The most members of a set the model reads (those stored without a sketch); a set
    /// with more keeps the first stage's order.
    pub max_model_reads: usize,
    /// Whether a search that embedded no query (a keyword search, or one whose embedding
    /// did not come) is read too: the model then reads the query as its question, a model
    /// run a search. Off, such a search keeps the first stage's order and costs no model.
    pub keyword_searches: bool,
    /// Share of their likeness at which an episode's neighbours' tokens (the turns around it
    /// in its conversation that the session lookup found) cover the query words its own lack
    /// (0 to 1; 0: its own tokens alone).
    pub neighbour_share: f64,
}

/// Which of `scored` the second stage reads: the `k` most relevant whose text can be read,
/// best first (ties by id, so the set is deterministic).
pub fn candidate_set(scored: &[Scored], k: usize) -> Vec<usize> {
    let mut readable: Vec<usize> = (0..scored.len())
        .filter(|&i| scored[i].candidate.sealed.is_none())
        .collect();
    readable.sort_by(|&a, &b| {
        let (a, b) = (&scored[a], &scored[b]);
        b.scores
            .relevance
            .total_cmp(&a.scores.relevance)
            .then_with(|| a.candidate.id.cmp(&b.candidate.id))
    });
    readable.truncate(k);
    readable
}

/// Each episode's turns around it in its conversation, as far as the session lookup reached.
pub type Adjacent = HashMap<Uuid, Vec<Uuid>>;

/// Each episode's turns around it, both ways, from the session lookup's `neighbours` (up to
/// `retrieval.session_neighbour_reach` turns each side for the episodes it looked up at full
/// reach, one for the others): what the second stage reads an episode with. An episode the
/// lookup did not reach has none here and is read alone.
pub fn adjacent(neighbours: &[SessionNeighbours]) -> Adjacent {
    let mut adjacent = Adjacent::new();
    for n in neighbours {
        for &(id, _) in &n.near {
            adjacent.entry(n.id).or_default().push(id);
            adjacent.entry(id).or_default().push(n.id);
        }
    }
    for turns in adjacent.values_mut() {
        turns.sort();
        turns.dedup();
    }
    adjacent
}

/// Blends the second stage's `measures` (one per member of `set`, in its order) into the
/// set's relevance, inside the range the set's relevances spanned, and records each measure
/// in the candidate's component scores.
pub fn apply(scored: &mut [Scored], set: &[usize], measures: &[f32], weight: f64) {
    assert_eq!(set.len(), measures.len(), "a measure per candidate read");
    if set.is_empty() {
        return;
    }
    let first: Vec<f64> = set.iter().map(|&i| scored[i].scores.relevance).collect();
    let second: Vec<f64> = measures.iter().map(|&m| f64::from(m)).collect();
    let lo = first.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = first.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let (first_n, second_n) = (min_max(&first), min_max(&second));
    for (k, &i) in set.iter().enumerate() {
        let blended = (1.0 - weight) * first_n(first[k]) + weight * second_n(second[k]);
        let scores = &mut scored[i].scores;
        scores.relevance = lo + (hi - lo) * blended;
        scores.rerank = Some(second[k]);
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::*;
    use crate::domain::memory_type::MemoryType;
    use crate::domain::search::{Candidate, ComponentScores};

    fn scored(n: u128, relevance: f64) -> Scored {
        let at = Utc.with_ymd_and_hms(2026, 5, 1, 9, 0, 0).unwrap();
        Scored {
            candidate: Candidate::fixture(MemoryType::Episode, n, at),
            scores: ComponentScores {
                relevance,
                ..ComponentScores::blank()
            },
        }
    }

    fn order(scored: &[Scored]) -> Vec<u128> {
        let mut by: Vec<&Scored> = scored.iter().collect();
        by.sort_by(|a, b| b.scores.relevance.total_cmp(&a.scores.relevance));
        by.iter().map(|s| s.candidate.id.as_u128()).collect()
    }

    /// The set is the k most relevant readable candidates; a sealed fact is not read.
    #[test]
    fn the_set_is_the_most_relevant_readable_candidates() {
        let mut all = vec![
            scored(1, 0.2),
            scored(2, 0.9),
            scored(3, 0.5),
            scored(4, 0.7),
        ];
        all[3].candidate.sealed = Some(vec![1, 2, 3]);
        assert_eq!(candidate_set(&all, 2), vec![1, 2]);
        assert_eq!(candidate_set(&all, 10), vec![1, 2, 0]);
    }

    /// The turns around an episode are the neighbours the lookup found, known both ways.
    #[test]
    fn the_turns_around_are_the_lookups_neighbours_both_ways() {
        let id = Uuid::from_u128;
        let neighbours = [
            SessionNeighbours {
                id: id(5),
                near: vec![(id(4), 1), (id(6), 1), (id(3), 2)],
            },
            SessionNeighbours {
                id: id(6),
                near: vec![(id(5), 1), (id(7), 1)],
            },
        ];
        let adjacent = adjacent(&neighbours);
        assert_eq!(adjacent[&id(5)], vec![id(3), id(4), id(6)]);
        assert_eq!(adjacent[&id(6)], vec![id(5), id(7)], "once each");
        assert_eq!(adjacent[&id(3)], vec![id(5)], "two turns away too");
        assert_eq!(
            adjacent[&id(4)],
            vec![id(5)],
            "a neighbour knows the turn it is next to"
        );
        assert!(!adjacent.contains_key(&id(8)), "a turn no lookup found");
    }

    /// The second stage reorders its set and nothing else: the set keeps the places it
    /// held, the others keep their relevance, and each member shows its measure.
    #[test]
    fn order_changes_only_within_the_set() {
        let mut all: Vec<Scored> = (1..=6).map(|n| scored(n, 1.0 - n as f64 / 10.0)).collect();
        let set = candidate_set(&all, 3);
        assert_eq!(set, vec![0, 1, 2]);
        let before = order(&all);
        // The set's last is the best covered, its first the worst.
        apply(&mut all, &set, &[0.1, 0.5, 0.9], 1.0);
        let after = order(&all);
        assert_eq!(after[..3], [3, 2, 1], "reversed by the measures");
        assert_eq!(after[3..], before[3..], "the rest keep their order");
        for s in &all[3..] {
            assert_eq!(s.scores.rerank, None);
        }
        assert_eq!(all[0].scores.rerank, Some(f64::from(0.1f32)));
        // Inside the range the set spanned: 0.7 to 0.9.
        assert!(
            all[..3]
                .iter()
                .all(|s| (0.7..=0.9).contains(&s.scores.relevance))
        );
    }

    /// The weight blends: at 0 the first stage's order stands, at a half a clear
    /// first-stage lead survives a small deficit in the measure.
    #[test]
    fn the_weight_blends_both_stages() {
        let mut all = vec![scored(1, 0.9), scored(2, 0.5), scored(3, 0.1)];
        let set = candidate_set(&all, 3);
        apply(&mut all, &set, &[0.2, 0.9, 0.6], 0.0);
        assert_eq!(order(&all), vec![1, 2, 3]);
        let mut all = vec![scored(1, 0.9), scored(2, 0.8), scored(3, 0.1)];
        apply(&mut all, &set, &[0.58, 0.6, 0.2], 0.5);
        assert_eq!(order(&all), vec![1, 2, 3]);
        let mut all = vec![scored(1, 0.9), scored(2, 0.8), scored(3, 0.1)];
        apply(&mut all, &set, &[0.2, 0.6, 0.55], 0.5);
        assert_eq!(order(&all), vec![2, 1, 3]);
    }
}
