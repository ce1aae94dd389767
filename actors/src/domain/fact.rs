//! Facts: durable knowledge in subject-predicate-content form with decaying confidence
//! (memory_butler.md §5.2). One live fact per `(tenant, scope, subject, predicate)`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::caller::{Caller, GLOBAL_SCOPE};
use super::decay::effective_confidence;
use super::permanence::Permanence;
use super::redaction::{Findings, Redactor};
use super::relation::LinkTarget;
use super::text::{
    Limits, check_confidence, check_content, check_importance, check_metadata, check_name,
    check_tags, normalize_key,
};
use super::time_window::parse_valid_from;
use super::validity::Validity;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// A stored fact, by its schema names.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct Fact {
    pub id: Uuid,
    pub tenant_id: String,
    pub subject: String,
    pub predicate: String,
    pub content: String,
    pub scope: String,
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
    pub source_butler: Option<String>,
    pub source_episode_id: Option<Uuid>,
    pub supersedes_id: Option<Uuid>,
    pub reference_count: i32,
    pub created_at: DateTime<Utc>,
    pub last_confirmed_at: DateTime<Utc>,
    pub last_referenced_at: DateTime<Utc>,
    pub retracted_at: Option<DateTime<Utc>>,
    /// When it became true (its stated start, else when it was recorded).
    pub valid_from: DateTime<Utc>,
    /// When it stopped being true: set when it is superseded (its successor's start).
    pub valid_until: Option<DateTime<Utc>>,
    /// The validity a retraction replaced, which `memory_restore` puts back.
    pub retracted_from: Option<String>,
    pub tags: Value,
    pub metadata: Value,
    pub embedding_model: Option<String>,
    pub request_id: Option<String>,
    /// The version of its tenant's data key that seals it at rest (a high-risk fact,
    /// `[encryption]`); absent when it is stored in the clear.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_version: Option<i32>,
    /// Its content and metadata sealed, until it is opened for a caller: only the audit
    /// stream carries it (base64), never an answer.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "super::sealed_bytes::serialize"
    )]
    #[schemars(skip)]
    pub sealed: Option<Vec<u8>>,
}

impl Fact {
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
pub struct FactInput {
    pub subject: String,
    pub predicate: String,
    pub content: String,
    pub importance: Option<f64>,
    pub permanence: Option<Permanence>,
    pub scope: Option<String>,
    pub tags: Option<Vec<String>>,
    pub metadata: Option<Value>,
    pub links: Vec<LinkTarget>,
    /// The butler the fact is attributed to (its shard); defaults to the key's butler.
    pub butler: Option<String>,
    pub confidence: Option<f64>,
    pub source_episode_id: Option<Uuid>,
    /// When it became true, as the caller states it (RFC 3339 or a date), else as its
    /// metadata's `valid_from` states it; default: now.
    pub valid_from: Option<String>,
}

/// A validated fact, ready for its shard to write.
#[derive(Debug, Clone)]
pub struct NewFact {
    pub id: Uuid,
    pub tenant_id: String,
    pub subject: String,
    pub predicate: String,
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
    /// When it became true (`created_at` unless stated).
    pub valid_from: DateTime<Utc>,
    /// What redaction found in it (detector: spans), for its event.
    pub redacted: Findings,
}

impl NewFact {
    /// Its subject, content, tags and metadata redacted in place. A masked subject stands
    /// for every value its detector finds (two e-mail subjects become one): `hash` keeps
    /// them apart.
    pub fn redact(&mut self, redactor: &Redactor) -> MemoryResult<&Findings> {
        let tenant = self.tenant_id.clone();
        let mut findings = Findings::new();
        self.subject = redactor.content(&tenant, &self.subject, &mut findings)?;
        self.content = redactor.content(&tenant, &self.content, &mut findings)?;
        self.tags = redactor.tags(&tenant, &self.tags, &mut findings)?;
        redactor.json(&tenant, "metadata", &mut self.metadata, &mut findings)?;
        self.redacted = findings;
        Ok(&self.redacted)
    }
}

/// What storing a fact did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FactOutcome {
    /// No live fact had this subject and predicate in this scope.
    Created,
    /// The live fact with this subject and predicate was superseded by the new one.
    Superseded,
    /// The live fact already said exactly this; it was confirmed instead of duplicated.
    Confirmed,
}

/// The result of storing a fact.
#[derive(Debug, Clone, Serialize)]
pub struct StoredFact {
    pub fact: Fact,
    pub outcome: FactOutcome,
    /// The fact that was live before, in its new state, when one was superseded.
    pub superseded: Option<Fact>,
}

impl FactInput {
    /// Validates the input for `caller` at time `now`.
    pub fn validate(
        self,
        caller: &Caller,
        limits: &Limits,
        now: DateTime<Utc>,
    ) -> MemoryResult<NewFact> {
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
        // Its start as a parameter, or as a caller that keeps dates in metadata states it.
        let stated = self.valid_from.clone().or_else(|| {
            let metadata = self.metadata.as_ref()?;
            Some(metadata.get("valid_from")?.as_str()?.to_owned())
        });
        Ok(NewFact {
            id: Uuid::now_v7(),
            tenant_id: caller.tenant_id.clone(),
            subject: normalize_key("subject", &self.subject, limits)?,
            predicate: normalize_key("predicate", &self.predicate, limits)?,
            content: check_content("content", &self.content, limits)?,
            scope,
            confidence: check_confidence(self.confidence, 1.0)?,
            decay_rate: permanence.decay_rate(),
            permanence,
            importance: check_importance(self.importance)?,
            source_butler,
            source_episode_id: self.source_episode_id,
            tags: check_tags(self.tags.unwrap_or_default(), limits)?,
            metadata: check_metadata(self.metadata, limits)?,
            links: self.links,
            created_at: now,
            valid_from: match &stated {
                Some(text) => parse_valid_from(text)?,
                None => now,
            },
            redacted: Findings::new(),
        })
    }
}
