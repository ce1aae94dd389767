//! The typed parameters of the orchestrator memory's tools (issue 23). Field names follow
//! orchestrator_memory_subsystem.md (`orchestratorId`, `memoryId`, `edgeType`, ...), so an
//! orchestrator writes the spec's shapes as they are.

use butler_memory_actors::{EdgeInput, NodeInput, NodeStatus, RequestContext, Source};
use schemars::JsonSchema;
use serde::Deserialize;
use uuid::Uuid;

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
    pub memories: Vec<NodeInput>,
    /// Up to 256 edges among this call's memories and stored ones. An edge already there is
    /// found (`created: false`).
    #[serde(default)]
    pub edges: Vec<EdgeInput>,
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

/// `orchestrator_status`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatusParams {
    #[serde(default)]
    pub orchestrator_id: Option<String>,
    #[serde(default, rename = "request_context")]
    pub request_context: Option<RequestContext>,
}

/// `orchestrator_capture`
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CaptureParams {
    #[serde(default)]
    pub orchestrator_id: Option<String>,
    /// Where the text comes from: `workflow_output` (with `workflowRunId`, `stepId`),
    /// `channel_transcript` (with `conversationId`), `diagnostics`, `manual`.
    pub source: Source,
    /// The text to read memories out of (at most 256 KiB): a step's output, a message, a
    /// finding. `Goal:`, `TODO:`, `Decision:` ... lines, checklists and typed headings give
    /// memories of their type; any other paragraph is an `Observation`.
    pub text: String,
    #[serde(default, rename = "request_context")]
    pub request_context: Option<RequestContext>,
}
