//! An orchestrator's nodes, page by page, for the people who look after its memory (the
//! dashboard's graph view): `domain/orchestrator/graph_query.rs` says the order and filters.

use super::Store;
use super::orchestrator_graph::{NODE_COLUMNS, NODE_FROM, NodeRow};
use crate::domain::listing::Page;
use crate::domain::orchestrator::graph_query::GraphQuery;
use crate::domain::orchestrator::node::Node;
use crate::error::MemoryResult;

/// The filters beside the tenant's, `$2` to `$4`.
const FILTERS: &str = "
       AND ($2::text IS NULL OR m.node_type = $2)
       AND ($3::text IS NULL OR m.status = $3)
       AND ($4::text IS NULL OR m.search_vector @@ plainto_tsquery('english', $4))";

impl Store {
    /// A page of at most `size` of the orchestrator's nodes matching `query`, newest first,
    /// with the number of them all.
    #[tracing::instrument(target = "otel", name = "db.orchestrator_list", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn orchestrator_list(
        &self,
        tenant_id: &str,
        query: &GraphQuery,
        size: u32,
    ) -> MemoryResult<Page<Node>> {
        let list = format!(
            "SELECT {NODE_COLUMNS} FROM {NODE_FROM} WHERE m.tenant_id = $1{FILTERS}
               AND ($5::uuid IS NULL OR m.id < $5)
             ORDER BY m.id DESC LIMIT $6"
        );
        let count =
            format!("SELECT count(*) FROM orchestrator_memories m WHERE m.tenant_id = $1{FILTERS}");
        macro_rules! bind {
            ($q:expr) => {
                $q.bind(tenant_id)
                    .bind(query.node_type.map(|t| t.as_str()))
                    .bind(query.status.map(|s| s.as_str()))
                    .bind(&query.q)
            };
        }
        let rows: Vec<NodeRow> = bind!(sqlx::query_as(sqlx::AssertSqlSafe(list)))
            .bind(query.cursor)
            .bind(i64::from(size) + 1)
            .fetch_all(self.pool())
            .await?;
        let total: i64 = bind!(sqlx::query_scalar(sqlx::AssertSqlSafe(count)))
            .fetch_one(self.pool())
            .await?;
        let mut items: Vec<Node> = rows.into_iter().map(Node::from).collect();
        let next_cursor = if items.len() > size as usize {
            items.truncate(size as usize);
            items.last().map(|n| n.memory_id)
        } else {
            None
        };
        Ok(Page {
            items,
            next_cursor,
            total: Some(total),
        })
    }
}
