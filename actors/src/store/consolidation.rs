//! Consolidation jobs: a bounded batch of one shard's pending episodes, extracted and
//! persisted in one transaction — the job row (found again by its idempotency key if the
//! batch is retried), one `consolidation_items` row per extracted item (the database
//! refuses to persist an item twice), the facts and rules with their `derived_from` links
//! and events (actor `consolidation`), and every episode of the batch marked
//! `consolidated`. A crash anywhere before the commit leaves nothing behind; the batch is
//! simply pending again.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use crate::domain::author::Author;
use crate::domain::extraction::{Extraction, SourceEpisode};
use crate::domain::fact::NewFact;
use crate::domain::memory_type::MemoryType;
use crate::domain::redaction::Redactor;
use crate::domain::relation::{LinkTarget, Relation};
use crate::domain::request_context::Lineage;
use crate::domain::rule::{NEW_RULE_CONFIDENCE, NewRule};
use crate::domain::shard_key::{ShardKey, TENANT_SHARD_BUTLER};
use crate::error::MemoryResult;

use super::columns::happened;
use super::{Store, facts, rules};

/// The actor recorded for consolidation's changes.
pub const CONSOLIDATION_ACTOR: &str = "consolidation";

/// What one job did.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct JobOutcome {
    pub episodes: u64,
    pub facts_created: u64,
    pub facts_superseded: u64,
    /// What redaction found in the extractor's output.
    pub redacted: crate::domain::redaction::Findings,
    pub facts_confirmed: u64,
    pub rules_created: u64,
    pub rules_confirmed: u64,
}

impl Store {
    /// The shard's live facts (most recently confirmed first) and rules, as reference for
    /// an extractor.
    #[tracing::instrument(target = "otel", name = "db.known_for_consolidation", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
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

    /// Persists one batch's extraction and marks the batch consolidated, atomically.
    #[tracing::instrument(target = "otel", name = "db.persist_consolidation", skip_all, fields(db.system.name = "postgresql", db.operation.name = "INSERT"))]
    pub async fn persist_consolidation(
        &self,
        shard: &ShardKey,
        batch: &[SourceEpisode],
        extraction: &Extraction,
        extractor: &str,
        redactor: &Redactor,
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
        // The batch's episodes are held until the commit. One that is gone was purged (or
        // cleaned up) since it was read: nothing is persisted from a text that no longer
        // exists, and the rest of the batch is pending again for the next run.
        let held: HashMap<Uuid, DateTime<Utc>> = sqlx::query_as(concat!(
            "SELECT id, ",
            happened!(""),
            " FROM episodes WHERE tenant_id = $1 AND id = ANY ($2) FOR SHARE"
        ))
        .bind(&shard.tenant_id)
        .bind(&ids)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
        if held.len() < ids.len() {
            tx.rollback().await?;
            return Ok(JobOutcome::default());
        }
        let author = Author::new(
            CONSOLIDATION_ACTOR,
            Lineage {
                request_id: format!("consolidation-{job_id}"),
                subrequest_id: None,
                segment_id: None,
                generated: true,
            },
        );
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
            let mut fact = NewFact {
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
                metadata: match &f.statement {
                    Some(statement) => json!({"extracted_by": extractor,
                                              "consolidation_job_id": job_id,
                                              "statement": statement}),
                    None => json!({"extracted_by": extractor, "consolidation_job_id": job_id}),
                },
                links: std::iter::once(derived_from(f.source_episode_id))
                    .chain(f.relations.iter().map(|(relation, id)| LinkTarget {
                        target_type: MemoryType::Fact,
                        target_id: *id,
                        relation: *relation,
                    }))
                    .collect(),
                created_at: now,
                // True from when the episode says, else from when what it tells happened
                // (not from when it was consolidated).
                valid_from: f
                    .valid_from
                    .or_else(|| held.get(&f.source_episode_id).copied())
                    .unwrap_or(now),
                redacted: Default::default(),
            };
            // An extractor can echo a secret back: its facts are redacted like any other.
            if let Err(e) = fact.redact(redactor) {
                tracing::info!(shard = %shard, code = e.code.as_str(), "an extracted fact was refused by redaction");
                continue;
            }
            for (detector, spans) in &fact.redacted {
                *outcome.redacted.entry(detector.clone()).or_default() += spans;
            }
            let stored = facts::insert_or_confirm(
                &mut tx,
                &fact,
                None,
                &author,
                self.vault(),
                facts::Restated::Content,
            )
            .await?;
            item_entity(&mut tx, shard, &format!("{key}:fact:{i}"), stored.fact.id).await?;
            // The fact it updates, when that one had another subject or predicate.
            if let Some(old) = f.supersedes_fact_id
                && stored.superseded.as_ref().map(|s| s.id) != Some(old)
                && stored.fact.id != old
            {
                let done: Option<Uuid> = sqlx::query_scalar(
                    "UPDATE facts SET validity = 'superseded', valid_until = GREATEST(valid_from, $3)
                     WHERE tenant_id = $1 AND id = $2 AND validity IN ('active', 'fading')
                     RETURNING id",
                )
                .bind(&shard.tenant_id)
                .bind(old)
                .bind(stored.fact.valid_from)
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
                            author: author.clone(),
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
            let mut redacted = Default::default();
            let content = match redactor.content(&shard.tenant_id, &r.content, &mut redacted) {
                Ok(content) => content,
                Err(e) => {
                    tracing::info!(shard = %shard, code = e.code.as_str(), "an extracted rule was refused by redaction");
                    continue;
                }
            };
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
            .bind(&content)
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
                        author: author.clone(),
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
                content,
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
                redacted,
            };
            for (detector, spans) in &rule.redacted {
                *outcome.redacted.entry(detector.clone()).or_default() += spans;
            }
            let stored = rules::insert(&mut tx, &rule, None, &author).await?;
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
                        author: author.clone(),
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
        .bind(&author.lineage.request_id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE consolidation_jobs SET status = 'succeeded', finished_at = $2, output = $3
             WHERE tenant_id = $4 AND id = $1",
        )
        .bind(job_id)
        .bind(now)
        .bind(json!({"extraction": extraction, "outcome": outcome}))
        .bind(&shard.tenant_id)
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
