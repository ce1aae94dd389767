//! The typed parameters of each MCP tool. The tools' input schemas are generated from these
//! structs, and arguments are parsed into them: a missing field, a wrong type, an unknown
//! enum value or an unknown field is an `invalid_input` tool error naming the problem.

use butler_memory_actors::{
    ErrorCode, LinkTarget, MemoryError, MemoryResult, MemoryType, Permanence, PurgeTarget,
    RequestContext, SearchMode, SweepKind,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};
use uuid::Uuid;

/// `memory_store_episode`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreEpisodeParams {
    /// What happened in the session: key observations, what the user said, what was decided.
    pub content: String,
    /// The butler the episode belongs to.
    pub butler: String,
    /// The session it came from.
    #[serde(default)]
    pub session_id: Option<String>,
    /// How notable it is, from 0 to 10 (default 5).
    #[serde(default)]
    pub importance: Option<f64>,
    /// Days until it expires (default from configuration, 7).
    #[serde(default)]
    pub ttl_days: Option<f64>,
    /// Any JSON object to keep with it.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Makes retries safe: a second submission with the same key (for the same butler)
    /// stores nothing and returns the episode stored the first time, marked `duplicate`.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// When it happened, if before now: an RFC 3339 time or a date (YYYY-MM-DD), e.g. a
    /// conversation imported from last spring. Reads with `as_of`, `since` or `until`, and
    /// a query that names a time, find episodes by it (default: now).
    #[serde(default)]
    pub occurred_at: Option<String>,
    /// Request lineage, echoed in the response and recorded in the audit stream.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// One episode of `memory_ingest_batch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestEpisode {
    pub content: String,
    pub butler: String,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub importance: Option<f64>,
    #[serde(default)]
    pub ttl_days: Option<f64>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
    #[serde(default)]
    pub occurred_at: Option<String>,
}

/// `memory_ingest_batch`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestBatchParams {
    /// Up to 1000 episodes (configurable), of any of the key's butlers.
    pub episodes: Vec<IngestEpisode>,
    /// Request lineage, echoed in the response and recorded in the audit stream.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_store_fact`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreFactParams {
    /// Who or what the fact is about, e.g. "user".
    pub subject: String,
    /// The property, e.g. "dietary_restriction". A new fact with the same subject and
    /// predicate in the same scope supersedes the current one.
    pub predicate: String,
    /// The fact itself, e.g. "Lactose intolerant".
    pub content: String,
    /// How important it is, from 0 to 10 (default 5).
    #[serde(default)]
    pub importance: Option<f64>,
    /// How long it is expected to stay true; sets its decay rate (default standard).
    #[serde(default)]
    pub permanence: Option<Permanence>,
    /// `global` (default) or a butler's name.
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Any JSON object to keep with it.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Links from this fact to existing memories.
    #[serde(default)]
    pub links: Option<Vec<LinkTarget>>,
    /// The butler it is attributed to (default: the key's butler).
    #[serde(default)]
    pub butler: Option<String>,
    /// Initial confidence, greater than 0 and at most 1 (default 1).
    #[serde(default)]
    pub confidence: Option<f64>,
    /// The episode it was learned from.
    #[serde(default)]
    pub source_episode_id: Option<Uuid>,
    /// When it became true, if not now: an RFC 3339 time or a date (YYYY-MM-DD), e.g. "the
    /// user moved in January" stored in March. Reads with `as_of`, `since` or `until` find
    /// facts by it; a fact it supersedes stops being true then.
    #[serde(default)]
    pub valid_from: Option<String>,
    /// Request lineage, echoed in the response and recorded in the audit stream.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_store_rule`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreRuleParams {
    /// How to behave, e.g. "Always confirm before sending outbound messages".
    pub content: String,
    /// `global` (default) or a butler's name.
    #[serde(default)]
    pub scope: Option<String>,
    #[serde(default)]
    pub tags: Option<Vec<String>>,
    /// Any JSON object to keep with it.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Links from this rule to existing memories.
    #[serde(default)]
    pub links: Option<Vec<LinkTarget>>,
    /// The butler it is attributed to (default: the key's butler).
    #[serde(default)]
    pub butler: Option<String>,
    /// How important it is, from 0 to 10 (default 5).
    #[serde(default)]
    pub importance: Option<f64>,
    /// How long it is expected to stay useful; sets its decay rate (default standard).
    #[serde(default)]
    pub permanence: Option<Permanence>,
    /// The episode it was learned from.
    #[serde(default)]
    pub source_episode_id: Option<Uuid>,
    /// When it became true, if not now: an RFC 3339 time or a date (YYYY-MM-DD), e.g. "the
    /// user moved in January" stored in March. Reads with `as_of`, `since` or `until` find
    /// facts by it; a fact it supersedes stops being true then.
    #[serde(default)]
    pub valid_from: Option<String>,
    /// Request lineage, echoed in the response and recorded in the audit stream.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_get`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetParams {
    /// The memory's type.
    #[serde(rename = "type")]
    pub memory_type: MemoryType,
    /// The memory's id.
    pub id: Uuid,
    /// The butler reading it (default: the key's butler); decides which scopes it may see.
    #[serde(default)]
    pub butler: Option<String>,
    /// Request lineage, echoed in the response.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_stats`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatsParams {
    /// Count only this scope's facts and rules (default: every scope the key may see).
    #[serde(default)]
    pub scope: Option<String>,
    /// Count only this butler's episodes (default: the key's butler, or all for admin keys).
    #[serde(default)]
    pub butler: Option<String>,
    /// Request lineage, echoed in the response.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_search`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchParams {
    /// What to look for, in natural language or keywords.
    pub query: String,
    /// Memory types to search (default: all three).
    #[serde(default)]
    pub types: Option<Vec<MemoryType>>,
    /// Only this scope's facts and rules (default: every scope the key may see).
    #[serde(default)]
    pub scope: Option<String>,
    /// hybrid (default), semantic or keyword.
    #[serde(default)]
    pub mode: Option<SearchMode>,
    /// Most results (default 20, at most 100).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Leave out facts and rules whose effective confidence is below this (default: the
    /// retrieval threshold, 0.2). 0 includes fading memories.
    #[serde(default)]
    pub min_confidence: Option<f64>,
    /// The butler searching (default: the key's butler); decides scopes and episodes.
    #[serde(default)]
    pub butler: Option<String>,
    /// Look back to a moment: facts true then (superseded since or not), episodes that had
    /// happened by then, rules made by then. RFC 3339 or a date (its end). Not with
    /// `since`/`until`.
    #[serde(default)]
    pub as_of: Option<String>,
    /// Only what was true or happened at or after this time (RFC 3339 or a date): facts
    /// true at some moment from then (superseded ones too), episodes from then.
    #[serde(default)]
    pub since: Option<String>,
    /// Only what was true or happened at or before this time (RFC 3339 or a date, its end).
    #[serde(default)]
    pub until: Option<String>,
    /// Request lineage, echoed in the response.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_recall`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallParams {
    /// The topic to recall facts and rules about.
    pub topic: String,
    /// Only this scope (default: every scope the key may see).
    #[serde(default)]
    pub scope: Option<String>,
    /// Most results (default 20, at most 100).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Leave out memories below this effective confidence (default 0.2; 0 includes fading).
    #[serde(default)]
    pub min_confidence: Option<f64>,
    /// The butler recalling (default: the key's butler).
    #[serde(default)]
    pub butler: Option<String>,
    /// Look back to a moment: facts true then (superseded since or not), episodes that had
    /// happened by then, rules made by then. RFC 3339 or a date (its end). Not with
    /// `since`/`until`.
    #[serde(default)]
    pub as_of: Option<String>,
    /// Only what was true or happened at or after this time (RFC 3339 or a date): facts
    /// true at some moment from then (superseded ones too), episodes from then.
    #[serde(default)]
    pub since: Option<String>,
    /// Only what was true or happened at or before this time (RFC 3339 or a date, its end).
    #[serde(default)]
    pub until: Option<String>,
    /// Request lineage, echoed in the response.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_context`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextParams {
    /// The prompt that starts the session; memories are ranked by relevance to it.
    pub trigger_prompt: String,
    /// The butler whose session it is.
    pub butler: String,
    /// Hard limit on the block's size in tokens (default 3000).
    #[serde(default)]
    pub token_budget: Option<u32>,
    /// Look back to a moment: facts true then (superseded since or not), episodes that had
    /// happened by then, rules made by then. RFC 3339 or a date (its end). Not with
    /// `since`/`until`.
    #[serde(default)]
    pub as_of: Option<String>,
    /// Only what was true or happened at or after this time (RFC 3339 or a date): facts
    /// true at some moment from then (superseded ones too), episodes from then.
    #[serde(default)]
    pub since: Option<String>,
    /// Only what was true or happened at or before this time (RFC 3339 or a date, its end).
    #[serde(default)]
    pub until: Option<String>,
    /// Request lineage, echoed in the response.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// One request of `memory_context_batch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextBatchItem {
    pub trigger_prompt: String,
    pub butler: String,
    #[serde(default)]
    pub token_budget: Option<u32>,
    /// Look back to a moment: facts true then (superseded since or not), episodes that had
    /// happened by then, rules made by then. RFC 3339 or a date (its end). Not with
    /// `since`/`until`.
    #[serde(default)]
    pub as_of: Option<String>,
    /// Only what was true or happened at or after this time (RFC 3339 or a date): facts
    /// true at some moment from then (superseded ones too), episodes from then.
    #[serde(default)]
    pub since: Option<String>,
    /// Only what was true or happened at or before this time (RFC 3339 or a date, its end).
    #[serde(default)]
    pub until: Option<String>,
}

/// `memory_context_batch`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextBatchParams {
    /// Up to 64 context requests, answered in order.
    pub requests: Vec<ContextBatchItem>,
    /// Request lineage, echoed in the response.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_confirm`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfirmParams {
    /// `fact` or `rule`.
    #[serde(rename = "type")]
    pub memory_type: MemoryType,
    /// The memory's id.
    pub id: Uuid,
    /// The butler confirming (default: the key's butler).
    #[serde(default)]
    pub butler: Option<String>,
    /// Request lineage, echoed in the response and recorded in the audit stream.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_mark_helpful`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MarkHelpfulParams {
    /// The rule that was applied and helped.
    pub rule_id: Uuid,
    /// The butler that applied it (default: the key's butler).
    #[serde(default)]
    pub butler: Option<String>,
    /// Request lineage, echoed in the response and recorded with the application.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_mark_harmful`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MarkHarmfulParams {
    /// The rule that was applied and caused a problem.
    pub rule_id: Uuid,
    /// What went wrong; quoted in the anti-pattern if the rule is inverted.
    #[serde(default)]
    pub reason: Option<String>,
    /// The butler that applied it (default: the key's butler).
    #[serde(default)]
    pub butler: Option<String>,
    /// Request lineage, echoed in the response and recorded with the application.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_forget`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetParams {
    /// The memory's type.
    #[serde(rename = "type")]
    pub memory_type: MemoryType,
    /// The memory's id.
    pub id: Uuid,
    /// Why, for the audit stream.
    #[serde(default)]
    pub reason: Option<String>,
    /// Legacy compatibility: the state a forgotten fact takes, `retracted` (the default) or
    /// its legacy name `forgotten`, which means the same and is stored as `retracted`.
    #[serde(default)]
    pub validity: Option<ForgottenState>,
    /// The butler forgetting (default: the key's butler).
    #[serde(default)]
    pub butler: Option<String>,
    /// Request lineage, echoed in the response and recorded in the audit stream.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// The state `memory_forget` leaves a fact in, by its canonical or its legacy name.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ForgottenState {
    Retracted,
    Forgotten,
}

/// `memory_restore`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreParams {
    /// The memory's type.
    #[serde(rename = "type")]
    pub memory_type: MemoryType,
    /// The memory's id.
    pub id: Uuid,
    /// Request lineage, echoed in the response and recorded in the audit stream.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_activity_stream`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivityStreamParams {
    /// Where to start: the `next_cursor` of the previous page, or an RFC 3339 time (events
    /// at or after it). Omitted: from the beginning.
    #[serde(default)]
    pub since: Option<String>,
    /// Only events of facts and rules in this scope.
    #[serde(default)]
    pub scope: Option<String>,
    /// Only events of this butler's memories.
    #[serde(default)]
    pub butler: Option<String>,
    /// Most events in the page (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Request lineage, echoed in the response.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_run_sweep`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunSweepParams {
    /// Which sweeps: `decay_sweep`, `episode_cleanup`, `consolidation` (default: all three,
    /// in that order).
    #[serde(default)]
    pub kinds: Option<Vec<SweepKind>>,
    /// Only this butler's shard (default: every shard of the tenant).
    #[serde(default)]
    pub butler: Option<String>,
    /// Request lineage, echoed in the response.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_dead_letters`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeadLettersParams {
    /// Most episodes listed (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Request lineage, echoed in the response.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_requeue_dead_letters`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequeueParams {
    /// The episodes to requeue (default: every dead letter of the tenant).
    #[serde(default)]
    pub ids: Option<Vec<Uuid>>,
    /// Request lineage, echoed in the response.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

/// `memory_purge`: exactly one target (`type` and `id`, `subject`, `butler` or `tenant`).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PurgeParams {
    /// One record: its type (with `id`).
    #[serde(rename = "type", default)]
    pub memory_type: Option<MemoryType>,
    /// One record: its id (with `type`). A fact goes with its supersession chain.
    #[serde(default)]
    pub id: Option<Uuid>,
    /// The records about a subject: facts whose subject it is and every record whose text
    /// mentions it. Without `confirm`, the answer lists these candidates and purges nothing.
    #[serde(default)]
    pub subject: Option<String>,
    /// With `subject`: the candidates to purge, by id.
    #[serde(default)]
    pub confirm: Option<Vec<Uuid>>,
    /// Every record of this butler: its episodes, and the facts and rules it wrote.
    #[serde(default)]
    pub butler: Option<String>,
    /// Every record of the tenant: the key's own tenant id, spelled out as a confirmation.
    #[serde(default)]
    pub tenant: Option<String>,
    /// Why; recorded with every purged record's event.
    pub reason: String,
    /// List what would be purged, and purge nothing.
    #[serde(default)]
    pub dry_run: bool,
    /// Request lineage, echoed in the response and recorded in the audit stream.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}

impl PurgeParams {
    /// The one target named, or what is wrong with the naming.
    pub fn target(&mut self) -> MemoryResult<PurgeTarget> {
        let record = match (self.memory_type, self.id) {
            (Some(memory_type), Some(id)) => Some(PurgeTarget::Record { memory_type, id }),
            (None, None) => None,
            _ => return Err(purge_target("a record is named by both `type` and `id`")),
        };
        if self.confirm.is_some() && self.subject.is_none() {
            return Err(purge_target("`confirm` lists candidates of a `subject`"));
        }
        let subject = self.subject.take().map(|subject| PurgeTarget::Subject {
            subject,
            confirm: self.confirm.take(),
        });
        let butler = self.butler.take().map(PurgeTarget::Butler);
        let tenant = self.tenant.take().map(PurgeTarget::Tenant);
        let mut named = [record, subject, butler, tenant].into_iter().flatten();
        match (named.next(), named.next()) {
            (Some(target), None) => Ok(target),
            (None, _) => Err(purge_target(
                "name what to purge: `type` and `id`, `subject`, `butler` or `tenant`",
            )),
            (Some(_), Some(_)) => Err(purge_target("name one target per purge")),
        }
    }
}

fn purge_target(message: &str) -> MemoryError {
    MemoryError::new(ErrorCode::InvalidPurgeTarget, message)
}

/// `memory_audit_reads`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditReadsParams {
    /// Where to start: the `next_cursor` of the previous page. Omitted: from the beginning.
    #[serde(default)]
    pub since: Option<i64>,
    /// Most calls listed (default 100, at most 1000).
    #[serde(default)]
    pub limit: Option<u32>,
    /// Request lineage, echoed in the response.
    #[serde(default)]
    pub request_context: Option<RequestContext>,
}
