//! Rules: procedural memory that earns trust through use (memory_butler.md §5.3).
//! Maturity (`candidate -> established -> proven`, or `anti_pattern`) is orthogonal to
//! validity (`active | fading | expired | retracted`, DECISIONS.md #5).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::caller::{Caller, GLOBAL_SCOPE};
use super::decay::effective_confidence;
use super::maturity::Maturity;
use super::permanence::Permanence;
use super::redaction::{Findings, Redactor};
use super::relation::LinkTarget;
use super::text::{
    Limits, check_confidence, check_content, check_importance, check_metadata, check_name,
    check_tags,
};
use super::validity::Validity;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// Baseline confidence of a new rule (memory_project_plan.md schema default).
pub const NEW_RULE_CONFIDENCE: f64 = 0.5;

/// A stored rule, by its schema names.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct Rule {
    pub id: Uuid,
    pub tenant_id: String,
    pub content: String,
    /// The rule as first written, kept when it is inverted into an anti-pattern.
    pub original_content: Option<String>,
    pub scope: String,
    #[sqlx(try_from = "String")]
    pub maturity: Maturity,
    #[sqlx(try_from = "String")]
    pub validity: Validity,
    pub confidence: f64,
    /// `confidence` decayed to the time of the response; not stored.
    #[sqlx(skip)]
    pub effective_confidence: f64,
    pub decay_rate: f64,
    #[sqlx(try_from = "String")]
    pub permanence: Permanence,
    pub importance: f64,
    pub effectiveness_score: f64,
    pub applied_count: i32,
    pub success_count: i32,
    pub harmful_count: i32,
    pub source_butler: Option<String>,
    pub source_episode_id: Option<Uuid>,
    pub reference_count: i32,
    pub created_at: DateTime<Utc>,
    pub last_applied_at: Option<DateTime<Utc>>,
    pub last_evaluated_at: Option<DateTime<Utc>>,
    pub last_confirmed_at: DateTime<Utc>,
    pub last_referenced_at: DateTime<Utc>,
    pub retracted_at: Option<DateTime<Utc>>,
    /// The validity a retraction replaced, which `memory_restore` puts back.
    pub retracted_from: Option<String>,
    pub tags: Value,
    pub metadata: Value,
    pub embedding_model: Option<String>,
    pub request_id: Option<String>,
    /// When an admin took it out of retrieval (it keeps its state and history).
    pub disabled_at: Option<DateTime<Utc>>,
}

impl Rule {
    /// Fills in the time-dependent fields for a response at `now`.
    pub fn at(mut self, now: DateTime<Utc>) -> Self {
        self.effective_confidence = effective_confidence(
            self.confidence,
            self.decay_rate,
            self.last_confirmed_at,
            now,
        );
        self
    }
}

/// What a caller asks to store, before validation.
#[derive(Debug, Clone, Default)]
pub struct RuleInput {
    pub content: String,
    pub scope: Option<String>,
    pub tags: Option<Vec<String>>,
    pub metadata: Option<Value>,
    pub links: Vec<LinkTarget>,
    pub butler: Option<String>,
    pub importance: Option<f64>,
    pub permanence: Option<Permanence>,
    pub source_episode_id: Option<Uuid>,
}

/// A validated rule, ready for its shard to write. New rules are always `candidate`.
#[derive(Debug, Clone)]
pub struct NewRule {
    pub id: Uuid,
    pub tenant_id: String,
    pub content: String,
    pub scope: String,
    pub confidence: f64,
    pub decay_rate: f64,
    pub permanence: Permanence,
    pub importance: f64,
    pub source_butler: Option<String>,
    pub source_episode_id: Option<Uuid>,
    pub tags: Vec<String>,
    pub metadata: Value,
    pub links: Vec<LinkTarget>,
    pub created_at: DateTime<Utc>,
    /// What redaction found in it (detector: spans), for its event.
    pub redacted: Findings,
}

impl NewRule {
    /// Its content, tags and metadata redacted in place.
    pub fn redact(&mut self, redactor: &Redactor) -> MemoryResult<&Findings> {
        let tenant = self.tenant_id.clone();
        let mut findings = Findings::new();
        self.content = redactor.content(&tenant, &self.content, &mut findings)?;
        self.tags = redactor.tags(&tenant, &self.tags, &mut findings)?;
        redactor.json(&tenant, "metadata", &mut self.metadata, &mut findings)?;
        self.redacted = findings;
        Ok(&self.redacted)
    }
}

impl RuleInput {
    /// Validates the input for `caller` at time `now`.
    pub fn validate(
        self,
        caller: &Caller,
        limits: &Limits,
        now: DateTime<Utc>,
    ) -> MemoryResult<NewRule> {
        if let Some(butler) = &self.butler {
            check_name("butler", butler)?;
        }
        let source_butler = caller.acting_butler(self.butler.as_deref())?;
        let scope = self.scope.unwrap_or_else(|| GLOBAL_SCOPE.to_owned());
        check_name("scope", &scope)?;
        caller.check_scope(&scope, source_butler.as_deref())?;
        if self.links.len() > limits.max_links {
            return Err(MemoryError::new(
                ErrorCode::TooManyLinks,
                format!("at most {} links are allowed", limits.max_links),
            ));
        }
        let permanence = self.permanence.unwrap_or(Permanence::DEFAULT);
        Ok(NewRule {
            id: Uuid::now_v7(),
            tenant_id: caller.tenant_id.clone(),
            content: check_content("content", &self.content, limits)?,
            scope,
            confidence: check_confidence(None, NEW_RULE_CONFIDENCE)?,
            decay_rate: permanence.decay_rate(),
            permanence,
            importance: check_importance(self.importance)?,
            source_butler,
            source_episode_id: self.source_episode_id,
            tags: check_tags(self.tags.unwrap_or_default(), limits)?,
            metadata: check_metadata(self.metadata, limits)?,
            links: self.links,
            created_at: now,
            redacted: Findings::new(),
        })
    }
}
