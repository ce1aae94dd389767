//! What a tool is: its name, title and description, who may call it (`Audience`), what it
//! changes (`Effect`, said to clients as MCP's annotations), its parameters' schema and its
//! handler; and `tool!`, which builds one from a parameter struct and a handler.

use std::sync::Arc;

use butler_memory_actors::{Caller, Engine, Lineage, Role};
use futures::future::BoxFuture;
use rmcp::model::{JsonObject, ToolAnnotations};

use super::tools::Outcome;

/// One tool: its name, what it does, who may call it, what it changes, the schema of its
/// parameters, and what runs it.
pub(crate) struct ToolSpec {
    pub(crate) name: &'static str,
    pub(crate) title: &'static str,
    pub(crate) description: &'static str,
    pub(crate) audience: Audience,
    pub(crate) effect: Effect,
    pub(crate) schema: fn() -> Arc<JsonObject>,
    /// Parses the arguments into the parameters and runs the handler. Boxed, so a request's
    /// future stays small whichever tool runs: request futures are moved as they are
    /// spawned and polled.
    pub(crate) run:
        for<'a> fn(&'a Engine, &'a Caller, JsonObject, Lineage) -> BoxFuture<'a, Outcome>,
}

/// Which keys a tool is listed to. The engine enforces the same rights on every call (a
/// test calls each tool with each role); a key is shown only what it may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Memory content: butler and admin keys.
    Memory,
    /// Tenant administration: admin keys.
    Admin,
    /// Operations: admin and operator keys.
    AdminOrOperator,
    /// An orchestrator's memory graph: orchestrator keys, and their tenant's admin keys.
    Orchestrator,
}

impl Audience {
    /// Whether `role` may call a tool of this audience that has `effect`. Auditors read:
    /// every tool of memory or administration that only reads.
    pub fn admits(self, role: Role, effect: Effect) -> bool {
        match (self, role) {
            (Audience::AdminOrOperator, Role::Auditor) => false,
            (_, Role::Auditor) => effect == Effect::Reads,
            (Audience::Memory, role) => matches!(role, Role::Butler | Role::Admin),
            (Audience::Admin, role) => role == Role::Admin,
            (Audience::AdminOrOperator, role) => matches!(role, Role::Admin | Role::Operator),
            (Audience::Orchestrator, role) => matches!(role, Role::Orchestrator | Role::Admin),
        }
    }
}

/// What a call changes, as MCP's tool annotations say it to clients (hints for whether to
/// ask a person first). No tool reaches outside the memory store (`openWorldHint: false`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Reads; a search or context bumps reference counts, which changes nothing a caller
    /// sees as memory.
    Reads,
    /// Adds records or evidence; a repeat adds again (unless an idempotency key says not).
    Adds,
    /// Takes something out of retrieval (reversible by an admin); a repeat changes nothing more.
    Removes,
    /// Changes state back or again; a repeat changes nothing more.
    Repeatable,
    /// Erases for good (no restore); a repeat finds nothing more to erase.
    Erases,
}

impl Effect {
    pub(crate) fn annotations(self, title: &str) -> ToolAnnotations {
        let (read_only, destructive, idempotent) = match self {
            Effect::Reads => (true, false, true),
            Effect::Adds => (false, false, false),
            Effect::Removes | Effect::Erases => (false, true, true),
            Effect::Repeatable => (false, false, true),
        };
        ToolAnnotations::with_title(title)
            .read_only(read_only)
            .destructive(destructive)
            .idempotent(idempotent)
            .open_world(false)
    }
}

/// A [`ToolSpec`] from its name, title, audience, effect, parameter struct, handler and
/// description.
macro_rules! tool {
    ($name:literal, $title:literal, $audience:expr, $effect:expr, $params:ty, $handler:path, $description:expr $(,)?) => {
        ToolSpec {
            name: $name,
            title: $title,
            description: $description,
            audience: $audience,
            effect: $effect,
            schema: schema_for_type::<$params>,
            run: |engine, caller, args, fallback| {
                Box::pin(parse_and_run::<$params, _, _>(
                    args,
                    fallback,
                    move |p, fallback| $handler(engine, caller, p, fallback),
                ))
            },
        }
    };
}
pub(crate) use tool;
