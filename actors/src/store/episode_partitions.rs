//! Episodes' monthly partitions (migration 26): a past month whose episodes have all expired
//! (dead letters past their retention too, by the rule of `episode_cleanup.rs`) is retired
//! whole: its `episode_deleted` events are appended, its counts taken out of the stats'
//! projections and its idempotency keys freed in one statement, the partition is emptied
//! (`TRUNCATE`) in the same transaction, and then dropped. No row is deleted one by one, and
//! nothing is left for vacuum. A month still holding a live episode is left to the per-shard
//! cleanup, row by row, as before.
//!
//! Locks: the events are written first, before the partition is locked (they take shard
//! heads, as every writer does); then the partition is locked against everything, briefly,
//! and what was logged is checked against what it holds before it is emptied (how many, and
//! each one's state that the counts depend on): a difference (an episode came in, or was
//! embedded or changed in between) rolls it all back. The waits for the month's lock
//! and the table's are bounded (`lock_timeout`): a month that cannot be had now is tried at
//! the next cleanup.

use chrono::{DateTime, Months, Utc};

use super::episode_cleanup::Cleanup;
use super::month_partitions::{Monthly, first_of_month};
use super::{Store, vocabulary};
use crate::error::MemoryResult;

/// How long retiring a month waits for a lock before giving up until the next cleanup.
const LOCK_TIMEOUT: &str = "SET LOCAL lock_timeout = '1s'";

/// A month retired: its partition and how many episodes it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetiredMonth {
    pub partition: String,
    pub episodes: i64,
}

/// Whether an episode of the partition is still kept: `$1` now, `$2` the dead-letter cutoff
/// (the negation of `episode_cleanup`'s EXPIRED).
const KEPT: &str =
    "NOT (expires_at <= $1 AND (consolidation_status <> 'dead_letter' OR expires_at <= $2))";

/// What the counts taken out of the projections depend on, for each episode, digested in id
/// order: checked again once the month is locked, since the indexer may embed (or another
/// writer change) an episode between the statement that took the counts out and the lock.
const STATE: &str = "md5(coalesce(string_agg(id::text || ':' || consolidation_status || ':' \
     || (forgotten_at IS NOT NULL)::text || ':' || coalesce(embedding_version_id::text, '-'), \
     ',' ORDER BY id), ''))";

/// Logs the deletion of every episode of `{partition}` (`$1` now, `$2` the actor), takes
/// them out of the stats' projections (as migration 19's trigger does for a DELETE) and frees
/// their keys; answers how many, and the digest of their states (`STATE`).
fn retire_sql(partition: &str) -> String {
    format!(
        "WITH gone AS MATERIALIZED (
             SELECT id, tenant_id, butler, consolidation_status, forgotten_at,
                    embedding_version_id, idempotency_key, created_at, expires_at
             FROM {partition}),
         logged AS (
             INSERT INTO memory_events (tenant_id, event_type, entity_type, entity_id,
                                        occurred_at, actor, butler, payload)
             SELECT tenant_id, 'episode_deleted', 'episode', id, $1, $2, butler,
                    jsonb_build_object('before', jsonb_build_object(
                                           'consolidation_status', consolidation_status,
                                           'created_at', created_at, 'expires_at', expires_at),
                                       'after', NULL, 'reason', 'expired')
             FROM gone ORDER BY tenant_id, butler, created_at, id),
         counted AS (
             INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n)
             SELECT g.tenant_id, 'episode', g.butler, k.dim, k.key, -sum(g.n)
             FROM (SELECT tenant_id, butler, consolidation_status,
                          forgotten_at IS NOT NULL AS forgotten, embedding_version_id,
                          count(*) AS n
                   FROM gone GROUP BY 1, 2, 3, 4, 5) g,
                  episode_count_keys(g.consolidation_status, g.forgotten,
                                     g.embedding_version_id) k
             GROUP BY 1, 2, 3, 4, 5),
         by_day AS (
             INSERT INTO memory_days (tenant_id, butler, day, status, n)
             SELECT tenant_id, butler, (created_at AT TIME ZONE 'UTC')::date,
                    consolidation_status, -count(*)
             FROM gone WHERE forgotten_at IS NULL
             GROUP BY 1, 2, 3, 4),
         freed AS (
             DELETE FROM episode_keys k USING gone g
             WHERE g.idempotency_key IS NOT NULL AND k.tenant_id = g.tenant_id
               AND k.butler = g.butler AND k.idempotency_key = g.idempotency_key
               AND k.episode_id = g.id)
         SELECT count(*), {STATE} FROM gone"
    )
}

impl Store {
    /// Retires every past month whose episodes have all expired at `cleanup.now` (the
    /// current month never: it still takes new episodes); answers the months retired. A
    /// month that cannot be locked within a second, or changes while it is retired, is
    /// left for the next cleanup.
    #[tracing::instrument(target = "otel", name = "db.retire_episode_months", skip_all, fields(db.system.name = "postgresql", db.operation.name = "TRUNCATE"))]
    pub async fn retire_expired_episode_months(
        &self,
        cleanup: Cleanup,
        actor: &str,
    ) -> MemoryResult<Vec<RetiredMonth>> {
        let current = first_of_month(cleanup.now);
        let mut retired = Vec::new();
        for (partition, month) in self.months_made(Monthly::Episodes).await? {
            if month + Months::new(1) > current {
                continue;
            }
            if let Some(episodes) = self.retire_month(&partition, cleanup, actor).await? {
                retired.push(RetiredMonth {
                    partition,
                    episodes,
                });
            }
        }
        Ok(retired)
    }

    /// Retires one month (`partition` is `episodes_YYYY_MM`, as `months_made` parsed it:
    /// nothing to escape) if every episode in it has expired: answers how many it held, or
    /// none when it was left.
    async fn retire_month(
        &self,
        partition: &str,
        cleanup: Cleanup,
        actor: &str,
    ) -> MemoryResult<Option<i64>> {
        let at = (cleanup.now, cleanup.dead_letter_cutoff);
        let mut tx = self.writer.begin().await?;
        // One instance at a time; the one that waited finds the month gone.
        sqlx::query(Monthly::Episodes.lock())
            .execute(&mut *tx)
            .await?;
        let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(partition)
            .fetch_one(&mut *tx)
            .await?;
        if !exists {
            return Ok(None);
        }
        if still_kept(&mut tx, partition, at).await? {
            return Ok(None);
        }
        let logged: (i64, String) = sqlx::query_as(sqlx::AssertSqlSafe(retire_sql(partition)))
            .bind(at.0)
            .bind(actor)
            .fetch_one(&mut *tx)
            .await?;
        // From here nothing else reads or writes the month until it is empty: a wait for
        // that is bounded (the events above waited for shard heads as any writer does).
        sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
        let lock = format!("LOCK TABLE {partition} IN ACCESS EXCLUSIVE MODE");
        if let Err(error) = sqlx::raw_sql(sqlx::AssertSqlSafe(lock))
            .execute(&mut *tx)
            .await
        {
            return lock_not_had(error, partition);
        }
        let count_sql = format!("SELECT count(*), {STATE} FROM {partition}");
        let held: (i64, String) = sqlx::query_as(sqlx::AssertSqlSafe(count_sql))
            .fetch_one(&mut *tx)
            .await?;
        if held != logged || still_kept(&mut tx, partition, at).await? {
            tracing::info!(
                partition,
                "an expired month changed while it was retired; the next cleanup tries again"
            );
            return Ok(None);
        }
        // The words the month's episodes held, by tenant: after it is emptied, each
        // tenant's vocabulary lets go of those no remaining memory holds.
        let words_sql = format!(
            "SELECT tenant_id, array_agg(DISTINCT l)
             FROM {partition}, unnest(tsvector_to_array(search_vector)) AS l GROUP BY tenant_id"
        );
        let words: Vec<(String, Vec<String>)> = sqlx::query_as(sqlx::AssertSqlSafe(words_sql))
            .fetch_all(&mut *tx)
            .await?;
        // TRUNCATE fires no delete trigger: the month's token sketches (migration 32) and
        // read tallies (migration 33) are deleted here, in the same transaction.
        let sketches = format!(
            "DELETE FROM episode_sketches s USING {partition} e
             WHERE s.tenant_id = e.tenant_id AND s.id = e.id"
        );
        let reads = format!(
            "DELETE FROM memory_reads r USING {partition} e
             WHERE r.memory_tenant_id = e.tenant_id AND r.memory_id = e.id"
        );
        for statement in [sketches, reads] {
            sqlx::query(sqlx::AssertSqlSafe(statement))
                .execute(&mut *tx)
                .await?;
        }
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("TRUNCATE {partition}")))
            .execute(&mut *tx)
            .await?;
        for (tenant_id, words) in &words {
            vocabulary::forget_words(&mut tx, tenant_id, Some(words)).await?;
        }
        tx.commit().await?;

        // Empty now: dropping it needs the whole table's lock, for a moment. Not had, the
        // empty month is dropped at the next cleanup (nothing in it to retire).
        let mut tx = self.writer.begin().await?;
        sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
        sqlx::query(Monthly::Episodes.lock())
            .execute(&mut *tx)
            .await?;
        let drop = format!("DROP TABLE IF EXISTS {partition}");
        match sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
            .execute(&mut *tx)
            .await
        {
            Ok(_) => tx.commit().await?,
            Err(error) => {
                lock_not_had(error, partition)?;
            }
        }
        Ok(Some(logged.0))
    }
}

/// A lock not had within `lock_timeout` leaves the month for the next cleanup; anything else
/// is an error.
fn lock_not_had(error: sqlx::Error, partition: &str) -> MemoryResult<Option<i64>> {
    match &error {
        // lock_not_available
        sqlx::Error::Database(db) if db.code().as_deref() == Some("55P03") => {
            tracing::info!(
                partition,
                "an expired month is in use; the next cleanup retires it"
            );
            Ok(None)
        }
        _ => Err(error.into()),
    }
}

/// Whether `partition` still holds an episode cleanup keeps at `at` (now, dead-letter cutoff).
async fn still_kept(
    conn: &mut sqlx::PgConnection,
    partition: &str,
    at: (DateTime<Utc>, DateTime<Utc>),
) -> MemoryResult<bool> {
    let sql = format!("SELECT EXISTS (SELECT 1 FROM {partition} WHERE {KEPT})");
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(at.0)
        .bind(at.1)
        .fetch_one(conn)
        .await?)
}
