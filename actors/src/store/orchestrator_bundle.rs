//! The orchestrator memory's graph in a tenant's bundle (docs/export.md): its sources, nodes
//! and edges as rows after the rules, in that order, each kind referring to the one before.
//! On import a node or source whose fingerprint (its typed content, its provenance) the
//! tenant already holds under another id is that one: the rows after it are pointed at the
//! stored id, so importing into a tenant that holds part of the graph joins the two.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::PgConnection;
use uuid::Uuid;

use super::orchestrator_graph::{EDGE_COLUMNS, EdgeRow, Events, node_by_id};
use crate::domain::author::Author;
use crate::domain::bundle::RowKind;
use crate::domain::orchestrator::edge::Edge;
use crate::error::MemoryResult;

/// Whether rows of `kind` are the orchestrator graph's.
pub(super) fn is_graph(kind: RowKind) -> bool {
    matches!(
        kind,
        RowKind::OrchestratorSource | RowKind::OrchestratorMemory | RowKind::OrchestratorEdge
    )
}

/// The id under which the tenant already holds what a skipped source or node row holds
/// (the same fingerprint), when that is another id than the row's.
pub(super) async fn stored_id(
    conn: &mut PgConnection,
    tenant_id: &str,
    kind: RowKind,
    row: &Value,
) -> MemoryResult<Option<String>> {
    if !matches!(
        kind,
        RowKind::OrchestratorSource | RowKind::OrchestratorMemory
    ) {
        return Ok(None);
    }
    let table = kind.table();
    let stored: Option<Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT t.id FROM {table} t, jsonb_populate_record(NULL::{table}, $2) r
         WHERE t.tenant_id = $1 AND t.fingerprint = r.fingerprint"
    )))
    .bind(tenant_id)
    .bind(row)
    .fetch_optional(conn)
    .await?;
    let own = row.get("id").and_then(Value::as_str).unwrap_or_default();
    Ok(stored
        .map(|id| id.to_string())
        .filter(|id| id.as_str() != own))
}

/// Points a graph row's references (a node's `source_id`, an edge's ends) at the ids
/// `stored` says the tenant holds them under.
pub(super) fn point_at_stored(row: &mut Value, stored: &HashMap<String, String>) {
    for field in ["source_id", "from_id", "to_id"] {
        if let Some(Value::String(id)) = row.get_mut(field)
            && let Some(held) = stored.get(id.as_str())
        {
            *id = held.clone();
        }
    }
}

/// An `orchestrator_memory_imported` or `orchestrator_edge_imported` event for each node
/// and edge an import wrote, whose `after` is the record as stored (as the butlers' records
/// get theirs).
pub(super) async fn append_imported_events(
    conn: &mut PgConnection,
    tenant_id: &str,
    nodes: &[Uuid],
    edges: &[Uuid],
    imported_from: &Value,
    author: &Author,
    now: DateTime<Utc>,
) -> MemoryResult<()> {
    let events = Events {
        tenant_id,
        author,
        now,
    };
    for id in nodes {
        let node = node_by_id(conn, tenant_id, *id).await?;
        let payload = json!({"before": null, "after": node, "imported_from": imported_from});
        events
            .append(
                conn,
                "orchestrator_memory_imported",
                "orchestrator_memory",
                *id,
                payload,
            )
            .await?;
    }
    let rows: Vec<EdgeRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {EDGE_COLUMNS} FROM orchestrator_edges
         WHERE tenant_id = $1 AND id = ANY($2) ORDER BY id"
    )))
    .bind(tenant_id)
    .bind(edges)
    .fetch_all(&mut *conn)
    .await?;
    for edge in rows.into_iter().map(Edge::from) {
        let id = edge.edge_id;
        let payload = json!({"before": null, "after": edge, "imported_from": imported_from});
        events
            .append(
                conn,
                "orchestrator_edge_imported",
                "orchestrator_edge",
                id,
                payload,
            )
            .await?;
    }
    Ok(())
}
