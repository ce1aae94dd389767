//! The shard heads (migration 21): each shard's count of write transactions, bumped by every
//! instance's writes inside their transactions. Their sum over a tenant tells an instance
//! whether anyone wrote to the tenant since it last looked.

use crate::error::MemoryResult;

use super::Store;

impl Store {
    /// The sum of each tenant's shard heads (0 for a tenant never written): it moves with
    /// every committed write of the tenant, on any instance. One probe of the primary key
    /// per tenant. With it, the primary's WAL position after the sums were read: every
    /// write they count committed at or below it, so a replica that has replayed that far
    /// misses none of them.
    #[tracing::instrument(target = "otel", name = "db.tenants_heads", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn tenants_heads(&self, tenants: &[String]) -> MemoryResult<HeadsLook> {
        let rows: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT t.tenant_id, coalesce(sum(h.seq), 0)::bigint,
                    (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint
             FROM unnest($1::text[]) AS t(tenant_id)
                  LEFT JOIN shard_heads h ON h.tenant_id = t.tenant_id
             GROUP BY t.tenant_id",
        )
        .bind(tenants)
        .fetch_all(self.pool())
        .await?;
        Ok(HeadsLook {
            wal_position: rows.iter().map(|r| r.2).max().unwrap_or(0),
            heads: rows.into_iter().map(|(t, sum, _)| (t, sum)).collect(),
        })
    }
}

/// One look at the shard heads.
#[derive(Debug, Clone)]
pub struct HeadsLook {
    /// Each tenant looked at, with the sum of its shard heads.
    pub heads: Vec<(String, i64)>,
    /// The primary's WAL position when they were read, in bytes from 0/0.
    pub wal_position: i64,
}
