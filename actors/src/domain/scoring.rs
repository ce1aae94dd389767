//! Ranking math (memory_butler.md §6.2, DECISIONS.md #8-9): Reciprocal Rank Fusion, the
//! composite score, recency, ordering with explicit tie-breakers, and diversification.
//! Pure functions; property-tested.

use std::cmp::Ordering;
use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use uuid::Uuid;

use super::decay::{days_between, effective_confidence};
use super::diversity::demote_near_duplicates;
use super::maturity::Maturity;
use super::memory_type::MemoryType;
use super::search::{
    Candidate, ComponentScores, Fusion, Hit, Scored, SearchMode, SessionNeighbours,
};
use super::time_window::TimeWindow;

/// Composite score weights.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoreWeights {
    pub relevance: f64,
    pub importance: f64,
    pub recency: f64,
    pub confidence: f64,
}

/// A score multiplier per memory type (1: unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeWeights {
    pub fact: f64,
    pub rule: f64,
    pub episode: f64,
}

impl TypeWeights {
    /// Every type as it is.
    pub const NEUTRAL: TypeWeights = TypeWeights {
        fact: 1.0,
        rule: 1.0,
        episode: 1.0,
    };

    /// The multiplier of `memory_type`.
    pub fn of(&self, memory_type: MemoryType) -> f64 {
        match memory_type {
            MemoryType::Fact => self.fact,
            MemoryType::Rule => self.rule,
            MemoryType::Episode => self.episode,
        }
    }
}

/// Score multipliers by rule maturity (DECISIONS.md #9).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaturityWeights {
    pub candidate: f64,
    pub established: f64,
    pub proven: f64,
}

/// The knobs of ranking, from `[retrieval]`.
#[derive(Debug, Clone)]
pub struct Ranking {
    pub weights: ScoreWeights,
    pub maturity_weights: MaturityWeights,
    pub fusion: Fusion,
    pub rrf_k: f64,
    /// Weight of the semantic list in relative-score fusion (the keyword list gets the rest).
    pub semantic_weight: f64,
    pub recency_half_life_days: f64,
    /// No diversity cluster may hold more than this share of the top-k (beyond it, hits
    /// move below those of other clusters).
    pub max_cluster_share: f64,
    /// How much of its best session neighbour's relevance an episode gains (0: none).
    pub session_neighbour_weight: f64,
    /// What a neighbour `d` turns away counts for against one just beside it:
    /// `decay^(d - 1)`.
    pub session_neighbour_decay: f64,
    /// A multiplier of the composite score per memory type (`domain::intent`).
    pub type_weights: TypeWeights,
    /// The time the query states and what a memory outside it keeps of its score
    /// (`domain::stated_time`).
    pub stated_time: Option<(TimeWindow, f64)>,
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

/// Min-max normalisation of a list's signals to [0, 1] (all 1 when they are all equal).
pub fn min_max(signals: &[f64]) -> impl Fn(f64) -> f64 + use<> {
    let lo = signals.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = signals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    move |x| {
        if hi - lo > 1e-12 {
            ((x - lo) / (hi - lo)).clamp(0.0, 1.0)
        } else {
            1.0
        }
    }
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

    /// Relevance of every candidate of the semantic and keyword lists (each best first,
    /// each candidate's `signal` its cosine similarity or BM25 score).
    pub fn relevance(
        &self,
        mode: SearchMode,
        semantic: Vec<Candidate>,
        keyword: Vec<Candidate>,
    ) -> Vec<Scored> {
        let semantic_ids: Vec<Uuid> = semantic.iter().map(|c| c.id).collect();
        let keyword_ids: Vec<Uuid> = keyword.iter().map(|c| c.id).collect();
        let fused = rrf(&semantic_ids, &keyword_ids, self.rrf_k);
        let rrf_max = 2.0 / (self.rrf_k + 1.0);
        let semantic_norm = min_max(&semantic.iter().map(|c| c.signal).collect::<Vec<_>>());
        let keyword_norm = min_max(&keyword.iter().map(|c| c.signal).collect::<Vec<_>>());
        let best_keyword = keyword.iter().map(|c| c.signal).fold(0.0, f64::max);

        let mut by_id: HashMap<Uuid, Scored> = HashMap::new();
        for (i, c) in semantic.into_iter().enumerate() {
            let signal = c.signal;
            let entry = by_id.entry(c.id).or_insert_with(|| Scored {
                candidate: c,
                scores: ComponentScores::blank(),
            });
            entry.scores.semantic = Some(signal);
            entry.scores.semantic_rank = Some(i + 1);
        }
        for (i, c) in keyword.into_iter().enumerate() {
            let signal = c.signal;
            let entry = by_id.entry(c.id).or_insert_with(|| Scored {
                candidate: c,
                scores: ComponentScores::blank(),
            });
            entry.scores.keyword = Some(signal);
            entry.scores.keyword_rank = Some(i + 1);
        }
        let w = self.semantic_weight;
        let mut scored: Vec<Scored> = by_id.into_values().collect();
        for s in &mut scored {
            let sc = &mut s.scores;
            sc.relevance = match mode {
                SearchMode::Hybrid => match self.fusion {
                    Fusion::Rrf => {
                        (fused.get(&s.candidate.id).copied().unwrap_or(0.0) / rrf_max).min(1.0)
                    }
                    Fusion::RelativeScore => {
                        w * sc.semantic.map(&semantic_norm).unwrap_or(0.0)
                            + (1.0 - w) * sc.keyword.map(&keyword_norm).unwrap_or(0.0)
                    }
                },
                SearchMode::Semantic => sc.semantic.unwrap_or(0.0).clamp(0.0, 1.0),
                SearchMode::Keyword => match sc.keyword {
                    Some(score) if best_keyword > 0.0 => (score / best_keyword).clamp(0.0, 1.0),
                    _ => 0.0,
                },
            };
        }
        scored
    }

    /// Ranks episodes in the context of their sessions: each gains a share of its best
    /// neighbour's relevance, and the neighbours of relevant episodes (`fetched`, which the
    /// lists did not find) join with a share of theirs. A neighbour `d` turns away counts
    /// `decay^(d - 1)` of its relevance: in an exchange, the turn two away is often the
    /// same speaker's, which a question about what was said may mean as much as the reply
    /// between. Relevance stays in [0, 1].
    pub fn with_session_neighbours(
        &self,
        scored: &mut Vec<Scored>,
        neighbours: &[SessionNeighbours],
        fetched: Vec<Candidate>,
    ) {
        let lambda = self.session_neighbour_weight;
        if lambda <= 0.0 || neighbours.is_empty() {
            return;
        }
        let base: HashMap<Uuid, f64> = scored
            .iter()
            .map(|s| (s.candidate.id, s.scores.relevance))
            .collect();
        let of: HashMap<Uuid, &SessionNeighbours> = neighbours.iter().map(|n| (n.id, n)).collect();
        let share = |distance: u32| {
            self.session_neighbour_decay
                .powi(i32::try_from(distance.max(1) - 1).unwrap_or(i32::MAX))
        };
        for s in scored.iter_mut() {
            if let Some(n) = of.get(&s.candidate.id) {
                let best = n
                    .near
                    .iter()
                    .map(|(id, d)| share(*d) * base.get(id).copied().unwrap_or(0.0))
                    .fold(0.0, f64::max);
                s.scores.session_neighbour = Some(best);
                s.scores.relevance = (s.scores.relevance + lambda * best) / (1.0 + lambda);
            }
        }
        // A neighbour that no list found inherits from the relevant episodes near it.
        let mut inherited: HashMap<Uuid, f64> = HashMap::new();
        for n in neighbours {
            let v = base.get(&n.id).copied().unwrap_or(0.0);
            for (id, d) in &n.near {
                if !base.contains_key(id) {
                    let best = inherited.entry(*id).or_default();
                    *best = best.max(share(*d) * v);
                }
            }
        }
        for candidate in fetched {
            if let Some(v) = inherited.get(&candidate.id) {
                let mut scores = ComponentScores::blank();
                scores.session_neighbour = Some(*v);
                scores.relevance = lambda * v / (1.0 + lambda);
                scored.push(Scored { candidate, scores });
            }
        }
    }

    /// The composite scores, in final order.
    pub fn finish(&self, scored: Vec<Scored>, now: DateTime<Utc>) -> Vec<Hit> {
        let mut hits: Vec<Hit> = scored
            .into_iter()
            .map(|s| self.complete(s.candidate, s.scores, now))
            .collect();
        hits.sort_by(order);
        hits
    }

    /// Relevance and composite scores in one step (no session context).
    #[cfg(test)]
    pub fn rank(
        &self,
        mode: SearchMode,
        semantic: Vec<Candidate>,
        keyword: Vec<Candidate>,
        now: DateTime<Utc>,
    ) -> Vec<Hit> {
        self.finish(self.relevance(mode, semantic, keyword), now)
    }

    /// Scores a candidate that no relevance list found (standing facts, recent episodes).
    pub fn standing(&self, candidate: Candidate, now: DateTime<Utc>) -> Hit {
        self.complete(candidate, ComponentScores::blank(), now)
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
        scores.type_weight = self.type_weights.of(candidate.memory_type());
        scores.time_weight = self.time_weight(&candidate);
        let score = scores.maturity_weight
            * scores.type_weight
            * scores.time_weight
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

    /// What `candidate` keeps of its score against the time the query states: all of it
    /// when it is an episode of that time, a fact true in it, or a rule (a rule is how to
    /// behave, whenever it was made).
    fn time_weight(&self, candidate: &Candidate) -> f64 {
        let Some((window, share)) = &self.stated_time else {
            return 1.0;
        };
        let of_the_time = match candidate.memory_type() {
            MemoryType::Episode => window.admits_episode(candidate.happened_at()),
            MemoryType::Fact => window.admits_fact(
                candidate.valid_from.unwrap_or(candidate.created_at),
                candidate.valid_until,
            ),
            MemoryType::Rule => true,
        };
        if of_the_time { 1.0 } else { *share }
    }

    /// Keeps one diversity cluster from taking more than its share of the top `limit`:
    /// beyond the cap, a cluster's hits move below every other cluster's (they are demoted,
    /// not dropped, so nothing disappears when there is nothing else to show); then a fact
    /// or rule that restates one above it moves down too (`diversity.rs`).
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
        demote_near_duplicates(kept, limit)
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

#[cfg(test)]
impl Ranking {
    /// The default knobs, for pure tests of ranking (reciprocal rank fusion).
    pub fn fixture() -> Ranking {
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
            fusion: Fusion::Rrf,
            rrf_k: 60.0,
            semantic_weight: 0.4,
            recency_half_life_days: 7.0,
            max_cluster_share: 0.5,
            session_neighbour_weight: 0.4,
            session_neighbour_decay: 0.75,
            type_weights: TypeWeights::NEUTRAL,
            stated_time: None,
        }
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
mod tests;
