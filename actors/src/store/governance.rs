//! An admin's decisions about a rule (`domain/governance.rs`), each one transaction with
//! its event.

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::author::Author;
use crate::domain::event::NewEvent;
use crate::domain::governance::Governance;
use crate::domain::record::MemoryRecord;
use crate::domain::rule::Rule;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

use super::columns::rule_columns;
use super::events;
use super::lifecycle_locks::rule_for_update;

/// Applies `decision` to a live rule. Disabling what is disabled, or enabling what is not,
/// is refused (`no_such_transition`), so every event records a change.
#[tracing::instrument(target = "otel", name = "db.govern_rule", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
pub async fn govern(
    conn: &mut PgConnection,
    tenant_id: &str,
    id: Uuid,
    decision: Governance,
    reason: &str,
    now: DateTime<Utc>,
    author: &Author,
) -> MemoryResult<Rule> {
    let before = rule_for_update(conn, tenant_id, id).await?;
    if !before.validity.is_live() {
        return Err(MemoryError::new(
            ErrorCode::NotLive,
            format!(
                "rule {id} is {}; only a live rule is governed",
                before.validity
            ),
        ));
    }
    let refuse =
        |why: &str| MemoryError::new(ErrorCode::NoSuchTransition, format!("rule {id} {why}"));
    let (after, changed): (Rule, serde_json::Value) = match decision {
        Governance::Promote | Governance::Demote => {
            let next = decision.next_maturity(before.maturity)?;
            let after = update(conn, "maturity = $3", tenant_id, id, Some(next.as_str())).await?;
            (
                after,
                json!({"before": {"maturity": before.maturity}, "after": {"maturity": next}}),
            )
        }
        Governance::Disable => {
            if before.disabled_at.is_some() {
                return Err(refuse("is already disabled"));
            }
            let at = now.to_rfc3339();
            let after = update(
                conn,
                "disabled_at = $3::timestamptz",
                tenant_id,
                id,
                Some(&at),
            )
            .await?;
            (
                after,
                json!({"before": {"disabled_at": null}, "after": {"disabled_at": now}}),
            )
        }
        Governance::Enable => {
            if before.disabled_at.is_none() {
                return Err(refuse("is not disabled"));
            }
            let after = update(conn, "disabled_at = NULL", tenant_id, id, None).await?;
            (
                after,
                json!({"before": {"disabled_at": before.disabled_at}, "after": {"disabled_at": null}}),
            )
        }
    };
    let mut payload = changed;
    payload["reason"] = json!(reason);
    payload["decision"] = json!(decision);
    let record = MemoryRecord::Rule(after);
    events::append(
        conn,
        &NewEvent::about(
            tenant_id,
            decision.event_type(),
            &record,
            id,
            author,
            payload,
        ),
        now,
    )
    .await?;
    let MemoryRecord::Rule(after) = record else {
        unreachable!("built as a rule")
    };
    Ok(after)
}

/// One SET on the rule (`$3` its value, when it has one), answering the rule after it.
async fn update(
    conn: &mut PgConnection,
    set: &'static str,
    tenant_id: &str,
    id: Uuid,
    value: Option<&str>,
) -> MemoryResult<Rule> {
    let sql = format!(
        "UPDATE rules SET {set} WHERE tenant_id = $1 AND id = $2 RETURNING {}",
        rule_columns!()
    );
    let query = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(tenant_id)
        .bind(id);
    let query = match value {
        Some(value) => query.bind(value),
        None => query,
    };
    Ok(query.fetch_one(conn).await?)
}
