//! Feedback on rules: a butler applied a rule and marks how it went. Each mark is one
//! `rule_applications` row and moves the rule's counts, effectiveness and maturity
//! (`rule_evidence.rs` says how far).

use serde::Serialize;
use uuid::Uuid;

use super::maturity::Maturity;
use super::rule::Rule;

/// How a rule worked out when a butler applied it: `memory_mark_helpful` or
/// `memory_mark_harmful`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mark {
    Helpful,
    Harmful,
}

impl Mark {
    pub fn as_str(self) -> &'static str {
        match self {
            Mark::Helpful => "helpful",
            Mark::Harmful => "harmful",
        }
    }
}

/// One application of a rule and how it went.
#[derive(Debug, Clone)]
pub struct RuleApplication {
    pub rule_id: Uuid,
    pub mark: Mark,
    pub reason: Option<String>,
    /// The butler that applied it, when known.
    pub butler: Option<String>,
}

/// One application of a rule as stored, for its history.
#[derive(Debug, Clone, PartialEq, serde::Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct StoredApplication {
    pub id: Uuid,
    pub rule_id: Uuid,
    /// `helpful` or `harmful`.
    pub outcome: String,
    pub reason: Option<String>,
    pub butler: Option<String>,
    pub actor: String,
    pub request_id: Option<String>,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

/// A rule after feedback, and the maturity it had before.
#[derive(Debug, Clone)]
pub struct Rated {
    pub rule: Rule,
    pub maturity_before: Maturity,
}
