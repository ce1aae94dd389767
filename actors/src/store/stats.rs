//! Counts and health indicators for `memory_stats`: one grouped query per table, so the cost
//! does not grow with the number of states.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::domain::stats::{
    Backlog, Breakdown, EpisodeStats, KnowledgeStats, Timeline, TimelineDay,
};
use crate::error::MemoryResult;

use super::Store;
use super::columns::{confidence_band_sql, effective_confidence};

/// Which part of a tenant's memory to count.
#[derive(Debug, Clone, Default)]
pub struct StatsFilter {
    pub tenant_id: String,
    /// Fact and rule scopes to count; `None` counts every scope.
    pub scopes: Option<Vec<String>>,
    /// Butlers whose episodes to count; `None` counts every butler.
    pub butlers: Option<Vec<String>>,
}

impl From<crate::domain::search::SearchScope> for StatsFilter {
    /// What a caller may see, as the part of its tenant to count.
    fn from(scope: crate::domain::search::SearchScope) -> Self {
        StatsFilter {
            tenant_id: scope.tenant_id,
            scopes: scope.scopes,
            butlers: scope.butlers,
        }
    }
}

#[derive(sqlx::FromRow)]
struct Count {
    dim: String,
    key: String,
    n: i64,
}

fn fold(rows: Vec<Count>) -> (i64, Breakdown) {
    let mut breakdown = Breakdown::new();
    let mut total = 0;
    for row in rows {
        if row.dim == "total" {
            total = row.n;
        } else {
            breakdown.entry(row.dim).or_default().insert(row.key, row.n);
        }
    }
    (total, breakdown)
}

/// Which model's vectors a row has: `current` (the running model's), `stale` (another
/// model's, waiting to be re-embedded) or `pending` (none yet). `$4` is the current model's
/// `embedding_versions` id.
macro_rules! embedding_state_sql {
    () => {
        "CASE WHEN embedding_version_id IS NULL THEN 'pending'
              WHEN embedding_version_id = $4 THEN 'current' ELSE 'stale' END"
    };
}

impl Store {
    /// `embedding_version`: the running model's, to tell current vectors from stale ones.
    #[tracing::instrument(target = "otel", name = "db.episode_stats", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn episode_stats(
        &self,
        filter: &StatsFilter,
        now: DateTime<Utc>,
        embedding_version: i16,
    ) -> MemoryResult<EpisodeStats> {
        let rows: Vec<Count> = sqlx::query_as(concat!(
            "WITH e AS (
                 SELECT consolidation_status, forgotten_at, expires_at, embedding IS NULL AS unembedded, created_at, ",
            embedding_state_sql!(),
            " AS embedding
                 FROM episodes
                 WHERE tenant_id = $1 AND ($3::text[] IS NULL OR butler = ANY($3)))
             SELECT 'total' AS dim, '' AS key, count(*) AS n FROM e
             UNION ALL SELECT 'consolidation_status', consolidation_status, count(*) FROM e GROUP BY 2
             UNION ALL SELECT 'embedding', embedding, count(*) FROM e GROUP BY 2
             UNION ALL SELECT 'flag', 'forgotten', count(*) FROM e WHERE forgotten_at IS NOT NULL
             UNION ALL SELECT 'flag', 'expired', count(*) FROM e WHERE expires_at <= $2
             UNION ALL SELECT 'flag', 'unembedded', count(*) FROM e WHERE unembedded"
        ))
        .bind(&filter.tenant_id)
        .bind(now)
        .bind(&filter.butlers)
        .bind(embedding_version)
        .fetch_all(self.pool())
        .await?;
        let (total, mut breakdown) = fold(rows);
        let flags = breakdown.remove("flag").unwrap_or_default();
        let oldest: Option<DateTime<Utc>> = sqlx::query_scalar(
            "SELECT min(created_at) FROM episodes
             WHERE tenant_id = $1 AND ($2::text[] IS NULL OR butler = ANY($2))
               AND consolidation_status = 'pending' AND forgotten_at IS NULL",
        )
        .bind(&filter.tenant_id)
        .bind(&filter.butlers)
        .fetch_one(self.pool())
        .await?;
        let pending = breakdown
            .get("consolidation_status")
            .and_then(|m| m.get("pending"))
            .copied()
            .unwrap_or(0);
        Ok(EpisodeStats {
            total,
            forgotten: flags.get("forgotten").copied().unwrap_or(0),
            expired: flags.get("expired").copied().unwrap_or(0),
            unembedded: flags.get("unembedded").copied().unwrap_or(0),
            breakdown,
            backlog: Backlog {
                size: pending,
                oldest_created_at: oldest,
                oldest_age_seconds: oldest
                    .map(|t| ((now - t).num_milliseconds() as f64 / 1000.0).max(0.0)),
            },
        })
    }

    #[tracing::instrument(target = "otel", name = "db.fact_stats", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn fact_stats(
        &self,
        filter: &StatsFilter,
        now: DateTime<Utc>,
        embedding_version: i16,
    ) -> MemoryResult<KnowledgeStats> {
        let rows: Vec<Count> = sqlx::query_as(concat!(
            "WITH f AS (
                 SELECT validity, permanence, ",
            embedding_state_sql!(),
            " AS embedding,
                        CASE WHEN validity IN ('active', 'fading') THEN ",
            effective_confidence!("", "$2::timestamptz"),
            " END AS eff
                 FROM facts
                 WHERE tenant_id = $1 AND ($3::text[] IS NULL OR scope = ANY($3)))
             SELECT 'total' AS dim, '' AS key, count(*) AS n FROM f
             UNION ALL SELECT 'validity', validity, count(*) FROM f GROUP BY 2
             UNION ALL SELECT 'embedding', embedding, count(*) FROM f GROUP BY 2
             UNION ALL SELECT 'permanence', permanence, count(*) FROM f WHERE eff IS NOT NULL GROUP BY 2
             UNION ALL SELECT 'effective_confidence', ",
            confidence_band_sql!(),
            ", count(*) FROM f WHERE eff IS NOT NULL GROUP BY 2"
        ))
        .bind(&filter.tenant_id)
        .bind(now)
        .bind(&filter.scopes)
        .bind(embedding_version)
        .fetch_all(self.pool())
        .await?;
        let (total, breakdown) = fold(rows);
        Ok(KnowledgeStats { total, breakdown })
    }

    #[tracing::instrument(target = "otel", name = "db.rule_stats", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn rule_stats(
        &self,
        filter: &StatsFilter,
        now: DateTime<Utc>,
        embedding_version: i16,
    ) -> MemoryResult<KnowledgeStats> {
        let rows: Vec<Count> = sqlx::query_as(concat!(
            "WITH r AS (
                 SELECT validity, maturity, effectiveness_score, applied_count, ",
            embedding_state_sql!(),
            " AS embedding,
                        CASE WHEN validity IN ('active', 'fading') THEN ",
            effective_confidence!("", "$2::timestamptz"),
            " END AS eff
                 FROM rules
                 WHERE tenant_id = $1 AND ($3::text[] IS NULL OR scope = ANY($3)))
             SELECT 'total' AS dim, '' AS key, count(*) AS n FROM r
             UNION ALL SELECT 'validity', validity, count(*) FROM r GROUP BY 2
             UNION ALL SELECT 'embedding', embedding, count(*) FROM r GROUP BY 2
             UNION ALL SELECT 'maturity', maturity, count(*) FROM r WHERE eff IS NOT NULL GROUP BY 2
             UNION ALL SELECT 'effective_confidence', ",
            confidence_band_sql!(),
            ", count(*) FROM r WHERE eff IS NOT NULL GROUP BY 2
             UNION ALL SELECT 'effectiveness',
                    CASE WHEN applied_count = 0 THEN 'unrated' WHEN effectiveness_score < 0.3 THEN 'below_0.3'
                         WHEN effectiveness_score < 0.6 THEN '0.3_to_0.6' WHEN effectiveness_score < 0.8 THEN '0.6_to_0.8'
                         ELSE '0.8_and_above' END, count(*)
                    FROM r WHERE eff IS NOT NULL GROUP BY 2"
        ))
        .bind(&filter.tenant_id)
        .bind(now)
        .bind(&filter.scopes)
        .bind(embedding_version)
        .fetch_all(self.pool())
        .await?;
        let (total, breakdown) = fold(rows);
        Ok(KnowledgeStats { total, breakdown })
    }

    /// When each lifecycle job last finished for the filtered shards.
    #[tracing::instrument(target = "otel", name = "db.last_runs", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn last_runs(
        &self,
        filter: &StatsFilter,
    ) -> MemoryResult<BTreeMap<String, Option<DateTime<Utc>>>> {
        let rows: Vec<(String, Option<DateTime<Utc>>)> = sqlx::query_as(
            "SELECT k.kind, (SELECT max(finished_at) FROM lifecycle_runs r
                             WHERE r.tenant_id = $1 AND r.kind = k.kind
                               AND ($2::text[] IS NULL OR r.butler = ANY($2)))
             FROM unnest(ARRAY['decay_sweep', 'episode_cleanup', 'consolidation']) AS k(kind)",
        )
        .bind(&filter.tenant_id)
        .bind(&filter.butlers)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().collect())
    }

    /// Day by day since `from` (a UTC midnight): episodes stored, by consolidation status (from
    /// the `memory_days` projection), and lifecycle runs with the sum of their changes, by
    /// kind (a range of `lifecycle_runs`, a few rows per shard and day).
    #[tracing::instrument(target = "otel", name = "db.timeline", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn timeline(
        &self,
        filter: &StatsFilter,
        from: DateTime<Utc>,
        days: u32,
    ) -> MemoryResult<Timeline> {
        // From the `memory_days` projection (migration 19), not the table.
        let episodes: Vec<(chrono::NaiveDate, String, i64)> = sqlx::query_as(
            "SELECT day, status, sum(n)::bigint FROM memory_days
             WHERE tenant_id = $1 AND ($2::text[] IS NULL OR butler = ANY($2)) AND day >= $3
             GROUP BY 1, 2 HAVING sum(n) <> 0",
        )
        .bind(&filter.tenant_id)
        .bind(&filter.butlers)
        .bind(from.date_naive())
        .fetch_all(self.pool())
        .await?;
        let runs: Vec<(chrono::NaiveDate, String, i64, i64)> = sqlx::query_as(
            "SELECT (finished_at AT TIME ZONE 'UTC')::date, kind, count(*),
                    coalesce(sum((SELECT sum(value::bigint) FROM jsonb_each_text(result->'changes'))), 0)::bigint
             FROM lifecycle_runs
             WHERE tenant_id = $1 AND ($2::text[] IS NULL OR butler = ANY($2))
               AND finished_at >= $3
             GROUP BY 1, 2",
        )
        .bind(&filter.tenant_id)
        .bind(&filter.butlers)
        .bind(from)
        .fetch_all(self.pool())
        .await?;
        let first = from.date_naive();
        let mut timeline = Timeline {
            days: (0..days)
                .map(|i| TimelineDay {
                    day: first + chrono::Days::new(u64::from(i)),
                    ..TimelineDay::default()
                })
                .collect(),
        };
        for (d, status, n) in episodes {
            if let Some(slot) = slot_of(&mut timeline, first, d) {
                slot.episodes.insert(status, n);
            }
        }
        for (d, kind, n, changes) in runs {
            if let Some(slot) = slot_of(&mut timeline, first, d) {
                slot.runs.insert(kind.clone(), n);
                slot.changes.insert(kind, changes);
            }
        }
        Ok(timeline)
    }
}

/// The day of a timeline that `day` falls on, if it is within the window.
fn slot_of(
    timeline: &mut Timeline,
    first: chrono::NaiveDate,
    day: chrono::NaiveDate,
) -> Option<&mut TimelineDay> {
    let index = usize::try_from((day - first).num_days()).ok()?;
    timeline.days.get_mut(index)
}
