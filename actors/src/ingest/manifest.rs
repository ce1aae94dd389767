//! A dropped file's manifest (orchestrator_memory_subsystem.md, "Write success or rejection
//! manifest"): written beside the file in `processed/` or `rejected/` as
//! `<name>.manifest.json`, it says what the file gave — each memory and edge with its id and
//! whether this file created it or found it stored — or, for a rejection, the
//! machine-readable reasons. Manifests carry ids, types and summaries, never a file's text.

use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::orchestrator::graph_write::Remembered;
use crate::domain::orchestrator::ingest_file::Reason;

/// What became of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Processed,
    Rejected,
}

impl Outcome {
    /// The folder under `ingest/` it goes to.
    pub fn folder(self) -> &'static str {
        match self {
            Outcome::Processed => "processed",
            Outcome::Rejected => "rejected",
        }
    }
}

/// A memory a file gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestMemory {
    pub memory_id: Uuid,
    #[serde(rename = "type")]
    pub node_type: String,
    pub summary: String,
    /// False: stored before (by an earlier drop of the same content, or before a crash).
    pub created: bool,
}

/// An edge a file gave.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestEdge {
    pub edge_id: Uuid,
    pub edge_type: String,
    pub from_memory_id: Uuid,
    pub to_memory_id: Uuid,
    pub created: bool,
}

/// The manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub outcome: Outcome,
    /// The file's name as dropped.
    pub file: String,
    /// Its name in `processed/` or `rejected/` (another when the name was taken).
    pub stored_as: String,
    /// The canonical path of what was read: the file in `processed/`, or where a link led.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// What read it: `json` (its own memories), `deterministic` or `llm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extractor: Option<String>,
    /// What did not go as configured but did not stop the file (the model could not read
    /// it, so the deterministic extractor did).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    pub at: DateTime<Utc>,
    /// The request id of its audit events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default)]
    pub memories: Vec<ManifestMemory>,
    #[serde(default)]
    pub edges: Vec<ManifestEdge>,
    #[serde(default)]
    pub superseded: Vec<Uuid>,
    /// Checked checklist items left out.
    #[serde(default)]
    pub done_items: usize,
    #[serde(default)]
    pub reasons: Vec<Reason>,
}

impl Manifest {
    /// A manifest of `outcome` for the file `file`, stored as `stored_as`, with nothing else
    /// known yet.
    pub fn new(outcome: Outcome, file: &str, stored_as: &str, at: DateTime<Utc>) -> Manifest {
        Manifest {
            outcome,
            file: file.to_owned(),
            stored_as: stored_as.to_owned(),
            source_path: None,
            sha256: None,
            bytes: None,
            extractor: None,
            warnings: Vec::new(),
            at,
            request_id: None,
            memories: Vec::new(),
            edges: Vec::new(),
            superseded: Vec::new(),
            done_items: 0,
            reasons: Vec::new(),
        }
    }

    /// Records what a write stored or found.
    pub fn record(&mut self, remembered: &Remembered) {
        self.memories = remembered
            .memories
            .iter()
            .map(|m| ManifestMemory {
                memory_id: m.record.memory_id,
                node_type: m.record.node_type.as_str().to_owned(),
                summary: m.record.summary.clone(),
                created: m.created,
            })
            .collect();
        self.edges = remembered
            .edges
            .iter()
            .map(|e| ManifestEdge {
                edge_id: e.record.edge_id,
                edge_type: e.record.edge_type.as_str().to_owned(),
                from_memory_id: e.record.from_memory_id,
                to_memory_id: e.record.to_memory_id,
                created: e.created,
            })
            .collect();
        self.superseded = remembered.superseded.clone();
    }

    /// Writes it as `path`: aside, then renamed, so that a manifest is never read half
    /// written.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let aside = path.with_file_name(format!(".{name}.tmp"));
        std::fs::write(&aside, json)?;
        std::fs::rename(&aside, path)
    }
}
