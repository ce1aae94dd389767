//! `memory_stats` from its read projections (migration 19), not from scans of the hot
//! tables (the timeline's episodes per day come from `memory_days`, `stats.rs`): counts by
//! type and state summed from `memory_counts` (deltas the writers append
//! in the same statement, folded by [`Store::compact_counts`]), the effective-confidence
//! bands of live facts and rules from `memory_bands` (recounted per tenant by
//! [`Store::recount_bands`] when older than `retrieval.stats_bands_max_age_secs`: they move
//! with the clock, not with writes), expired episodes and the oldest pending one from their
//! indexes. The scans in `stats.rs` are the reference these are tested against.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Store;
use super::columns::{confidence_band_sql, effective_confidence};
use super::stats::StatsFilter;
use crate::domain::stats::{Backlog, Breakdown, EpisodeStats, KnowledgeStats};
use crate::error::MemoryResult;

/// Deltas a tenant may gather before a scheduler tick folds them.
const COMPACT_AT: i64 = 32;
/// Tenants folded per tick at most (the rest wait for the next).
const COMPACT_TENANTS_PER_TICK: i64 = 200;
/// The band row that says a tenant was counted (it may have no live fact or rule).
const COUNTED_MARKER: &str = "counted";

/// The three parts of `memory_stats` that the projections answer, and when the bands were
/// counted.
pub struct ProjectedStats {
    pub episodes: EpisodeStats,
    pub facts: KnowledgeStats,
    pub rules: KnowledgeStats,
    pub bands_counted_at: Option<DateTime<Utc>>,
}

#[derive(sqlx::FromRow)]
struct Count {
    kind: String,
    dim: String,
    key: String,
    n: i64,
}

impl Store {
    /// The stats of `filter` as of `now`. `embedding_version` tells current vectors from
    /// stale ones. Bands older than `bands_max_age` are answered as they are and recounted in
    /// the background; bands never counted are counted first.
    #[tracing::instrument(target = "otel", name = "db.projected_stats", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn projected_stats(
        &self,
        filter: &StatsFilter,
        now: DateTime<Utc>,
        embedding_version: i16,
        bands_max_age: Duration,
    ) -> MemoryResult<ProjectedStats> {
        let counts: Vec<Count> = sqlx::query_as(
            "SELECT kind, dim, key, sum(n)::bigint AS n FROM memory_counts
             WHERE tenant_id = $1
               AND CASE WHEN kind = 'episode' THEN $3::text[] IS NULL OR part = ANY($3)
                        ELSE $2::text[] IS NULL OR part = ANY($2) END
             GROUP BY 1, 2, 3",
        )
        .bind(&filter.tenant_id)
        .bind(&filter.scopes)
        .bind(&filter.butlers)
        .fetch_all(self.pool())
        .await?;
        let (mut bands, mut counted_at) = self.bands(filter).await?;
        if counted_at.is_none() {
            self.recount_bands(&filter.tenant_id, now).await?;
            (bands, counted_at) = self.bands(filter).await?;
        } else if counted_at
            .is_some_and(|at| (now - at).to_std().unwrap_or_default() > bands_max_age)
        {
            let store = self.clone();
            let tenant = filter.tenant_id.clone();
            tokio::spawn(async move {
                if let Err(error) = store.recount_bands(&tenant, now).await {
                    tracing::warn!(%error, tenant, "recounting confidence bands failed");
                }
            });
        }
        let mut by_kind: BTreeMap<String, Vec<Count>> = BTreeMap::new();
        for count in counts.into_iter().filter(|c| c.n != 0) {
            by_kind.entry(count.kind.clone()).or_default().push(count);
        }
        let mut take = |kind: &str| by_kind.remove(kind).unwrap_or_default();
        let (episode_total, mut episode_breakdown) = fold(take("episode"), embedding_version);
        let (fact_total, mut fact_breakdown) = fold(take("fact"), embedding_version);
        let (rule_total, mut rule_breakdown) = fold(take("rule"), embedding_version);
        for (kind, band, n) in bands {
            let breakdown = if kind == "fact" {
                &mut fact_breakdown
            } else {
                &mut rule_breakdown
            };
            breakdown
                .entry("effective_confidence".into())
                .or_default()
                .insert(band, n);
        }
        let flags = episode_breakdown.remove("flag").unwrap_or_default();
        let pending = episode_breakdown
            .get("consolidation_status")
            .and_then(|m| m.get("pending"))
            .copied()
            .unwrap_or(0);
        let (expired, oldest) = self.episode_times(filter, now).await?;
        Ok(ProjectedStats {
            episodes: EpisodeStats {
                total: episode_total,
                forgotten: flags.get("forgotten").copied().unwrap_or(0),
                expired,
                unembedded: flags.get("unembedded").copied().unwrap_or(0),
                breakdown: episode_breakdown,
                backlog: Backlog {
                    size: pending,
                    oldest_created_at: oldest,
                    oldest_age_seconds: oldest
                        .map(|t| ((now - t).num_milliseconds() as f64 / 1000.0).max(0.0)),
                },
            },
            facts: KnowledgeStats {
                total: fact_total,
                breakdown: fact_breakdown,
            },
            rules: KnowledgeStats {
                total: rule_total,
                breakdown: rule_breakdown,
            },
            bands_counted_at: counted_at,
        })
    }

    /// How many records of `kind` in `parts` (scopes, or butlers for episodes; `None`: all)
    /// the projection counts: all of them, or those whose `dim` (a state) is `key`.
    pub(crate) async fn projected_total(
        &self,
        tenant_id: &str,
        kind: &str,
        parts: &Option<Vec<String>>,
        key: Option<&str>,
        dim: &str,
    ) -> MemoryResult<i64> {
        let (dim, key) = match key {
            Some(key) => (dim, key),
            None => ("total", ""),
        };
        Ok(sqlx::query_scalar(
            "SELECT coalesce(sum(n), 0)::bigint FROM memory_counts
             WHERE tenant_id = $1 AND kind = $2 AND ($3::text[] IS NULL OR part = ANY($3))
               AND dim = $4 AND key = $5",
        )
        .bind(tenant_id)
        .bind(kind)
        .bind(parts)
        .bind(dim)
        .bind(key)
        .fetch_one(self.pool())
        .await?)
    }

    /// The filter's bands, and when the tenant's were counted (`None`: never).
    async fn bands(
        &self,
        filter: &StatsFilter,
    ) -> MemoryResult<(Vec<(String, String, i64)>, Option<DateTime<Utc>>)> {
        let rows: Vec<(String, String, i64, DateTime<Utc>)> = sqlx::query_as(
            "SELECT kind, band, sum(n)::bigint, min(counted_at) FROM memory_bands
             WHERE tenant_id = $1 AND (band = $3 OR $2::text[] IS NULL OR part = ANY($2))
             GROUP BY 1, 2",
        )
        .bind(&filter.tenant_id)
        .bind(&filter.scopes)
        .bind(COUNTED_MARKER)
        .fetch_all(self.pool())
        .await?;
        let counted_at = rows.iter().map(|r| r.3).min();
        let bands = rows
            .into_iter()
            .filter(|r| r.1 != COUNTED_MARKER && r.2 != 0)
            .map(|(kind, band, n, _)| (kind, band, n))
            .collect();
        Ok((bands, counted_at))
    }

    /// Episodes past their expiry (cleanup has not deleted them yet) and the oldest episode
    /// waiting for consolidation, each from its index (one probe per butler for the oldest).
    async fn episode_times(
        &self,
        filter: &StatsFilter,
        now: DateTime<Utc>,
    ) -> MemoryResult<(i64, Option<DateTime<Utc>>)> {
        Ok(sqlx::query_as(
            "SELECT
                (SELECT count(*) FROM episodes
                 WHERE tenant_id = $1 AND ($2::text[] IS NULL OR butler = ANY($2)) AND expires_at <= $3),
                (SELECT min(o.created_at)
                 FROM (SELECT DISTINCT part FROM memory_counts
                       WHERE tenant_id = $1 AND kind = 'episode'
                         AND ($2::text[] IS NULL OR part = ANY($2))) b
                 CROSS JOIN LATERAL (
                     SELECT created_at FROM episodes e
                     WHERE e.tenant_id = $1 AND e.butler = b.part
                       AND e.consolidation_status = 'pending' AND e.forgotten_at IS NULL
                     ORDER BY e.created_at LIMIT 1) o)",
        )
        .bind(&filter.tenant_id)
        .bind(&filter.butlers)
        .bind(now)
        .fetch_one(self.pool())
        .await?)
    }

    /// Counts a tenant's live facts and rules by effective confidence at `now` into
    /// `memory_bands`, replacing what was there. One recount per tenant at a time: another
    /// one already running makes this a no-op (`false`).
    #[tracing::instrument(target = "otel", name = "db.recount_bands", skip_all, fields(db.system.name = "postgresql", db.operation.name = "INSERT"))]
    pub async fn recount_bands(&self, tenant_id: &str, now: DateTime<Utc>) -> MemoryResult<bool> {
        // On the read pool: a recount holds its connection for a scan (0.6 s at a million
        // facts), which the four write connections of the shards cannot spare.
        let mut tx = self.pool().begin().await?;
        let locked: bool = sqlx::query_scalar(
            "SELECT pg_try_advisory_xact_lock(hashtextextended('memory_bands:' || $1, 0))",
        )
        .bind(tenant_id)
        .fetch_one(&mut *tx)
        .await?;
        if !locked {
            return Ok(false);
        }
        sqlx::query("DELETE FROM memory_bands WHERE tenant_id = $1")
            .bind(tenant_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query(concat!(
            "INSERT INTO memory_bands (tenant_id, kind, part, band, n, counted_at)
             SELECT $1, kind, scope, ",
            confidence_band_sql!(),
            ", count(*), $2 FROM (
                 SELECT 'fact' AS kind, scope, ",
            effective_confidence!("", "$2::timestamptz"),
            " AS eff FROM facts WHERE tenant_id = $1 AND validity IN ('active', 'fading')
                 UNION ALL
                 SELECT 'rule', scope, ",
            effective_confidence!("", "$2::timestamptz"),
            " FROM rules WHERE tenant_id = $1 AND validity IN ('active', 'fading')) live
             GROUP BY 2, 3, 4
             UNION ALL SELECT $1, 'fact', '', $3, 0, $2"
        ))
        .bind(tenant_id)
        .bind(now)
        .bind(COUNTED_MARKER)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Folds the deltas of tenants that gathered [`COMPACT_AT`] or more (in `memory_counts` or
    /// `memory_days`) into one row per key, dropping keys that sum to zero; answers how many
    /// tenants were folded. Each fold is one statement: deltas appended meanwhile by other
    /// transactions are not in its snapshot and stay for the next.
    #[tracing::instrument(target = "otel", name = "db.compact_counts", skip_all, fields(db.system.name = "postgresql", db.operation.name = "DELETE"))]
    pub async fn compact_counts(&self) -> MemoryResult<usize> {
        let tenants: Vec<String> = sqlx::query_scalar(
            "SELECT tenant_id FROM (
                 SELECT tenant_id FROM memory_counts WHERE NOT compacted
                 UNION ALL SELECT tenant_id FROM memory_days WHERE NOT compacted) d
             GROUP BY tenant_id HAVING count(*) >= $1 LIMIT $2",
        )
        .bind(COMPACT_AT)
        .bind(COMPACT_TENANTS_PER_TICK)
        .fetch_all(self.pool())
        .await?;
        for tenant in &tenants {
            sqlx::query(
                "WITH folded AS (DELETE FROM memory_counts WHERE tenant_id = $1
                                 RETURNING kind, part, dim, key, n)
                 INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n, compacted)
                 SELECT $1, kind, part, dim, key, sum(n), true FROM folded
                 GROUP BY kind, part, dim, key HAVING sum(n) <> 0",
            )
            .bind(tenant)
            .execute(self.pool())
            .await?;
            sqlx::query(
                "WITH folded AS (DELETE FROM memory_days WHERE tenant_id = $1
                                 RETURNING butler, day, status, n)
                 INSERT INTO memory_days (tenant_id, butler, day, status, n, compacted)
                 SELECT $1, butler, day, status, sum(n), true FROM folded
                 GROUP BY butler, day, status HAVING sum(n) <> 0",
            )
            .bind(tenant)
            .execute(self.pool())
            .await?;
        }
        Ok(tenants.len())
    }
}

/// Counts of one type as `memory_stats` shows them: the total apart, embedding versions
/// read as `current` (the running model's), `stale` (another's) or `pending`.
fn fold(rows: Vec<Count>, embedding_version: i16) -> (i64, Breakdown) {
    let mut breakdown = Breakdown::new();
    let mut total = 0;
    let current = embedding_version.to_string();
    for row in rows {
        match row.dim.as_str() {
            "total" => total = row.n,
            "embedding_version" => {
                let state = match row.key.as_str() {
                    "pending" => "pending",
                    version if version == current => "current",
                    _ => "stale",
                };
                *breakdown
                    .entry("embedding".into())
                    .or_default()
                    .entry(state.into())
                    .or_default() += row.n;
            }
            _ => {
                breakdown.entry(row.dim).or_default().insert(row.key, row.n);
            }
        }
    }
    (total, breakdown)
}
