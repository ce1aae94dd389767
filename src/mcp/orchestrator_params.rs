//! The typed parameters of the orchestrator memory's tools (issue 23). Field names follow
//! orchestrator_memory_subsystem.md (`orchestratorId`, `memoryId`, `edgeType`, ...), so an
//! orchestrator writes the spec's shapes as they are.

use butler_memory_actors::{EdgeType, NodeStatus, NodeType, RequestContext, Source};
use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

/// One memory of `orchestrator_remember`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryParam {
    /// A name this call's edges use for this memory (`from`, `to`); not stored.
    #[serde(default, rename = "ref")]
    pub reference: Option<String>,
    /// What it records.
    #[serde(rename = "type")]
    pub node_type: NodeType,
    /// The memory, as plain text (whitespace is normalised).
    pub content: String,
    /// A short line for bulletins (default: the content's first line, cut at 160 characters).
    #[serde(default)]
    pub summary: Option<String>,
    /// How much it matters, 0 to 100 (default 50).
    #[serde(default)]
    pub importance: Option<i64>,
    /// How sure it is, 0.0 to 1.0 (default 0.8).
    #[serde(default)]
    pub confidence: Option<f64>,
    /// Ids of stored memories this one replaces: each becomes `superseded`, with an
    /// `Updates` edge from this one.
    #[serde(default)]
    pub supersedes: Vec<Uuid>,
}

/// One edge of `orchestrator_remember`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EdgeParam {
    /// A stored memory's id, or the `ref` of a memory of this call.
    pub from: String,
    /// A stored memory's id, or the `ref` of a memory of this call.
    pub to: String,
    pub edge_type: EdgeType,
    /// 0.0 to 1.0 (default 1.0).
    #[serde(default)]
    pub weight: Option<f64>,
    /// Why they relate (a contradiction's reason, say).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `orchestrator_remember`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RememberParams {
    /// The orchestrator: the key's own (its tenant). Naming another is refused.
    #[serde(default)]
    pub orchestrator_id: Option<String>,
    /// Where the memories come from.
    pub source: Source,
    /// Up to 256 typed memories. One with the same type and content as a stored one is that
    /// one (`created: false`).
    #[serde(default)]
    pub memories: Vec<MemoryParam>,
    /// Up to 256 edges among this call's memories and stored ones. An edge already there is
    /// found (`created: false`).
    #[serde(default)]
    pub edges: Vec<EdgeParam>,
    /// Request lineage, echoed in the response and recorded in the audit stream.
    #[serde(default, rename = "request_context")]
    pub request_context: Option<RequestContext>,
}

/// `orchestrator_set_status`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetStatusParams {
    #[serde(default)]
    pub orchestrator_id: Option<String>,
    pub memory_id: Uuid,
    /// `superseded` or `retracted` (final).
    pub status: NodeStatus,
    /// Why: kept in the audit stream.
    pub reason: String,
    #[serde(default, rename = "request_context")]
    pub request_context: Option<RequestContext>,
}

/// `orchestrator_get`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OrchestratorGetParams {
    #[serde(default)]
    pub orchestrator_id: Option<String>,
    pub memory_id: Uuid,
    #[serde(default, rename = "request_context")]
    pub request_context: Option<RequestContext>,
}

/// `orchestrator_recall`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecallParams {
    #[serde(default)]
    pub orchestrator_id: Option<String>,
    /// What to recall: a message, a question, a topic.
    pub query: String,
    /// How many memories at most (default and most: `memory.retrieval.top_n`, 20).
    #[serde(default)]
    pub limit: Option<u32>,
    #[serde(default, rename = "request_context")]
    pub request_context: Option<RequestContext>,
}

/// `orchestrator_bulletin`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BulletinParams {
    #[serde(default)]
    pub orchestrator_id: Option<String>,
    /// The channel message the bulletin is for (recall spans every conversation and channel
    /// of the orchestrator).
    pub message: String,
    #[serde(default, rename = "request_context")]
    pub request_context: Option<RequestContext>,
}
