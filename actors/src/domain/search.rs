//! What a search asks for and what it finds: the request after the caller's rights are
//! applied, the candidates the store returns, and the scored hits.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::intent::Intent;
use super::maturity::Maturity;
use super::memory_type::MemoryType;
use super::stated_time::StatedTime;
use super::time_window::TimeWindow;

super::string_enum! {
    /// How hybrid mode fuses its semantic and keyword lists.
    Fusion {
        /// Each list's scores min-max normalised to [0, 1], then a weighted sum.
        RelativeScore => "relative_score",
        /// Reciprocal Rank Fusion: the sum of `1 / (k + rank)` over both lists.
        Rrf => "rrf",
    }
}

impl Fusion {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}

super::string_enum! {
    /// How relevance is measured.
    SearchMode {
        /// pgvector cosine similarity of the query embedding.
        Semantic => "semantic",
        /// PostgreSQL full text.
        Keyword => "keyword",
        /// Both lists fused (relative-score fusion by default, RRF in configuration).
        Hybrid => "hybrid",
    }
}

impl SearchMode {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }

    pub fn uses_semantic(self) -> bool {
        matches!(self, SearchMode::Semantic | SearchMode::Hybrid)
    }

    pub fn uses_keyword(self) -> bool {
        matches!(self, SearchMode::Keyword | SearchMode::Hybrid)
    }
}

/// Which memories a search may look at, already narrowed to what the caller may see.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchScope {
    pub tenant_id: String,
    /// Fact and rule scopes; `None` means every scope of the tenant (admin only).
    pub scopes: Option<Vec<String>>,
    /// Butlers whose episodes may appear; `None` means every butler (admin only).
    pub butlers: Option<Vec<String>>,
}

/// A search, validated.
#[derive(Debug, Clone)]
pub struct SearchQuery {
    pub text: String,
    /// Whether the mode needs the query's embedding.
    pub embedding_needed: bool,
    pub types: Vec<MemoryType>,
    pub mode: SearchMode,
    pub limit: usize,
    /// Facts and rules below this effective confidence are left out.
    pub min_confidence: f64,
    pub scope: SearchScope,
    pub now: DateTime<Utc>,
    /// When to look; `None`: what is live now.
    pub window: Option<TimeWindow>,
    /// The time the query's words state, when it has no window and stated times are read
    /// (`domain::stated_time`): its memories rank first.
    pub stated: Option<StatedTime>,
}

/// A memory the store found for a search, with what ranking needs.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Candidate {
    #[sqlx(skip)]
    pub memory_type: Option<MemoryType>,
    pub id: Uuid,
    pub content: String,
    pub importance: f64,
    pub created_at: DateTime<Utc>,
    pub last_referenced_at: DateTime<Utc>,
    pub confidence: f64,
    pub decay_rate: f64,
    pub last_confirmed_at: DateTime<Utc>,
    pub subject: Option<String>,
    pub predicate: Option<String>,
    pub scope: Option<String>,
    pub permanence: Option<String>,
    pub validity: Option<String>,
    pub maturity: Option<String>,
    /// The episode's butler, or the fact's or rule's source butler.
    pub butler: Option<String>,
    pub session_id: Option<String>,
    pub metadata: Value,
    /// When an episode happened, if before it was stored (`Episode::occurred_at`).
    pub occurred_at: Option<DateTime<Utc>>,
    /// Cosine similarity (semantic list) or full-text rank (keyword list).
    pub signal: f64,
    /// A sealed fact's tenant, data key version and ciphertext (`vault.rs`), until the
    /// store opens it; only fact candidates have them.
    pub tenant_id: Option<String>,
    pub key_version: Option<i32>,
    pub sealed: Option<Vec<u8>>,
    /// A fact's validity time (`domain::time_window`); only fact candidates have it.
    pub valid_from: Option<DateTime<Utc>>,
    pub valid_until: Option<DateTime<Utc>>,
    /// Stored without its vector so far (the indexer has not embedded it): it has no token
    /// sketch either, which the second stage knows without looking sketches up.
    pub unembedded: bool,
}

impl Candidate {
    /// A bare candidate for pure tests of ranking: no optional attribute, importance 5,
    /// confidence 1 without decay, every time `at`, content `c{n}`. A test sets what it is
    /// about with `..Candidate::fixture(..)`.
    #[cfg(test)]
    pub fn fixture(memory_type: MemoryType, n: u128, at: DateTime<Utc>) -> Candidate {
        Candidate {
            memory_type: Some(memory_type),
            id: Uuid::from_u128(n),
            content: format!("c{n}"),
            importance: 5.0,
            created_at: at,
            last_referenced_at: at,
            confidence: 1.0,
            decay_rate: 0.0,
            last_confirmed_at: at,
            subject: None,
            predicate: None,
            scope: None,
            permanence: None,
            validity: None,
            maturity: None,
            butler: None,
            session_id: None,
            metadata: serde_json::json!({}),
            occurred_at: None,
            signal: 0.0,
            tenant_id: None,
            key_version: None,
            sealed: None,
            valid_from: None,
            valid_until: None,
            unembedded: false,
        }
    }

    /// When the memory happened or was made: an episode's `occurred_at` if it has one, else
    /// when it was stored.
    pub fn happened_at(&self) -> DateTime<Utc> {
        self.occurred_at.unwrap_or(self.created_at)
    }

    pub fn memory_type(&self) -> MemoryType {
        self.memory_type
            .expect("the store sets the type of every candidate")
    }

    pub fn maturity(&self) -> Option<Maturity> {
        self.maturity.as_deref().and_then(|m| m.parse().ok())
    }
}

/// Why a hit ranked where it did: the components of its score (`relevance`, `importance`,
/// `recency`, `confidence` in [0, 1]) and the raw signals behind relevance.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ComponentScores {
    pub relevance: f64,
    pub importance: f64,
    pub recency: f64,
    /// Effective confidence (1 for episodes).
    pub confidence: f64,
    /// Rule maturity multiplier (1 for facts and episodes).
    pub maturity_weight: f64,
    /// The query's intent's multiplier of this memory type (1 when the query has no intent
    /// or routing is off; `domain::intent`).
    pub type_weight: f64,
    /// What the hit keeps of its score for lying outside the time the query states
    /// (`retrieval.stated_time_share`; `domain::stated_time`): 1 when it is an episode of that
    /// time, a fact true in it, a rule, or the query states no time.
    pub time_weight: f64,
    /// Cosine similarity, when the semantic list found it.
    pub semantic: Option<f64>,
    /// BM25 score (unbounded), when the keyword list found it.
    pub keyword: Option<f64>,
    /// 1-based position in the semantic list.
    pub semantic_rank: Option<usize>,
    /// 1-based position in the keyword list.
    pub keyword_rank: Option<usize>,
    /// Relevance of the episode's best neighbour in its session (up to
    /// `retrieval.session_neighbour_reach` turns away, weighed by distance), when it has one.
    pub session_neighbour: Option<f64>,
    /// How well the hit covers the query token by token (the mean, over the query's content
    /// words, of each one's best cosine in the hit), when the second stage read it
    /// (`retrieval.rerank`); its relevance then blends this in.
    pub rerank: Option<f64>,
}

impl ComponentScores {
    /// Scores with nothing known yet.
    pub fn blank() -> Self {
        ComponentScores {
            relevance: 0.0,
            importance: 0.0,
            recency: 0.0,
            confidence: 0.0,
            maturity_weight: 1.0,
            type_weight: 1.0,
            time_weight: 1.0,
            semantic: None,
            keyword: None,
            semantic_rank: None,
            keyword_rank: None,
            session_neighbour: None,
            rerank: None,
        }
    }
}

/// An episode's neighbours in its conversation: the visible episodes before and after it,
/// each with its distance in turns (1: just before or just after).
#[derive(Debug, Clone, PartialEq)]
pub struct SessionNeighbours {
    pub id: Uuid,
    pub near: Vec<(Uuid, u32)>,
}

/// A candidate with its relevance, before the composite score.
#[derive(Debug, Clone)]
pub struct Scored {
    pub candidate: Candidate,
    pub scores: ComponentScores,
}

/// A scored search result.
#[derive(Debug, Clone)]
pub struct Hit {
    pub candidate: Candidate,
    pub score: f64,
    pub scores: ComponentScores,
}

/// What a caller asks to search, before validation.
#[derive(Debug, Clone, Default)]
pub struct SearchInput {
    pub query: String,
    pub types: Option<Vec<MemoryType>>,
    pub scope: Option<String>,
    pub mode: Option<SearchMode>,
    pub limit: Option<u32>,
    pub min_confidence: Option<f64>,
    /// The butler searching (default: the key's butler); decides scopes and episodes.
    pub butler: Option<String>,
    /// When to look, as the caller wrote it (`domain::time_window`).
    pub as_of: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
}

/// What a caller asks of `memory_context`, before validation.
#[derive(Debug, Clone, Default)]
pub struct ContextInput {
    pub trigger_prompt: String,
    pub butler: String,
    pub token_budget: Option<u32>,
    /// When to look, as the caller wrote it (`domain::time_window`).
    pub as_of: Option<String>,
    pub since: Option<String>,
    pub until: Option<String>,
}

/// A context request, validated.
#[derive(Debug, Clone)]
pub struct ContextRequest {
    pub trigger_prompt: String,
    pub butler: String,
    pub token_budget: usize,
    pub scope: SearchScope,
    pub min_confidence: f64,
    pub now: DateTime<Utc>,
    /// When to look; `None`: what is live now.
    pub window: Option<TimeWindow>,
    /// The time the prompt states, when it has no window and stated times are read
    /// (`domain::stated_time`): its memories rank first in each section.
    pub stated: Option<StatedTime>,
}

/// What a search found.
#[derive(Debug, Clone)]
pub struct SearchOutcome {
    pub hits: Vec<Hit>,
    /// The mode that actually ran (keyword when a semantic search degraded).
    pub mode: SearchMode,
    /// The query embedding was unavailable: results come from the keyword path alone.
    pub degraded: bool,
    /// The query's intent, when queries are routed by intent (`domain::intent`).
    pub intent: Option<Intent>,
    /// The second stage is on but did not answer in time: the first stage's order stands,
    /// and the answer is not remembered in the result cache.
    pub rerank_skipped: bool,
    /// The time the query states, as it was read (`domain::stated_time`).
    pub stated_time: Option<StatedTime>,
}
