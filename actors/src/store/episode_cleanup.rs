//! Episode cleanup of one shard (memory_project_plan.md "Episode Cleanup", DECISIONS.md #6):
//! expired episodes are deleted (dead letters only once their retention has passed too);
//! then, above `max_entries`, the oldest terminal episodes go: consolidated ones first, then
//! failed ones. A pending episode that has not expired is never deleted, nor is a dead
//! letter inside its retention, whatever the count. Every deletion appends an
//! `episode_deleted` event in the statement that deletes, in bounded batches, and the
//! tenant's vocabulary then lets go of the words no remaining memory holds.

use chrono::{DateTime, Duration, Utc};

use crate::domain::shard_key::ShardKey;
use crate::error::MemoryResult;

use super::{Store, vocabulary};

/// Deletes the episodes `$victims` selects (a query over `episodes` returning ids, using
/// `$1` tenant, `$2` butler, `$3` now, `$4` batch size and `$6` the dead-letter cutoff) and
/// logs each, with `$5` as the actor and `reason`. Answers how many, and the words they held
/// (for the tenant's vocabulary to let go of those no memory holds any longer).
fn delete_sql(victims: &str, reason: &str) -> String {
    format!(
        "WITH gone AS (
             DELETE FROM episodes WHERE tenant_id = $1 AND id IN ({victims})
             RETURNING id, butler, consolidation_status, created_at, expires_at, search_vector),
         logged AS (
             INSERT INTO memory_events (tenant_id, event_type, entity_type, entity_id,
                                        occurred_at, actor, butler, payload)
             SELECT $1, 'episode_deleted', 'episode', id, $3, $5, butler,
                    jsonb_build_object('before', jsonb_build_object(
                                           'consolidation_status', consolidation_status,
                                           'created_at', created_at, 'expires_at', expires_at),
                                       'after', NULL, 'reason', '{reason}')
             FROM gone)
         SELECT count(*),
                COALESCE((SELECT array_agg(DISTINCT l)
                          FROM gone g, unnest(tsvector_to_array(g.search_vector)) AS l),
                         '{{}}')
         FROM gone"
    )
}

const EXPIRED: &str = "SELECT id FROM episodes
     WHERE tenant_id = $1 AND butler = $2 AND expires_at <= $3
       AND (consolidation_status <> 'dead_letter' OR expires_at <= $6)
     LIMIT $4";

/// Oldest terminal episodes, consolidated before failed. `$7` is how many to take.
const OVER_CAPACITY: &str = "SELECT id FROM episodes
     WHERE tenant_id = $1 AND butler = $2 AND consolidation_status IN ('consolidated', 'failed')
     ORDER BY (consolidation_status = 'failed'), created_at, id
     LIMIT LEAST($4, $7)";

/// The cutoff of a cleanup: what it deletes is decided at `now`.
#[derive(Debug, Clone, Copy)]
pub struct Cleanup {
    pub now: DateTime<Utc>,
    /// Dead letters that expired before this are past their retention.
    pub dead_letter_cutoff: DateTime<Utc>,
    pub batch: i64,
}

impl Cleanup {
    pub fn new(now: DateTime<Utc>, dead_letter_retention_days: f64, batch: i64) -> Self {
        Cleanup {
            now,
            dead_letter_cutoff: now
                - Duration::milliseconds((dead_letter_retention_days * 86_400_000.0) as i64),
            batch,
        }
    }
}

impl Store {
    /// Deletes up to one batch of the shard's expired episodes; returns how many.
    #[tracing::instrument(target = "otel", name = "db.delete_expired_episodes", skip_all, fields(db.system.name = "postgresql", db.operation.name = "DELETE"))]
    pub async fn delete_expired_episodes(
        &self,
        shard: &ShardKey,
        cleanup: Cleanup,
        actor: &str,
    ) -> MemoryResult<u64> {
        let gone = sqlx::query_as(sqlx::AssertSqlSafe(delete_sql(EXPIRED, "expired")))
            .bind(&shard.tenant_id)
            .bind(&shard.butler)
            .bind(cleanup.now)
            .bind(cleanup.batch)
            .bind(actor)
            .bind(cleanup.dead_letter_cutoff)
            .fetch_one(self.writer())
            .await?;
        self.forget_words_of(shard, gone).await
    }

    /// After a deletion of `gone` (how many episodes, the words they held): the tenant's
    /// vocabulary lets go of the words no memory holds any longer. Answers how many.
    async fn forget_words_of(
        &self,
        shard: &ShardKey,
        gone: (i64, Vec<String>),
    ) -> MemoryResult<u64> {
        let (n, words) = gone;
        if !words.is_empty() {
            let mut conn = self.writer().acquire().await?;
            vocabulary::forget_words(&mut conn, &shard.tenant_id, Some(&words)).await?;
        }
        Ok(n as u64)
    }

    /// The shard's episode count.
    pub async fn shard_episode_count(&self, shard: &ShardKey) -> MemoryResult<u64> {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM episodes WHERE tenant_id = $1 AND butler = $2",
        )
        .bind(&shard.tenant_id)
        .bind(&shard.butler)
        .fetch_one(self.pool())
        .await?;
        Ok(n as u64)
    }

    /// Deletes up to one batch (at most `excess`) of the shard's oldest terminal episodes;
    /// returns how many.
    #[tracing::instrument(target = "otel", name = "db.delete_over_capacity_episodes", skip_all, fields(db.system.name = "postgresql", db.operation.name = "DELETE"))]
    pub async fn delete_over_capacity_episodes(
        &self,
        shard: &ShardKey,
        cleanup: Cleanup,
        excess: u64,
        actor: &str,
    ) -> MemoryResult<u64> {
        let gone = sqlx::query_as(sqlx::AssertSqlSafe(delete_sql(OVER_CAPACITY, "capacity")))
            .bind(&shard.tenant_id)
            .bind(&shard.butler)
            .bind(cleanup.now)
            .bind(cleanup.batch)
            .bind(actor)
            .bind(cleanup.dead_letter_cutoff)
            .bind(excess as i64)
            .fetch_one(self.writer())
            .await?;
        self.forget_words_of(shard, gone).await
    }
}
