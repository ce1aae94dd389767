//! Browsing memory page by page, for the people who own it (the dashboard's REST API,
//! `memory_project_plan.md` "Dashboard API Endpoints"): filters per type, a stable order
//! (newest first, by id: ids are time-ordered UUIDv7, so rows inserted while someone pages
//! land before the cursor and never shift a page), bounded pages and the total count.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::consolidation_status::ConsolidationStatus;
use super::maturity::Maturity;
use super::permanence::Permanence;
use super::validity::Validity;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// Records per page unless asked otherwise.
pub const DEFAULT_PAGE: u32 = 50;
/// Most records per page.
pub const MAX_PAGE: u32 = 200;

/// Filters of a facts list.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FactQuery {
    /// Only this scope (a butler key: `global` or its own butler's).
    pub scope: Option<String>,
    /// Only facts about this subject (any case).
    pub subject: Option<String>,
    /// Only facts whose words match (full text over subject, predicate and content).
    pub q: Option<String>,
    /// Only facts whose effective confidence is at least this, now (0 to 1).
    pub min_confidence: Option<f64>,
    pub permanence: Option<Permanence>,
    pub validity: Option<Validity>,
    /// Only facts this butler wrote (`_tenant`: written without a butler).
    pub source_butler: Option<String>,
    /// Records per page (1 to 200, default 50).
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<Uuid>,
}

/// Filters of a rules list.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleQuery {
    /// Only this scope (a butler key: `global` or its own butler's).
    pub scope: Option<String>,
    pub maturity: Option<Maturity>,
    pub validity: Option<Validity>,
    /// Only rules whose words match.
    pub q: Option<String>,
    /// Only rules this butler wrote (`_tenant`: written without a butler).
    pub source_butler: Option<String>,
    /// Records per page (1 to 200, default 50).
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<Uuid>,
}

/// Filters of an episodes list.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EpisodeQuery {
    /// Only this butler's episodes (a butler key: its own).
    pub butler: Option<String>,
    /// Only episodes stored at or after this time (RFC 3339).
    pub from: Option<DateTime<Utc>>,
    /// Only episodes stored before this time (RFC 3339).
    pub to: Option<DateTime<Utc>>,
    pub consolidation_status: Option<ConsolidationStatus>,
    /// Records per page (1 to 200, default 50).
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<Uuid>,
}

/// A person's correction of a fact (`PUT /api/memory/facts/{id}`): a new version that
/// supersedes it; what is not given keeps the fact's value.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FactEdit {
    /// What is true now.
    pub content: String,
    pub confidence: Option<f64>,
    pub importance: Option<f64>,
    pub permanence: Option<Permanence>,
    pub tags: Option<Vec<String>>,
    pub metadata: Option<serde_json::Value>,
}

/// A person's rewrite of a rule (`PUT /api/memory/rules/{id}`): a new candidate that
/// supersedes it (maturity starts again); the old one is retracted.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleEdit {
    /// How to behave now.
    pub content: String,
    /// Why, recorded with the old rule's retraction.
    pub reason: Option<String>,
}

/// One page of a list.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[schemars(rename = "{T}Page")]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Pass it back as `cursor` for the next page; `null` on the last page.
    pub next_cursor: Option<Uuid>,
    /// Records matching the filters, on every page: exact from the stats' projections for
    /// the filters they count (scope or butler, state), else counted within a few
    /// milliseconds; `null` when that count would take longer than a page should.
    pub total: Option<i64>,
}

/// The page size asked for, checked.
pub fn page_size(limit: Option<u32>) -> MemoryResult<u32> {
    match limit.unwrap_or(DEFAULT_PAGE) {
        n @ 1..=MAX_PAGE => Ok(n),
        _ => Err(MemoryError::new(
            ErrorCode::InvalidLimit,
            format!("`limit` must be between 1 and {MAX_PAGE}"),
        )),
    }
}

/// `min_confidence`, checked.
pub fn check_min_confidence(value: Option<f64>) -> MemoryResult<Option<f64>> {
    match value {
        Some(v) if !(0.0..=1.0).contains(&v) => Err(MemoryError::new(
            ErrorCode::InvalidMinConfidence,
            "`min_confidence` must be between 0 and 1",
        )),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_bounded() {
        assert_eq!(page_size(None).unwrap(), DEFAULT_PAGE);
        assert_eq!(page_size(Some(MAX_PAGE)).unwrap(), MAX_PAGE);
        for bad in [0, MAX_PAGE + 1] {
            assert_eq!(
                page_size(Some(bad)).unwrap_err().code,
                ErrorCode::InvalidLimit
            );
        }
        assert!(check_min_confidence(Some(1.5)).is_err());
        assert_eq!(check_min_confidence(Some(0.5)).unwrap(), Some(0.5));
    }
}
