//! Consolidation jobs: a bounded batch of one shard's pending episodes, extracted and
//! persisted in one transaction — the job row (found again by its idempotency key if the
//! batch is retried), one `consolidation_items` row per extracted item (the database
//! refuses to persist an item twice), the facts and rules with their `derived_from` links
//! and events (actor `consolidation`), and every episode of the batch marked
//! `consolidated`. A crash anywhere before the commit leaves nothing behind; the batch is
//! simply pending again.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::domain::extraction::{Extraction, SourceEpisode};
use crate::domain::fact::NewFact;
use crate::domain::memory_type::MemoryType;
use crate::domain::relation::{LinkTarget, Relation};
use crate::domain::request_context::Lineage;
use crate::domain::rule::{NEW_RULE_CONFIDENCE, NewRule};
use crate::domain::shard_key::{ShardKey, TENANT_SHARD_BUTLER};
use crate::error::MemoryResult;

use super::{Store, facts, rules};

/// The actor recorded for consolidation's changes.
pub const CONSOLIDATION_ACTOR: &str = "consolidation";

/// What one job did.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct JobOutcome {
    pub episodes: u64,
    pub facts_created: u64,
    pub facts_superseded: u64,
    pub facts_confirmed: u64,
    pub rules_created: u64,
    pub rules_confirmed: u64,
}

/// What a failed attempt did to its batch.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct FailedAttempt {
    /// Episodes that will be retried.
    pub retrying: u64,
    /// Episodes that ran out of attempts.
    pub dead_lettered: u64,
}

/// A dead-lettered episode, for the admin who decides its fate.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct DeadLetter {
    pub id: Uuid,
    pub butler: String,
    pub content: String,
    pub consolidation_attempts: i32,
    pub last_consolidation_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
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
    pub async fn requeue_dead_letters(
        &self,
        tenant_id: &str,
        ids: Option<&[Uuid]>,
        actor: &str,
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
        let lineage = Lineage::generated();
        for (id, butler) in &requeued {
            super::events::append(
                &mut tx,
                &crate::domain::event::NewEvent {
                    tenant_id: tenant_id.to_owned(),
                    event_type: crate::domain::event::EventType::EpisodeRequeued,
                    entity_type: MemoryType::Episode,
                    entity_id: *id,
                    actor: actor.to_owned(),
                    lineage: lineage.clone(),
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

    /// The shard's live facts (most recently confirmed first) and rules, as reference for
    /// an extractor.
    pub async fn known_for_consolidation(
        &self,
        shard: &ShardKey,
        limit: i64,
    ) -> MemoryResult<(Vec<crate::domain::extraction::KnownFact>, Vec<String>)> {
        let facts = sqlx::query_as(
            "SELECT id, subject, predicate, content FROM facts
             WHERE tenant_id = $1 AND validity IN ('active', 'fading')
               AND (scope = 'global' OR scope = $2)
             ORDER BY last_confirmed_at DESC, id LIMIT $3",
        )
        .bind(&shard.tenant_id)
        .bind(&shard.butler)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        let rules = sqlx::query_scalar(
            "SELECT content FROM rules
             WHERE tenant_id = $1 AND validity IN ('active', 'fading')
               AND (scope = 'global' OR scope = $2)
             ORDER BY last_confirmed_at DESC, id LIMIT $3",
        )
        .bind(&shard.tenant_id)
        .bind(&shard.butler)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok((facts, rules))
    }

    /// Records a failed attempt on a batch: each episode's attempts go up, the error is
    /// kept, and it is retried after `backoff(attempts)` — or, with no attempts left,
    /// dead-lettered (with an event). The job row records the failure.
    #[allow(clippy::too_many_arguments)]
    pub async fn record_failed_attempt(
        &self,
        shard: &ShardKey,
        batch: &[SourceEpisode],
        extractor: &str,
        error: &str,
        now: DateTime<Utc>,
        max_attempts: u32,
        backoff: impl Fn(i32) -> chrono::Duration,
    ) -> MemoryResult<FailedAttempt> {
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
        let lineage = Lineage::generated();
        for (id, attempt) in attempts {
            let dead = attempt as u32 >= max_attempts;
            let retry_at = (!dead).then(|| now + backoff(attempt));
            sqlx::query(
                "UPDATE episodes SET consolidation_attempts = $3, last_consolidation_error = $4,
                                     next_consolidation_retry_at = $5,
                                     consolidation_status = CASE WHEN $6 THEN 'dead_letter' ELSE 'pending' END
                 WHERE tenant_id = $1 AND id = $2",
            )
            .bind(&shard.tenant_id)
            .bind(id)
            .bind(attempt)
            .bind(error)
            .bind(retry_at)
            .bind(dead)
            .execute(&mut *tx)
            .await?;
            if dead {
                out.dead_lettered += 1;
                super::events::append(
                    &mut tx,
                    &crate::domain::event::NewEvent {
                        tenant_id: shard.tenant_id.clone(),
                        event_type: crate::domain::event::EventType::EpisodeDeadLettered,
                        entity_type: MemoryType::Episode,
                        entity_id: id,
                        actor: CONSOLIDATION_ACTOR.to_owned(),
                        lineage: lineage.clone(),
                        scope: None,
                        butler: Some(shard.butler.clone()),
                        payload: json!({"before": {"consolidation_status": "pending"},
                                        "after": {"consolidation_status": "dead_letter",
                                                  "consolidation_attempts": attempt,
                                                  "last_consolidation_error": error}}),
                    },
                    now,
                )
                .await?;
            } else {
                out.retrying += 1;
            }
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
    pub async fn pending_episodes(
        &self,
        shard: &ShardKey,
        now: DateTime<Utc>,
        limit: i64,
    ) -> MemoryResult<Vec<SourceEpisode>> {
        let rows: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT id, content FROM episodes
             WHERE tenant_id = $1 AND butler = $2 AND consolidation_status = 'pending'
               AND forgotten_at IS NULL AND expires_at > $3
               AND (next_consolidation_retry_at IS NULL OR next_consolidation_retry_at <= $3)
             ORDER BY created_at, id LIMIT $4",
        )
        .bind(&shard.tenant_id)
        .bind(&shard.butler)
        .bind(now)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|(id, content)| SourceEpisode { id, content })
            .collect())
    }

    /// Persists one batch's extraction and marks the batch consolidated, atomically.
    pub async fn persist_consolidation(
        &self,
        shard: &ShardKey,
        batch: &[SourceEpisode],
        extraction: &Extraction,
        extractor: &str,
        now: DateTime<Utc>,
    ) -> MemoryResult<JobOutcome> {
        let ids: Vec<Uuid> = batch.iter().map(|e| e.id).collect();
        let key = format!(
            "{}:{}:{}:{}",
            shard.butler,
            ids.first().copied().unwrap_or_default(),
            ids.last().copied().unwrap_or_default(),
            ids.len()
        );
        let mut tx = self.begin().await?;
        let job_id: Uuid = sqlx::query_scalar(
            "INSERT INTO consolidation_jobs
                 (id, tenant_id, butler, idempotency_key, status, extractor, episode_ids, started_at)
             VALUES ($1, $2, $3, $4, 'running', $5, $6, $7)
             ON CONFLICT (tenant_id, idempotency_key)
             DO UPDATE SET attempt = consolidation_jobs.attempt + 1, started_at = EXCLUDED.started_at
             RETURNING id",
        )
        .bind(Uuid::now_v7())
        .bind(&shard.tenant_id)
        .bind(&shard.butler)
        .bind(&key)
        .bind(extractor)
        .bind(&ids)
        .bind(now)
        .fetch_one(&mut *tx)
        .await?;
        let lineage = Lineage {
            request_id: format!("consolidation-{job_id}"),
            subrequest_id: None,
            segment_id: None,
            generated: true,
        };
        let butler = (shard.butler != TENANT_SHARD_BUTLER).then(|| shard.butler.clone());
        let mut outcome = JobOutcome {
            episodes: ids.len() as u64,
            ..JobOutcome::default()
        };
        let derived_from = |episode: Uuid| LinkTarget {
            target_type: MemoryType::Episode,
            target_id: episode,
            relation: Relation::DerivedFrom,
        };

        for (i, f) in extraction.facts.iter().enumerate() {
            if !claim_item(
                &mut tx,
                shard,
                &format!("{key}:fact:{i}"),
                job_id,
                MemoryType::Fact,
                now,
            )
            .await?
            {
                continue;
            }
            let fact = NewFact {
                id: Uuid::now_v7(),
                tenant_id: shard.tenant_id.clone(),
                subject: f.subject.clone(),
                predicate: f.predicate.clone(),
                content: f.content.clone(),
                scope: crate::domain::caller::GLOBAL_SCOPE.to_owned(),
                confidence: 1.0,
                decay_rate: f.permanence.decay_rate(),
                permanence: f.permanence,
                importance: f.importance,
                source_butler: butler.clone(),
                source_episode_id: Some(f.source_episode_id),
                tags: Vec::new(),
                metadata: json!({"extracted_by": extractor, "consolidation_job_id": job_id}),
                links: std::iter::once(derived_from(f.source_episode_id))
                    .chain(f.relations.iter().map(|(relation, id)| LinkTarget {
                        target_type: MemoryType::Fact,
                        target_id: *id,
                        relation: *relation,
                    }))
                    .collect(),
                created_at: now,
            };
            let stored =
                facts::insert_superseding(&mut tx, &fact, None, CONSOLIDATION_ACTOR, &lineage)
                    .await?;
            item_entity(&mut tx, shard, &format!("{key}:fact:{i}"), stored.fact.id).await?;
            // The fact it updates, when that one had another subject or predicate.
            if let Some(old) = f.supersedes_fact_id
                && stored.superseded.as_ref().map(|s| s.id) != Some(old)
                && stored.fact.id != old
            {
                let done: Option<Uuid> = sqlx::query_scalar(
                    "UPDATE facts SET validity = 'superseded'
                     WHERE tenant_id = $1 AND id = $2 AND validity IN ('active', 'fading')
                     RETURNING id",
                )
                .bind(&shard.tenant_id)
                .bind(old)
                .fetch_optional(&mut *tx)
                .await?;
                if done.is_some() {
                    super::events::append(
                        &mut tx,
                        &crate::domain::event::NewEvent {
                            tenant_id: shard.tenant_id.clone(),
                            event_type: crate::domain::event::EventType::FactSuperseded,
                            entity_type: MemoryType::Fact,
                            entity_id: old,
                            actor: CONSOLIDATION_ACTOR.to_owned(),
                            lineage: lineage.clone(),
                            scope: None,
                            butler: butler.clone(),
                            payload: json!({"after": {"validity": "superseded"},
                                            "superseded_by": stored.fact.id}),
                        },
                        now,
                    )
                    .await?;
                    outcome.facts_superseded += 1;
                }
            }
            match stored.outcome {
                crate::domain::fact::FactOutcome::Created => outcome.facts_created += 1,
                crate::domain::fact::FactOutcome::Superseded => outcome.facts_superseded += 1,
                crate::domain::fact::FactOutcome::Confirmed => outcome.facts_confirmed += 1,
            }
        }

        let scope = butler
            .clone()
            .unwrap_or_else(|| crate::domain::caller::GLOBAL_SCOPE.to_owned());
        for (i, r) in extraction.rules.iter().enumerate() {
            if !claim_item(
                &mut tx,
                shard,
                &format!("{key}:rule:{i}"),
                job_id,
                MemoryType::Rule,
                now,
            )
            .await?
            {
                continue;
            }
            // The same advice again confirms the live rule instead of duplicating it.
            let confirmed: Option<Uuid> = sqlx::query_scalar(
                "UPDATE rules SET last_confirmed_at = $4, validity = 'active'
                 WHERE id = (SELECT id FROM rules
                             WHERE tenant_id = $1 AND scope = $2 AND content = $3
                               AND validity IN ('active', 'fading')
                             ORDER BY created_at LIMIT 1)
                 RETURNING id",
            )
            .bind(&shard.tenant_id)
            .bind(&scope)
            .bind(&r.content)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(id) = confirmed {
                item_entity(&mut tx, shard, &format!("{key}:rule:{i}"), id).await?;
                super::events::append(
                    &mut tx,
                    &crate::domain::event::NewEvent {
                        tenant_id: shard.tenant_id.clone(),
                        event_type: crate::domain::event::EventType::RuleConfirmed,
                        entity_type: MemoryType::Rule,
                        entity_id: id,
                        actor: CONSOLIDATION_ACTOR.to_owned(),
                        lineage: lineage.clone(),
                        scope: Some(scope.clone()),
                        butler: butler.clone(),
                        payload: json!({"after": {"validity": "active", "last_confirmed_at": now},
                                        "source_episode_id": r.source_episode_id}),
                    },
                    now,
                )
                .await?;
                outcome.rules_confirmed += 1;
                continue;
            }
            let permanence = crate::domain::permanence::Permanence::DEFAULT;
            let rule = NewRule {
                id: Uuid::now_v7(),
                tenant_id: shard.tenant_id.clone(),
                content: r.content.clone(),
                scope: scope.clone(),
                confidence: NEW_RULE_CONFIDENCE,
                decay_rate: permanence.decay_rate(),
                permanence,
                importance: 5.0,
                source_butler: butler.clone(),
                source_episode_id: Some(r.source_episode_id),
                tags: Vec::new(),
                metadata: json!({"extracted_by": extractor, "consolidation_job_id": job_id}),
                links: vec![derived_from(r.source_episode_id)],
                created_at: now,
            };
            let stored = rules::insert(&mut tx, &rule, None, CONSOLIDATION_ACTOR, &lineage).await?;
            item_entity(&mut tx, shard, &format!("{key}:rule:{i}"), stored.id).await?;
            outcome.rules_created += 1;
        }

        for (i, id) in extraction.confirmations.iter().enumerate() {
            if !claim_item(
                &mut tx,
                shard,
                &format!("{key}:confirm:{i}"),
                job_id,
                MemoryType::Fact,
                now,
            )
            .await?
            {
                continue;
            }
            let confirmed: Option<(Option<String>, String)> = sqlx::query_as(
                "UPDATE facts SET last_confirmed_at = $3, validity = 'active'
                 WHERE tenant_id = $1 AND id = $2 AND validity IN ('active', 'fading')
                 RETURNING source_butler, scope",
            )
            .bind(&shard.tenant_id)
            .bind(id)
            .bind(now)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some((source_butler, scope)) = confirmed {
                item_entity(&mut tx, shard, &format!("{key}:confirm:{i}"), *id).await?;
                super::events::append(
                    &mut tx,
                    &crate::domain::event::NewEvent {
                        tenant_id: shard.tenant_id.clone(),
                        event_type: crate::domain::event::EventType::FactConfirmed,
                        entity_type: MemoryType::Fact,
                        entity_id: *id,
                        actor: CONSOLIDATION_ACTOR.to_owned(),
                        lineage: lineage.clone(),
                        scope: Some(scope),
                        butler: source_butler,
                        payload: json!({"after": {"validity": "active", "last_confirmed_at": now}}),
                    },
                    now,
                )
                .await?;
                outcome.facts_confirmed += 1;
            }
        }

        // Every episode of the batch ends consolidated, one event each.
        sqlx::query(
            "WITH done AS (
                 UPDATE episodes SET consolidation_status = 'consolidated', consolidation_job_id = $2,
                                     last_consolidation_error = NULL, next_consolidation_retry_at = NULL
                 WHERE tenant_id = $1 AND id = ANY($3) AND consolidation_status = 'pending'
                 RETURNING id, butler)
             INSERT INTO memory_events (tenant_id, event_type, entity_type, entity_id, occurred_at,
                                        actor, request_id, butler, payload)
             SELECT $1, 'episode_consolidated', 'episode', id, $4, $5, $6, butler,
                    jsonb_build_object('before', jsonb_build_object('consolidation_status', 'pending'),
                                       'after', jsonb_build_object('consolidation_status', 'consolidated',
                                                                   'consolidation_job_id', $2::uuid))
             FROM done",
        )
        .bind(&shard.tenant_id)
        .bind(job_id)
        .bind(&ids)
        .bind(now)
        .bind(CONSOLIDATION_ACTOR)
        .bind(&lineage.request_id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE consolidation_jobs SET status = 'succeeded', finished_at = $2, output = $3
             WHERE id = $1",
        )
        .bind(job_id)
        .bind(now)
        .bind(json!({"extraction": extraction, "outcome": outcome}))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(outcome)
    }
}

/// Records that a job persists one item (its entity is filled in once stored); false if
/// the item was persisted before.
async fn claim_item(
    conn: &mut sqlx::PgConnection,
    shard: &ShardKey,
    item_key: &str,
    job_id: Uuid,
    entity_type: MemoryType,
    now: DateTime<Utc>,
) -> MemoryResult<bool> {
    let claimed: Option<String> = sqlx::query_scalar(
        "INSERT INTO consolidation_items (tenant_id, item_key, job_id, entity_type, entity_id, created_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (tenant_id, item_key) DO NOTHING
         RETURNING item_key",
    )
    .bind(&shard.tenant_id)
    .bind(item_key)
    .bind(job_id)
    .bind(entity_type.as_str())
    .bind(Uuid::nil())
    .bind(now)
    .fetch_optional(conn)
    .await?;
    Ok(claimed.is_some())
}

/// Points a claimed item at the memory it became.
async fn item_entity(
    conn: &mut sqlx::PgConnection,
    shard: &ShardKey,
    item_key: &str,
    entity_id: Uuid,
) -> MemoryResult<()> {
    sqlx::query(
        "UPDATE consolidation_items SET entity_id = $3 WHERE tenant_id = $1 AND item_key = $2",
    )
    .bind(&shard.tenant_id)
    .bind(item_key)
    .bind(entity_id)
    .execute(conn)
    .await?;
    Ok(())
}
