//! Hybrid recall over an orchestrator's graph (orchestrator_memory_subsystem.md, "Retrieval:
//! Hybrid Recall"): the vector ranking and the full-text ranking merged by reciprocal rank
//! fusion, then the spec's modifiers — importance, recency, confidence, and a penalty for an
//! unresolved contradiction. Pure and deterministic: the same candidates at the same clock
//! time give the same order (ties broken by id).

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::edge::Edge;
use super::node::Node;

/// Half-life of the recency modifier, in days: a memory untouched for a month counts half.
pub const RECENCY_HALF_LIFE_DAYS: f64 = 30.0;
/// What an unresolved contradiction leaves of a memory's score.
pub const CONTRADICTION_PENALTY: f64 = 0.7;

/// A candidate: its place in each ranking it appeared in (1 = best).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranks {
    pub id: Uuid,
    pub vector: Option<u32>,
    pub text: Option<u32>,
}

/// Reciprocal rank fusion of the candidates' ranks with constant `k`, divided by its
/// maximum (first in both lists, `2 / (k + 1)`): in (0, 1].
pub fn fused(ranks: &Ranks, k: u32) -> f64 {
    let term = |rank: Option<u32>| rank.map_or(0.0, |r| 1.0 / f64::from(k + r));
    (term(ranks.vector) + term(ranks.text)) / (2.0 / f64::from(k + 1))
}

/// How each part weighed in a recalled memory's score (all in [0, 1]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecallScores {
    /// Reciprocal rank fusion of the vector and full-text ranks, normalised.
    pub relevance: f64,
    pub vector_rank: Option<u32>,
    pub text_rank: Option<u32>,
    /// `importance / 100`.
    pub importance: f64,
    /// `exp(-ln 2 * age_days / 30)` on `updatedAt`.
    pub recency: f64,
    pub confidence: f64,
    /// Whether a `Contradicts` edge joins it to another active memory.
    pub contradicted: bool,
}

impl RecallScores {
    /// The score recall orders by: relevance, each modifier taking up to half of it away.
    pub fn total(&self) -> f64 {
        let half = |x: f64| 0.5 + 0.5 * x;
        let penalty = if self.contradicted {
            CONTRADICTION_PENALTY
        } else {
            1.0
        };
        self.relevance
            * half(self.importance)
            * half(self.recency)
            * half(self.confidence)
            * penalty
    }
}

/// A memory recall found, with its score.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Recalled {
    #[serde(flatten)]
    pub node: Node,
    pub score: f64,
    pub scores: RecallScores,
}

/// What recall answers: the memories it selected, best first, each with its provenance
/// (`source`) for citation, and the edges among them.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct RecallBundle {
    pub memories: Vec<Recalled>,
    pub edges: Vec<Edge>,
}

/// The recency of a memory last changed at `updated_at`, at `now`.
pub fn recency(updated_at: DateTime<Utc>, now: DateTime<Utc>) -> f64 {
    let age_days = ((now - updated_at).num_milliseconds() as f64 / 86_400_000.0).max(0.0);
    (-std::f64::consts::LN_2 * age_days / RECENCY_HALF_LIFE_DAYS).exp()
}

/// Scores `nodes` (each with its ranks and whether it is contradicted) and keeps the best
/// `top_n`, best first, ties by id.
pub fn rank(
    nodes: Vec<(Node, Ranks, bool)>,
    k: u32,
    top_n: usize,
    now: DateTime<Utc>,
) -> Vec<Recalled> {
    let mut scored: Vec<Recalled> = nodes
        .into_iter()
        .map(|(node, ranks, contradicted)| {
            let scores = RecallScores {
                relevance: fused(&ranks, k),
                vector_rank: ranks.vector,
                text_rank: ranks.text,
                importance: f64::from(node.importance) / 100.0,
                recency: recency(node.updated_at, now),
                confidence: node.confidence,
                contradicted,
            };
            Recalled {
                score: scores.total(),
                scores,
                node,
            }
        })
        .collect();
    scored.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(a.node.memory_id.cmp(&b.node.memory_id))
    });
    scored.truncate(top_n);
    scored
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::orchestrator::node::{NodeStatus, NodeType};
    use crate::domain::orchestrator::source::{CapturedBy, Source, SourceType};
    use chrono::Duration;

    fn node(id: u128, importance: i16, confidence: f64, age_days: i64, now: DateTime<Utc>) -> Node {
        Node {
            memory_id: Uuid::from_u128(id),
            orchestrator_id: "o".into(),
            node_type: NodeType::Fact,
            importance,
            content: format!("node {id}"),
            summary: format!("node {id}"),
            confidence,
            source: Source {
                source_type: SourceType::Manual,
                source_path: None,
                conversation_id: None,
                workflow_run_id: None,
                step_id: None,
                captured_by: CapturedBy::User,
            },
            status: NodeStatus::Active,
            created_at: now - Duration::days(age_days),
            updated_at: now - Duration::days(age_days),
        }
    }

    fn ranks(id: u128, vector: Option<u32>, text: Option<u32>) -> Ranks {
        Ranks {
            id: Uuid::from_u128(id),
            vector,
            text,
        }
    }

    #[test]
    fn fusion_rewards_agreement_and_is_normalised() {
        let k = 60;
        assert_eq!(fused(&ranks(1, Some(1), Some(1)), k), 1.0);
        let both = fused(&ranks(1, Some(3), Some(3)), k);
        let one = fused(&ranks(1, Some(1), None), k);
        assert!(both > one, "{both} > {one}");
        assert!(fused(&ranks(1, None, Some(50)), k) > 0.0);
        assert_eq!(fused(&ranks(1, None, None), k), 0.0);
        // A larger k flattens the ranks.
        let steep = fused(&ranks(1, Some(10), None), 1) / fused(&ranks(1, Some(1), None), 1);
        let flat = fused(&ranks(1, Some(10), None), 60) / fused(&ranks(1, Some(1), None), 60);
        assert!(steep < flat);
    }

    #[test]
    fn the_merge_is_deterministic_with_ties_broken_by_id() {
        let now = Utc::now();
        let candidates = || {
            vec![
                (node(3, 50, 0.8, 1, now), ranks(3, Some(2), Some(1)), false),
                (node(1, 50, 0.8, 1, now), ranks(1, Some(1), Some(2)), false),
                (node(2, 50, 0.8, 1, now), ranks(2, None, Some(3)), false),
            ]
        };
        let first: Vec<Uuid> = rank(candidates(), 60, 20, now)
            .iter()
            .map(|r| r.node.memory_id)
            .collect();
        // 1 and 3 tie (ranks 1+2 each): the smaller id first.
        assert_eq!(
            first,
            [Uuid::from_u128(1), Uuid::from_u128(3), Uuid::from_u128(2)]
        );
        let mut reversed = candidates();
        reversed.reverse();
        let second: Vec<Uuid> = rank(reversed, 60, 20, now)
            .iter()
            .map(|r| r.node.memory_id)
            .collect();
        assert_eq!(first, second);
        assert_eq!(rank(candidates(), 60, 2, now).len(), 2);
    }

    #[test]
    fn modifiers_weigh_importance_recency_confidence_and_contradiction() {
        let now = Utc::now();
        let same = |id| ranks(id, Some(1), Some(1));
        let score =
            |n: Node, contradicted| rank(vec![(n, same(1), contradicted)], 60, 1, now)[0].score;
        let base = score(node(1, 50, 0.8, 0, now), false);
        assert!(score(node(1, 100, 0.8, 0, now), false) > base);
        assert!(score(node(1, 50, 1.0, 0, now), false) > base);
        assert!(score(node(1, 50, 0.8, 60, now), false) < base);
        let contradicted = score(node(1, 50, 0.8, 0, now), true);
        assert!((contradicted - base * CONTRADICTION_PENALTY).abs() < 1e-12);
        assert!((recency(now - Duration::days(30), now) - 0.5).abs() < 1e-9);
        assert_eq!(recency(now + Duration::days(1), now), 1.0);
    }
}
