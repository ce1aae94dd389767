//! Whether an orchestrator's memory works, and what it holds (orchestrator_memory_subsystem.md,
//! "Failure Modes and Recovery": "orchestrator continues with memory disabled status"): the
//! answer of `orchestrator_status`. A store that cannot be reached or read makes the
//! memory `disabled`, with the reason, rather than an error: the orchestrator keeps
//! routing messages, without memory, and says why.

use chrono::{DateTime, Utc};
use serde::Serialize;

crate::domain::string_enum! {
    /// Whether the orchestrator memory answers.
    MemoryState {
        Enabled => "enabled",
        /// Off by configuration, or its store unreachable or broken: see `reason`.
        Disabled => "disabled",
    }
}

impl MemoryState {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}

/// What the graph holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GraphCounts {
    pub active: i64,
    pub superseded: i64,
    pub retracted: i64,
    pub edges: i64,
    /// Nodes the indexer has not embedded yet (found by full text meanwhile).
    pub unembedded: i64,
}

/// The drop-zone's folders.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngestCounts {
    pub enabled: bool,
    /// The folder files are dropped in.
    pub folder: String,
    /// Files waiting to be read.
    pub waiting: usize,
    /// Files in `processed/` and `rejected/` (manifests aside).
    pub processed: usize,
    pub rejected: usize,
}

/// `orchestrator_status`
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStatus {
    pub orchestrator_id: String,
    pub status: MemoryState,
    /// Why it is disabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// None when the store could not be read.
    pub graph: Option<GraphCounts>,
    /// None when the folder was never made (no key for this orchestrator at start).
    pub ingest: Option<IngestCounts>,
    /// When the last bulletin snapshot was written.
    pub last_bulletin_at: Option<DateTime<Utc>>,
}
