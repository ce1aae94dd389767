//! One dropped file, from `ingest/` to `processed/` or `rejected/`
//! (orchestrator_memory_subsystem.md, "Ingestion", steps 2–6): resolved inside the workspace,
//! its kind and size checked, read, its candidate memories extracted and validated, written
//! in one transaction (redacted and audited as a tool call's), then its manifest written and
//! the file moved beside it.
//!
//! Crash-safe by order: the file leaves `ingest/` last. A crash before the commit leaves
//! nothing written; a crash after it leaves the file to be read again, and since a memory
//! is found by its typed content (and an edge by its ends and type), the second pass
//! creates nothing and its manifest says so (`created: false`). A write the store cannot
//! take now (the database down, the service overloaded) leaves the file where it is for the
//! next pass; anything the file itself gets wrong rejects it.

use std::path::Path;

use chrono::{DateTime, Utc};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::drop_zone::DropZone;
use super::manifest::{Manifest, Outcome};
use super::memory_log;
use crate::domain::author::Author;
use crate::domain::orchestrator::ingest_file::{
    FileKind, Reason, json_candidates, text_candidates,
};
use crate::domain::text::hex;
use crate::error::{ErrorClass, ErrorCode, MemoryError};
use crate::services::Services;
use crate::write_path::write_graph;

/// What became of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ingested {
    /// Moved to `processed/` or `rejected/`, beside its manifest.
    Settled(Outcome),
    /// Left in `ingest/` for a later pass: the store could not take it now.
    Later,
}

impl Ingested {
    /// The `outcome` label of `butler_memory_ingest_files_total`.
    pub fn label(self) -> &'static str {
        match self {
            Ingested::Settled(outcome) => outcome.folder(),
            Ingested::Later => "deferred",
        }
    }
}

/// Takes the file `entry` of `zone` through the pipeline. `crash_after_commit` is a drill
/// (`Engine::crash_ingest_after_commit`): the ingester panics once its write is committed,
/// as a crash would.
pub(crate) async fn ingest(
    services: &Services,
    zone: &DropZone,
    entry: &Path,
    crash_after_commit: bool,
) -> Ingested {
    let now = services.clock.now();
    let name = entry
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut manifest = Manifest::new(Outcome::Rejected, &name, &name, now);
    let reasons = match read_and_write(
        services,
        zone,
        entry,
        &name,
        &mut manifest,
        crash_after_commit,
    )
    .await
    {
        Ok(()) => {
            manifest.outcome = Outcome::Processed;
            settle(zone, entry, &manifest, now);
            return Ingested::Settled(Outcome::Processed);
        }
        Err(Failure::Later(e)) => {
            memory_log::append(
                &zone.log,
                now,
                "warn",
                "ingest_deferred",
                json!({"file": name, "code": e.code.as_str(), "message": e.message}),
            );
            tracing::warn!(orchestrator = %zone.orchestrator, file = %name, error = %e, "ingest file left for a later pass");
            return Ingested::Later;
        }
        Err(Failure::Rejected(reasons)) => reasons,
    };
    let tag = manifest
        .sha256
        .as_deref()
        .map(|sha| sha[..12].to_owned())
        .unwrap_or_else(|| uuid::Uuid::now_v7().simple().to_string()[20..].to_owned());
    manifest.stored_as = zone.free_name(Outcome::Rejected, &name, &tag);
    // A file read but refused rests in `rejected/`, not where it would have gone.
    let rejected = zone.folder(Outcome::Rejected);
    let processed = zone.folder(Outcome::Processed);
    if let Some(path) = &mut manifest.source_path
        && Path::new(path.as_str()).starts_with(&processed)
    {
        *path = rejected
            .join(&manifest.stored_as)
            .to_string_lossy()
            .into_owned();
    }
    manifest.reasons = reasons;
    settle(zone, entry, &manifest, now);
    Ingested::Settled(Outcome::Rejected)
}

/// Why a file did not go through.
enum Failure {
    Rejected(Vec<Reason>),
    Later(MemoryError),
}

impl From<Reason> for Failure {
    fn from(reason: Reason) -> Failure {
        Failure::Rejected(vec![reason])
    }
}

/// Steps 2 to 4; fills `manifest` with what it learns on the way.
async fn read_and_write(
    services: &Services,
    zone: &DropZone,
    entry: &Path,
    name: &str,
    manifest: &mut Manifest,
    crash_after_commit: bool,
) -> Result<(), Failure> {
    let config = &services.config;
    let kind = FileKind::of(name).ok_or_else(|| {
        Reason::new(
            "unsupported_type",
            format!("{name:?} is not a .txt, .md or .json file"),
        )
    })?;
    let target = zone.workspace.resolve(entry)?;
    let size = std::fs::metadata(&target).map(|m| m.len()).unwrap_or(0);
    manifest.bytes = Some(size);
    let limit = config.memory.ingest.max_file_bytes();
    if size > limit {
        return Err(Reason::new(
            "too_large",
            format!("{size} bytes; memory.ingest.max_file_size_mb allows {limit}",),
        )
        .into());
    }
    let bytes = tokio::fs::read(&target)
        .await
        .map_err(|e| Reason::new("unreadable", format!("{}: {e}", target.display())))?;
    let sha = hex(&Sha256::digest(&bytes));
    manifest.sha256 = Some(sha.clone());
    let text = String::from_utf8(bytes).map_err(|e| {
        Reason::new(
            "not_utf8",
            format!(
                "not UTF-8 text (the first invalid byte is at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })?;

    // The citation: the file where it will rest in `processed/`, or where a link led.
    let linked = std::fs::symlink_metadata(entry).is_ok_and(|m| m.is_symlink());
    manifest.stored_as = zone.free_name(Outcome::Processed, name, &sha[..12]);
    let path = if linked {
        target
    } else {
        zone.folder(Outcome::Processed).join(&manifest.stored_as)
    };
    let path = path.to_string_lossy().into_owned();
    manifest.source_path = Some(path.clone());

    let max_bytes = config.limits.max_content_bytes;
    let read = match kind {
        FileKind::Json => {
            manifest.extractor = Some("json".to_owned());
            json_candidates(&text, &path)
        }
        FileKind::Text | FileKind::Markdown => {
            let reading = services
                .memory_extractor
                .read(&text, max_bytes)
                .await
                .map_err(|e| {
                    Failure::Later(MemoryError::new(
                        ErrorCode::ExtractorUnavailable,
                        e.to_string(),
                    ))
                })?;
            manifest.extractor = Some(reading.extractor.to_owned());
            manifest.warnings.extend(reading.warning);
            text_candidates(reading.extracted, &path)
        }
    }
    .map_err(Failure::Rejected)?;
    manifest.done_items = read.done_items;
    if read.path_given
        && let Some(given) = &read.input.source.source_path
    {
        zone.workspace.check_given(given)?;
        manifest.source_path = Some(given.clone());
    }
    let write = read.input.validate(&config.limits).map_err(rejected)?;
    services.database.check().map_err(Failure::Later)?;
    let author = Author::service("ingest");
    manifest.request_id = Some(author.lineage.request_id.clone());
    let remembered = write_graph(
        services,
        &zone.orchestrator,
        write,
        &author,
        services.clock.now(),
    )
    .await
    .map_err(|e| match e.class() {
        ErrorClass::Unavailable | ErrorClass::Overloaded => Failure::Later(e),
        _ => rejected(e),
    })?;
    if crash_after_commit {
        panic!("drill: the ingester crashed after committing {name}");
    }
    manifest.record(&remembered);
    Ok(())
}

fn rejected(e: MemoryError) -> Failure {
    Failure::Rejected(vec![Reason::from(e)])
}

/// Steps 5 and 6: the manifest, then the file beside it, then the log line.
fn settle(zone: &DropZone, entry: &Path, manifest: &Manifest, now: DateTime<Utc>) {
    let folder = zone.folder(manifest.outcome);
    let manifest_path = folder.join(format!("{}.manifest.json", manifest.stored_as));
    if let Err(e) = manifest.write(&manifest_path) {
        tracing::warn!(path = %manifest_path.display(), error = %e, "ingest manifest not written");
    }
    if let Err(e) = std::fs::rename(entry, folder.join(&manifest.stored_as)) {
        // Another instance sharing the folder may have moved it first.
        tracing::warn!(file = %entry.display(), error = %e, "ingested file not moved");
    }
    let created = manifest.memories.iter().filter(|m| m.created).count();
    match manifest.outcome {
        Outcome::Processed => {
            tracing::info!(
                orchestrator = %zone.orchestrator,
                file = %manifest.file,
                memories = manifest.memories.len(),
                created,
                edges = manifest.edges.len(),
                "ingest file processed"
            );
            memory_log::append(
                &zone.log,
                now,
                "info",
                "ingest_processed",
                json!({
                    "file": manifest.file,
                    "storedAs": manifest.stored_as,
                    "sha256": manifest.sha256,
                    "memories": manifest.memories.len(),
                    "created": created,
                    "edges": manifest.edges.len(),
                    "requestId": manifest.request_id,
                }),
            );
        }
        Outcome::Rejected => {
            let codes: Vec<&str> = manifest.reasons.iter().map(|r| r.code.as_str()).collect();
            tracing::warn!(
                orchestrator = %zone.orchestrator,
                file = %manifest.file,
                reasons = ?codes,
                "ingest file rejected"
            );
            memory_log::append(
                &zone.log,
                now,
                "warn",
                "ingest_rejected",
                json!({
                    "file": manifest.file,
                    "storedAs": manifest.stored_as,
                    "reasons": manifest.reasons,
                }),
            );
        }
    }
}
