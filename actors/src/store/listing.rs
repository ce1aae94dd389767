//! The dashboard's lists (`domain/listing.rs`): one statement per page (newest first by
//! id, keyset after the cursor) and the total: from the stats' projections when the filters
//! are ones they count (the caller's scopes or butlers, a state), else one count with the same
//! filters that may take [`COUNT_BUDGET_MS`] (past it, the page has no total). The caller's
//! visibility arrives as the scopes and butlers it may see (`None`: all of them).

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::episode::Episode;
use crate::domain::fact::Fact;
use crate::domain::listing::{EpisodeQuery, FactQuery, Page, RuleQuery};
use crate::domain::rule::Rule;
use crate::domain::search::SearchScope;
use crate::error::MemoryResult;

use super::Store;
use super::columns::{effective_confidence, episode_columns, fact_columns, rule_columns};

/// The filters of a facts list, parameters $1 to $10.
const FACT_FILTERS: &str = concat!(
    " WHERE tenant_id = $1 AND ($2::text[] IS NULL OR scope = ANY ($2))
       AND ($3::text IS NULL OR lower(subject) = lower($3))
       AND ($4::text IS NULL OR search_vector @@ plainto_tsquery('english', $4))
       AND ($5::float8 IS NULL OR ",
    effective_confidence!("", "$10"),
    " >= $5)
       AND ($6::text IS NULL OR permanence = $6)
       AND ($7::text IS NULL OR validity = $7)
       AND ($8::text IS NULL OR COALESCE(source_butler, '_tenant') = $8)"
);

/// The filters of a rules list, parameters $1 to $6.
const RULE_FILTERS: &str = " WHERE tenant_id = $1 AND ($2::text[] IS NULL OR scope = ANY ($2))
       AND ($3::text IS NULL OR maturity = $3)
       AND ($4::text IS NULL OR validity = $4)
       AND ($5::text IS NULL OR search_vector @@ plainto_tsquery('english', $5))
       AND ($6::text IS NULL OR COALESCE(source_butler, '_tenant') = $6)";

/// The filters of an episodes list, parameters $1 to $5.
const EPISODE_FILTERS: &str = " WHERE tenant_id = $1 AND ($2::text[] IS NULL OR butler = ANY ($2))
       AND ($3::timestamptz IS NULL OR created_at >= $3)
       AND ($4::timestamptz IS NULL OR created_at < $4)
       AND ($5::text IS NULL OR consolidation_status = $5)";

/// How long a list's count may take before the page goes without it (`total: null`).
const COUNT_BUDGET_MS: u32 = 20;

/// Whether a statement was cancelled by its `statement_timeout`.
fn timed_out(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code == "57014")
}

/// Runs a count within [`COUNT_BUDGET_MS`]: the count, or `None` when it would take longer.
macro_rules! bounded_count {
    ($store:expr, $query:expr) => {{
        let mut tx = $store.pool().begin().await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SET LOCAL statement_timeout = {COUNT_BUDGET_MS}"
        )))
        .execute(&mut *tx)
        .await?;
        let counted: Result<i64, sqlx::Error> = $query.fetch_one(&mut *tx).await;
        let _ = tx.rollback().await;
        match counted {
            Ok(n) => Some(n),
            Err(e) if timed_out(&e) => None,
            Err(e) => return Err(e.into()),
        }
    }};
}

fn page<T>(mut items: Vec<T>, size: u32, id: impl Fn(&T) -> Uuid, total: Option<i64>) -> Page<T> {
    let more = items.len() > size as usize;
    items.truncate(size as usize);
    let next_cursor = if more { items.last().map(&id) } else { None };
    Page {
        items,
        next_cursor,
        total,
    }
}

impl Store {
    /// A page of facts the scope may see.
    pub async fn list_facts(
        &self,
        visible: &SearchScope,
        query: &FactQuery,
        size: u32,
        now: DateTime<Utc>,
    ) -> MemoryResult<Page<Fact>> {
        let list = format!(
            "SELECT {} FROM facts{FACT_FILTERS} AND ($9::uuid IS NULL OR id < $9)
             ORDER BY id DESC LIMIT $11",
            fact_columns!()
        );
        // The count binds the cursor ($9) as NULL only so that `now` keeps its number ($10).
        let count = format!("SELECT count(*) FROM facts{FACT_FILTERS} AND $9::uuid IS NULL");
        macro_rules! bind {
            ($q:expr) => {
                $q.bind(&visible.tenant_id)
                    .bind(&visible.scopes)
                    .bind(&query.subject)
                    .bind(&query.q)
                    .bind(query.min_confidence)
                    .bind(query.permanence.map(|p| p.as_str()))
                    .bind(query.validity.map(|v| v.as_str()))
                    .bind(&query.source_butler)
            };
        }
        let items: Vec<Fact> = bind!(sqlx::query_as(sqlx::AssertSqlSafe(list)))
            .bind(query.cursor)
            .bind(now)
            .bind(i64::from(size) + 1)
            .fetch_all(self.pool())
            .await?;
        let counted_by_projection = query.subject.is_none()
            && query.q.is_none()
            && query.min_confidence.is_none()
            && query.permanence.is_none()
            && query.source_butler.is_none();
        let total = if counted_by_projection {
            Some(
                self.projected_total(
                    &visible.tenant_id,
                    "fact",
                    &visible.scopes,
                    query.validity.map(|v| v.as_str()),
                    "validity",
                )
                .await?,
            )
        } else {
            bounded_count!(
                self,
                bind!(sqlx::query_scalar(sqlx::AssertSqlSafe(count)))
                    .bind(None::<Uuid>)
                    .bind(now)
            )
        };
        let mut items: Vec<Fact> = items.into_iter().map(|f| f.at(now)).collect();
        self.open_facts(&mut items).await?;
        Ok(page(items, size, |f: &Fact| f.id, total))
    }

    /// A page of rules the scope may see.
    pub async fn list_rules(
        &self,
        visible: &SearchScope,
        query: &RuleQuery,
        size: u32,
        now: DateTime<Utc>,
    ) -> MemoryResult<Page<Rule>> {
        let list = format!(
            "SELECT {} FROM rules{RULE_FILTERS} AND ($7::uuid IS NULL OR id < $7)
             ORDER BY id DESC LIMIT $8",
            rule_columns!()
        );
        let count = format!("SELECT count(*) FROM rules{RULE_FILTERS}");
        macro_rules! bind {
            ($q:expr) => {
                $q.bind(&visible.tenant_id)
                    .bind(&visible.scopes)
                    .bind(query.maturity.map(|m| m.as_str()))
                    .bind(query.validity.map(|v| v.as_str()))
                    .bind(&query.q)
                    .bind(&query.source_butler)
            };
        }
        let items: Vec<Rule> = bind!(sqlx::query_as(sqlx::AssertSqlSafe(list)))
            .bind(query.cursor)
            .bind(i64::from(size) + 1)
            .fetch_all(self.pool())
            .await?;
        let total =
            if query.maturity.is_none() && query.q.is_none() && query.source_butler.is_none() {
                Some(
                    self.projected_total(
                        &visible.tenant_id,
                        "rule",
                        &visible.scopes,
                        query.validity.map(|v| v.as_str()),
                        "validity",
                    )
                    .await?,
                )
            } else {
                bounded_count!(self, bind!(sqlx::query_scalar(sqlx::AssertSqlSafe(count))))
            };
        let items = items.into_iter().map(|r| r.at(now)).collect();
        Ok(page(items, size, |r: &Rule| r.id, total))
    }

    /// A page of episodes the scope may see.
    pub async fn list_episodes(
        &self,
        visible: &SearchScope,
        query: &EpisodeQuery,
        size: u32,
    ) -> MemoryResult<Page<Episode>> {
        let list = format!(
            "SELECT {} FROM episodes{EPISODE_FILTERS} AND ($6::uuid IS NULL OR id < $6)
             ORDER BY id DESC LIMIT $7",
            episode_columns!()
        );
        let count = format!("SELECT count(*) FROM episodes{EPISODE_FILTERS}");
        macro_rules! bind {
            ($q:expr) => {
                $q.bind(&visible.tenant_id)
                    .bind(&visible.butlers)
                    .bind(query.from)
                    .bind(query.to)
                    .bind(query.consolidation_status.map(|s| s.as_str()))
            };
        }
        let items: Vec<Episode> = bind!(sqlx::query_as(sqlx::AssertSqlSafe(list)))
            .bind(query.cursor)
            .bind(i64::from(size) + 1)
            .fetch_all(self.pool())
            .await?;
        let total = if query.from.is_none() && query.to.is_none() {
            Some(
                self.projected_total(
                    &visible.tenant_id,
                    "episode",
                    &visible.butlers,
                    query.consolidation_status.map(|s| s.as_str()),
                    "consolidation_status",
                )
                .await?,
            )
        } else {
            bounded_count!(self, bind!(sqlx::query_scalar(sqlx::AssertSqlSafe(count))))
        };
        Ok(page(items, size, |e: &Episode| e.id, total))
    }
}
