//! What a bulletin always considers, whatever the message: the orchestrator's active goals,
//! todos, decisions (most recent first) and preferences, and the contradictions still
//! unresolved (both ends active).

use uuid::Uuid;

use super::Store;
use super::orchestrator_graph::{NODE_COLUMNS, NODE_FROM, NodeRow};
use crate::domain::orchestrator::node::Node;
use crate::error::MemoryResult;

impl Store {
    /// Up to `per_type` active goals, todos and preferences (most important, then most
    /// recent first) and decisions (most recent first), of the orchestrator.
    #[tracing::instrument(target = "otel", name = "db.orchestrator_standing", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn orchestrator_standing(
        &self,
        tenant_id: &str,
        per_type: i64,
    ) -> MemoryResult<Vec<Node>> {
        let rows: Vec<NodeRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {NODE_COLUMNS} FROM (
                 SELECT id, row_number() OVER (
                            PARTITION BY node_type
                            ORDER BY CASE WHEN node_type = 'Decision' THEN 0 ELSE importance END DESC,
                                     updated_at DESC, id) AS place
                 FROM orchestrator_memories
                 WHERE tenant_id = $1 AND status = 'active'
                   AND node_type IN ('Goal', 'Todo', 'Decision', 'Preference')) ranked
             JOIN {NODE_FROM} ON m.tenant_id = $1 AND m.id = ranked.id
             WHERE ranked.place <= $2
             ORDER BY m.node_type, ranked.place"
        )))
        .bind(tenant_id)
        .bind(per_type)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(Node::from).collect())
    }

    /// Up to `limit` unresolved contradictions of the orchestrator, newest first: each
    /// `Contradicts` edge whose two ends are active, as its (from, to) nodes.
    #[tracing::instrument(target = "otel", name = "db.orchestrator_conflicts", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn orchestrator_conflicts(
        &self,
        tenant_id: &str,
        limit: i64,
    ) -> MemoryResult<Vec<(Node, Node)>> {
        let pairs: Vec<(Uuid, Uuid)> = sqlx::query_as(
            "SELECT e.from_id, e.to_id FROM orchestrator_edges e
                 JOIN orchestrator_memories a ON a.tenant_id = e.tenant_id AND a.id = e.from_id
                 JOIN orchestrator_memories b ON b.tenant_id = e.tenant_id AND b.id = e.to_id
             WHERE e.tenant_id = $1 AND e.edge_type = 'Contradicts'
               AND a.status = 'active' AND b.status = 'active'
             ORDER BY e.created_at DESC, e.id LIMIT $2",
        )
        .bind(tenant_id)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        let ids: Vec<Uuid> = pairs.iter().flat_map(|(a, b)| [*a, *b]).collect();
        let rows: Vec<NodeRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {NODE_COLUMNS} FROM {NODE_FROM} WHERE m.tenant_id = $1 AND m.id = ANY($2)"
        )))
        .bind(tenant_id)
        .bind(&ids)
        .fetch_all(self.pool())
        .await?;
        let nodes: Vec<Node> = rows.into_iter().map(Node::from).collect();
        let find = |id: Uuid| nodes.iter().find(|n| n.memory_id == id).cloned();
        Ok(pairs
            .into_iter()
            .filter_map(|(a, b)| Some((find(a)?, find(b)?)))
            .collect())
    }
}
