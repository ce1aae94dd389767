//! The orchestrator memory's tools (issue 23): an orchestrator's typed memory graph, written
//! and read over MCP by orchestrator keys (and the tenant's admin keys). Declared here as a
//! table of their own, listed after the butlers' tools.

use butler_memory_actors::{Caller, Engine, Lineage, RememberInput};
use rmcp::handler::server::common::schema_for_type;

use super::orchestrator_params::{
    BulletinParams, CaptureParams, OrchestratorGetParams, RecallParams, RememberParams,
    SetStatusParams, StatusParams,
};
use super::reply::to_json;
use super::tools::{Outcome, with_lineage};
use super::{Audience, Effect, ToolSpec, parse_and_run, tool};

pub(super) const ORCHESTRATOR_TOOLS: &[ToolSpec] = &[
    tool!(
        "orchestrator_remember",
        "Remember in the memory graph",
        Audience::Orchestrator,
        Effect::Adds,
        RememberParams,
        remember,
        "Orchestrator: store typed memories (Fact, Preference, Decision, Identity, Event, \
            Observation, Goal, Todo) from one source, the memories they supersede, and typed edges \
            (RelatedTo, Updates, Contradicts, CausedBy, PartOf), in one transaction. The same \
            typed content or edge again is found, not added.",
    ),
    tool!(
        "orchestrator_capture",
        "Capture memories from a text",
        Audience::Orchestrator,
        Effect::Adds,
        CaptureParams,
        capture,
        "Orchestrator: write back what a trigger produced — a workflow step's output, an inbound \
            channel message, a diagnostics finding — as typed memories with that source: labelled \
            lines (`Goal:`, `TODO:`, `Decision:`, `Preference:`, `Fact:` ...), open checklist items \
            and the items of typed headings become memories of their type, any other paragraph an \
            Observation; a todo in a goal's section is PartOf it. One transaction; the same typed \
            content again is found, not added.",
    ),
    tool!(
        "orchestrator_set_status",
        "Supersede or retract a memory",
        Audience::Orchestrator,
        Effect::Removes,
        SetStatusParams,
        set_status,
        "Orchestrator: mark a memory `superseded` or `retracted` (final), with a reason kept \
            in the audit stream. Contradictions are edges, not this.",
    ),
    tool!(
        "orchestrator_get",
        "A memory of the graph",
        Audience::Orchestrator,
        Effect::Reads,
        OrchestratorGetParams,
        get,
        "Orchestrator: one memory with its provenance and every edge into or out of it.",
    ),
    tool!(
        "orchestrator_recall",
        "Recall from the memory graph",
        Audience::Orchestrator,
        Effect::Reads,
        RecallParams,
        recall,
        "Orchestrator: the active memories that best answer a query, across all its \
            conversations and channels: vector and full-text recall merged by reciprocal rank \
            fusion, weighed by importance, recency and confidence, an unresolved contradiction \
            penalised; each with its provenance, and the edges among them.",
    ),
    tool!(
        "orchestrator_bulletin",
        "The memory bulletin of a message",
        Audience::Orchestrator,
        Effect::Reads,
        BulletinParams,
        bulletin,
        "Orchestrator: the bulletin to inject before a message's context is assembled: \
            knowledge_summary, active_goals, open_todos, recent_decisions, preference_profile and \
            conflicts_and_uncertainties, every line citing its memoryIds, within \
            `memory.bulletin_max_tokens`. Never an error for a failure of the store: then the last \
            successful bulletin (or an empty one) with a `warning`.",
    ),
    tool!(
        "orchestrator_status",
        "The state of the memory graph",
        Audience::Orchestrator,
        Effect::Reads,
        StatusParams,
        status,
        "Orchestrator: whether its memory works (`enabled`, or `disabled` with the reason: \
            turned off, or its store unreachable or broken; never an error for that), what the \
            graph holds (memories by status, edges, memories not embedded yet), the drop-zone's \
            folder with its waiting, processed and rejected files, and when the last bulletin was \
            made.",
    ),
];

async fn remember(
    engine: &Engine,
    caller: &Caller,
    p: RememberParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |lineage| async move {
        let input = RememberInput {
            source: p.source,
            memories: p.memories,
            edges: p.edges,
        };
        let remembered = engine
            .orchestrator_remember(caller, p.orchestrator_id.as_deref(), input, lineage)
            .await?;
        to_json(remembered)
    })
    .await
}

async fn capture(engine: &Engine, caller: &Caller, p: CaptureParams, fallback: Lineage) -> Outcome {
    with_lineage(p.request_context, fallback, |lineage| async move {
        let remembered = engine
            .orchestrator_capture(
                caller,
                p.orchestrator_id.as_deref(),
                p.source,
                &p.text,
                lineage,
            )
            .await?;
        to_json(remembered)
    })
    .await
}

async fn set_status(
    engine: &Engine,
    caller: &Caller,
    p: SetStatusParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |lineage| async move {
        let node = engine
            .orchestrator_set_status(
                caller,
                p.orchestrator_id.as_deref(),
                p.memory_id,
                p.status,
                p.reason,
                lineage,
            )
            .await?;
        to_json(node)
    })
    .await
}

async fn get(
    engine: &Engine,
    caller: &Caller,
    p: OrchestratorGetParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        let found = engine
            .orchestrator_get(caller, p.orchestrator_id.as_deref(), p.memory_id)
            .await?;
        to_json(found)
    })
    .await
}

async fn recall(engine: &Engine, caller: &Caller, p: RecallParams, fallback: Lineage) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        let bundle = engine
            .orchestrator_recall(caller, p.orchestrator_id.as_deref(), &p.query, p.limit)
            .await?;
        to_json(bundle)
    })
    .await
}

async fn bulletin(
    engine: &Engine,
    caller: &Caller,
    p: BulletinParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        let answer = engine
            .orchestrator_bulletin(caller, p.orchestrator_id.as_deref(), &p.message)
            .await?;
        to_json(answer)
    })
    .await
}

async fn status(engine: &Engine, caller: &Caller, p: StatusParams, fallback: Lineage) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        let status = engine
            .orchestrator_status(caller, p.orchestrator_id.as_deref())
            .await?;
        to_json(status)
    })
    .await
}
