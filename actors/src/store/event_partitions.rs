//! The audit stream's monthly partitions (migration 24): made ahead of the months that need
//! them, and under an explicit retention (`lifecycle.event_retention_months`, default 0:
//! keep everything) old months dropped whole. Any instance may do either at any time; the
//! database function that makes a partition takes a lock, so instances take turns.

use chrono::{DateTime, Months, Utc};

use super::Store;
use super::month_partitions::{Monthly, first_of_month};
use crate::error::MemoryResult;

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
        let mut upkeep = PartitionUpkeep {
            created: self.keep_months_ahead(Monthly::Events, now, ahead).await?,
            dropped: Vec::new(),
        };
        if retain_months == 0 {
            return Ok(upkeep);
        }
        let oldest_kept = first_of_month(now) - Months::new(retain_months);
        for (name, month) in self.months_made(Monthly::Events).await? {
            if month >= oldest_kept {
                continue;
            }
            let mut tx = self.writer.begin().await?;
            sqlx::query(Monthly::Events.lock())
                .execute(&mut *tx)
                .await?;
            // The name is `memory_events_YYYY_MM` (months_made parsed it): nothing to escape.
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {name}")))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            upkeep.dropped.push(name);
        }
        Ok(upkeep)
    }
}
