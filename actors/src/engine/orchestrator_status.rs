//! `orchestrator_status`: whether an orchestrator's memory works, and what it holds. Like
//! a bulletin, the status never fails for the store: an unreachable or broken store, or
//! the memory turned off, is `disabled` with the reason (and the orchestrator goes on
//! without memory); only a caller's own mistake (another orchestrator's id) is an error.

use super::Engine;
use crate::domain::caller::Caller;
use crate::domain::orchestrator::status::{MemoryState, MemoryStatus};
use crate::error::{ErrorClass, MemoryResult};

impl Engine {
    /// The status of the caller's orchestrator memory.
    pub async fn orchestrator_status(
        &self,
        caller: &Caller,
        orchestrator_id: Option<&str>,
    ) -> MemoryResult<MemoryStatus> {
        let memory = &self.services.config.memory;
        let (orchestrator, off) = match self.orchestrator_of(caller, orchestrator_id, false) {
            Ok(o) => (o.to_owned(), None),
            Err(e) if e.class() == ErrorClass::Unavailable => {
                (caller.tenant_id.clone(), Some(e.message))
            }
            Err(e) => return Err(e),
        };
        let graph = match off {
            Some(reason) => Err(reason),
            None => self
                .services
                .store
                .orchestrator_counts(&orchestrator)
                .await
                .map_err(|e| format!("its store cannot be read: {e}")),
        };
        let (status, reason, graph) = match graph {
            Ok(counts) => (MemoryState::Enabled, None, Some(counts)),
            Err(reason) => {
                tracing::warn!(orchestrator = %orchestrator, %reason, "orchestrator memory disabled");
                (MemoryState::Disabled, Some(reason), None)
            }
        };
        let ingest_on = memory.enabled && memory.ingest.enabled;
        Ok(MemoryStatus {
            ingest: crate::ingest::counts(&memory.root, &orchestrator, ingest_on),
            last_bulletin_at: self.last_snapshot(&orchestrator).await.map(|(_, at)| at),
            orchestrator_id: orchestrator,
            status,
            reason,
            graph,
        })
    }
}
