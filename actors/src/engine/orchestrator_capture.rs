//! The orchestrator's write-back triggers (orchestrator_memory_subsystem.md, "Memory
//! write-back triggers": parsed workflow outputs, inbound transcript capture, diagnostics
//! findings): the orchestrator hands over a text with its source — a step's output, a
//! channel message, a finding — and the typed memories in it are read out by the drop-zone's
//! extractor (`memory.ingest.extractor`: `TODO:`, `Decision:`, checklists, typed headings,
//! any other paragraph an observation; or the model) and written with that source, as a dropped file's are. An orchestrator that
//! already knows its memories' types writes them with `orchestrator_remember` instead.

use super::Engine;
use crate::domain::author::Author;
use crate::domain::caller::Caller;
use crate::domain::orchestrator::extract::extract;
use crate::domain::orchestrator::graph_write::{RememberInput, Remembered};
use crate::domain::orchestrator::source::{Source, SourceType};
use crate::domain::request_context::Lineage;
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::write_path::write_graph;

/// The longest text one capture reads, in bytes (a long workflow output; each memory read
/// out of it is bounded by `limits.max_content_bytes`).
pub const MAX_CAPTURE_BYTES: usize = 256 * 1024;

impl Engine {
    /// Reads the typed memories out of `text` and writes them, sourced `source`, to the
    /// caller's orchestrator graph in one transaction. A text with nothing to remember (only
    /// done checklist items, say) writes nothing and answers empty.
    pub async fn orchestrator_capture(
        &self,
        caller: &Caller,
        orchestrator_id: Option<&str>,
        source: Source,
        text: &str,
        lineage: Lineage,
    ) -> MemoryResult<Remembered> {
        let orchestrator = self.orchestrator_of(caller, orchestrator_id, true)?;
        if source.source_type == SourceType::IngestFile {
            return Err(MemoryError::new(
                ErrorCode::InvalidSourcePath,
                "files are captured by dropping them in the orchestrator's ingest folder, \
                 not as `ingest_file` text",
            ));
        }
        if text.trim().is_empty() {
            return Err(MemoryError::new(
                ErrorCode::EmptyContent,
                "`text` must not be empty",
            ));
        }
        if text.len() > MAX_CAPTURE_BYTES {
            return Err(MemoryError::new(
                ErrorCode::ContentTooLarge,
                format!(
                    "`text` is {} bytes; a capture reads at most {MAX_CAPTURE_BYTES}",
                    text.len()
                ),
            ));
        }
        let limits = &self.services.config.limits;
        // A capture does not wait for a model that does not answer now: the orchestrator's
        // trigger is on its way; the deterministic extractor reads the text instead.
        let extracted = match self
            .services
            .memory_extractor
            .read(text, limits.max_content_bytes)
            .await
        {
            Ok(reading) => reading.extracted,
            Err(e) => {
                tracing::warn!(orchestrator, error = %e, "the model did not answer; the capture is read by the deterministic extractor");
                extract(text, limits.max_content_bytes)
            }
        };
        if extracted.memories.is_empty() {
            return Ok(Remembered {
                memories: Vec::new(),
                edges: Vec::new(),
                superseded: Vec::new(),
            });
        }
        let write = RememberInput {
            source,
            memories: extracted.memories,
            edges: extracted.edges,
        }
        .validate(limits)?;
        let author = Author::new(caller.actor(), lineage);
        let now = self.services.clock.now();
        write_graph(&self.services, orchestrator, write, &author, now).await
    }
}
