//! The decay sweep of one shard (memory_butler.md §7.3, memory_project_plan.md "Decay Sweep
//! Flow"): every live fact and rule gets its effective confidence computed at the sweep's
//! time; below the retrieval threshold it is `fading`, below the expiry threshold
//! `expired`, at or above it `active` again. Then rules are re-evaluated on evidence that
//! needed time (promotion to `proven` needs age) and inverted where harm calls for it.
//!
//! The work is set-based: pages of `page_size` rows, in id order along the shard's partial
//! index, each page one statement that computes, updates and appends the events of the rows
//! that change, in its own short transaction. Rows that do not change are not written.
//! Anti-patterns do not decay: they are the memory of a mistake, kept so it is not
//! learned again. Running the sweep twice at the same time changes nothing the second time.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::decay::days_between;
use crate::domain::maturity::Maturity;
use crate::domain::rule_evidence::RuleThresholds;
use crate::domain::rule_evidence::{Direction, Evidence, next_maturity};
use crate::domain::shard_key::ShardKey;
use crate::error::MemoryResult;

use super::columns::effective_confidence;
use super::{Store, anti_patterns};

/// The thresholds of a sweep.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    pub retrieval: f64,
    pub expiry: f64,
}

/// Which table a decay page walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecayTable {
    Facts,
    Rules,
}

impl DecayTable {
    pub fn entity(self) -> &'static str {
        match self {
            DecayTable::Facts => "fact",
            DecayTable::Rules => "rule",
        }
    }
}

/// One page's outcome: where it ended (`None`: nothing was left), how many live rows it
/// looked at, and how many moved to each validity.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DecayPage {
    pub last_id: Option<Uuid>,
    pub scanned: i64,
    pub fading: i64,
    pub expired: i64,
    pub active: i64,
}

/// The page statement for `facts` or `rules`. `$1` tenant, `$2` shard butler, `$3` the
/// last id of the previous page, `$4` page size, `$5` now, `$6` retrieval threshold, `$7`
/// expiry threshold, `$8` the actor. The UPDATE re-checks validity and the confirmation
/// time, so a row confirmed or superseded meanwhile by a writer of another shard is left
/// alone rather than overwritten with a stale decision.
fn page_sql(table: &str, entity: &str, extra: &str) -> String {
    let eff = effective_confidence!("t.", "$5::timestamptz");
    format!(
        "WITH page AS (
             SELECT id FROM {table}
             WHERE tenant_id = $1 AND COALESCE(source_butler, '_tenant') = $2
               AND validity IN ('active', 'fading') AND id > $3
             ORDER BY id LIMIT $4),
         calc AS (
             SELECT t.id, t.validity AS before, t.last_confirmed_at, e.eff,
                    CASE WHEN e.eff < $7 THEN 'expired' WHEN e.eff < $6 THEN 'fading'
                         ELSE 'active' END AS after
             FROM {table} t JOIN page USING (id)
             CROSS JOIN LATERAL (SELECT {eff} AS eff) e
             WHERE t.tenant_id = $1 {extra}),
         changed AS (
             UPDATE {table} t SET validity = c.after
             FROM calc c
             WHERE t.tenant_id = $1 AND t.id = c.id AND c.after <> c.before
               AND t.validity = c.before AND t.last_confirmed_at = c.last_confirmed_at
             RETURNING t.id, t.scope, t.source_butler, c.before, c.after, c.eff),
         logged AS (
             INSERT INTO memory_events (tenant_id, event_type, entity_type, entity_id,
                                        occurred_at, actor, scope, butler, payload)
             SELECT $1, '{entity}_decayed', '{entity}', id, $5, $8, scope, source_butler,
                    jsonb_build_object('before', jsonb_build_object('validity', before),
                                       'after', jsonb_build_object('validity', after),
                                       'effective_confidence', eff)
             FROM changed)
         SELECT (SELECT id FROM page ORDER BY id DESC LIMIT 1) AS last_id,
                (SELECT count(*) FROM page) AS scanned,
                count(*) FILTER (WHERE after = 'fading') AS fading,
                count(*) FILTER (WHERE after = 'expired') AS expired,
                count(*) FILTER (WHERE after = 'active') AS active
         FROM changed"
    )
}

impl Store {
    /// Decays one page of a shard's live facts or rules at `now`: up to `page_size` rows
    /// with ids after `after`.
    #[allow(clippy::too_many_arguments)]
    #[tracing::instrument(target = "otel", name = "db.decay_page", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
    pub async fn decay_page(
        &self,
        shard: &ShardKey,
        table: DecayTable,
        after: Uuid,
        page_size: i64,
        now: DateTime<Utc>,
        thresholds: Thresholds,
        actor: &str,
    ) -> MemoryResult<DecayPage> {
        let sql = match table {
            DecayTable::Facts => page_sql("facts", "fact", ""),
            DecayTable::Rules => page_sql("rules", "rule", "AND t.maturity <> 'anti_pattern'"),
        };
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(&shard.tenant_id)
            .bind(&shard.butler)
            .bind(after)
            .bind(page_size)
            .bind(now)
            .bind(thresholds.retrieval)
            .bind(thresholds.expiry)
            .bind(actor)
            .fetch_one(self.writer())
            .await?)
    }

    /// Promotes rules whose evidence now supports more (age counts for `proven`) and
    /// inverts those whose harm calls for it under the current thresholds.
    #[tracing::instrument(target = "otel", name = "db.reevaluate_rules", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
    pub async fn reevaluate_rules(
        &self,
        shard: &ShardKey,
        now: DateTime<Utc>,
        rules: &RuleThresholds,
        actor: &str,
    ) -> MemoryResult<(u64, u64)> {
        // Only rules with some evidence can move; a shard has few of them.
        let rows: Vec<(Uuid, String, i32, i32, DateTime<Utc>)> = sqlx::query_as(
            "SELECT id, maturity, success_count, harmful_count, created_at FROM rules
             WHERE tenant_id = $1 AND COALESCE(source_butler, '_tenant') = $2
               AND validity IN ('active', 'fading') AND maturity <> 'anti_pattern'
               AND (success_count > 0 OR harmful_count > 0)",
        )
        .bind(&shard.tenant_id)
        .bind(&shard.butler)
        .fetch_all(self.pool())
        .await?;
        let mut promote: Vec<(Uuid, Maturity, Maturity)> = Vec::new();
        let mut invert: Vec<Uuid> = Vec::new();
        for (id, maturity, success_count, harmful_count, created_at) in rows {
            let current: Maturity = maturity.parse()?;
            let evidence = Evidence {
                success_count,
                harmful_count,
                age_days: days_between(created_at, now),
            };
            match next_maturity(current, &evidence, Direction::Up, rules) {
                Maturity::AntiPattern => invert.push(id),
                next if next != current => promote.push((id, current, next)),
                _ => {}
            }
        }
        if promote.is_empty() && invert.is_empty() {
            return Ok((0, 0));
        }
        let mut tx = self.begin().await?;
        let ids: Vec<Uuid> = promote.iter().map(|p| p.0).collect();
        let from: Vec<&str> = promote.iter().map(|p| p.1.as_str()).collect();
        let to: Vec<&str> = promote.iter().map(|p| p.2.as_str()).collect();
        let promoted = sqlx::query(
            "WITH changed AS (
                 UPDATE rules r SET maturity = v.next, last_evaluated_at = $2
                 FROM unnest($3::uuid[], $4::text[], $5::text[]) AS v(id, before, next)
                 WHERE r.tenant_id = $1 AND r.id = v.id AND r.maturity = v.before
                 RETURNING r.id, r.scope, r.source_butler, v.before, v.next)
             INSERT INTO memory_events (tenant_id, event_type, entity_type, entity_id,
                                        occurred_at, actor, scope, butler, payload)
             SELECT $1, 'rule_promoted', 'rule', id, $2, $6, scope, source_butler,
                    jsonb_build_object('before', jsonb_build_object('maturity', before),
                                       'after', jsonb_build_object('maturity', next,
                                                                   'last_evaluated_at', $2::timestamptz))
             FROM changed",
        )
        .bind(&shard.tenant_id)
        .bind(now)
        .bind(&ids)
        .bind(&from)
        .bind(&to)
        .bind(actor)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let inverted = anti_patterns::invert(&mut tx, &shard.tenant_id, &invert).await?;
        sqlx::query(
            "INSERT INTO memory_events (tenant_id, event_type, entity_type, entity_id,
                                        occurred_at, actor, scope, butler, payload)
             SELECT r.tenant_id, 'rule_inverted', 'rule', r.id, $2, $4, r.scope, r.source_butler,
                    jsonb_build_object('before', jsonb_build_object('content', r.original_content),
                                       'after', jsonb_build_object('maturity', r.maturity,
                                                                   'content', r.content,
                                                                   'original_content', r.original_content))
             FROM rules r WHERE r.tenant_id = $1 AND r.id = ANY($3)",
        )
        .bind(&shard.tenant_id)
        .bind(now)
        .bind(&inverted)
        .bind(actor)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((promoted, inverted.len() as u64))
    }
}
