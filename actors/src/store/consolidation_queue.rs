//! The consolidation queue: which episodes are due (pending, live, past their retry time,
//! oldest first), what a failed attempt does to them (attempts, error, backoff, and the dead
//! letter at the end), the dead letters an admin lists and requeues, and the backlog that
//! metrics export and the scheduler's triggers watch. Persisting a successful job is
//! `consolidation.rs`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::domain::author::Author;
use crate::domain::consolidation_status::{AttemptFailure, ConsolidationStatus};
use crate::domain::episode::DeadLetter;
use crate::domain::event::{EventType, NewEvent};
use crate::domain::extraction::SourceEpisode;
use crate::domain::memory_type::MemoryType;
use crate::domain::shard_key::ShardKey;
use crate::error::MemoryResult;

use super::Store;
use super::columns::happened;
use super::consolidation::CONSOLIDATION_ACTOR;

/// A failed extraction attempt on a batch.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// The extractor that failed (`heuristic`, `llm`, `local`).
    pub extractor: &'a str,
    /// Why, as recorded on each episode and the job.
    pub error: &'a str,
    pub failure: AttemptFailure,
    pub at: DateTime<Utc>,
}

/// What a failed attempt did to its batch.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct FailedAttempt {
    /// Episodes that will be retried.
    pub retrying: u64,
    /// Episodes that ran out of attempts after transient failures.
    pub dead_lettered: u64,
    /// Episodes the extractor refused or could not answer for.
    pub failed: u64,
}

/// A shard whose consolidation backlog is over the size or age trigger.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ShardBacklog {
    pub tenant_id: String,
    pub butler: String,
    pub pending: i64,
    pub oldest: DateTime<Utc>,
}

impl Store {
    /// The tenant's dead-lettered episodes, oldest first.
    #[tracing::instrument(target = "otel", name = "db.dead_letters", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn dead_letters(&self, tenant_id: &str, limit: i64) -> MemoryResult<Vec<DeadLetter>> {
        Ok(sqlx::query_as(
            "SELECT id, butler, content, consolidation_attempts, last_consolidation_error,
                    created_at, expires_at
             FROM episodes WHERE tenant_id = $1 AND consolidation_status = 'dead_letter'
             ORDER BY created_at, id LIMIT $2",
        )
        .bind(tenant_id)
        .bind(limit)
        .fetch_all(self.pool())
        .await?)
    }

    /// Puts dead letters back in the queue (all of the tenant's, or the given ids) with
    /// their attempts reset; one `episode_requeued` event each. Returns the ids requeued.
    #[tracing::instrument(target = "otel", name = "db.requeue_dead_letters", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
    pub async fn requeue_dead_letters(
        &self,
        tenant_id: &str,
        ids: Option<&[Uuid]>,
        author: &Author,
        now: DateTime<Utc>,
    ) -> MemoryResult<Vec<Uuid>> {
        let mut tx = self.begin().await?;
        let requeued: Vec<(Uuid, String)> = sqlx::query_as(
            "UPDATE episodes SET consolidation_status = 'pending', consolidation_attempts = 0,
                                 next_consolidation_retry_at = NULL
             WHERE tenant_id = $1 AND consolidation_status = 'dead_letter'
               AND ($2::uuid[] IS NULL OR id = ANY($2))
             RETURNING id, butler",
        )
        .bind(tenant_id)
        .bind(ids)
        .fetch_all(&mut *tx)
        .await?;
        for (id, butler) in &requeued {
            super::events::append(
                &mut tx,
                &NewEvent {
                    tenant_id: tenant_id.to_owned(),
                    event_type: EventType::EpisodeRequeued,
                    entity_type: MemoryType::Episode,
                    entity_id: *id,
                    author: author.clone(),
                    scope: None,
                    butler: Some(butler.clone()),
                    payload: json!({"before": {"consolidation_status": "dead_letter"},
                                    "after": {"consolidation_status": "pending",
                                              "consolidation_attempts": 0,
                                              "next_consolidation_retry_at": null}}),
                },
                now,
            )
            .await?;
        }
        tx.commit().await?;
        Ok(requeued.into_iter().map(|(id, _)| id).collect())
    }

    /// Shards whose backlog of episodes due for consolidation at `now` is at least `size`
    /// or has one older than `since`.
    #[tracing::instrument(target = "otel", name = "db.backlogged_shards", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn backlogged_shards(
        &self,
        size: i64,
        since: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> MemoryResult<Vec<ShardBacklog>> {
        Ok(sqlx::query_as(
            "SELECT tenant_id, butler, count(*) AS pending, min(created_at) AS oldest
             FROM episodes
             WHERE consolidation_status = 'pending' AND forgotten_at IS NULL AND expires_at > $3
               AND (next_consolidation_retry_at IS NULL OR next_consolidation_retry_at <= $3)
             GROUP BY tenant_id, butler
             HAVING count(*) >= $1 OR min(created_at) <= $2",
        )
        .bind(size)
        .bind(since)
        .bind(now)
        .fetch_all(self.pool())
        .await?)
    }

    /// The whole consolidation backlog (pending, live episodes): size and oldest, for
    /// metrics.
    pub async fn consolidation_backlog(
        &self,
        now: DateTime<Utc>,
    ) -> MemoryResult<(i64, Option<DateTime<Utc>>)> {
        Ok(sqlx::query_as(
            "SELECT count(*), min(created_at) FROM episodes
             WHERE consolidation_status = 'pending' AND forgotten_at IS NULL AND expires_at > $1",
        )
        .bind(now)
        .fetch_one(self.pool())
        .await?)
    }

    /// Records a failed attempt on a batch: each episode's attempts go up, the error is
    /// kept, and the failure decides the rest (`AttemptFailure::next_status`): retried after
    /// `backoff(attempts)`, or dead-lettered, or failed, each terminal state with its event.
    /// The job row records the failure.
    #[tracing::instrument(target = "otel", name = "db.record_failed_attempt", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
    pub async fn record_failed_attempt(
        &self,
        shard: &ShardKey,
        batch: &[SourceEpisode],
        attempt: Attempt<'_>,
        max_attempts: u32,
        backoff: impl Fn(i32) -> chrono::Duration,
    ) -> MemoryResult<FailedAttempt> {
        let Attempt {
            extractor,
            error,
            failure,
            at: now,
        } = attempt;
        let ids: Vec<Uuid> = batch.iter().map(|e| e.id).collect();
        let mut tx = self.begin().await?;
        let attempts: Vec<(Uuid, i32)> = sqlx::query_as(
            "SELECT id, consolidation_attempts + 1 FROM episodes
             WHERE tenant_id = $1 AND id = ANY($2) AND consolidation_status = 'pending'
             ORDER BY created_at, id FOR UPDATE",
        )
        .bind(&shard.tenant_id)
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?;
        let mut out = FailedAttempt::default();
        let author = Author::service(CONSOLIDATION_ACTOR);
        for (id, attempt) in attempts {
            let status = failure.next_status(attempt.max(0) as u32, max_attempts);
            let retry_at = (status == ConsolidationStatus::Pending).then(|| now + backoff(attempt));
            sqlx::query(
                "UPDATE episodes SET consolidation_attempts = $3, last_consolidation_error = $4,
                                     next_consolidation_retry_at = $5, consolidation_status = $6
                 WHERE tenant_id = $1 AND id = $2",
            )
            .bind(&shard.tenant_id)
            .bind(id)
            .bind(attempt)
            .bind(error)
            .bind(retry_at)
            .bind(status.as_str())
            .execute(&mut *tx)
            .await?;
            let event_type = match status {
                ConsolidationStatus::DeadLetter => {
                    out.dead_lettered += 1;
                    EventType::EpisodeDeadLettered
                }
                ConsolidationStatus::Failed => {
                    out.failed += 1;
                    EventType::EpisodeFailed
                }
                ConsolidationStatus::Pending | ConsolidationStatus::Consolidated => {
                    out.retrying += 1;
                    continue;
                }
            };
            super::events::append(
                &mut tx,
                &NewEvent {
                    tenant_id: shard.tenant_id.clone(),
                    event_type,
                    entity_type: MemoryType::Episode,
                    entity_id: id,
                    author: author.clone(),
                    scope: None,
                    butler: Some(shard.butler.clone()),
                    payload: json!({"before": {"consolidation_status": "pending"},
                                    "after": {"consolidation_status": status,
                                              "consolidation_attempts": attempt,
                                              "last_consolidation_error": error}}),
                },
                now,
            )
            .await?;
        }
        sqlx::query(
            "INSERT INTO consolidation_jobs
                 (id, tenant_id, butler, idempotency_key, status, extractor, episode_ids,
                  started_at, finished_at, error)
             VALUES ($1, $2, $3, $4, 'failed', $5, $6, $7, $7, $8)",
        )
        .bind(Uuid::now_v7())
        .bind(&shard.tenant_id)
        .bind(&shard.butler)
        .bind(format!("failed:{}", Uuid::now_v7()))
        .bind(extractor)
        .bind(&ids)
        .bind(now)
        .bind(error)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(out)
    }

    /// The shard's next batch: pending, not forgotten, not expired, due for (re)trying, in
    /// `created_at, id` order.
    #[tracing::instrument(target = "otel", name = "db.pending_episodes", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn pending_episodes(
        &self,
        shard: &ShardKey,
        now: DateTime<Utc>,
        limit: i64,
    ) -> MemoryResult<Vec<SourceEpisode>> {
        let rows: Vec<(Uuid, String, DateTime<Utc>)> = sqlx::query_as(concat!(
            "SELECT id, content, ",
            happened!(""),
            " FROM episodes
             WHERE tenant_id = $1 AND butler = $2 AND consolidation_status = 'pending'
               AND forgotten_at IS NULL AND expires_at > $3
               AND (next_consolidation_retry_at IS NULL OR next_consolidation_retry_at <= $3)
             ORDER BY created_at, id LIMIT $4"
        ))
        .bind(&shard.tenant_id)
        .bind(&shard.butler)
        .bind(now)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, content, happened_at)| SourceEpisode {
                id,
                content,
                happened_at,
            })
            .collect())
    }
}
