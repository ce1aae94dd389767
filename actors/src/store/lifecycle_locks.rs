//! Reading a fact or rule for a lifecycle change: the row is locked for the rest of the
//! transaction, and an id of the wrong type is told apart from an absent one, because
//! feedback on a fact is a broken invariant (`integrity`), not a typo (`not_found`).

use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::fact::Fact;
use crate::domain::memory_type::MemoryType;
use crate::domain::rule::Rule;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

use super::columns::{fact_columns, rule_columns};

/// The fact, locked; `not_found` when the tenant has no fact with this id.
pub async fn fact_for_update(
    conn: &mut PgConnection,
    tenant_id: &str,
    id: Uuid,
) -> MemoryResult<Fact> {
    sqlx::query_as(concat!(
        "SELECT ",
        fact_columns!(),
        " FROM facts WHERE tenant_id = $1 AND id = $2 FOR UPDATE"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?
    .ok_or_else(|| MemoryError::not_found(MemoryType::Fact, id))
}

/// The rule, locked. An id that names a fact or an episode of the tenant is refused as
/// `integrity` (`not_a_rule`); an unknown id is `not_found`.
pub async fn rule_for_update(
    conn: &mut PgConnection,
    tenant_id: &str,
    id: Uuid,
) -> MemoryResult<Rule> {
    let rule: Option<Rule> = sqlx::query_as(concat!(
        "SELECT ",
        rule_columns!(),
        " FROM rules WHERE tenant_id = $1 AND id = $2 FOR UPDATE"
    ))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(rule) = rule {
        return Ok(rule);
    }
    let other: Option<String> = sqlx::query_scalar(
        "SELECT 'fact' FROM facts WHERE tenant_id = $1 AND id = $2
         UNION ALL SELECT 'episode' FROM episodes WHERE tenant_id = $1 AND id = $2",
    )
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    Err(match other {
        Some(kind) => MemoryError::new(
            ErrorCode::NotARule,
            format!("{id} is a {kind}; only rules take feedback"),
        ),
        None => MemoryError::not_found(MemoryType::Rule, id),
    })
}
