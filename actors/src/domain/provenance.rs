//! Why a record exists and what became of it, for a person looking at one record (the
//! dashboard's detail drawer): its links both ways, a fact's versions (the supersession
//! chain, oldest first), the episode it came from, what consolidation derived from an
//! episode, and its events. Only what the caller may see is in it.

use serde::Serialize;

use super::episode::Episode;
use super::event::StoredEvent;
use super::fact::Fact;
use super::record::{MemoryRecord, RecordWithLinks};

/// A record's provenance.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Provenance {
    #[serde(flatten)]
    pub record: RecordWithLinks,
    /// A fact's versions, oldest first (itself among them); empty for episodes and rules.
    pub versions: Vec<Fact>,
    /// The episode a fact or rule came from, when it still exists and may be seen.
    pub source_episode: Option<Episode>,
    /// The facts and rules that name an episode as their source.
    pub derived: Vec<MemoryRecord>,
    /// Its events, oldest first.
    pub events: Vec<StoredEvent>,
}
