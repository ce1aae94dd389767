//! Any one memory, tagged with its `type`, as returned by `memory_get` and the store tools.

use serde::Serialize;

use super::episode::Episode;
use super::fact::Fact;
use super::memory_type::MemoryType;
use super::relation::Link;
use super::rule::Rule;

/// A memory of any type. Serialises with `"type": "episode" | "fact" | "rule"` first.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum MemoryRecord {
    Episode(Episode),
    Fact(Fact),
    Rule(Rule),
}

impl MemoryRecord {
    pub fn memory_type(&self) -> MemoryType {
        match self {
            MemoryRecord::Episode(_) => MemoryType::Episode,
            MemoryRecord::Fact(_) => MemoryType::Fact,
            MemoryRecord::Rule(_) => MemoryType::Rule,
        }
    }
}

/// A record with the provenance links that point out of it and into it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct RecordWithLinks {
    #[serde(flatten)]
    pub record: MemoryRecord,
    pub links: Links,
}

/// Both directions of a record's links.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Links {
    pub outbound: Vec<Link>,
    pub inbound: Vec<Link>,
}

/// The record after a forget or restore, and whether anything changed.
#[derive(Debug, Clone)]
pub struct Forgetting {
    pub record: MemoryRecord,
    pub changed: bool,
}
