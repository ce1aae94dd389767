//! Link relations of the provenance graph (memory_butler.md §5.4) and the link record.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::memory_type::MemoryType;

super::string_enum! {
    /// How two memories relate.
    Relation {
        /// A fact or rule was extracted from this episode.
        DerivedFrom => "derived_from",
        /// This memory is evidence for the target.
        Supports => "supports",
        /// These two memories are in tension.
        Contradicts => "contradicts",
        /// This fact replaced the target fact.
        Supersedes => "supersedes",
        /// A general association.
        RelatedTo => "related_to",
    }
}

impl Relation {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}

/// A requested link from a memory being stored to an existing one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkTarget {
    /// Type of the memory linked to.
    pub target_type: MemoryType,
    /// Id of the memory linked to (in the caller's tenant).
    pub target_id: Uuid,
    /// How the new memory relates to the target.
    pub relation: Relation,
}

/// An edge of the provenance graph, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Link {
    pub source_type: MemoryType,
    pub source_id: Uuid,
    pub target_type: MemoryType,
    pub target_id: Uuid,
    pub relation: Relation,
    pub created_at: DateTime<Utc>,
}
