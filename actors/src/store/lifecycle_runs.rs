//! Bookkeeping of the per-shard lifecycle jobs: which shards hold data (so a shard stopped
//! while idle is still swept, DECISIONS.md #13) and a record of every run, for
//! `memory_stats` and operators.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::shard_key::ShardKey;
use crate::error::MemoryResult;

use super::Store;

impl Store {
    /// Every shard that owns at least one row, of one tenant or of all.
    pub async fn shard_keys(&self, tenant_id: Option<&str>) -> MemoryResult<Vec<ShardKey>> {
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT tenant_id, butler FROM episodes WHERE $1::text IS NULL OR tenant_id = $1
             UNION
             SELECT tenant_id, COALESCE(source_butler, '_tenant') FROM facts
             WHERE $1::text IS NULL OR tenant_id = $1
             UNION
             SELECT tenant_id, COALESCE(source_butler, '_tenant') FROM rules
             WHERE $1::text IS NULL OR tenant_id = $1
             ORDER BY 1, 2",
        )
        .bind(tenant_id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(tenant, butler)| ShardKey::new(tenant, butler))
            .collect())
    }

    /// Records one finished run of `kind` for a shard.
    pub async fn record_run(
        &self,
        shard: &ShardKey,
        kind: &str,
        started_at: DateTime<Utc>,
        finished_at: DateTime<Utc>,
        result: &Value,
    ) -> MemoryResult<()> {
        sqlx::query(
            "INSERT INTO lifecycle_runs (id, tenant_id, butler, kind, started_at, finished_at, result)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(Uuid::now_v7())
        .bind(&shard.tenant_id)
        .bind(&shard.butler)
        .bind(kind)
        .bind(started_at)
        .bind(finished_at)
        .bind(result)
        .execute(self.writer())
        .await?;
        Ok(())
    }

    /// When `kind` last finished anywhere, for catching up on runs missed while down.
    pub async fn last_run_of(&self, kind: &str) -> MemoryResult<Option<DateTime<Utc>>> {
        Ok(
            sqlx::query_scalar("SELECT max(finished_at) FROM lifecycle_runs WHERE kind = $1")
                .bind(kind)
                .fetch_one(self.pool())
                .await?,
        )
    }
}
