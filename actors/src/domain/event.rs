//! The audit stream's vocabulary: one `memory_events` row per mutation or lifecycle
//! transition, written in the same transaction as the change (memory_butler.md §5.5).

use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::memory_type::MemoryType;
use super::request_context::Lineage;

super::string_enum! {
    /// What happened to an entity.
    EventType {
        EpisodeStored => "episode_stored",
        FactCreated => "fact_created",
        FactSuperseded => "fact_superseded",
        FactConfirmed => "fact_confirmed",
        RuleCreated => "rule_created",
    }
}

impl EventType {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}

/// An event to append.
#[derive(Debug, Clone, Serialize)]
pub struct NewEvent {
    pub tenant_id: String,
    pub event_type: EventType,
    pub entity_type: MemoryType,
    pub entity_id: Uuid,
    /// Who caused it: `butler:<key>`, `admin:<key>`, `consolidation`, `sweep`.
    pub actor: String,
    pub lineage: Lineage,
    /// `{"before": ..., "after": ...}` plus anything the event type adds.
    pub payload: Value,
}
