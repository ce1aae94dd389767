//! Episodes: raw, short-lived observations of what happened in a session (memory_butler.md §5.1).

use chrono::{DateTime, Duration, SubsecRound, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::author::Author;
use super::caller::Caller;
use super::consolidation_status::ConsolidationStatus;
use super::text::{
    Limits, check_content, check_identifier_text, check_importance, check_metadata, check_name,
};
use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// A stored episode, by its schema names.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Episode {
    pub id: Uuid,
    pub tenant_id: String,
    pub butler: String,
    pub session_id: Option<String>,
    pub content: String,
    pub importance: f64,
    pub reference_count: i32,
    #[sqlx(try_from = "String")]
    pub consolidation_status: ConsolidationStatus,
    /// Compatibility projection of `consolidation_status = 'consolidated'`.
    pub consolidated: bool,
    pub consolidation_attempts: i32,
    pub last_consolidation_error: Option<String>,
    pub next_consolidation_retry_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub last_referenced_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub forgotten_at: Option<DateTime<Utc>>,
    pub metadata: Value,
    /// The model that embedded this row; `None` until it is embedded.
    pub embedding_model: Option<String>,
    pub request_id: Option<String>,
    pub idempotency_key: Option<String>,
}

/// What a caller asks to store, before validation.
#[derive(Debug, Clone, Default)]
pub struct EpisodeInput {
    pub butler: String,
    pub session_id: Option<String>,
    pub content: String,
    pub importance: Option<f64>,
    pub metadata: Option<Value>,
    /// Overrides the configured time to live, in days.
    pub ttl_days: Option<f64>,
    /// Stores the episode once however often it is submitted with this key (per butler).
    pub idempotency_key: Option<String>,
}

/// A validated episode, ready for its shard to write.
#[derive(Debug, Clone)]
pub struct NewEpisode {
    pub id: Uuid,
    pub tenant_id: String,
    pub butler: String,
    pub session_id: Option<String>,
    pub content: String,
    pub importance: f64,
    pub metadata: Value,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub idempotency_key: Option<String>,
}

impl NewEpisode {
    /// The row this episode becomes when inserted: what it says, plus the schema's defaults
    /// for everything that happens later (references, consolidation, embedding).
    pub fn stored(&self, request_id: &str) -> Episode {
        Episode {
            id: self.id,
            tenant_id: self.tenant_id.clone(),
            butler: self.butler.clone(),
            session_id: self.session_id.clone(),
            content: self.content.clone(),
            importance: self.importance,
            reference_count: 0,
            consolidation_status: ConsolidationStatus::Pending,
            consolidated: false,
            consolidation_attempts: 0,
            last_consolidation_error: None,
            next_consolidation_retry_at: None,
            created_at: self.created_at,
            last_referenced_at: self.created_at,
            expires_at: self.expires_at,
            forgotten_at: None,
            metadata: self.metadata.clone(),
            embedding_model: None,
            request_id: Some(request_id.to_owned()),
            idempotency_key: self.idempotency_key.clone(),
        }
    }
}

/// Longest time to live a caller may ask for.
const MAX_TTL_DAYS: f64 = 3650.0;

impl EpisodeInput {
    /// Validates the input for `caller` at time `now`.
    pub fn validate(
        self,
        caller: &Caller,
        limits: &Limits,
        default_ttl_days: f64,
        now: DateTime<Utc>,
    ) -> MemoryResult<NewEpisode> {
        check_name("butler", &self.butler)?;
        let butler = caller
            .acting_butler(Some(&self.butler))?
            .unwrap_or(self.butler);
        if let Some(session) = &self.session_id {
            check_identifier_text("session_id", session)?;
        }
        if let Some(key) = &self.idempotency_key {
            check_identifier_text("idempotency_key", key)?;
        }
        let ttl_days = self.ttl_days.unwrap_or(default_ttl_days);
        if !(ttl_days.is_finite() && ttl_days > 0.0 && ttl_days <= MAX_TTL_DAYS) {
            return Err(MemoryError::new(
                ErrorCode::InvalidTtl,
                format!("`ttl_days` must be greater than 0 and at most {MAX_TTL_DAYS}"),
            ));
        }
        // PostgreSQL keeps microseconds: the episode is stamped as it will be stored, so the
        // record built before the insert (`stored`) is the one a later read returns.
        let now = now.trunc_subsecs(6);
        Ok(NewEpisode {
            id: Uuid::now_v7(),
            tenant_id: caller.tenant_id.clone(),
            butler,
            session_id: self.session_id,
            content: check_content("content", &self.content, limits)?,
            importance: check_importance(self.importance)?,
            metadata: check_metadata(self.metadata, limits)?,
            created_at: now,
            expires_at: now + Duration::milliseconds((ttl_days * 86_400_000.0) as i64),
            idempotency_key: self.idempotency_key,
        })
    }
}

/// A validated episode and who asked for it: what the write path carries to the statement
/// that stores it.
#[derive(Debug, Clone)]
pub struct Submission {
    pub episode: NewEpisode,
    pub author: Author,
}

/// What became of one submitted episode.
#[derive(Debug, Clone)]
pub struct Inserted {
    pub episode: Episode,
    /// An episode with the same idempotency key was already stored: this is that one, and
    /// nothing was written.
    pub duplicate: bool,
}

/// A dead-lettered episode, for the admin who decides its fate.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct DeadLetter {
    pub id: Uuid,
    pub butler: String,
    pub content: String,
    pub consolidation_attempts: i32,
    pub last_consolidation_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}
