//! Who asked for a change: the name the audit stream records (`butler:<key>`, `admin:<key>`,
//! `consolidation`, ...) and the request lineage it came with. Every write carries one, from
//! the engine's entry point down to the event row, so there is one type for it.

use super::request_context::Lineage;

/// The author of a write, as recorded in `memory_events`.
#[derive(Debug, Clone)]
pub struct Author {
    /// `butler:<key>`, `admin:<key>`, `consolidation`, `sweep`.
    pub name: String,
    pub lineage: Lineage,
    /// The span of the call that asked (disabled unless traces are exported): the shard's
    /// and the statement's spans join its trace.
    pub span: tracing::Span,
}

/// Authors are the same when they name the same actor and lineage; the span is how the
/// write is traced, not who asked.
impl PartialEq for Author {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.lineage == other.lineage
    }
}

impl Eq for Author {}

impl Author {
    /// An author of the current call (its span is the current span).
    pub fn new(name: impl Into<String>, lineage: Lineage) -> Self {
        Author {
            name: name.into(),
            lineage,
            span: tracing::Span::current(),
        }
    }

    /// Work the service starts itself (consolidation, an admin requeue), with a request id
    /// generated for it.
    pub fn service(name: &str) -> Self {
        Author::new(name, Lineage::generated())
    }
}
