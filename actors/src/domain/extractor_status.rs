//! Which extractor consolidation runs, and how its local model is doing: what `memory_stats`
//! and `/readyz` show, so that a service that fell back to the heuristic extractor says so.

use chrono::{DateTime, Utc};
use serde::Serialize;

/// Consolidation's extractor as configured, and the one that extracts now.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ExtractorStatus {
    /// `consolidation.extractor`: `local`, `llm` or `heuristic`.
    pub configured: String,
    /// What extracts now: the configured one, or `heuristic` while the local model cannot
    /// run (`local_model` says why).
    pub active: String,
    /// The local model, when `local` is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_model: Option<LocalModelStatus>,
}

/// The local model's process, as its keeper last saw it.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct LocalModelStatus {
    pub state: LocalModelState,
    /// The runtime running it (or last tried): `llama-server` or `portable`.
    pub runtime: Option<String>,
    /// The model's process, while it runs.
    pub pid: Option<u32>,
    /// Restarts after the process died or stopped answering, since the service started.
    pub restarts: u32,
    /// Why the last start or run failed, when one did.
    pub last_error: Option<String>,
    /// When it entered this state.
    pub since: DateTime<Utc>,
}

/// Where the local model's process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LocalModelState {
    /// Not running: not needed yet, or stopped while idle; started when consolidation
    /// needs it.
    Stopped,
    /// Loading the model.
    Starting,
    /// Answering.
    Ready,
    /// It died or stopped answering; started again after a backoff.
    Restarting,
    /// No runtime can run it here (missing files, a CPU it was not built for): the
    /// heuristic extractor stands in until the service is restarted.
    Unavailable,
}

impl LocalModelState {
    pub fn as_str(self) -> &'static str {
        match self {
            LocalModelState::Stopped => "stopped",
            LocalModelState::Starting => "starting",
            LocalModelState::Ready => "ready",
            LocalModelState::Restarting => "restarting",
            LocalModelState::Unavailable => "unavailable",
        }
    }
}
