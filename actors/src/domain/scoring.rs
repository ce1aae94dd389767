//! Ranking math (memory_butler.md §6.2, DECISIONS.md #8-9): Reciprocal Rank Fusion, the
//! composite score, recency, ordering with explicit tie-breakers, and diversification.
//! Pure functions; property-tested.

use std::cmp::Ordering;
use std::collections::HashMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::decay::{days_between, effective_confidence};
use super::maturity::Maturity;
use super::memory_type::MemoryType;
use super::search::{Candidate, ComponentScores, Hit, SearchMode};
use crate::config::{MaturityWeights, ScoreWeights};

/// The knobs of ranking, from `[retrieval]`.
#[derive(Debug, Clone)]
pub struct Ranking {
    pub weights: ScoreWeights,
    pub maturity_weights: MaturityWeights,
    pub rrf_k: f64,
    pub recency_half_life_days: f64,
    /// No diversity cluster may hold more than this share of the top-k (beyond it, hits
    /// move below those of other clusters).
    pub max_cluster_share: f64,
}

/// Reciprocal Rank Fusion of two ranked lists of ids: `Σ 1 / (k + rank)`, ranks 1-based.
pub fn rrf(semantic: &[Uuid], keyword: &[Uuid], k: f64) -> HashMap<Uuid, f64> {
    let mut fused: HashMap<Uuid, f64> = HashMap::new();
    for list in [semantic, keyword] {
        for (i, id) in list.iter().enumerate() {
            *fused.entry(*id).or_default() += 1.0 / (k + (i + 1) as f64);
        }
    }
    fused
}

/// `exp(-ln 2 * age_days / half_life)`: 1 now, 0.5 one half-life ago.
pub fn recency(last_referenced_at: DateTime<Utc>, now: DateTime<Utc>, half_life_days: f64) -> f64 {
    (-std::f64::consts::LN_2 * days_between(last_referenced_at, now) / half_life_days).exp()
}

impl Ranking {
    /// The score multiplier of a rule's maturity (1 for everything else). Anti-patterns
    /// keep full weight: they surface as warnings, not guidance.
    pub fn maturity_weight(&self, maturity: Option<Maturity>) -> f64 {
        match maturity {
            Some(Maturity::Candidate) => self.maturity_weights.candidate,
            Some(Maturity::Established) => self.maturity_weights.established,
            Some(Maturity::Proven) => self.maturity_weights.proven,
            Some(Maturity::AntiPattern) | None => 1.0,
        }
    }

    /// Scores candidates from the semantic and keyword lists (each best first, each
    /// candidate's `signal` its similarity or rank) and returns the hits in final order.
    pub fn rank(
        &self,
        mode: SearchMode,
        semantic: Vec<Candidate>,
        keyword: Vec<Candidate>,
        now: DateTime<Utc>,
    ) -> Vec<Hit> {
        let semantic_ids: Vec<Uuid> = semantic.iter().map(|c| c.id).collect();
        let keyword_ids: Vec<Uuid> = keyword.iter().map(|c| c.id).collect();
        let fused = rrf(&semantic_ids, &keyword_ids, self.rrf_k);
        let best_keyword = keyword.iter().map(|c| c.signal).fold(0.0, f64::max);
        let rrf_max = 2.0 / (self.rrf_k + 1.0);

        let mut by_id: HashMap<Uuid, (Candidate, ComponentScores)> = HashMap::new();
        let blank = ComponentScores {
            relevance: 0.0,
            importance: 0.0,
            recency: 0.0,
            confidence: 0.0,
            maturity_weight: 1.0,
            semantic: None,
            keyword: None,
            semantic_rank: None,
            keyword_rank: None,
        };
        for (i, c) in semantic.into_iter().enumerate() {
            let entry = by_id.entry(c.id).or_insert_with(|| (c.clone(), blank));
            entry.1.semantic = Some(c.signal);
            entry.1.semantic_rank = Some(i + 1);
        }
        for (i, c) in keyword.into_iter().enumerate() {
            let entry = by_id.entry(c.id).or_insert_with(|| (c.clone(), blank));
            entry.1.keyword = Some(c.signal);
            entry.1.keyword_rank = Some(i + 1);
        }

        let mut hits: Vec<Hit> = by_id
            .into_values()
            .map(|(candidate, mut scores)| {
                scores.relevance = match mode {
                    SearchMode::Hybrid => {
                        (fused.get(&candidate.id).copied().unwrap_or(0.0) / rrf_max).min(1.0)
                    }
                    SearchMode::Semantic => scores.semantic.unwrap_or(0.0).clamp(0.0, 1.0),
                    SearchMode::Keyword => match scores.keyword {
                        Some(rank) if best_keyword > 0.0 => (rank / best_keyword).clamp(0.0, 1.0),
                        _ => 0.0,
                    },
                };
                self.complete(candidate, scores, now)
            })
            .collect();
        hits.sort_by(order);
        hits
    }

    /// Scores a candidate that no relevance list found (standing facts, recent episodes).
    pub fn standing(&self, candidate: Candidate, now: DateTime<Utc>) -> Hit {
        let scores = ComponentScores {
            relevance: 0.0,
            importance: 0.0,
            recency: 0.0,
            confidence: 0.0,
            maturity_weight: 1.0,
            semantic: None,
            keyword: None,
            semantic_rank: None,
            keyword_rank: None,
        };
        self.complete(candidate, scores, now)
    }

    /// Fills in the non-relevance components and the composite score.
    fn complete(
        &self,
        candidate: Candidate,
        mut scores: ComponentScores,
        now: DateTime<Utc>,
    ) -> Hit {
        let w = &self.weights;
        scores.importance = (candidate.importance / 10.0).clamp(0.0, 1.0);
        scores.recency = recency(
            candidate.last_referenced_at,
            now,
            self.recency_half_life_days,
        );
        scores.confidence = match candidate.memory_type() {
            MemoryType::Episode => 1.0,
            MemoryType::Fact | MemoryType::Rule => effective_confidence(
                candidate.confidence,
                candidate.decay_rate,
                candidate.last_confirmed_at,
                now,
            )
            .clamp(0.0, 1.0),
        };
        scores.maturity_weight = self.maturity_weight(candidate.maturity());
        let score = scores.maturity_weight
            * (w.relevance * scores.relevance
                + w.importance * scores.importance
                + w.recency * scores.recency
                + w.confidence * scores.confidence);
        Hit {
            candidate,
            score,
            scores,
        }
    }

    /// Keeps one diversity cluster from taking more than its share of the top `limit`:
    /// beyond the cap, a cluster's hits move below every other cluster's (they are demoted,
    /// not dropped, so nothing disappears when there is nothing else to show).
    pub fn diversify(&self, hits: Vec<Hit>, limit: usize) -> Vec<Hit> {
        let cap = ((limit as f64) * self.max_cluster_share).ceil().max(1.0) as usize;
        let mut taken: HashMap<String, usize> = HashMap::new();
        let (mut kept, mut demoted) = (Vec::with_capacity(hits.len()), Vec::new());
        for hit in hits {
            match cluster(&hit.candidate) {
                Some(key) => {
                    let n = taken.entry(key).or_default();
                    *n += 1;
                    if *n > cap {
                        demoted.push(hit);
                    } else {
                        kept.push(hit);
                    }
                }
                None => kept.push(hit),
            }
        }
        kept.extend(demoted);
        kept
    }
}

/// The diversity cluster of a hit: a fact's subject, an episode's session. Rules stand alone.
fn cluster(candidate: &Candidate) -> Option<String> {
    match candidate.memory_type() {
        MemoryType::Fact => candidate.subject.as_ref().map(|s| format!("fact:{s}")),
        MemoryType::Episode => candidate
            .session_id
            .as_ref()
            .map(|s| format!("session:{s}")),
        MemoryType::Rule => None,
    }
}

/// The contract's order: score DESC, then created_at DESC, then id ASC.
pub fn order(a: &Hit, b: &Hit) -> Ordering {
    b.score
        .total_cmp(&a.score)
        .then_with(|| b.candidate.created_at.cmp(&a.candidate.created_at))
        .then_with(|| a.candidate.id.cmp(&b.candidate.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;
    use proptest::prelude::*;

    fn ranking() -> Ranking {
        Ranking {
            weights: ScoreWeights {
                relevance: 0.4,
                importance: 0.3,
                recency: 0.2,
                confidence: 0.1,
            },
            maturity_weights: MaturityWeights {
                candidate: 0.7,
                established: 1.0,
                proven: 1.15,
            },
            rrf_k: 60.0,
            recency_half_life_days: 7.0,
            max_cluster_share: 0.5,
        }
    }

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-06-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn candidate(memory_type: MemoryType, n: u128, signal: f64) -> Candidate {
        Candidate {
            memory_type: Some(memory_type),
            id: Uuid::from_u128(n),
            content: format!("c{n}"),
            importance: 5.0,
            created_at: t0(),
            last_referenced_at: t0(),
            confidence: 1.0,
            decay_rate: 0.0,
            last_confirmed_at: t0(),
            subject: Some(format!("s{n}")),
            predicate: Some("p".into()),
            scope: Some("global".into()),
            permanence: Some("permanent".into()),
            validity: Some("active".into()),
            maturity: None,
            butler: None,
            session_id: None,
            metadata: serde_json::json!({}),
            signal,
        }
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
}
