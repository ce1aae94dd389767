//! Feedback on what memory told a butler: confirmations reset decay; helpful and harmful
//! marks are recorded one `rule_applications` row each and move the rule's counts,
//! effectiveness and maturity, all in one transaction with its event.

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::author::Author;
use crate::domain::decay::days_between;
use crate::domain::event::{EventType, NewEvent};
use crate::domain::fact::Fact;
use crate::domain::feedback::{Mark, Rated, RuleApplication};
use crate::domain::maturity::Maturity;
use crate::domain::memory_type::MemoryType;
use crate::domain::rule::Rule;
use crate::domain::rule_evidence::{Direction, Evidence, RuleThresholds, next_maturity};
use crate::domain::validity::Validity;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

use super::columns::{fact_columns, rule_columns};
use super::lifecycle_locks::{fact_for_update, rule_for_update};
use super::{anti_patterns, events};

/// Only live memories can be confirmed or rated: the rest are history.
fn require_live(memory_type: MemoryType, id: Uuid, validity: Validity) -> MemoryResult<()> {
    if validity.is_live() {
        Ok(())
    } else {
        Err(MemoryError::new(
            ErrorCode::NotLive,
            format!(
                "{memory_type} {id} is {validity}; only active or fading ones can change this way"
            ),
        ))
    }
}

/// Resets a fact's decay clock; a fading fact becomes active again.
#[tracing::instrument(target = "otel", name = "db.confirm_fact", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
pub async fn confirm_fact(
    conn: &mut PgConnection,
    tenant_id: &str,
    id: Uuid,
    now: DateTime<Utc>,
    author: &Author,
) -> MemoryResult<Fact> {
    let before = fact_for_update(conn, tenant_id, id).await?;
    require_live(MemoryType::Fact, id, before.validity)?;
    let after: Fact = sqlx::query_as(concat!(
        "UPDATE facts SET validity = 'active', last_confirmed_at = $3
         WHERE tenant_id = $1 AND id = $2 RETURNING ",
        fact_columns!()
    ))
    .bind(tenant_id)
    .bind(id)
    .bind(now)
    .fetch_one(&mut *conn)
    .await?;
    let event = NewEvent {
        tenant_id: tenant_id.to_owned(),
        event_type: EventType::FactConfirmed,
        entity_type: MemoryType::Fact,
        entity_id: id,
        author: author.clone(),
        scope: Some(after.scope.clone()),
        butler: after.source_butler.clone(),
        payload: json!({
            "before": {"validity": before.validity, "last_confirmed_at": before.last_confirmed_at},
            "after": {"validity": after.validity, "last_confirmed_at": after.last_confirmed_at},
        }),
    };
    events::append(conn, &event, now).await?;
    Ok(after)
}

/// Resets a rule's decay clock; a fading rule becomes active again.
#[tracing::instrument(target = "otel", name = "db.confirm_rule", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
pub async fn confirm_rule(
    conn: &mut PgConnection,
    tenant_id: &str,
    id: Uuid,
    now: DateTime<Utc>,
    author: &Author,
) -> MemoryResult<Rule> {
    let before = rule_for_update(conn, tenant_id, id).await?;
    require_live(MemoryType::Rule, id, before.validity)?;
    let after: Rule = sqlx::query_as(concat!(
        "UPDATE rules SET validity = 'active', last_confirmed_at = $3
         WHERE tenant_id = $1 AND id = $2 RETURNING ",
        rule_columns!()
    ))
    .bind(tenant_id)
    .bind(id)
    .bind(now)
    .fetch_one(&mut *conn)
    .await?;
    let event = NewEvent {
        tenant_id: tenant_id.to_owned(),
        event_type: EventType::RuleConfirmed,
        entity_type: MemoryType::Rule,
        entity_id: id,
        author: author.clone(),
        scope: Some(after.scope.clone()),
        butler: after.source_butler.clone(),
        payload: json!({
            "before": {"validity": before.validity, "last_confirmed_at": before.last_confirmed_at},
            "after": {"validity": after.validity, "last_confirmed_at": after.last_confirmed_at},
        }),
    };
    events::append(conn, &event, now).await?;
    Ok(after)
}

/// Records an application and re-evaluates the rule: counts, effectiveness, maturity
/// (promotion on help, demotion on harm) and, past the harm threshold, inversion into an
/// anti-pattern.
#[tracing::instrument(target = "otel", name = "db.rate_rule", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
pub async fn rate_rule(
    conn: &mut PgConnection,
    tenant_id: &str,
    application: &RuleApplication,
    now: DateTime<Utc>,
    rules: &RuleThresholds,
    author: &Author,
) -> MemoryResult<Rated> {
    let id = application.rule_id;
    let before = rule_for_update(conn, tenant_id, id).await?;
    require_live(MemoryType::Rule, id, before.validity)?;
    sqlx::query(
        "INSERT INTO rule_applications
             (id, tenant_id, rule_id, outcome, reason, butler, actor, request_id, subrequest_id,
              segment_id, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(Uuid::now_v7())
    .bind(tenant_id)
    .bind(id)
    .bind(application.mark.as_str())
    .bind(&application.reason)
    .bind(&application.butler)
    .bind(&author.name)
    .bind(&author.lineage.request_id)
    .bind(&author.lineage.subrequest_id)
    .bind(&author.lineage.segment_id)
    .bind(now)
    .execute(&mut *conn)
    .await?;

    let (success, harmful, direction) = match application.mark {
        Mark::Helpful => (
            before.success_count + 1,
            before.harmful_count,
            Direction::Up,
        ),
        Mark::Harmful => (
            before.success_count,
            before.harmful_count + 1,
            Direction::Down,
        ),
    };
    let evidence = Evidence {
        success_count: success,
        harmful_count: harmful,
        age_days: days_between(before.created_at, now),
    };
    let maturity = next_maturity(before.maturity, &evidence, direction, rules);
    sqlx::query(
        "UPDATE rules SET applied_count = applied_count + 1, success_count = $3,
                          harmful_count = $4, effectiveness_score = $5, maturity = $6,
                          last_applied_at = $7, last_evaluated_at = $7
         WHERE tenant_id = $1 AND id = $2",
    )
    .bind(tenant_id)
    .bind(id)
    .bind(success)
    .bind(harmful)
    .bind(evidence.effectiveness())
    .bind(if maturity == Maturity::AntiPattern {
        before.maturity.as_str()
    } else {
        maturity.as_str()
    })
    .bind(now)
    .execute(&mut *conn)
    .await?;
    if maturity == Maturity::AntiPattern && before.maturity != Maturity::AntiPattern {
        anti_patterns::invert(conn, tenant_id, &[id]).await?;
    }
    let after: Rule = sqlx::query_as(concat!(
        "SELECT ",
        rule_columns!(),
        " FROM rules WHERE tenant_id = $1 AND id = $2"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_one(&mut *conn)
    .await?;
    let event = NewEvent {
        tenant_id: tenant_id.to_owned(),
        event_type: match application.mark {
            Mark::Helpful => EventType::RuleMarkedHelpful,
            Mark::Harmful => EventType::RuleMarkedHarmful,
        },
        entity_type: MemoryType::Rule,
        entity_id: id,
        author: author.clone(),
        scope: Some(after.scope.clone()),
        butler: after.source_butler.clone(),
        payload: json!({
            "before": evidence_fields(&before),
            "after": evidence_fields(&after),
            "reason": application.reason,
            "applied_by": application.butler,
        }),
    };
    events::append(conn, &event, now).await?;
    Ok(Rated {
        maturity_before: before.maturity,
        rule: after,
    })
}

/// The fields feedback changes, as the event records them.
fn evidence_fields(rule: &Rule) -> serde_json::Value {
    json!({
        "maturity": rule.maturity,
        "content": rule.content,
        "original_content": rule.original_content,
        "applied_count": rule.applied_count,
        "success_count": rule.success_count,
        "harmful_count": rule.harmful_count,
        "effectiveness_score": rule.effectiveness_score,
        "last_applied_at": rule.last_applied_at,
        "last_evaluated_at": rule.last_evaluated_at,
    })
}
