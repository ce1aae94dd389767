//! Episodes: raw, short-lived observations of what happened in a session (memory_butler.md §5.1).

use chrono::{DateTime, Duration, SubsecRound, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::author::Author;
use super::caller::Caller;
use super::consolidation_status::ConsolidationStatus;
use super::redaction::{Findings, Redactor};
use super::text::{
    Limits, check_content, check_identifier_text, check_importance, check_metadata, check_name,
};
use super::time_window::parse_occurred_at;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// A stored episode, by its schema names.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, schemars::JsonSchema)]
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
    /// When it was stored (the record time: its expiry counts from it).
    pub created_at: DateTime<Utc>,
    /// When it happened, when its caller said it was before it was stored (an imported
    /// conversation, an outage's outbox); absent: it happened as it was stored. Time-aware
    /// reads select episodes by it. Left out of the record (and its events) when absent, so
    /// an episode stored without one costs nothing more than before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<DateTime<Utc>>,
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
    /// When it happened, if before now (RFC 3339 or a date); else an `occurred_at` string
    /// in its metadata says it; default: now.
    pub occurred_at: Option<String>,
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
    /// When it happened, when earlier than `created_at`.
    pub occurred_at: Option<DateTime<Utc>>,
    pub expires_at: DateTime<Utc>,
    pub idempotency_key: Option<String>,
    /// What redaction found in it (detector: spans), for its event.
    pub redacted: Findings,
}

impl NewEpisode {
    /// Its content and metadata redacted in place, its findings kept for its event.
    pub fn redact(&mut self, redactor: &Redactor) -> MemoryResult<&Findings> {
        let mut findings = Findings::new();
        self.content = redactor.content(&self.tenant_id, &self.content, &mut findings)?;
        redactor.json(
            &self.tenant_id,
            "metadata",
            &mut self.metadata,
            &mut findings,
        )?;
        self.redacted = findings;
        Ok(&self.redacted)
    }

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
            occurred_at: self.occurred_at,
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

/// How far ahead of the service's clock a caller's `occurred_at` may be and still be read
/// as now: a caller stamping what just happened with a clock a little fast is not wrong.
/// Further ahead is refused: an episode is stored once it has happened.
pub const OCCURRED_AT_SKEW: Duration = Duration::minutes(5);

/// Longest time to live a caller may ask for.
pub const MAX_TTL_DAYS: f64 = 3650.0;

/// Shortest time to live: one second. Anything shorter would expire as it is stored (the
/// database keeps `expires_at > created_at`), and no caller means that.
pub const MIN_TTL_DAYS: f64 = 1.0 / 86_400.0;

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
        // PostgreSQL keeps microseconds: the episode is stamped as it will be stored, so the
        // record built before the insert (`stored`) is the one a later read returns.
        let now = now.trunc_subsecs(6);
        let occurred_at = self.occurred_at(now)?;
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
        if !(ttl_days.is_finite() && (MIN_TTL_DAYS..=MAX_TTL_DAYS).contains(&ttl_days)) {
            return Err(MemoryError::new(
                ErrorCode::InvalidTtl,
                format!(
                    "`ttl_days` must be at least one second ({MIN_TTL_DAYS:.7}) and at most \
                     {MAX_TTL_DAYS}, got {ttl_days}"
                ),
            ));
        }
        Ok(NewEpisode {
            id: id_at(now),
            tenant_id: caller.tenant_id.clone(),
            butler,
            session_id: self.session_id,
            content: check_content("content", &self.content, limits)?,
            importance: check_importance(self.importance)?,
            metadata: check_metadata(self.metadata, limits)?,
            created_at: now,
            occurred_at,
            expires_at: now + Duration::milliseconds((ttl_days * 86_400_000.0) as i64),
            idempotency_key: self.idempotency_key,
            redacted: Findings::new(),
        })
    }

    /// When it happened, if before `now`: the `occurred_at` given, or a string of that name
    /// in its metadata (as a caller that keeps times in metadata states it).
    fn occurred_at(&self, now: DateTime<Utc>) -> MemoryResult<Option<DateTime<Utc>>> {
        let stated = self
            .occurred_at
            .as_deref()
            .or_else(|| self.metadata.as_ref()?.get("occurred_at")?.as_str());
        let Some(text) = stated else {
            return Ok(None);
        };
        let at = parse_occurred_at(text)?.trunc_subsecs(6);
        if at > now + OCCURRED_AT_SKEW {
            return Err(MemoryError::new(
                ErrorCode::InvalidTime,
                format!(
                    "`occurred_at` {text} is after now ({}): an episode is stored once it has \
                     happened",
                    now.to_rfc3339()
                ),
            ));
        }
        Ok((at < now).then_some(at))
    }
}

/// A new episode's id: a UUIDv7 that begins with its `created_at` (milliseconds), so the
/// month of an id is the month the episode was stored, and `episodes` is partitioned by id
/// (migration 26): a month's episodes are one partition, emptied and dropped whole once they
/// have all expired. The rest of the id is random.
pub fn id_at(at: DateTime<Utc>) -> Uuid {
    let ms = at.timestamp_millis().max(0) as u64;
    let ts = uuid::Timestamp::from_unix(uuid::NoContext, ms / 1000, (ms % 1000) as u32 * 1_000_000);
    Uuid::new_v7(ts)
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
#[derive(Debug, Clone, Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct DeadLetter {
    pub id: Uuid,
    pub butler: String,
    pub content: String,
    pub consolidation_attempts: i32,
    pub last_consolidation_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use proptest::prelude::*;

    use super::*;
    use crate::domain::caller::Role;

    fn caller() -> Caller {
        Caller {
            tenant_id: "t".into(),
            role: Role::Butler,
            butler: Some("b".into()),
            key_name: "b".into(),
            audit_reason: None,
        }
    }

    #[test]
    fn an_id_begins_with_its_millisecond_and_ids_of_one_millisecond_differ() {
        let at =
            Utc.with_ymd_and_hms(2026, 3, 31, 23, 59, 59).unwrap() + Duration::milliseconds(999);
        let (a, b) = (id_at(at), id_at(at));
        assert_ne!(a, b);
        for id in [a, b] {
            assert_eq!(id.get_version_num(), 7);
            let (secs, nanos) = id.get_timestamp().unwrap().to_unix();
            assert_eq!((secs as i64, nanos), (at.timestamp(), 999_000_000));
        }
        // The next millisecond (the next month) sorts after every id of this one.
        let next = id_at(at + Duration::milliseconds(1));
        assert!(next > a && next > b);
    }

    proptest! {
        /// No input that validation lets through can reach a CHECK of the `episodes` table:
        /// the database's constraints are a backstop, never the validator.
        #[test]
        fn a_valid_episode_meets_every_check_of_its_table(
            content in ".{0,40}",
            importance in proptest::num::f64::ANY,
            ttl_days in prop_oneof![
                proptest::num::f64::ANY,
                0.0..0.001f64,
                0.0..4000.0f64,
            ],
            micros in 0i64..1_000_000,
        ) {
            let now = Utc.with_ymd_and_hms(2026, 5, 1, 9, 0, 0).unwrap()
                + Duration::microseconds(micros)
                + Duration::nanoseconds(micros % 1000);
            let input = EpisodeInput {
                butler: "b".into(),
                content,
                importance: Some(importance),
                ttl_days: Some(ttl_days),
                ..EpisodeInput::default()
            };
            if let Ok(episode) = input.validate(&caller(), &Limits::default(), 7.0, now) {
                // CHECK (content <> ''), importance in [0, 10], expires_at > created_at,
                // metadata an object; stored with microseconds.
                prop_assert!(!episode.content.is_empty());
                prop_assert!((0.0..=10.0).contains(&episode.importance));
                prop_assert!(episode.expires_at.trunc_subsecs(6) > episode.created_at);
                prop_assert!(episode.metadata.is_object());
                prop_assert!(!episode.content.contains('\0'));
            }
        }

        /// Whatever time a caller states, a stored episode never happened after it was
        /// stored (`CHECK (occurred_at <= created_at)`), and one within the skew is now (none).
        #[test]
        fn an_episode_never_happens_after_it_is_stored(offset_secs in -10_000_000i64..10_000_000) {
            let now = Utc.with_ymd_and_hms(2026, 5, 1, 9, 0, 0).unwrap();
            let stated = now + Duration::seconds(offset_secs);
            let input = EpisodeInput {
                butler: "b".into(),
                content: "c".into(),
                occurred_at: Some(stated.to_rfc3339()),
                ..EpisodeInput::default()
            };
            match input.validate(&caller(), &Limits::default(), 7.0, now) {
                Ok(episode) => {
                    prop_assert!(stated <= now + OCCURRED_AT_SKEW);
                    prop_assert_eq!(episode.occurred_at, (stated < now).then_some(stated));
                    prop_assert!(episode.stored("r").occurred_at.is_none_or(|t| t < episode.created_at));
                }
                Err(e) => {
                    prop_assert!(stated > now + OCCURRED_AT_SKEW);
                    prop_assert_eq!(e.code, ErrorCode::InvalidTime);
                }
            }
        }
    }

    #[test]
    fn when_an_episode_happened_is_read_from_its_parameter_then_its_metadata() {
        let now = Utc.with_ymd_and_hms(2026, 5, 1, 9, 0, 0).unwrap();
        let stored = |occurred_at: Option<&str>, metadata: serde_json::Value| {
            EpisodeInput {
                butler: "b".into(),
                content: "c".into(),
                occurred_at: occurred_at.map(str::to_owned),
                metadata: Some(metadata),
                ..EpisodeInput::default()
            }
            .validate(&caller(), &Limits::default(), 7.0, now)
            .map(|e| e.occurred_at)
        };
        let march = Utc.with_ymd_and_hms(2025, 3, 8, 0, 0, 0).unwrap();
        let none = serde_json::json!({});
        assert_eq!(
            stored(Some("2025-03-08"), none.clone()).unwrap(),
            Some(march)
        );
        assert_eq!(
            stored(Some("2025-03-08T14:30:00+02:00"), none.clone()).unwrap(),
            Some(Utc.with_ymd_and_hms(2025, 3, 8, 12, 30, 0).unwrap())
        );
        let in_metadata = serde_json::json!({"occurred_at": "2025-03-08", "source": "import"});
        assert_eq!(stored(None, in_metadata.clone()).unwrap(), Some(march));
        // The parameter wins over the metadata.
        assert_eq!(
            stored(Some("2024-01-01"), in_metadata).unwrap(),
            Some(Utc.with_ymd_and_hms(2024, 1, 1, 0, 0, 0).unwrap())
        );
        assert_eq!(stored(None, none.clone()).unwrap(), None);
        // A metadata value that is no time is refused, as a parameter would be; a
        // non-string one is ordinary metadata.
        for bad in [
            stored(Some("last March"), none.clone()),
            stored(None, serde_json::json!({"occurred_at": "8 March 2025"})),
        ] {
            assert_eq!(bad.unwrap_err().code, ErrorCode::InvalidTime);
        }
        assert_eq!(
            stored(None, serde_json::json!({"occurred_at": 17})).unwrap(),
            None
        );
        let future = stored(Some("2026-05-02"), none).unwrap_err();
        assert_eq!(future.code, ErrorCode::InvalidTime);
        assert!(future.message.contains("after now"), "{}", future.message);
    }
}
