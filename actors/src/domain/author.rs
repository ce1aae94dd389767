//! Who asked for a change: the name the audit stream records (`butler:<key>`, `admin:<key>`,
//! `consolidation`, ...) and the request lineage it came with. Every write carries one, from
//! the engine's entry point down to the event row, so there is one type for it.

use super::request_context::Lineage;

/// The author of a write, as recorded in `memory_events`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Author {
    /// `butler:<key>`, `admin:<key>`, `consolidation`, `sweep`.
    pub name: String,
    pub lineage: Lineage,
}

impl Author {
    pub fn new(name: impl Into<String>, lineage: Lineage) -> Self {
        Author {
            name: name.into(),
            lineage,
        }
    }

    /// Work the service starts itself (consolidation, an admin requeue), with a request id
    /// generated for it.
    pub fn service(name: &str) -> Self {
        Author::new(name, Lineage::generated())
    }
}
