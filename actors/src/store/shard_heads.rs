//! The shard heads (migration 21): each shard's count of write transactions, bumped by every
//! instance's writes inside their transactions. Their sum over a tenant tells an instance
//! whether anyone wrote to the tenant since it last looked.

use crate::error::MemoryResult;

use super::Store;

impl Store {
    /// The sum of each tenant's shard heads (0 for a tenant never written): it moves with
    /// every committed write of the tenant, on any instance. One probe of the primary key
    /// per tenant.
    #[tracing::instrument(target = "otel", name = "db.tenants_heads", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn tenants_heads(&self, tenants: &[String]) -> MemoryResult<Vec<(String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT t.tenant_id, coalesce(sum(h.seq), 0)::bigint
             FROM unnest($1::text[]) AS t(tenant_id)
                  LEFT JOIN shard_heads h ON h.tenant_id = t.tenant_id
             GROUP BY t.tenant_id",
        )
        .bind(tenants)
        .fetch_all(self.pool())
        .await?)
    }
}
