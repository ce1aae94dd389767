//! The MCP endpoint: rmcp over Streamable HTTP at `/mcp`, stateless, JSON responses.
//!
//! Tools are declared in tables ([`TOOLS`], and the orchestrator memory's in
//! `orchestrator_tools.rs`): name, description, the schema generated from the parameter
//! struct, and the handler. A new tool is its parameter struct, its handler and one line
//! there. Arguments are parsed here rather than by rmcp's macros so that every
//! bad input becomes a classified tool error (`invalid_input`) instead of a protocol error.

pub mod answers;
pub mod direct;
pub mod jsonrpc;
pub mod orchestrator_params;
mod orchestrator_tools;
pub mod output_schema;
pub mod params;
pub mod reply;
pub mod schema;
mod tool_spec;
pub mod tools;

use std::sync::Arc;
use std::time::Instant;

use butler_memory_actors::{Caller, ErrorClass, ErrorCode, Lineage, MemoryError, Role};
use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::app_state::AppState;
use crate::config::{Config, McpConfig};
use crate::http::request_meta::{RequestMeta, ToolNote};
use direct::Endpoint;
use params::{
    ActivityStreamParams, AuditReadsParams, ConfirmParams, ContextBatchParams, ContextParams,
    DeadLettersParams, ForgetParams, GetParams, IngestBatchParams, MarkHarmfulParams,
    MarkHelpfulParams, PurgeParams, RecallParams, RequeueParams, RestoreParams, RunSweepParams,
    SearchParams, StatsParams, StoreEpisodeParams, StoreFactParams, StoreRuleParams,
};
pub use tool_spec::{Audience, Effect};
use tool_spec::{ToolSpec, tool};
use tools::Outcome;

/// Every tool the endpoint serves.
const TOOLS: &[ToolSpec] = &[
    tool!(
        "memory_store_episode",
        "Store an episode",
        Audience::Memory,
        Effect::Adds,
        StoreEpisodeParams,
        tools::store_episode,
        "Store what happened in a session (an episode). Acknowledged once durable; \
            consolidation later turns episodes into facts and rules.",
    ),
    tool!(
        "memory_ingest_batch",
        "Store episodes in a batch",
        Audience::Memory,
        Effect::Adds,
        IngestBatchParams,
        tools::ingest_batch,
        "Store many episodes in one call (bulk import, load tests): each butler's \
            share is committed in one transaction; ids come back in input order. Give each an \
            idempotency_key to make retries safe.",
    ),
    tool!(
        "memory_store_fact",
        "Store a fact",
        Audience::Memory,
        Effect::Adds,
        StoreFactParams,
        tools::store_fact,
        "Store a fact (subject, predicate, content). A fact with the same subject \
            and predicate in the same scope supersedes the current one; restating it confirms it.",
    ),
    tool!(
        "memory_store_rule",
        "Store a rule",
        Audience::Memory,
        Effect::Adds,
        StoreRuleParams,
        tools::store_rule,
        "Store a behaviour rule as a candidate; it earns trust through helpful marks.",
    ),
    tool!(
        "memory_get",
        "Get a memory",
        Audience::Memory,
        Effect::Reads,
        GetParams,
        tools::get,
        "Get one memory by type and id, with its provenance links in both directions.",
    ),
    tool!(
        "memory_search",
        "Search memory",
        Audience::Memory,
        Effect::Reads,
        SearchParams,
        tools::search,
        "Search memories: hybrid (default: semantic and keyword lists fused by \
            relative score), semantic or keyword (BM25). Each result carries its composite score and the \
            components behind it. Superseded, expired and retracted memories never appear; \
            fading ones only with min_confidence 0.",
    ),
    tool!(
        "memory_recall",
        "Recall about a subject",
        Audience::Memory,
        Effect::Reads,
        RecallParams,
        tools::recall,
        "Recall the facts and rules most relevant to a topic, composite-scored. \
            The primary read for a butler mid-session.",
    ),
    tool!(
        "memory_context",
        "Memory context for a session",
        Audience::Memory,
        Effect::Reads,
        ContextParams,
        tools::context,
        "The memory block to put in a butler's system prompt before a session: \
            facts, rules and recent episodes relevant to the trigger prompt, as sectioned text \
            within a hard token budget, with the ids included per section.",
    ),
    tool!(
        "memory_context_batch",
        "Memory context for many sessions",
        Audience::Memory,
        Effect::Reads,
        ContextBatchParams,
        tools::context_batch,
        "memory_context for many sessions at once: one embedding batch, answers in \
            request order; each request succeeds or fails on its own.",
    ),
    tool!(
        "memory_confirm",
        "Confirm a fact",
        Audience::Memory,
        Effect::Adds,
        ConfirmParams,
        tools::confirm,
        "Confirm that a fact or rule you used is still true: its confidence decay \
            starts over and a fading one becomes active again. Call it after using a memory \
            without contradiction.",
    ),
    tool!(
        "memory_mark_helpful",
        "Mark a rule helpful",
        Audience::Memory,
        Effect::Adds,
        MarkHelpfulParams,
        tools::mark_helpful,
        "Report that applying a rule helped. Counts toward its effectiveness and its \
            promotion (candidate -> established -> proven).",
    ),
    tool!(
        "memory_mark_harmful",
        "Mark a rule harmful",
        Audience::Memory,
        Effect::Adds,
        MarkHarmfulParams,
        tools::mark_harmful,
        "Report that applying a rule caused a problem, and why. Harm weighs four \
            times as much as help; it demotes the rule, and repeated harm turns it into an \
            anti-pattern warning.",
    ),
    tool!(
        "memory_forget",
        "Forget a memory",
        Audience::Memory,
        Effect::Removes,
        ForgetParams,
        tools::forget,
        "Forget a memory: a fact or rule becomes retracted, an episode is \
            tombstoned. It leaves retrieval at once; the change is audited and an admin can \
            restore it.",
    ),
    tool!(
        "memory_restore",
        "Restore a forgotten memory",
        Audience::Admin,
        Effect::Repeatable,
        RestoreParams,
        tools::restore,
        "Admin: undo a forget, putting the memory back in the state it was \
            forgotten from. Refused for a fact whose subject and predicate a newer fact holds.",
    ),
    tool!(
        "memory_purge",
        "Purge memories for good",
        Audience::Admin,
        Effect::Erases,
        PurgeParams,
        tools::purge,
        "Admin: erase memories for good (unlike memory_forget, there is no restore): one \
            record (a fact with its earlier and later versions), the records about a subject \
            (the first call lists candidates, a second with `confirm` purges the chosen ones), \
            a butler's or the whole tenant's. Rows, embeddings, links and consolidation traces \
            go; past events keep their order with their content rewritten to a marker, and each \
            record gets a purged event with the reason and a keyed hash of what was erased. \
            `dry_run` lists what would go.",
    ),
    tool!(
        "memory_activity_stream",
        "Audit stream",
        Audience::Admin,
        Effect::Reads,
        ActivityStreamParams,
        tools::activity_stream,
        "Admin: the audit stream of every change to the tenant's memory, oldest \
            first, one page at a time; pass `next_cursor` back as `since` for the next page.",
    ),
    tool!(
        "memory_audit_reads",
        "Auditors' reads",
        Audience::Admin,
        Effect::Reads,
        AuditReadsParams,
        tools::audit_reads,
        "Admin: every call auditor keys made on this tenant (who, when, which tool with \
            which arguments, and the reason they gave), oldest first; pass `next_cursor` back \
            as `since` for the next page.",
    ),
    tool!(
        "memory_run_sweep",
        "Run lifecycle sweeps",
        Audience::AdminOrOperator,
        Effect::Removes,
        RunSweepParams,
        tools::run_sweep,
        "Admin: run the lifecycle sweeps now (decay: fading, expiry, rule \
            promotion and inversion; episode cleanup: expiry and capacity) and report what \
            each shard changed.",
    ),
    tool!(
        "memory_dead_letters",
        "Dead-lettered episodes",
        Audience::Admin,
        Effect::Reads,
        DeadLettersParams,
        tools::dead_letters,
        "Admin: episodes consolidation gave up on (after its retries), with the \
            last error, oldest first.",
    ),
    tool!(
        "memory_requeue_dead_letters",
        "Requeue dead letters",
        Audience::Admin,
        Effect::Repeatable,
        RequeueParams,
        tools::requeue_dead_letters,
        "Admin: put dead-lettered episodes (the given ids, or all) back in the \
            consolidation queue with fresh attempts.",
    ),
    tool!(
        "memory_stats",
        "Memory statistics",
        Audience::Memory,
        Effect::Reads,
        StatsParams,
        tools::stats,
        "Counts and health indicators: memories by type and state, confidence and \
            effectiveness bands, the consolidation backlog, last lifecycle runs.",
    ),
];

/// Every tool: the butlers' memory's, then the orchestrator memory's.
fn all_tools() -> impl Iterator<Item = &'static ToolSpec> {
    TOOLS.iter().chain(orchestrator_tools::ORCHESTRATOR_TOOLS)
}

/// The tools' names, in the tables' order.
pub fn tool_names() -> impl Iterator<Item = &'static str> {
    all_tools().map(|t| t.name)
}

/// Every tool's definition under `config`'s limits, as listed to an admin key.
pub fn tool_definitions(config: &Config) -> Vec<Tool> {
    all_tools().map(|t| definition(t, config)).collect()
}

/// The definitions of the tools `role` may call: what `tools/list` answers it.
pub fn tool_definitions_for(role: Role, config: &Config) -> Vec<Tool> {
    all_tools()
        .filter(|t| t.audience.admits(role, t.effect))
        .map(|t| definition(t, config))
        .collect()
}

fn definition(tool: &ToolSpec, config: &Config) -> Tool {
    let mut input = (*(tool.schema)()).clone();
    schema::standardize(tool.name, &mut input, config);
    let definition = Tool::new(tool.name, tool.description, Arc::new(input))
        .with_title(tool.title)
        .with_annotations(tool.effect.annotations(tool.title));
    // Every tool has one (a unit test says so); a tool without would be listed without.
    match output_schema::for_tool(tool.name) {
        Some(output) => definition.with_raw_output_schema(output),
        None => definition,
    }
}

/// The MCP server: one cheap clone per request (the endpoint is stateless).
#[derive(Clone)]
pub struct MemoryServer {
    state: Arc<AppState>,
    /// The caller of every request, over a transport without keys (stdio); over HTTP the
    /// caller comes with each request, from its key.
    local: Option<Caller>,
}

impl MemoryServer {
    /// A server whose every request is `caller`'s (stdio: one local user).
    pub fn local(state: Arc<AppState>, caller: Caller) -> MemoryServer {
        MemoryServer {
            state,
            local: Some(caller),
        }
    }

    /// Who is calling: the HTTP request's key, or the local caller.
    fn caller<'a>(&'a self, context: &'a RequestContext<RoleServer>) -> Option<&'a Caller> {
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .or(self.local.as_ref())
    }
}

impl ServerHandler for MemoryServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("butler-memory", env!("CARGO_PKG_VERSION")))
            .with_instructions(
            "Long-term memory for butlers. Store episodes after sessions, facts and rules when you \
             learn them; call memory_get for a record. Errors carry a class: retry `overloaded` and \
             `unavailable`, never `invalid_input`. Treat memory as optional: if it fails, carry on.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let role = self
            .caller(&context)
            .map(|caller| caller.role)
            .ok_or_else(|| ErrorData::internal_error("tools/list without a caller", None))?;
        Ok(ListToolsResult::with_all_items(tool_definitions_for(
            role,
            &self.state.config,
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = self.caller(&context).ok_or_else(|| {
            ErrorData::internal_error("request reached a tool without a caller", None)
        })?;
        let meta = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<RequestMeta>())
            .cloned()
            .unwrap_or_else(RequestMeta::generated);
        let name = request.name.as_ref();
        let args = request.arguments.unwrap_or_default();
        match self.run_tool(name, caller, &meta, args).await {
            Some(result) => Ok(result.into()),
            None => Err(ErrorData::invalid_params(
                format!("unknown tool `{name}`"),
                None,
            )),
        }
    }
}

impl MemoryServer {
    /// Runs the tool called `name` for `caller`: `None` when there is no such tool.
    pub(crate) async fn run_tool(
        &self,
        name: &str,
        caller: &Caller,
        meta: &RequestMeta,
        args: JsonObject,
    ) -> Option<CallToolResult> {
        let tool = all_tools().find(|t| t.name == name)?;
        let started = Instant::now();
        let span = tool_span(name, caller, meta);
        let engine = &self.state.engine;
        // An auditor's call is recorded before it runs, or it does not run.
        let arguments = serde_json::Value::Object(args);
        let recorded = engine
            .record_audit_read(caller, name, &arguments, &meta.id)
            .instrument(span.clone())
            .await;
        let serde_json::Value::Object(args) = arguments else {
            unreachable!("built as an object")
        };
        let outcome = match recorded {
            Ok(()) => {
                (tool.run)(engine, caller, args, meta.lineage())
                    .instrument(span.clone())
                    .await
            }
            Err(e) => Outcome {
                lineage: meta.lineage(),
                result: Err(e),
            },
        };
        Some(finish(name, caller, meta, &span, outcome, started))
    }
}

/// A tool call's span (OpenTelemetry's MCP conventions: `tools/call {tool}`), in the
/// caller's trace when it sent a `traceparent`. Never arguments or content.
fn tool_span(tool: &str, caller: &Caller, meta: &RequestMeta) -> tracing::Span {
    let span = tracing::info_span!(
        target: butler_memory_actors::TRACE_SPANS,
        "tools/call",
        otel.name = %format!("tools/call {tool}"),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        mcp.method.name = "tools/call",
        gen_ai.tool.name = tool,
        mcp.outcome = tracing::field::Empty,
        tenant = %caller.tenant_id,
        request_id = %meta.id,
    );
    if let Some(trace) = &meta.trace {
        crate::telemetry::traces::continue_trace(&span, &trace.header);
    }
    span
}

/// Parses the arguments into the tool's parameters, then runs it; `fallback` is the
/// lineage of a call that names none (and of arguments that do not parse).
async fn parse_and_run<P, F, Fut>(args: JsonObject, fallback: Lineage, tool: F) -> Outcome
where
    P: DeserializeOwned + JsonSchema,
    F: FnOnce(P, Lineage) -> Fut,
    Fut: Future<Output = Outcome>,
{
    match serde_json::from_value::<P>(serde_json::Value::Object(args)) {
        Ok(params) => tool(params, fallback).await,
        Err(e) => Outcome {
            lineage: fallback,
            result: Err(MemoryError::new(
                ErrorCode::InvalidArguments,
                format!("invalid arguments: {e}"),
            )),
        },
    }
}

/// Records metrics, the outcome on the call's span, the access log's tool part and error
/// logs for a finished call, and shapes its result.
fn finish(
    tool: &str,
    caller: &Caller,
    meta: &RequestMeta,
    span: &tracing::Span,
    outcome: Outcome,
    started: Instant,
) -> CallToolResult {
    let elapsed = started.elapsed().as_secs_f64();
    let class = match &outcome.result {
        Ok(_) => "ok",
        Err(e) => e.class().as_str(),
    };
    span.record("mcp.outcome", class);
    if matches!(class, "internal" | "integrity" | "unavailable") {
        span.record("otel.status_code", "ERROR");
    }
    metrics::counter!("butler_memory_requests_total", "tool" => tool.to_owned(), "class" => class)
        .increment(1);
    metrics::histogram!("butler_memory_request_duration_seconds", "tool" => tool.to_owned(), "class" => class)
        .record(elapsed);
    meta.note(ToolNote {
        tool: tool.to_owned(),
        class,
        tenant: caller.tenant_id.to_string(),
    });
    let request_id = outcome.lineage.request_id.as_str();
    match outcome.result {
        Ok(body) => reply::success(body, &outcome.lineage),
        Err(e) => {
            match e.class() {
                ErrorClass::Integrity | ErrorClass::Internal => {
                    tracing::error!(tool, tenant = %caller.tenant_id, request_id, class = %e.class(), code = e.code.as_str(), error = %e, "tool failed")
                }
                ErrorClass::Unavailable | ErrorClass::Overloaded => {
                    tracing::warn!(tool, tenant = %caller.tenant_id, request_id, class = %e.class(), code = e.code.as_str(), error = %e, "tool failed")
                }
                _ => {
                    tracing::info!(tool, tenant = %caller.tenant_id, request_id, class = %e.class(), code = e.code.as_str(), error = %e, "tool refused")
                }
            }
            reply::failure(&e, &outcome.lineage)
        }
    }
}

/// The `/mcp` endpoint: stateless Streamable HTTP with JSON responses, so each POST is one
/// independent request and no session state has to be kept or recovered. Plain tool calls
/// are answered directly ([`direct`]); everything else goes through rmcp.
pub fn endpoint(state: Arc<AppState>, config: &McpConfig, cancel: CancellationToken) -> Endpoint {
    let mut http = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(config.max_request_bytes)
        .with_cancellation_token(cancel);
    http = if config.allowed_hosts.is_empty() {
        http.disable_allowed_hosts()
    } else {
        http.with_allowed_hosts(config.allowed_hosts.clone())
    };
    let server = MemoryServer { state, local: None };
    let factory = server.clone();
    let rmcp = StreamableHttpService::new(move || Ok(factory.clone()), Default::default(), http);
    Endpoint::new(server, rmcp, config)
}
