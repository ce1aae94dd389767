//! The audit stream's vocabulary: one `memory_events` row per mutation or lifecycle
//! transition, written in the same transaction as the change (memory_butler.md §5.5).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::author::Author;
use super::memory_type::MemoryType;
use super::record::MemoryRecord;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

super::string_enum! {
    /// What happened to an entity.
    EventType {
        EpisodeStored => "episode_stored",
        EpisodeForgotten => "episode_forgotten",
        EpisodeRestored => "episode_restored",
        /// Deleted by episode cleanup (expired, or beyond the shard's capacity).
        EpisodeDeleted => "episode_deleted",
        /// Consolidation failed on it `consolidation.max_attempts` times, the extractor
        /// unreachable or asking to come back later.
        EpisodeDeadLettered => "episode_dead_lettered",
        /// The extractor refused it, or never answered it validly: it cannot be processed.
        EpisodeFailed => "episode_failed",
        /// Consolidation extracted what it could from it.
        EpisodeConsolidated => "episode_consolidated",
        /// An admin put a dead letter back in the consolidation queue.
        EpisodeRequeued => "episode_requeued",
        /// Erased by an admin's purge: its rows are gone and its past events' content is
        /// rewritten to a marker (`domain/purge.rs`). Likewise for facts and rules.
        EpisodePurged => "episode_purged",
        /// Written by an import (`domain/bundle.rs`); `after` is the record. Likewise for
        /// facts and rules.
        EpisodeImported => "episode_imported",
        FactCreated => "fact_created",
        FactSuperseded => "fact_superseded",
        FactConfirmed => "fact_confirmed",
        FactRetracted => "fact_retracted",
        FactRestored => "fact_restored",
        /// The decay sweep moved its validity (`fading`, `expired`, or back to `active`).
        FactDecayed => "fact_decayed",
        FactPurged => "fact_purged",
        FactImported => "fact_imported",
        /// Stored in the clear before the encryption policy named it, then sealed in place
        /// by `rotate-keys` (`vault.rs`); `after` holds the sealed fields, never the text.
        FactSealed => "fact_sealed",
        RuleCreated => "rule_created",
        RuleConfirmed => "rule_confirmed",
        RuleMarkedHelpful => "rule_marked_helpful",
        RuleMarkedHarmful => "rule_marked_harmful",
        RuleRetracted => "rule_retracted",
        RuleRestored => "rule_restored",
        RuleDecayed => "rule_decayed",
        /// The sweep promoted it on evidence that needed time (`proven` needs age).
        RulePromoted => "rule_promoted",
        /// The sweep inverted it into an anti-pattern (thresholds changed since its marks).
        RuleInverted => "rule_inverted",
        RulePurged => "rule_purged",
        RuleImported => "rule_imported",
        /// An admin moved it one maturity step down (promotions by an admin are
        /// `rule_promoted`, with the admin as actor and a reason).
        RuleDemoted => "rule_demoted",
        /// An admin took it out of retrieval, or put it back.
        RuleDisabled => "rule_disabled",
        RuleEnabled => "rule_enabled",
    }
}

impl EventType {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}

/// An event to append.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub tenant_id: String,
    pub event_type: EventType,
    pub entity_type: MemoryType,
    pub entity_id: Uuid,
    /// Who caused it, and the request it came with.
    pub author: Author,
    /// The entity's scope (facts and rules) and owning butler, for filtered streams.
    pub scope: Option<String>,
    pub butler: Option<String>,
    /// `{"before": ..., "after": ...}` plus anything the event type adds. `after` holds the
    /// state after the change (the whole record, or only the fields that changed), so
    /// folding the `after` objects of an entity's events in order gives its current state.
    pub payload: Value,
}

impl NewEvent {
    /// An event about `record` (its type, its scope and owning butler for the filtered
    /// streams).
    pub fn about(
        tenant_id: &str,
        event_type: EventType,
        record: &MemoryRecord,
        id: Uuid,
        author: &Author,
        payload: Value,
    ) -> NewEvent {
        let (scope, butler) = match record {
            MemoryRecord::Episode(e) => (None, Some(e.butler.clone())),
            MemoryRecord::Fact(f) => (Some(f.scope.clone()), f.source_butler.clone()),
            MemoryRecord::Rule(r) => (Some(r.scope.clone()), r.source_butler.clone()),
        };
        NewEvent {
            tenant_id: tenant_id.to_owned(),
            event_type,
            entity_type: record.memory_type(),
            entity_id: id,
            author: author.clone(),
            scope,
            butler,
            payload,
        }
    }
}

/// An event as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct StoredEvent {
    pub id: i64,
    pub tenant_id: String,
    pub event_type: String,
    pub entity_type: String,
    pub entity_id: Uuid,
    pub occurred_at: DateTime<Utc>,
    pub actor: String,
    pub request_id: Option<String>,
    pub subrequest_id: Option<String>,
    pub segment_id: Option<String>,
    pub payload: Value,
    /// The butler of the record, whose shard wrote the event (none: the tenant's shard,
    /// `_tenant`).
    pub butler: Option<String>,
    /// The event's place in its shard's write order, across every instance: one number per
    /// transaction, following commit order with no gaps; events of one number are in `id`
    /// order. None for events written before shard ordering (migration 21).
    pub shard_seq: Option<i64>,
}

/// Where an activity page starts: after an event id (the cursor of the previous page), or
/// at a time.
#[derive(Debug, Clone, Copy)]
pub enum Since {
    Cursor(i64),
    Time(DateTime<Utc>),
    /// The newest events, newest first (the dashboard's live feed).
    Latest,
}

impl Since {
    /// Reads `since` as given to the activity stream: a cursor (digits), an RFC 3339 time,
    /// or nothing (the beginning).
    pub fn parse(since: Option<&str>) -> MemoryResult<Since> {
        match since.map(str::trim) {
            None | Some("") => Ok(Since::Cursor(0)),
            Some(s) if s.bytes().all(|b| b.is_ascii_digit()) => {
                Ok(Since::Cursor(s.parse().map_err(|_| {
                    MemoryError::new(ErrorCode::InvalidSince, "`since` cursor is out of range")
                })?))
            }
            Some(s) => Ok(Since::Time(
                DateTime::parse_from_rfc3339(s)
                    .map_err(|_| {
                        MemoryError::new(
                            ErrorCode::InvalidSince,
                            "`since` must be a cursor from a previous page or an RFC 3339 time",
                        )
                    })?
                    .with_timezone(&Utc),
            )),
        }
    }

    /// The cursor of the page after `events` (or this one's, when the page is empty).
    pub fn next_cursor(self, events: &[StoredEvent]) -> Option<String> {
        match (events.last(), self) {
            (Some(last), _) => Some(last.id.to_string()),
            (None, Since::Cursor(c)) => Some(c.to_string()),
            (None, Since::Time(_) | Since::Latest) => None,
        }
    }
}
