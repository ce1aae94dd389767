//! The ingestion drop-zone of the orchestrator memory (orchestrator_memory_subsystem.md,
//! "Ingestion"; docs/orchestrator.md): files dropped in an orchestrator's
//! `memory/ingest/` folder become typed memories of its graph. The ingester actor
//! (`actors/ingester.rs`) finds them; this module is what happens to one.
//!
//! ```text
//! drop_zone.rs   the folders, listing what waits, names in processed/ and rejected/
//! workspace.rs   where a file (or a link) may lead: its own folder or a shared one
//! pipeline.rs    one file: resolve, check, read, extract, write, manifest, move
//! manifest.rs    what a file gave, or why it was rejected
//! memory_extractor.rs  what reads typed memories out of a text: deterministic, or a model
//! memory_log.rs  the orchestrator's own log, logs/memory.log
//! ```

mod drop_zone;
mod manifest;
mod memory_extractor;
mod memory_log;
mod pipeline;
mod workspace;

pub(crate) use drop_zone::{DropZone, counts};
pub(crate) use memory_extractor::MemoryExtractor;
pub(crate) use pipeline::{Ingested, ingest};
