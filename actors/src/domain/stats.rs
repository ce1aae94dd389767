//! What `memory_stats` answers: counts by type and state, confidence and effectiveness
//! bands, the consolidation backlog, and when each lifecycle job last ran.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

/// The answer of `memory_stats`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct MemoryStats {
    pub tenant_id: String,
    /// The fact and rule scopes counted (`null`: all of the tenant's).
    pub scopes: Option<Vec<String>>,
    /// The butlers whose episodes were counted (`null`: all).
    pub butlers: Option<Vec<String>>,
    pub episodes: EpisodeStats,
    pub facts: KnowledgeStats,
    pub rules: KnowledgeStats,
    pub consolidation_backlog: Backlog,
    /// Consolidation's extractor, as configured and as it runs now (the heuristic one while
    /// the local model cannot run).
    pub consolidation_extractor: super::extractor_status::ExtractorStatus,
    pub last_runs: BTreeMap<String, Option<DateTime<Utc>>>,
    pub computed_at: DateTime<Utc>,
    /// When the `effective_confidence` bands were counted: they move with the clock, not
    /// with writes, and are recounted when older than `retrieval.stats_bands_max_age_secs`
    /// (every other count is current).
    pub confidence_bands_counted_at: Option<DateTime<Utc>>,
}

/// Counts by dimension and value, e.g. `{"validity": {"active": 3}}`.
pub type Breakdown = BTreeMap<String, BTreeMap<String, i64>>;

/// Episode counts and the consolidation backlog.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EpisodeStats {
    pub total: i64,
    pub breakdown: Breakdown,
    pub forgotten: i64,
    /// Past `expires_at` but not yet deleted by cleanup.
    pub expired: i64,
    /// Not yet embedded (found by keyword search only until they are).
    pub unembedded: i64,
    pub backlog: Backlog,
}

/// Unconsolidated episodes waiting for consolidation.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Backlog {
    pub size: i64,
    pub oldest_created_at: Option<DateTime<Utc>>,
    pub oldest_age_seconds: Option<f64>,
}

/// Fact or rule counts, by state and by band.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct KnowledgeStats {
    pub total: i64,
    pub breakdown: Breakdown,
}

/// Most days a timeline covers.
pub const MAX_TIMELINE_DAYS: u32 = 90;

/// Day by day (UTC), what came in and what the lifecycle did: the dashboard's charts of
/// episodes per day and consolidation activity.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Timeline {
    /// Every day of the window, oldest first (days with nothing included, at zero).
    pub days: Vec<TimelineDay>,
}

/// One day of a [`Timeline`].
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct TimelineDay {
    pub day: chrono::NaiveDate,
    /// Episodes stored that day (not forgotten), by their consolidation status now.
    pub episodes: BTreeMap<String, i64>,
    /// Lifecycle runs finished that day, by kind (`consolidation`, `decay_sweep`, ...).
    pub runs: BTreeMap<String, i64>,
    /// What those runs changed, by kind (the sum of their reports' changes).
    pub changes: BTreeMap<String, i64>,
}
