//! The orchestrator graph's one way in: every text of a write through the redaction policy,
//! then the write in one transaction (`Store::orchestrator_remember`). The tool
//! (`engine/orchestrator.rs`) and the drop-zone (`ingest/pipeline.rs`) both write here, so
//! a file's memories are redacted and audited exactly as a call's.

use chrono::{DateTime, Utc};

use crate::domain::author::Author;
use crate::domain::orchestrator::graph_write::{GraphWrite, Remembered};
use crate::domain::redaction::Findings;
use crate::error::MemoryResult;
use crate::services::{Services, count_redactions, redact_write};

/// Redacts `write`'s texts and writes it to `orchestrator`'s graph.
pub(crate) async fn write_graph(
    services: &Services,
    orchestrator: &str,
    mut write: GraphWrite,
    author: &Author,
    now: DateTime<Utc>,
) -> MemoryResult<Remembered> {
    redact_write(&services.redactor, |redactor| {
        let mut findings = Findings::new();
        for node in &mut write.nodes {
            let node = &mut node.node;
            node.content = redactor.content(orchestrator, &node.content, &mut findings)?;
            node.summary = redactor.content(orchestrator, &node.summary, &mut findings)?;
        }
        count_redactions(&findings);
        Ok(())
    })?;
    services
        .store
        .orchestrator_remember(orchestrator, &write, author, now)
        .await
}
