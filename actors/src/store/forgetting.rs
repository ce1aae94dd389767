//! Forgetting and restoring (memory_butler.md §7.1, §10): a forgotten fact or rule becomes
//! `retracted` (remembering the state it replaced), a forgotten episode gets a
//! `forgotten_at` tombstone; either way it leaves retrieval and an event records why.
//! Restoring puts back exactly what was there, unless a newer live fact has taken the
//! forgotten fact's subject and predicate since: then it is refused (`integrity`).
//!
//! Forgetting what is already forgotten changes nothing and writes no event.

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::author::Author;
use crate::domain::episode::Episode;
use crate::domain::event::{EventType, NewEvent};
use crate::domain::memory_type::MemoryType;
use crate::domain::record::{Forgetting, MemoryRecord};
use crate::domain::validity::Validity;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

use super::columns::{episode_columns, fact_columns, rule_columns};
use super::events;
use super::facts::lock_fact_key;
use super::lifecycle_locks::{fact_for_update, rule_for_update};

/// Forgets one memory of the tenant.
#[tracing::instrument(target = "otel", name = "db.forget_record", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
pub async fn forget(
    conn: &mut PgConnection,
    tenant_id: &str,
    memory_type: MemoryType,
    id: Uuid,
    reason: Option<&str>,
    now: DateTime<Utc>,
    author: &Author,
) -> MemoryResult<Forgetting> {
    let (record, event_type, payload) = match memory_type {
        MemoryType::Fact => {
            let before = fact_for_update(conn, tenant_id, id).await?;
            if before.validity == Validity::Retracted {
                return Ok(unchanged(MemoryRecord::Fact(before)));
            }
            let after: crate::domain::fact::Fact = sqlx::query_as(concat!(
                "UPDATE facts SET validity = 'retracted', retracted_from = validity, retracted_at = $3
                 WHERE tenant_id = $1 AND id = $2 RETURNING ",
                fact_columns!()
            ))
            .bind(tenant_id)
            .bind(id)
            .bind(now)
            .fetch_one(&mut *conn)
            .await?;
            let payload = validity_change(
                before.validity,
                &after.retracted_from,
                after.retracted_at,
                reason,
            );
            (MemoryRecord::Fact(after), EventType::FactRetracted, payload)
        }
        MemoryType::Rule => {
            let before = rule_for_update(conn, tenant_id, id).await?;
            if before.validity == Validity::Retracted {
                return Ok(unchanged(MemoryRecord::Rule(before)));
            }
            let after: crate::domain::rule::Rule = sqlx::query_as(concat!(
                "UPDATE rules SET validity = 'retracted', retracted_from = validity, retracted_at = $3
                 WHERE tenant_id = $1 AND id = $2 RETURNING ",
                rule_columns!()
            ))
            .bind(tenant_id)
            .bind(id)
            .bind(now)
            .fetch_one(&mut *conn)
            .await?;
            let payload = validity_change(
                before.validity,
                &after.retracted_from,
                after.retracted_at,
                reason,
            );
            (MemoryRecord::Rule(after), EventType::RuleRetracted, payload)
        }
        MemoryType::Episode => {
            let before = episode_for_update(conn, tenant_id, id).await?;
            if before.forgotten_at.is_some() {
                return Ok(unchanged(MemoryRecord::Episode(before)));
            }
            let after = set_forgotten_at(conn, tenant_id, id, Some(now)).await?;
            let payload = json!({
                "before": {"forgotten_at": null},
                "after": {"forgotten_at": after.forgotten_at},
                "reason": reason,
            });
            (
                MemoryRecord::Episode(after),
                EventType::EpisodeForgotten,
                payload,
            )
        }
    };
    events::append(
        conn,
        &NewEvent::about(tenant_id, event_type, &record, id, author, payload),
        now,
    )
    .await?;
    Ok(Forgetting {
        record,
        changed: true,
    })
}

/// Restores one forgotten memory of the tenant to the state it was forgotten from.
#[tracing::instrument(target = "otel", name = "db.restore_record", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
pub async fn restore(
    conn: &mut PgConnection,
    tenant_id: &str,
    memory_type: MemoryType,
    id: Uuid,
    now: DateTime<Utc>,
    author: &Author,
) -> MemoryResult<Forgetting> {
    let not_forgotten = || {
        MemoryError::new(
            ErrorCode::NotForgotten,
            format!("{memory_type} {id} is not forgotten; there is nothing to restore"),
        )
    };
    let (record, event_type, payload) = match memory_type {
        MemoryType::Fact => {
            let peek = fact_for_update(conn, tenant_id, id).await?;
            if peek.validity != Validity::Retracted {
                return Err(not_forgotten());
            }
            let back = restored_validity(&peek.retracted_from)?;
            if back.is_live() {
                // Serialised with any writer of the same key, as supersession is.
                lock_fact_key(conn, tenant_id, &peek.scope, &peek.subject, &peek.predicate).await?;
                let newer: Option<Uuid> = sqlx::query_scalar(
                    "SELECT id FROM facts
                     WHERE tenant_id = $1 AND scope = $2 AND subject = $3 AND predicate = $4
                       AND validity IN ('active', 'fading')",
                )
                .bind(tenant_id)
                .bind(&peek.scope)
                .bind(&peek.subject)
                .bind(&peek.predicate)
                .fetch_optional(&mut *conn)
                .await?;
                if let Some(newer) = newer {
                    return Err(MemoryError::new(
                        ErrorCode::NewerFact,
                        format!(
                            "fact {id} cannot be restored: fact {newer} now holds `{}` / `{}`",
                            peek.subject, peek.predicate
                        ),
                    ));
                }
            }
            let after: crate::domain::fact::Fact = sqlx::query_as(concat!(
                "UPDATE facts SET validity = retracted_from, retracted_from = NULL, retracted_at = NULL
                 WHERE tenant_id = $1 AND id = $2 RETURNING ",
                fact_columns!()
            ))
            .bind(tenant_id)
            .bind(id)
            .fetch_one(&mut *conn)
            .await?;
            let payload = restore_change(after.validity, &peek.retracted_from);
            (MemoryRecord::Fact(after), EventType::FactRestored, payload)
        }
        MemoryType::Rule => {
            let peek = rule_for_update(conn, tenant_id, id).await?;
            if peek.validity != Validity::Retracted {
                return Err(not_forgotten());
            }
            restored_validity(&peek.retracted_from)?;
            let after: crate::domain::rule::Rule = sqlx::query_as(concat!(
                "UPDATE rules SET validity = retracted_from, retracted_from = NULL, retracted_at = NULL
                 WHERE tenant_id = $1 AND id = $2 RETURNING ",
                rule_columns!()
            ))
            .bind(tenant_id)
            .bind(id)
            .fetch_one(&mut *conn)
            .await?;
            let payload = restore_change(after.validity, &peek.retracted_from);
            (MemoryRecord::Rule(after), EventType::RuleRestored, payload)
        }
        MemoryType::Episode => {
            let before = episode_for_update(conn, tenant_id, id).await?;
            if before.forgotten_at.is_none() {
                return Err(not_forgotten());
            }
            let after = set_forgotten_at(conn, tenant_id, id, None).await?;
            let payload = json!({
                "before": {"forgotten_at": before.forgotten_at},
                "after": {"forgotten_at": null},
            });
            (
                MemoryRecord::Episode(after),
                EventType::EpisodeRestored,
                payload,
            )
        }
    };
    events::append(
        conn,
        &NewEvent::about(tenant_id, event_type, &record, id, author, payload),
        now,
    )
    .await?;
    Ok(Forgetting {
        record,
        changed: true,
    })
}

fn unchanged(record: MemoryRecord) -> Forgetting {
    Forgetting {
        record,
        changed: false,
    }
}

fn restored_validity(retracted_from: &Option<String>) -> MemoryResult<Validity> {
    retracted_from
        .as_deref()
        .ok_or_else(|| MemoryError::internal("a retracted row without retracted_from"))?
        .parse()
}

fn validity_change(
    before: Validity,
    retracted_from: &Option<String>,
    retracted_at: Option<DateTime<Utc>>,
    reason: Option<&str>,
) -> serde_json::Value {
    json!({
        "before": {"validity": before, "retracted_from": null, "retracted_at": null},
        "after": {"validity": Validity::Retracted, "retracted_from": retracted_from, "retracted_at": retracted_at},
        "reason": reason,
    })
}

fn restore_change(after: Validity, retracted_from: &Option<String>) -> serde_json::Value {
    json!({
        "before": {"validity": Validity::Retracted, "retracted_from": retracted_from},
        "after": {"validity": after, "retracted_from": null, "retracted_at": null},
    })
}

async fn episode_for_update(
    conn: &mut PgConnection,
    tenant_id: &str,
    id: Uuid,
) -> MemoryResult<Episode> {
    sqlx::query_as(concat!(
        "SELECT ",
        episode_columns!(),
        " FROM episodes WHERE tenant_id = $1 AND id = $2 FOR UPDATE"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| MemoryError::not_found(MemoryType::Episode, id))
}

async fn set_forgotten_at(
    conn: &mut PgConnection,
    tenant_id: &str,
    id: Uuid,
    at: Option<DateTime<Utc>>,
) -> MemoryResult<Episode> {
    Ok(sqlx::query_as(concat!(
        "UPDATE episodes SET forgotten_at = $3 WHERE tenant_id = $1 AND id = $2 RETURNING ",
        episode_columns!()
    ))
    .bind(tenant_id)
    .bind(id)
    .bind(at)
    .fetch_one(conn)
    .await?)
}
