//! What an orchestrator's graph holds, counted for `orchestrator_status`. It reads both
//! tables, so that a store that lost or broke either answers an error here (the status
//! says `disabled`, with it).

use super::Store;
use crate::domain::orchestrator::status::GraphCounts;
use crate::error::MemoryResult;

impl Store {
    /// The orchestrator's nodes by status, its edges, and its nodes without an embedding.
    #[tracing::instrument(target = "otel", name = "db.orchestrator_counts", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn orchestrator_counts(&self, tenant_id: &str) -> MemoryResult<GraphCounts> {
        let (active, superseded, retracted, unembedded, edges): (i64, i64, i64, i64, i64) =
            sqlx::query_as(
                "SELECT count(*) FILTER (WHERE status = 'active'),
                        count(*) FILTER (WHERE status = 'superseded'),
                        count(*) FILTER (WHERE status = 'retracted'),
                        count(*) FILTER (WHERE embedding IS NULL),
                        (SELECT count(*) FROM orchestrator_edges WHERE tenant_id = $1)
                 FROM orchestrator_memories
                 WHERE tenant_id = $1",
            )
            .bind(tenant_id)
            .fetch_one(self.pool())
            .await?;
        Ok(GraphCounts {
            active,
            superseded,
            retracted,
            edges,
            unembedded,
        })
    }
}
