//! The REST API under `/api` (issue 20, `memory_project_plan.md` "Dashboard API
//! Endpoints"): JSON reads of what a key may see, for the dashboard and for people and
//! tools that do not speak MCP. Same keys, same visibility, same error shape
//! (`{class, code, message}`) as the tools; the tenant comes from the key, never from the
//! URL. Every endpoint is one row of [`ENDPOINTS`], which routes it and describes it in
//! the OpenAPI document (`/api/openapi.json`, `api/openapi.rs`).

pub mod handlers;
pub mod openapi;

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{MethodRouter, delete, get, post, put};
use butler_memory_actors::{
    EpisodeQuery, FactEdit, FactQuery, GovernanceRequest, MemoryRecord, MemoryStats, MemoryType,
    Page, Provenance, RecordWithLinks, RuleEdit, RuleQuery, SearchMode, StoredApplication,
    StoredEvent, Timeline,
};
use schemars::JsonSchema;
use schemars::generate::SchemaGenerator;
use serde::{Deserialize, Serialize};

use crate::app_state::AppState;
use crate::mcp::answers::{FactStored, SearchResults};
use handlers::{
    activity, applications, butler_episodes, butler_facts, butler_rules, butler_stats, demote_rule,
    disable_rule, edit_fact, edit_rule, enable_rule, episodes, facts, forget, promote_rule,
    provenance, purge, record, restore, rules, search, stats, timeline,
};

/// `GET /api/memory/stats`'s query.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatsQuery {
    /// Count only this scope's facts and rules.
    pub scope: Option<String>,
    /// Count only this butler's episodes.
    pub butler: Option<String>,
}

/// `GET /api/memory/timeline`'s query.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TimelineQuery {
    /// Only this butler's episodes and lifecycle runs.
    pub butler: Option<String>,
    /// Days back, today included (1 to 90, default 14).
    pub days: Option<u32>,
}

/// `GET /api/memory/activity`'s query.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivityQuery {
    /// The `next_cursor` of the previous page, or an RFC 3339 time.
    pub since: Option<String>,
    /// Only events of facts and rules of this scope.
    pub scope: Option<String>,
    /// Only events of this butler's records.
    pub butler: Option<String>,
    /// Events per page (1 to 1000, default 100).
    pub limit: Option<u32>,
}

/// `GET /api/memory/search`'s query.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchQuery {
    /// What to look for.
    pub q: String,
    /// Only these types, comma-separated (`episode,fact,rule`; default all).
    pub types: Option<String>,
    pub scope: Option<String>,
    pub mode: Option<SearchMode>,
    /// Results (default and bounds as `memory_search`).
    pub limit: Option<u32>,
    pub min_confidence: Option<f64>,
    /// Search as this butler (default: the key's).
    pub butler: Option<String>,
    /// Facts true at this moment (superseded since or not), what had happened by then
    /// (RFC 3339 or a date); not with `since`/`until`.
    pub as_of: Option<String>,
    /// Only what was true or happened at or after this time.
    pub since: Option<String>,
    /// Only what was true or happened at or before this time.
    pub until: Option<String>,
}

/// `GET /api/memory/rules/{id}/applications`'s query.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplicationsQuery {
    /// Applications per page (1 to 200, default 50).
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<uuid::Uuid>,
}

/// `DELETE /api/memory/{type}/{id}`'s query.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForgetQuery {
    /// Why, for the audit stream.
    pub reason: Option<String>,
}

/// One page of the audit stream.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ActivityPage {
    pub events: Vec<StoredEvent>,
    /// Pass it back as `since` for the next page.
    pub next_cursor: Option<String>,
}

/// A schema for the OpenAPI document.
type SchemaFn = fn(&mut SchemaGenerator) -> schemars::Schema;

/// One endpoint: how it is routed and how the OpenAPI document describes it.
pub struct Endpoint {
    /// `get`, `put`, `post` or `delete`.
    pub method: &'static str,
    /// The path, with `{id}` or `{name}` parameters.
    pub path: &'static str,
    /// Its handler, for the router.
    pub route: fn() -> MethodRouter<Arc<AppState>>,
    pub summary: &'static str,
    /// Its query's parameters.
    pub query: Option<SchemaFn>,
    /// Its JSON body.
    pub body: Option<SchemaFn>,
    /// What a 200 answers.
    pub response: SchemaFn,
}

fn schema<T: JsonSchema>(generator: &mut SchemaGenerator) -> schemars::Schema {
    generator.subschema_for::<T>()
}

/// Every endpoint.
pub const ENDPOINTS: &[Endpoint] = &[
    Endpoint {
        path: "/api/memory/stats",
        route: || get(stats),
        summary: "Counts by type and state, confidence and effectiveness bands, backlog, last runs",
        method: "get",
        body: None,
        query: Some(schema::<StatsQuery>),
        response: schema::<MemoryStats>,
    },
    Endpoint {
        path: "/api/memory/timeline",
        route: || get(timeline),
        summary: "Day by day (UTC): episodes stored by consolidation status, lifecycle runs and their changes",
        method: "get",
        body: None,
        query: Some(schema::<TimelineQuery>),
        response: schema::<Timeline>,
    },
    Endpoint {
        path: "/api/memory/facts",
        route: || get(facts),
        summary: "Facts, newest first, filtered",
        method: "get",
        body: None,
        query: Some(schema::<FactQuery>),
        response: schema::<Page<butler_memory_actors::Fact>>,
    },
    Endpoint {
        path: "/api/memory/facts/{id}",
        route: || typed(MemoryType::Fact, get(record)),
        summary: "One fact with its links",
        method: "get",
        body: None,
        query: None,
        response: schema::<RecordWithLinks>,
    },
    Endpoint {
        path: "/api/memory/rules",
        route: || get(rules),
        summary: "Rules, newest first, filtered",
        method: "get",
        body: None,
        query: Some(schema::<RuleQuery>),
        response: schema::<Page<butler_memory_actors::Rule>>,
    },
    Endpoint {
        path: "/api/memory/rules/{id}",
        route: || typed(MemoryType::Rule, get(record)),
        summary: "One rule with its links",
        method: "get",
        body: None,
        query: None,
        response: schema::<RecordWithLinks>,
    },
    Endpoint {
        path: "/api/memory/episodes",
        route: || get(episodes),
        summary: "Episodes, newest first, filtered",
        method: "get",
        body: None,
        query: Some(schema::<EpisodeQuery>),
        response: schema::<Page<butler_memory_actors::Episode>>,
    },
    Endpoint {
        path: "/api/memory/episodes/{id}",
        route: || typed(MemoryType::Episode, get(record)),
        summary: "One episode with its links",
        method: "get",
        body: None,
        query: None,
        response: schema::<RecordWithLinks>,
    },
    Endpoint {
        path: "/api/memory/activity",
        route: || get(activity),
        summary: "The audit stream, oldest first: an admin's whole tenant, a butler key's visible records",
        method: "get",
        body: None,
        query: Some(schema::<ActivityQuery>),
        response: schema::<ActivityPage>,
    },
    Endpoint {
        path: "/api/butlers/{name}/memory/stats",
        route: || get(butler_stats),
        summary: "A butler's statistics: what it sees (facts and rules of scope global or its own, its episodes)",
        method: "get",
        body: None,
        query: Some(schema::<StatsQuery>),
        response: schema::<MemoryStats>,
    },
    Endpoint {
        path: "/api/butlers/{name}/memory/facts",
        route: || get(butler_facts),
        summary: "Facts a butler sees (scope global or its own)",
        method: "get",
        body: None,
        query: Some(schema::<FactQuery>),
        response: schema::<Page<butler_memory_actors::Fact>>,
    },
    Endpoint {
        path: "/api/butlers/{name}/memory/rules",
        route: || get(butler_rules),
        summary: "Rules a butler sees (scope global or its own)",
        method: "get",
        body: None,
        query: Some(schema::<RuleQuery>),
        response: schema::<Page<butler_memory_actors::Rule>>,
    },
    Endpoint {
        path: "/api/butlers/{name}/memory/episodes",
        route: || get(butler_episodes),
        summary: "A butler's episodes",
        method: "get",
        body: None,
        query: Some(schema::<EpisodeQuery>),
        response: schema::<Page<butler_memory_actors::Episode>>,
    },
    Endpoint {
        method: "get",
        path: "/api/memory/search",
        route: || get(search),
        summary: "Search across types, as memory_search (bumping nothing)",
        query: Some(schema::<SearchQuery>),
        body: None,
        response: schema::<SearchResults>,
    },
    Endpoint {
        method: "get",
        path: "/api/memory/facts/{id}/provenance",
        route: || typed(MemoryType::Fact, get(provenance)),
        summary: "A fact's links, versions, source episode and events",
        query: None,
        body: None,
        response: schema::<Provenance>,
    },
    Endpoint {
        method: "get",
        path: "/api/memory/rules/{id}/provenance",
        route: || typed(MemoryType::Rule, get(provenance)),
        summary: "A rule's links, source episode and events",
        query: None,
        body: None,
        response: schema::<Provenance>,
    },
    Endpoint {
        method: "get",
        path: "/api/memory/episodes/{id}/provenance",
        route: || typed(MemoryType::Episode, get(provenance)),
        summary: "An episode's links, what was derived from it, and its events",
        query: None,
        body: None,
        response: schema::<Provenance>,
    },
    Endpoint {
        method: "get",
        path: "/api/memory/rules/{id}/applications",
        route: || get(applications),
        summary: "A rule's applications and how they went, newest first",
        query: Some(schema::<ApplicationsQuery>),
        body: None,
        response: schema::<Page<StoredApplication>>,
    },
    Endpoint {
        method: "put",
        path: "/api/memory/facts/{id}",
        route: || put(edit_fact),
        summary: "Correct a live fact (admin): a new version supersedes it",
        query: None,
        body: Some(schema::<FactEdit>),
        response: schema::<FactStored>,
    },
    Endpoint {
        method: "delete",
        path: "/api/memory/facts/{id}",
        route: || typed(MemoryType::Fact, delete(forget)),
        summary: "Forget a fact (admin; reversible, as memory_forget)",
        query: Some(schema::<ForgetQuery>),
        body: None,
        response: schema::<MemoryRecord>,
    },
    Endpoint {
        method: "post",
        path: "/api/memory/facts/{id}/restore",
        route: || typed(MemoryType::Fact, post(restore)),
        summary: "Restore a forgotten fact (admin)",
        query: None,
        body: None,
        response: schema::<MemoryRecord>,
    },
    Endpoint {
        method: "put",
        path: "/api/memory/rules/{id}",
        route: || put(edit_rule),
        summary: "Rewrite a live rule (admin): a new candidate supersedes it, the old one is retracted",
        query: None,
        body: Some(schema::<RuleEdit>),
        response: schema::<butler_memory_actors::Rule>,
    },
    Endpoint {
        method: "delete",
        path: "/api/memory/rules/{id}",
        route: || typed(MemoryType::Rule, delete(forget)),
        summary: "Forget a rule (admin; reversible)",
        query: Some(schema::<ForgetQuery>),
        body: None,
        response: schema::<MemoryRecord>,
    },
    Endpoint {
        method: "post",
        path: "/api/memory/rules/{id}/restore",
        route: || typed(MemoryType::Rule, post(restore)),
        summary: "Restore a forgotten rule (admin)",
        query: None,
        body: None,
        response: schema::<MemoryRecord>,
    },
    Endpoint {
        method: "post",
        path: "/api/memory/rules/{id}/promote",
        route: || post(promote_rule),
        summary: "Promote a live rule one maturity step (admin), with a reason",
        query: None,
        body: Some(schema::<GovernanceRequest>),
        response: schema::<butler_memory_actors::Rule>,
    },
    Endpoint {
        method: "post",
        path: "/api/memory/rules/{id}/demote",
        route: || post(demote_rule),
        summary: "Demote a live rule one maturity step (admin), with a reason",
        query: None,
        body: Some(schema::<GovernanceRequest>),
        response: schema::<butler_memory_actors::Rule>,
    },
    Endpoint {
        method: "post",
        path: "/api/memory/rules/{id}/disable",
        route: || post(disable_rule),
        summary: "Take a rule out of retrieval (admin), with a reason; it keeps its state and history",
        query: None,
        body: Some(schema::<GovernanceRequest>),
        response: schema::<butler_memory_actors::Rule>,
    },
    Endpoint {
        method: "post",
        path: "/api/memory/rules/{id}/enable",
        route: || post(enable_rule),
        summary: "Put a disabled rule back into retrieval (admin), with a reason",
        query: None,
        body: Some(schema::<GovernanceRequest>),
        response: schema::<butler_memory_actors::Rule>,
    },
    Endpoint {
        method: "post",
        path: "/api/memory/purge",
        route: || post(purge),
        summary: "Erase for good (admin), as memory_purge: a record, a subject's confirmed candidates, a butler's or the tenant's",
        query: None,
        body: Some(schema::<crate::mcp::params::PurgeParams>),
        response: schema::<butler_memory_actors::Purge>,
    },
    Endpoint {
        method: "delete",
        path: "/api/memory/episodes/{id}",
        route: || typed(MemoryType::Episode, delete(forget)),
        summary: "Forget an episode (admin; reversible)",
        query: Some(schema::<ForgetQuery>),
        body: None,
        response: schema::<MemoryRecord>,
    },
    Endpoint {
        method: "post",
        path: "/api/memory/episodes/{id}/restore",
        route: || typed(MemoryType::Episode, post(restore)),
        summary: "Restore a forgotten episode (admin)",
        query: None,
        body: None,
        response: schema::<MemoryRecord>,
    },
];

/// Middleware: no answer of `/api` (or `/admin`) is kept by a browser or a proxy. What one
/// key read must never be served from a cache to whoever uses the same browser next (the
/// dashboard's pages say the same, `dashboard::page_headers`).
pub async fn no_store(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The `/api` routes (the caller adds the state and the key check): the OpenAPI document
/// and every row of [`ENDPOINTS`], so that what is routed is what the document describes.
pub fn routes() -> Router<Arc<AppState>> {
    ENDPOINTS.iter().fold(
        Router::new().route("/api/openapi.json", get(openapi::document)),
        |router, endpoint| router.route(endpoint.path, (endpoint.route)()),
    )
}

/// A record route's handler, told the type of record by the router.
fn typed(
    memory_type: MemoryType,
    route: MethodRouter<Arc<AppState>>,
) -> MethodRouter<Arc<AppState>> {
    route.route_layer(axum::Extension(memory_type))
}
