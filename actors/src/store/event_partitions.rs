//! The audit stream's monthly partitions (migration 24): made ahead of the months that need
//! them, and under an explicit retention (`lifecycle.event_retention_months`, default 0:
//! keep everything) old months dropped whole. Any instance may do either at any time; the
//! database function that makes a partition takes a lock, so instances take turns.

use chrono::{DateTime, Datelike, Months, TimeZone, Utc};

use super::Store;
use crate::error::MemoryResult;

/// The lock instances take turns on to change the partitions (the migration's function
/// takes the same).
const PARTITIONS_LOCK: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('memory_events partitions', 0))";

/// What one upkeep of the partitions did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PartitionUpkeep {
    /// Partitions made (their names).
    pub created: Vec<String>,
    /// Partitions dropped under the retention (their names).
    pub dropped: Vec<String>,
}

impl Store {
    /// Makes the partitions of the month of `now` and of the `ahead` months after it (a
    /// month whose events already sit in the default partition keeps them there), and when
    /// `retain_months` is not 0 drops the partition of every month before the
    /// `retain_months` months that precede the current one.
    pub async fn keep_event_partitions(
        &self,
        now: DateTime<Utc>,
        ahead: u32,
        retain_months: u32,
    ) -> MemoryResult<PartitionUpkeep> {
        let mut upkeep = PartitionUpkeep::default();
        let month = first_of_month(now);
        for k in 0..=ahead {
            let at = month + Months::new(k);
            let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
                .bind(partition_name(at))
                .fetch_one(&self.writer)
                .await?;
            if exists {
                continue;
            }
            let made: Option<String> = sqlx::query_scalar("SELECT memory_events_month($1)")
                .bind(at)
                .fetch_one(&self.writer)
                .await?;
            upkeep.created.extend(made);
        }
        if retain_months == 0 {
            return Ok(upkeep);
        }
        let oldest_kept = month - Months::new(retain_months);
        let partitions: Vec<String> = sqlx::query_scalar(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'memory_events'::regclass ORDER BY 1",
        )
        .fetch_all(&self.writer)
        .await?;
        for name in partitions {
            if partition_month(&name).is_none_or(|start| start >= oldest_kept) {
                continue;
            }
            let mut tx = self.writer.begin().await?;
            sqlx::query(PARTITIONS_LOCK).execute(&mut *tx).await?;
            // The name is `memory_events_YYYY_MM` (checked above): nothing to escape.
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {name}")))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            upkeep.dropped.push(name);
        }
        Ok(upkeep)
    }
}

/// The first instant of the month (UTC) of `at`.
fn first_of_month(at: DateTime<Utc>) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(at.year(), at.month(), 1, 0, 0, 0)
        .single()
        .unwrap_or(at)
}

/// The partition of the month of `at`, as the migration's function names it.
fn partition_name(at: DateTime<Utc>) -> String {
    format!("memory_events_{:04}_{:02}", at.year(), at.month())
}

/// The month a partition named `memory_events_YYYY_MM` holds (none for the default one).
fn partition_month(name: &str) -> Option<DateTime<Utc>> {
    let (year, month) = name.strip_prefix("memory_events_")?.split_once('_')?;
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if year.len() != 4 || month.len() != 2 || !all_digits(year) || !all_digits(month) {
        return None;
    }
    Utc.with_ymd_and_hms(year.parse().ok()?, month.parse().ok()?, 1, 0, 0, 0)
        .single()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_named_by_their_utc_month_and_read_back() {
        let at = Utc.with_ymd_and_hms(2026, 3, 31, 23, 30, 0).unwrap();
        assert_eq!(partition_name(at), "memory_events_2026_03");
        assert_eq!(
            partition_month("memory_events_2026_03"),
            Some(Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap())
        );
        assert_eq!(
            first_of_month(at),
            partition_month("memory_events_2026_03").unwrap()
        );
        for not_a_month in [
            "memory_events_default",
            "memory_events_2026_3",
            "memory_events_2026_13",
            "memory_events_2026_03; DROP TABLE facts",
        ] {
            assert_eq!(partition_month(not_a_month), None, "{not_a_month}");
        }
    }
}
