//! Tables partitioned by calendar month (UTC): the audit stream by `occurred_at` (migration
//! 24) and episodes by the time their id begins with (migration 26). Each has a database
//! function that makes a month's partition (`<table>_month`, taking a lock so that instances
//! take turns) and a default partition for rows outside every month made. This is what both
//! share: naming a month's partition, reading one's month back, making months ahead, and
//! listing the months made.

use chrono::{DateTime, Datelike, Months, TimeZone, Utc};

use super::Store;
use crate::error::MemoryResult;

/// A table partitioned by month.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Monthly {
    /// `memory_events`, by `occurred_at`.
    Events,
    /// `episodes`, by the time its id begins with (its `created_at`).
    Episodes,
}

impl Monthly {
    /// The partitioned table.
    pub fn table(self) -> &'static str {
        match self {
            Monthly::Events => "memory_events",
            Monthly::Episodes => "episodes",
        }
    }

    /// The lock instances take turns on to change the table's partitions (the database
    /// function that makes one takes the same).
    pub(super) fn lock(self) -> &'static str {
        match self {
            Monthly::Events => {
                "SELECT pg_advisory_xact_lock(hashtextextended('memory_events partitions', 0))"
            }
            Monthly::Episodes => {
                "SELECT pg_advisory_xact_lock(hashtextextended('episodes partitions', 0))"
            }
        }
    }

    /// The partition of the month of `at`, as the database function names it.
    pub fn partition_name(self, at: DateTime<Utc>) -> String {
        format!("{}_{:04}_{:02}", self.table(), at.year(), at.month())
    }

    /// The month a partition named `<table>_YYYY_MM` holds (none for the default one, or a
    /// name of another shape).
    pub fn partition_month(self, name: &str) -> Option<DateTime<Utc>> {
        let (year, month) = name
            .strip_prefix(self.table())?
            .strip_prefix('_')?
            .split_once('_')?;
        let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if year.len() != 4 || month.len() != 2 || !all_digits(year) || !all_digits(month) {
            return None;
        }
        Utc.with_ymd_and_hms(year.parse().ok()?, month.parse().ok()?, 1, 0, 0, 0)
            .single()
    }
}

/// The first instant of the month (UTC) of `at`.
pub fn first_of_month(at: DateTime<Utc>) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(at.year(), at.month(), 1, 0, 0, 0)
        .single()
        .unwrap_or(at)
}

impl Store {
    /// Makes the partitions of `table` for the month of `now` and the `ahead` months after
    /// it (a month whose rows already sit in the default partition keeps them there);
    /// answers the names of those it made.
    pub async fn keep_months_ahead(
        &self,
        table: Monthly,
        now: DateTime<Utc>,
        ahead: u32,
    ) -> MemoryResult<Vec<String>> {
        let month = first_of_month(now);
        let wanted: Vec<DateTime<Utc>> = (0..=ahead).map(|k| month + Months::new(k)).collect();
        let names: Vec<String> = wanted.iter().map(|at| table.partition_name(*at)).collect();
        // One look for all of them: this runs every scheduler tick.
        let missing: Vec<bool> = sqlx::query_scalar(
            "SELECT to_regclass(name) IS NULL FROM unnest($1::text[]) WITH ORDINALITY AS n(name, i)
             ORDER BY i",
        )
        .bind(&names)
        .fetch_all(&self.writer)
        .await?;
        let mut made = Vec::new();
        for (at, missing) in wanted.into_iter().zip(missing) {
            if !missing {
                continue;
            }
            // The function's name is `<table>_month`, from a closed set: nothing to escape.
            let sql = format!("SELECT {}_month($1)", table.table());
            let name: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                .bind(at)
                .fetch_one(&self.writer)
                .await?;
            made.extend(name);
        }
        Ok(made)
    }

    /// The monthly partitions of `table` (not the default one), oldest first, with their
    /// months.
    pub async fn months_made(&self, table: Monthly) -> MemoryResult<Vec<(String, DateTime<Utc>)>> {
        let names: Vec<String> = sqlx::query_scalar(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = $1::regclass ORDER BY 1",
        )
        .bind(table.table())
        .fetch_all(&self.writer)
        .await?;
        Ok(names
            .into_iter()
            .filter_map(|name| table.partition_month(&name).map(|month| (name, month)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_named_by_their_utc_month_and_read_back() {
        let at = Utc.with_ymd_and_hms(2026, 3, 31, 23, 30, 0).unwrap();
        let march = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
        for (table, name) in [
            (Monthly::Events, "memory_events_2026_03"),
            (Monthly::Episodes, "episodes_2026_03"),
        ] {
            assert_eq!(table.partition_name(at), name);
            assert_eq!(table.partition_month(name), Some(march));
        }
        assert_eq!(first_of_month(at), march);
        for (table, not_a_month) in [
            (Monthly::Events, "memory_events_default"),
            (Monthly::Events, "memory_events_2026_3"),
            (Monthly::Events, "memory_events_2026_13"),
            (Monthly::Events, "memory_events_2026_03; DROP TABLE facts"),
            (Monthly::Events, "episodes_2026_03"),
            (Monthly::Episodes, "memory_events_2026_03"),
            (Monthly::Episodes, "episodes_default"),
            (Monthly::Episodes, "episodes2026_03"),
        ] {
            assert_eq!(table.partition_month(not_a_month), None, "{not_a_month}");
        }
    }
}
