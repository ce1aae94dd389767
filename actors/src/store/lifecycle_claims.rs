//! Claims on scheduled sweeps, so that with several service instances on one database each
//! shard's sweep runs once per scheduled time (migration 20): the instance that claims
//! (shard, kind, scheduled time) first runs it and keeps a heartbeat; a claim whose holder
//! stopped beating without finishing is taken over, atomically, by whoever claims it next.

use chrono::{DateTime, Duration, Utc};

use super::Store;
use crate::domain::shard_key::ShardKey;
use crate::domain::sweep::SweepKind;
use crate::error::MemoryResult;

/// One scheduled run of one shard's sweep.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SweepFire {
    pub shard: ShardKey,
    pub kind: SweepKind,
    /// The scheduled time (the same on every instance).
    pub fire_at: DateTime<Utc>,
}

impl Store {
    /// Claims `fire` for `instance` at `now`: `true` when this instance should run it (it
    /// claimed it first, or took it over from a holder silent for longer than `lease`).
    pub async fn claim_sweep(
        &self,
        fire: &SweepFire,
        instance: &str,
        now: DateTime<Utc>,
        lease: Duration,
    ) -> MemoryResult<bool> {
        let won: Option<i32> = sqlx::query_scalar(
            "INSERT INTO lifecycle_claims
                 (tenant_id, butler, kind, fire_at, instance_id, claimed_at, heartbeat_at)
             VALUES ($1, $2, $3, $4, $5, $6, $6)
             ON CONFLICT (tenant_id, butler, kind, fire_at) DO UPDATE
                 SET instance_id = EXCLUDED.instance_id, claimed_at = EXCLUDED.claimed_at,
                     heartbeat_at = EXCLUDED.heartbeat_at, holders = lifecycle_claims.holders + 1
                 WHERE lifecycle_claims.finished_at IS NULL
                   AND lifecycle_claims.heartbeat_at < $7
             RETURNING holders",
        )
        .bind(&fire.shard.tenant_id)
        .bind(&fire.shard.butler)
        .bind(fire.kind.as_str())
        .bind(fire.fire_at)
        .bind(instance)
        .bind(now)
        .bind(now - lease)
        .fetch_optional(self.writer())
        .await?;
        Ok(won.is_some())
    }

    /// Keeps `instance`'s claim on `fire` alive.
    pub async fn beat(
        &self,
        fire: &SweepFire,
        instance: &str,
        now: DateTime<Utc>,
    ) -> MemoryResult<()> {
        self.set_claim(fire, instance, now, "heartbeat_at").await
    }

    /// Marks `instance`'s claim on `fire` done.
    pub async fn finish_claim(
        &self,
        fire: &SweepFire,
        instance: &str,
        now: DateTime<Utc>,
    ) -> MemoryResult<()> {
        self.set_claim(fire, instance, now, "finished_at").await
    }

    async fn set_claim(
        &self,
        fire: &SweepFire,
        instance: &str,
        now: DateTime<Utc>,
        column: &str,
    ) -> MemoryResult<()> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE lifecycle_claims SET {column} = $6
             WHERE tenant_id = $1 AND butler = $2 AND kind = $3 AND fire_at = $4 AND instance_id = $5"
        )))
        .bind(&fire.shard.tenant_id)
        .bind(&fire.shard.butler)
        .bind(fire.kind.as_str())
        .bind(fire.fire_at)
        .bind(instance)
        .bind(now)
        .execute(self.writer())
        .await?;
        Ok(())
    }

    /// Claims whose holder went silent for longer than `lease` without finishing: their
    /// sweeps did not run to the end, and another instance should take them over.
    pub async fn abandoned_claims(
        &self,
        now: DateTime<Utc>,
        lease: Duration,
    ) -> MemoryResult<Vec<SweepFire>> {
        let rows: Vec<(String, String, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT tenant_id, butler, kind, fire_at FROM lifecycle_claims
             WHERE finished_at IS NULL AND heartbeat_at < $1
             ORDER BY fire_at LIMIT 100",
        )
        .bind(now - lease)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(fire).collect()
    }

    /// The claims `instance` holds and has not finished, oldest first.
    pub async fn held_claims(&self, instance: &str) -> MemoryResult<Vec<SweepFire>> {
        let rows: Vec<(String, String, String, DateTime<Utc>)> = sqlx::query_as(
            "SELECT tenant_id, butler, kind, fire_at FROM lifecycle_claims
             WHERE instance_id = $1 AND finished_at IS NULL ORDER BY fire_at LIMIT 1000",
        )
        .bind(instance)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(fire).collect()
    }

    /// Forgets finished claims older than `before` (their runs are in `lifecycle_runs`).
    pub async fn forget_finished_claims(&self, before: DateTime<Utc>) -> MemoryResult<u64> {
        Ok(
            sqlx::query("DELETE FROM lifecycle_claims WHERE finished_at < $1")
                .bind(before)
                .execute(self.writer())
                .await?
                .rows_affected(),
        )
    }
}

fn fire(
    (tenant_id, butler, kind, fire_at): (String, String, String, DateTime<Utc>),
) -> MemoryResult<SweepFire> {
    Ok(SweepFire {
        shard: ShardKey::new(tenant_id, butler),
        kind: kind.parse()?,
        fire_at,
    })
}
