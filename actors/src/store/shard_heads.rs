//! The shard heads (migrations 21 and 28): each shard's count of write transactions, and of
//! those that changed its episodes, facts and rules, bumped by every instance's writes inside
//! their transactions. Their sums over a tenant tell an instance whether anyone wrote to the
//! tenant since it last looked, and which memory types the writes changed.

use crate::domain::memory_type::MemoryType;
use crate::error::MemoryResult;

use super::Store;

impl Store {
    /// Each tenant's shard heads summed (zeros for a tenant never written): they move with
    /// every committed write of the tenant, on any instance. One probe of the primary key
    /// per tenant. With them, the primary's WAL position after the sums were read: every
    /// write they count committed at or below it, so a replica that has replayed that far
    /// misses none of them.
    #[tracing::instrument(target = "otel", name = "db.tenants_heads", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn tenants_heads(&self, tenants: &[String]) -> MemoryResult<HeadsLook> {
        let rows: Vec<(String, i64, i64, i64, i64, i64)> = sqlx::query_as(
            "SELECT t.tenant_id, coalesce(sum(h.seq), 0)::bigint,
                    coalesce(sum(h.episode_writes), 0)::bigint,
                    coalesce(sum(h.fact_writes), 0)::bigint,
                    coalesce(sum(h.rule_writes), 0)::bigint,
                    (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint
             FROM unnest($1::text[]) AS t(tenant_id)
                  LEFT JOIN shard_heads h ON h.tenant_id = t.tenant_id
             GROUP BY t.tenant_id",
        )
        .bind(tenants)
        .fetch_all(self.pool())
        .await?;
        Ok(HeadsLook {
            wal_position: rows.iter().map(|r| r.5).max().unwrap_or(0),
            heads: rows
                .into_iter()
                .map(|(tenant, writes, episodes, facts, rules, _)| {
                    let heads = TenantHeads {
                        writes,
                        by_type: [episodes, facts, rules],
                    };
                    (tenant, heads)
                })
                .collect(),
        })
    }
}

/// One look at the shard heads.
#[derive(Debug, Clone)]
pub struct HeadsLook {
    /// Each tenant looked at, with its shard heads summed.
    pub heads: Vec<(String, TenantHeads)>,
    /// The primary's WAL position when they were read, in bytes from 0/0.
    pub wal_position: i64,
}

/// A tenant's shard heads summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantHeads {
    /// Write transactions: each moves it by one per shard it wrote to.
    pub writes: i64,
    /// Of those, the ones that changed episodes, facts and rules (in that order):
    /// a transaction that changed several types counts in each.
    pub by_type: [i64; 3],
}

impl TenantHeads {
    /// The count of write transactions that changed memories of `memory_type`.
    pub fn of(&self, memory_type: MemoryType) -> i64 {
        self.by_type[match memory_type {
            MemoryType::Episode => 0,
            MemoryType::Fact => 1,
            MemoryType::Rule => 2,
        }]
    }
}
