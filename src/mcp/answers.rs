//! The answers the tools and the REST API share, as types: a search's results
//! (`memory_search`, `memory_recall`, `GET /api/memory/search`) and a stored fact with what
//! it did (`memory_store_fact`, `PUT /api/memory/facts/{id}`). Both edges serialise these
//! same values, and the OpenAPI document derives their schemas from them, so the document
//! cannot describe a field the handler does not send.

use butler_memory_actors::{
    ComponentScores, Fact, FactOutcome, Hit, Intent, MemoryType, SearchMode, SearchOutcome,
    StatedTime, StoredFact,
};
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

/// What a search found, best first.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchResults {
    pub results: Vec<SearchHit>,
    pub count: usize,
    /// The mode that ran (keyword when a semantic search had to do without embeddings).
    pub mode: SearchMode,
    /// Relevance had to do without embeddings.
    pub degraded: bool,
    /// The query's intent, when the service routes queries by intent
    /// (`retrieval.intent_routing`): it shifted the weights behind each hit's score.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent: Option<Intent>,
    /// The time the query states ("last week", "in March"), as the service read it, when
    /// the search had no `as_of`, `since` or `until`: its episodes and facts rank first
    /// (`retrieval.stated_time_share`; each hit's `scores.time_weight`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stated_time: Option<StatedTime>,
}

/// One search result: the record's common fields, its score and the components behind
/// it, and the attributes its type has (absent where it has none).
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchHit {
    #[serde(rename = "type")]
    pub memory_type: MemoryType,
    pub id: Uuid,
    pub content: String,
    pub score: f64,
    pub scores: ComponentScores,
    pub created_at: DateTime<Utc>,
    pub last_referenced_at: DateTime<Utc>,
    pub importance: f64,
    pub metadata: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicate: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permanence: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validity: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maturity: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub butler: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Episodes stored with an earlier time: when it happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<DateTime<Utc>>,
    /// Facts: when it became true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_from: Option<DateTime<Utc>>,
    /// Facts: when it stopped being true (superseded), `null` while it is; found only
    /// with `as_of`, `since` or `until`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<Option<DateTime<Utc>>>,
    /// Facts and rules.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effective_confidence: Option<f64>,
    /// An anti-pattern: do the opposite.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<bool>,
}

impl From<SearchOutcome> for SearchResults {
    fn from(outcome: SearchOutcome) -> Self {
        let results: Vec<SearchHit> = outcome.hits.into_iter().map(SearchHit::from).collect();
        SearchResults {
            count: results.len(),
            results,
            mode: outcome.mode,
            degraded: outcome.degraded,
            intent: outcome.intent,
            stated_time: outcome.stated_time,
        }
    }
}

impl From<Hit> for SearchHit {
    fn from(hit: Hit) -> Self {
        let c = hit.candidate;
        let memory_type = c.memory_type();
        let anti_pattern = c.maturity.as_deref() == Some("anti_pattern");
        SearchHit {
            memory_type,
            id: c.id,
            content: c.content,
            score: hit.score,
            scores: hit.scores,
            created_at: c.created_at,
            last_referenced_at: c.last_referenced_at,
            importance: c.importance,
            metadata: c.metadata,
            subject: c.subject,
            predicate: c.predicate,
            scope: c.scope,
            permanence: c.permanence,
            validity: c.validity,
            maturity: c.maturity,
            butler: c.butler,
            session_id: c.session_id,
            occurred_at: c.occurred_at,
            valid_from: c.valid_from,
            valid_until: c.valid_from.map(|_| c.valid_until),
            effective_confidence: (memory_type != MemoryType::Episode)
                .then_some(hit.scores.confidence),
            warning: anti_pattern.then_some(true),
        }
    }
}

/// A fact with its type, as records are answered (`"type": "fact"` first).
#[derive(Debug, Serialize, JsonSchema)]
pub struct TypedFact {
    /// Always `fact`.
    #[serde(rename = "type")]
    pub memory_type: MemoryType,
    #[serde(flatten)]
    pub fact: Fact,
}

impl From<Fact> for TypedFact {
    fn from(fact: Fact) -> Self {
        TypedFact {
            memory_type: MemoryType::Fact,
            fact,
        }
    }
}

/// A stored fact and what storing it did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct FactStored {
    #[serde(flatten)]
    pub fact: TypedFact,
    pub outcome: FactOutcome,
    /// The fact this one replaced, in its new state.
    pub superseded: Option<TypedFact>,
}

impl From<StoredFact> for FactStored {
    fn from(stored: StoredFact) -> Self {
        FactStored {
            fact: stored.fact.into(),
            outcome: stored.outcome,
            superseded: stored.superseded.map(TypedFact::from),
        }
    }
}
