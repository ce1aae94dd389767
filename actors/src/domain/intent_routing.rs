//! How a query's intent ranks (`[retrieval.intent_routing]`, `intent.rs` for the intents):
//! per intent, the composite score's weights and the fusion's semantic weight where it
//! sets them, and a multiplier per memory type. Both show in each hit's component scores
//! (`type_weight`), and the search answer names the intent.

use serde::Deserialize;

use super::intent::Intent;
use super::scoring::{Ranking, ScoreWeights, TypeWeights};

/// How one intent ranks: the composite score's weights and the fusion's semantic weight,
/// where it sets them, and a weight per memory type.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Replaces `score_weights` for this intent; absent: the configured weights.
    #[serde(default)]
    pub score_weights: Option<ScoreWeights>,
    /// Replaces `semantic_weight` (relative-score fusion) for this intent; absent: as
    /// configured.
    #[serde(default)]
    pub semantic_weight: Option<f64>,
    pub type_weights: TypeWeights,
}

impl Route {
    /// `ranking` as this route sets it.
    pub fn apply(&self, mut ranking: Ranking) -> Ranking {
        if let Some(weights) = &self.score_weights {
            ranking.weights = weights.clone();
        }
        if let Some(w) = self.semantic_weight {
            ranking.semantic_weight = w;
        }
        ranking.type_weights = self.type_weights;
        ranking
    }
}

/// `[retrieval.intent_routing]`: whether queries are routed by intent, and the route of each
/// intent but `General` (which is ranked as configured).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntentRouting {
    pub enabled: bool,
    pub identity: Route,
    pub preference: Route,
    pub procedure: Route,
    pub temporal: Route,
}

impl IntentRouting {
    /// The intent of `query` and its route, when routing is on and the query has one.
    pub fn route(&self, query: &str) -> Option<(Intent, &Route)> {
        if !self.enabled {
            return None;
        }
        let intent = Intent::of(query);
        let route = match intent {
            Intent::Identity => &self.identity,
            Intent::Preference => &self.preference,
            Intent::Procedure => &self.procedure,
            Intent::Temporal => &self.temporal,
            Intent::General => return Some((intent, &GENERAL)),
        };
        Some((intent, route))
    }
}

/// `General`: as configured.
const GENERAL: Route = Route {
    score_weights: None,
    semantic_weight: None,
    type_weights: TypeWeights::NEUTRAL,
};

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Duration, Utc};
    use uuid::Uuid;

    use super::*;
    use crate::domain::memory_type::MemoryType;
    use crate::domain::search::{Candidate, SearchMode};

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-06-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn episode(n: u128, signal: f64) -> Candidate {
        Candidate {
            signal,
            ..Candidate::fixture(MemoryType::Episode, n, t0())
        }
    }

    /// A route replaces the weights and multiplies per type: an old episode that matches
    /// better beats a fresh one once recency counts for nothing, and the type multiplier is
    /// in the component scores.
    #[test]
    fn a_route_sets_weights_and_type_multipliers() {
        let mut old = episode(1, 0.9);
        old.last_referenced_at = t0() - Duration::days(60);
        let fresh = episode(2, 0.7);
        let both = || vec![old.clone(), fresh.clone()];
        let plain = Ranking::fixture().rank(SearchMode::Semantic, both(), vec![], t0());
        assert_eq!(
            plain[0].candidate.id,
            Uuid::from_u128(2),
            "recency lifts the fresh one"
        );
        let route = Route {
            score_weights: Some(ScoreWeights {
                relevance: 0.6,
                importance: 0.3,
                recency: 0.0,
                confidence: 0.1,
            }),
            semantic_weight: Some(0.7),
            type_weights: TypeWeights {
                fact: 1.0,
                rule: 0.8,
                episode: 1.15,
            },
        };
        let routed = route.apply(Ranking::fixture());
        assert_eq!(routed.semantic_weight, 0.7);
        let hits = routed.rank(SearchMode::Semantic, both(), vec![], t0());
        assert_eq!(hits[0].candidate.id, Uuid::from_u128(1), "the better match");
        assert_eq!(hits[0].scores.type_weight, 1.15);
        // 1.15 * (0.6 * 0.9 + 0.3 * 0.5 + 0.1 * 1)
        assert!(
            (hits[0].score - 1.15 * 0.79).abs() < 1e-9,
            "{}",
            hits[0].score
        );
        assert!(plain.iter().all(|h| h.scores.type_weight == 1.0));
    }

    /// Off, nothing is routed; on, a query without a cue is routed as configured.
    #[test]
    fn routing_off_routes_nothing() {
        let neutral = Route {
            score_weights: None,
            semantic_weight: None,
            type_weights: TypeWeights::NEUTRAL,
        };
        let mut routing = IntentRouting {
            enabled: false,
            identity: neutral.clone(),
            preference: neutral.clone(),
            procedure: neutral.clone(),
            temporal: neutral,
        };
        assert!(routing.route("what is my name").is_none());
        routing.enabled = true;
        let (intent, route) = routing.route("pool size").unwrap();
        assert_eq!(intent, Intent::General);
        assert_eq!(route, &GENERAL);
    }
}
