//! The per-shard lifecycle sweeps and what they report.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::shard_key::ShardKey;

super::string_enum! {
    /// A lifecycle job run per shard.
    SweepKind {
        /// Effective confidence -> fading / expired / active; rule promotion and inversion.
        DecaySweep => "decay_sweep",
        /// Expired episodes deleted; capacity enforced, oldest consolidated first.
        EpisodeCleanup => "episode_cleanup",
        /// Pending episodes extracted into facts and rules, batch by batch.
        Consolidation => "consolidation",
    }
}

impl SweepKind {
    fn parse_alias(s: &str) -> Option<Self> {
        match s {
            "decay" => Some(SweepKind::DecaySweep),
            "cleanup" => Some(SweepKind::EpisodeCleanup),
            "consolidate" => Some(SweepKind::Consolidation),
            _ => None,
        }
    }
}

/// What one sweep of one shard did.
#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
pub struct SweepReport {
    pub kind: SweepKind,
    pub shard: ShardKey,
    /// The time the sweep judged by (the engine clock when it began).
    pub as_of: DateTime<Utc>,
    pub elapsed_ms: u64,
    /// Live rows looked at (decay) or episodes left (cleanup).
    pub scanned: u64,
    /// Changes by name: `fact_fading`, `rule_expired`, `rule_promoted`, `expired_deleted`,
    /// `capacity_deleted`, ...
    pub changes: BTreeMap<String, u64>,
    /// Episodes above `max_entries` that cleanup may not delete (pending, or dead letters
    /// within retention).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub over_capacity_protected: Option<u64>,
}

impl SweepReport {
    pub fn new(kind: SweepKind, shard: ShardKey, as_of: DateTime<Utc>) -> Self {
        SweepReport {
            kind,
            shard,
            as_of,
            elapsed_ms: 0,
            scanned: 0,
            changes: BTreeMap::new(),
            over_capacity_protected: None,
        }
    }

    /// Adds `n` changes of one kind (zero counts are left out).
    pub fn add(&mut self, change: &str, n: u64) {
        if n > 0 {
            *self.changes.entry(change.to_owned()).or_default() += n;
        }
    }

    pub fn changed(&self) -> u64 {
        self.changes.values().sum()
    }
}
