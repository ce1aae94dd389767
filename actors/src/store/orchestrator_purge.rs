//! A purge of a whole tenant erases its orchestrator memory graph too (an orchestrator is a
//! tenant): every edge, node and source row, and, as for the butlers' records, the content
//! of their past events (the purge's `memory_events_purge`). Each node erased gets an
//! `orchestrator_memory_purged` event saying which purge, why and by whom.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::author::Author;
use crate::error::MemoryResult;

/// Erases the tenant's graph; answers the ids of the nodes and edges erased, whose past
/// events the purge then rewrites. `payload` is the purge's own (its id, scope, reason).
pub(super) async fn erase_graph(
    conn: &mut PgConnection,
    tenant_id: &str,
    payload: &Value,
    author: &Author,
    now: DateTime<Utc>,
) -> MemoryResult<Vec<Uuid>> {
    // One statement: the edges' foreign keys are checked when both ends are gone.
    let erased: Vec<(Uuid, bool)> = sqlx::query_as(
        "WITH edges AS (DELETE FROM orchestrator_edges WHERE tenant_id = $1 RETURNING id),
              nodes AS (DELETE FROM orchestrator_memories WHERE tenant_id = $1 RETURNING id)
         SELECT id, true FROM nodes UNION ALL SELECT id, false FROM edges",
    )
    .bind(tenant_id)
    .fetch_all(&mut *conn)
    .await?;
    sqlx::query("DELETE FROM orchestrator_sources WHERE tenant_id = $1")
        .bind(tenant_id)
        .execute(&mut *conn)
        .await?;
    let nodes: Vec<Uuid> = erased.iter().filter(|e| e.1).map(|e| e.0).collect();
    sqlx::query(
        "INSERT INTO memory_events
             (tenant_id, event_type, entity_type, entity_id, occurred_at, actor,
              request_id, subrequest_id, segment_id, payload)
         SELECT $1, 'orchestrator_memory_purged', 'orchestrator_memory', id, $3, $4, $5, $6, $7, $8
         FROM unnest($2::uuid[]) WITH ORDINALITY AS n (id, ord)
         ORDER BY ord",
    )
    .bind(tenant_id)
    .bind(&nodes)
    .bind(now)
    .bind(&author.name)
    .bind(&author.lineage.request_id)
    .bind(&author.lineage.subrequest_id)
    .bind(&author.lineage.segment_id)
    .bind(payload)
    .execute(&mut *conn)
    .await?;
    Ok(erased.into_iter().map(|e| e.0).collect())
}
