//! The shard heads (migration 21): each shard's count of write transactions, bumped by every
//! instance's writes inside their transactions. Their sum over a tenant tells an instance
//! whether anyone wrote to the tenant since it last looked.

use crate::error::MemoryResult;

use super::Store;

impl Store {
    /// The sum of the tenant's shard heads: it moves with every committed write of the
    /// tenant, on any instance. One probe of the primary key.
    #[tracing::instrument(target = "otel", name = "db.tenant_heads", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn tenant_heads(&self, tenant_id: &str) -> MemoryResult<i64> {
        Ok(sqlx::query_scalar(
            "SELECT coalesce(sum(seq), 0)::bigint FROM shard_heads WHERE tenant_id = $1",
        )
        .bind(tenant_id)
        .fetch_one(self.pool())
        .await?)
    }
}
