//! Writing rules. New rules start as `candidate` with the baseline confidence; a rewrite
//! stores the new candidate and retracts the rule it replaces in one transaction.

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::author::Author;
use crate::domain::event::{EventType, NewEvent};
use crate::domain::memory_type::MemoryType;
use crate::domain::rule::{NewRule, Rule};
use crate::error::{ErrorCode, MemoryError, MemoryResult};

use super::columns::rule_columns;
use super::episodes::Embedded;
use super::lifecycle_locks::rule_for_update;
use super::{events, forgetting, links};

/// Inserts a rule, its requested links and its `rule_created` event.
#[tracing::instrument(target = "otel", name = "db.insert_rule", skip_all, fields(db.system.name = "postgresql", db.operation.name = "INSERT"))]
pub async fn insert(
    conn: &mut PgConnection,
    rule: &NewRule,
    embedding: Option<&Embedded>,
    author: &Author,
) -> MemoryResult<Rule> {
    let stored: Rule = sqlx::query_as(concat!(
        "INSERT INTO rules
             (id, tenant_id, content, embedding, embedding_version_id, scope, maturity, validity,
              importance, confidence, decay_rate, permanence, source_butler, source_episode_id,
              created_at, last_confirmed_at, last_referenced_at, tags, metadata, request_id)
         VALUES ($1, $2, $3, $4, $5, $6, 'candidate', 'active', $7, $8, $9, $10, $11, $12,
                 $13, $13, $13, $14, $15, $16)
         RETURNING ",
        rule_columns!()
    ))
    .bind(rule.id)
    .bind(&rule.tenant_id)
    .bind(&rule.content)
    .bind(embedding.map(|e| &e.vector))
    .bind(embedding.map(|e| e.version_id))
    .bind(&rule.scope)
    .bind(rule.importance)
    .bind(rule.confidence)
    .bind(rule.decay_rate)
    .bind(rule.permanence.as_str())
    .bind(&rule.source_butler)
    .bind(rule.source_episode_id)
    .bind(rule.created_at)
    .bind(json!(rule.tags))
    .bind(&rule.metadata)
    .bind(&author.lineage.request_id)
    .fetch_one(&mut *conn)
    .await?;
    let written = links::insert_requested(
        conn,
        &rule.tenant_id,
        (MemoryType::Rule, stored.id),
        &rule.links,
        rule.created_at,
    )
    .await?;
    events::append(
        conn,
        &NewEvent {
            tenant_id: rule.tenant_id.clone(),
            event_type: EventType::RuleCreated,
            entity_type: MemoryType::Rule,
            entity_id: stored.id,
            author: author.clone(),
            scope: Some(stored.scope.clone()),
            butler: stored.source_butler.clone(),
            payload: super::facts::with_redactions(
                json!({ "before": null, "after": stored, "links": written }),
                &rule.redacted,
            ),
        },
        rule.created_at,
    )
    .await?;
    Ok(stored)
}

/// A rule rewritten (`PUT /api/memory/rules/{id}`): `rule`, a new candidate whose links say
/// it supersedes `old`, is inserted and `old` retracted with `reason`, in the caller's
/// transaction, so that either both happen or neither: a rewrite never leaves the old rule
/// and its replacement both live. `old` is locked first; when it is no longer live (a
/// rewrite or a forget got there first) nothing is written: `not_live`.
pub async fn replace(
    conn: &mut PgConnection,
    rule: &NewRule,
    old: Uuid,
    reason: &str,
    now: DateTime<Utc>,
    author: &Author,
) -> MemoryResult<Rule> {
    let before = rule_for_update(conn, &rule.tenant_id, old).await?;
    if !before.validity.is_live() {
        return Err(MemoryError::new(
            ErrorCode::NotLive,
            format!(
                "rule {old} is {}: only a live rule can be rewritten",
                before.validity
            ),
        ));
    }
    let stored = insert(conn, rule, None, author).await?;
    forgetting::forget(
        conn,
        &rule.tenant_id,
        MemoryType::Rule,
        old,
        Some(reason),
        now,
        author,
    )
    .await?;
    Ok(stored)
}
