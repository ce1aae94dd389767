//! The orchestrator memory (orchestrator_memory_subsystem.md, issue 23): an orchestrator's
//! typed memory graph, written and read through the engine. An orchestrator is a tenant
//! (DECISIONS.md #1): its key's tenant is its `orchestratorId`, so its memory is isolated
//! from every other orchestrator's as tenants are, by the key and never by an argument. A
//! call that names another orchestrator is refused, and the refusal logged.

use uuid::Uuid;

use super::Engine;
use crate::domain::author::Author;
use crate::domain::caller::Caller;
use crate::domain::listing::{Page, page_size};
use crate::domain::orchestrator::graph_query::GraphQuery;
use crate::domain::orchestrator::graph_write::{RememberInput, Remembered};
use crate::domain::orchestrator::node::{Node, NodeStatus};
use crate::domain::request_context::Lineage;
use crate::domain::text::{check_content, check_required_reason};
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::store::orchestrator_graph::NodeWithEdges;
use crate::write_path::write_graph;

impl Engine {
    /// Writes nodes, their supersessions and edges to the caller's orchestrator graph, in
    /// one transaction (`write_path::write_graph`: content and summaries pass the redaction
    /// policy first, as every text stored).
    pub async fn orchestrator_remember(
        &self,
        caller: &Caller,
        orchestrator_id: Option<&str>,
        input: RememberInput,
        lineage: Lineage,
    ) -> MemoryResult<Remembered> {
        let orchestrator = self.orchestrator_of(caller, orchestrator_id, true)?;
        let write = input.validate(&self.services.config.limits)?;
        let author = Author::new(caller.actor(), lineage);
        let now = self.services.clock.now();
        write_graph(&self.services, orchestrator, write, &author, now).await
    }

    /// Marks a node of the caller's orchestrator `superseded` or `retracted`, with a reason
    /// (logged in the audit stream).
    pub async fn orchestrator_set_status(
        &self,
        caller: &Caller,
        orchestrator_id: Option<&str>,
        id: Uuid,
        status: NodeStatus,
        reason: String,
        lineage: Lineage,
    ) -> MemoryResult<Node> {
        let orchestrator = self.orchestrator_of(caller, orchestrator_id, true)?;
        if status == NodeStatus::Active {
            return Err(MemoryError::new(
                ErrorCode::InvalidTransition,
                "a memory is made `superseded` or `retracted`; none is made active again",
            ));
        }
        let reason =
            check_required_reason(reason, &self.services.config.limits, "a status change")?;
        let author = Author::new(caller.actor(), lineage);
        let now = self.services.clock.now();
        self.services
            .store
            .orchestrator_set_status(orchestrator, id, status, &reason, &author, now)
            .await
    }

    /// A node of the caller's orchestrator with its edges both ways.
    pub async fn orchestrator_get(
        &self,
        caller: &Caller,
        orchestrator_id: Option<&str>,
        id: Uuid,
    ) -> MemoryResult<NodeWithEdges> {
        let orchestrator = self.orchestrator_of(caller, orchestrator_id, false)?;
        self.services.store.orchestrator_get(orchestrator, id).await
    }

    /// A page of the caller's orchestrator's nodes (the dashboard's graph view).
    pub async fn orchestrator_list(
        &self,
        caller: &Caller,
        orchestrator_id: Option<&str>,
        query: GraphQuery,
    ) -> MemoryResult<Page<Node>> {
        let orchestrator = self.orchestrator_of(caller, orchestrator_id, false)?;
        let size = page_size(query.limit)?;
        if let Some(q) = &query.q {
            check_content("q", q, &self.services.config.limits)?;
        }
        self.services
            .store
            .orchestrator_list(orchestrator, &query, size)
            .await
    }

    /// The orchestrator a call acts on (`Caller::orchestrator`), once the orchestrator
    /// memory is on and the database answers. A call naming another orchestrator is logged
    /// as a warning: it is a key used where it should not be, or a routing bug.
    pub(super) fn orchestrator_of<'a>(
        &self,
        caller: &'a Caller,
        requested: Option<&str>,
        writes: bool,
    ) -> MemoryResult<&'a str> {
        if !self.services.config.memory.enabled {
            return Err(MemoryError::new(
                ErrorCode::OrchestratorMemoryDisabled,
                "the orchestrator memory is turned off (`memory.enabled = false`)",
            ));
        }
        self.services.database.check()?;
        caller.orchestrator(requested, writes).inspect_err(|e| {
            if e.code == ErrorCode::CrossOrchestrator {
                tracing::warn!(
                    orchestrator = %caller.tenant_id,
                    requested = requested.unwrap_or_default(),
                    key = %caller.key_name,
                    "orchestrator memory access refused across orchestrators"
                );
            }
        })
    }
}
