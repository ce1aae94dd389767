//! The orchestrator's memory graph (issue 23, docs/orchestrator.md): its nodes grouped by
//! type — goals, todos and decisions first, as its bulletins keep them —, each with its
//! importance and confidence bars, its status and its source; filters by type, status and
//! words. A node opens in the drawer with its content, provenance and every edge in or out
//! (each end opening in turn), and, for a key that may write the graph, the form that
//! supersedes or retracts it with a reason (an audited status change, as
//! `orchestrator_set_status`). The memory's status heads the page: enabled, or disabled with
//! the reason, and the drop-zone's files.

use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use butler_memory_actors::{
    Edge, GraphQuery, MemoryResult, MemoryState, MemoryStatus, Node, NodeStatus, NodeType, Role,
    Source,
};
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use serde::Deserialize;
use uuid::Uuid;

use super::filters;
use super::layout::{self, Section};
use super::session::Viewer;
use super::widgets::{ago, badge, meter, short};
use crate::app_state::AppState;
use crate::http::request_meta::RequestMeta;

/// Nodes a page lists (the API's largest page).
const PAGE: u32 = 200;

/// The order types are shown in: what bulletins keep longest first.
const TYPE_ORDER: [NodeType; 8] = [
    NodeType::Goal,
    NodeType::Todo,
    NodeType::Decision,
    NodeType::Preference,
    NodeType::Fact,
    NodeType::Identity,
    NodeType::Event,
    NodeType::Observation,
];

/// Edges a node's drawer shows, each with the other end's summary.
const DRAWER_EDGES: usize = 50;

/// Whether the viewer may change the graph: its orchestrator, or the tenant's admin.
fn can_change(viewer: &Viewer) -> bool {
    matches!(viewer.caller.role, Role::Admin | Role::Orchestrator)
}

/// Where a node opens.
fn node_href(id: &Uuid) -> String {
    format!("/memory/graph/{id}")
}

fn node_link(id: &Uuid, text: &str) -> Markup {
    let href = node_href(id);
    html! { a href=(href) hx-get=(href) hx-target="#drawer" hx-swap="innerHTML" { (text) } }
}

/// `GET /memory/graph`
pub async fn list(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    RawQuery(raw): RawQuery,
) -> Response {
    let body = async {
        let mut query: GraphQuery = filters::parse(raw.as_deref())?;
        query.limit = Some(query.limit.unwrap_or(PAGE));
        let shown = query.clone();
        let status = state.engine.orchestrator_status(&viewer.caller, None).await?;
        let now = state.engine.clock().now();
        let page = match status.status {
            MemoryState::Enabled => Some(
                state
                    .engine
                    .orchestrator_list(&viewer.caller, None, query)
                    .await?,
            ),
            MemoryState::Disabled => None,
        };
        Ok(html! {
            h1 { "Memory graph " @if let Some(page) = &page { span.muted { (super::widgets::total(page.total)) } } }
            (status_panel(&status, now))
            (filter_form(&shown))
            @if let Some(done) = super::changes::done_note(raw.as_deref()) { div.flash role="status" { (done) } }
            @if let Some(page) = &page {
                @for node_type in TYPE_ORDER {
                    @let nodes: Vec<&Node> = page.items.iter().filter(|n| n.node_type == node_type).collect();
                    @if !nodes.is_empty() {
                        section data-type=(node_type.as_str()) {
                            h2 { (node_type.as_str()) " " span.muted { "(" (nodes.len()) ")" } }
                            @for n in nodes { (node_card(n, now)) }
                        }
                    }
                }
                @if page.items.is_empty() { p.muted { "No memory matches." } }
                (super::widgets::next_page("/memory/graph", raw.as_deref(), page.next_cursor))
            }
        })
    }
    .await;
    layout::page_of(&viewer, "Memory graph", Section::Graph, body)
}

/// The memory's state and its drop-zone.
fn status_panel(status: &MemoryStatus, now: DateTime<Utc>) -> Markup {
    html! {
        div.cards {
            div.card data-status=(status.status.as_str()) {
                h3 { "Memory" }
                p { (badge(status.status.as_str())) " · orchestrator " code { (status.orchestrator_id) } }
                @if let Some(reason) = &status.reason { p.flash.error role="alert" { (reason) } }
                @if let Some(g) = &status.graph {
                    p { (g.active) " active · " (g.superseded) " superseded · " (g.retracted) " retracted · " (g.edges) " edges"
                        @if g.unembedded > 0 { " · " (g.unembedded) " not embedded yet" } }
                }
                @if let Some(at) = status.last_bulletin_at { p.muted { "last bulletin " (ago(at, now)) } }
            }
            @if let Some(ingest) = &status.ingest {
                div.card data-card="ingest" {
                    h3 { "Drop-zone" }
                    p { code { (ingest.folder) } }
                    p { (ingest.waiting) " waiting · " (ingest.processed) " processed · " (ingest.rejected) " rejected"
                        @if !ingest.enabled { " · " (badge("off")) } }
                }
            }
        }
    }
}

fn filter_form(q: &GraphQuery) -> Markup {
    let words = q.q.clone().unwrap_or_default();
    html! {
        form.filters method="get" action="/memory/graph" {
            label { "Words" input name="q" value=(words); }
            label { "Type"
                select name="type" {
                    option value="" { "any" }
                    @for t in TYPE_ORDER { option value=(t.as_str()) selected[q.node_type == Some(t)] { (t.as_str()) } }
                }
            }
            label { "Status"
                select name="status" {
                    option value="" { "any" }
                    @for s in NodeStatus::ALL { option value=(s.as_str()) selected[q.status == Some(*s)] { (s.as_str()) } }
                }
            }
            button type="submit" { "Filter" }
            a href="/memory/graph" { "Clear" }
        }
    }
}

fn node_card(n: &Node, now: DateTime<Utc>) -> Markup {
    let active = n.status == NodeStatus::Active;
    html! {
        div.node.superseded[!active] data-node=(n.memory_id) {
            div {
                @if !active { (badge(n.status.as_str())) }
                (node_link(&n.memory_id, &n.summary))
            }
            div.counts {
                "importance " (meter(f64::from(n.importance) / 100.0, "importance"))
                " · confidence " (meter(n.confidence, "confidence"))
                " · " (source_words(&n.source))
                " · updated " (ago(n.updated_at, now))
            }
        }
    }
}

/// A source in a few words: its kind, its run or conversation, its file's name.
fn source_words(s: &Source) -> String {
    let mut words = vec![s.source_type.as_str().replace('_', " ")];
    if let Some(run) = &s.workflow_run_id {
        words.push(format!("run {run}"));
    }
    if let Some(conversation) = &s.conversation_id {
        words.push(format!("conversation {conversation}"));
    }
    if let Some(path) = &s.source_path {
        words.push(path.rsplit('/').next().unwrap_or(path).to_owned());
    }
    words.join(" · ")
}

/// `GET /memory/graph/{id}`: the drawer (or a page of its own without script).
pub async fn detail(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    headers: HeaderMap,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Response {
    let body = async {
        let id = super::changes::record_id(&id)?;
        let found = state.engine.orchestrator_get(&viewer.caller, None, id).await?;
        let mut ends = Vec::new();
        for edge in found.edges.iter().take(DRAWER_EDGES) {
            let other = if edge.from_memory_id == id { edge.to_memory_id } else { edge.from_memory_id };
            let summary = match state.engine.orchestrator_get(&viewer.caller, None, other).await {
                Ok(end) => end.node.summary,
                Err(_) => short(&other),
            };
            ends.push((edge, other, summary));
        }
        let now = state.engine.clock().now();
        let n = &found.node;
        Ok(html! {
            div.drawer-head {
                h2 { (n.node_type.as_str()) " · " (n.summary) }
                button.quiet type="button" data-close-drawer { "Close" }
            }
            @if let Some(done) = super::changes::done_note(raw.as_deref()) { div.flash role="status" { (done) } }
            p.content.superseded[n.status != NodeStatus::Active] { span.content { (n.content) } }
            dl.fields {
                dt { "Status" } dd { (badge(n.status.as_str())) }
                dt { "Importance" } dd { (meter(f64::from(n.importance) / 100.0, "importance")) " (" (n.importance) ")" }
                dt { "Confidence" } dd { (meter(n.confidence, "confidence")) }
                dt { "Source" } dd { (n.source.source_type.as_str().replace('_', " ")) " · captured by " (n.source.captured_by.as_str()) }
                @if let Some(path) = &n.source.source_path { dt { "File" } dd { code { (path) } } }
                @if let Some(c) = &n.source.conversation_id { dt { "Conversation" } dd { (c) } }
                @if let Some(r) = &n.source.workflow_run_id { dt { "Workflow run" } dd { (r) } }
                @if let Some(s) = &n.source.step_id { dt { "Step" } dd { (s) } }
                dt { "Created" } dd { (ago(n.created_at, now)) }
                dt { "Updated" } dd { (ago(n.updated_at, now)) }
                dt { "Id" } dd { code { (n.memory_id) } }
            }
            h3 { "Edges " span.muted { "(" (found.edges.len()) ")" } }
            @if found.edges.is_empty() { p.muted { "None." } }
            ul.edges {
                @for (edge, other, summary) in &ends { li { (edge_line(edge, id, *other, summary)) } }
            }
            @if can_change(&viewer) && n.status == NodeStatus::Active { (status_form(&viewer, &n.memory_id)) }
        })
    }
    .await;
    layout::fragment_of(&headers, &viewer, "Memory", Section::Graph, body)
}

/// "PartOf → Ship the billing export" (out) or "← PartOf Write the CSV writer" (in).
fn edge_line(edge: &Edge, this: Uuid, other: Uuid, summary: &str) -> Markup {
    let out = edge.from_memory_id == this;
    html! {
        span.edge data-edge-type=(edge.edge_type.as_str()) {
            @if out { (edge.edge_type.as_str()) " → " } @else { "← " (edge.edge_type.as_str()) " " }
            (node_link(&other, summary))
            @if (edge.weight - 1.0).abs() > f64::EPSILON { span.muted { " weight " (format!("{:.2}", edge.weight)) } }
            @if let Some(reason) = &edge.reason { span.muted { " — " (reason) } }
        }
    }
}

fn status_form(viewer: &Viewer, id: &Uuid) -> Markup {
    html! {
        form.change method="post" action=(format!("{}/status", node_href(id))) {
            input type="hidden" name="csrf" value=(viewer.csrf);
            label { "Mark it"
                select name="status" {
                    option value="superseded" { "superseded" }
                    option value="retracted" { "retracted (final)" }
                }
            }
            label { "Why" input name="reason" required; }
            button type="submit" { "Change" }
        }
    }
}

#[derive(Deserialize)]
pub struct StatusForm {
    csrf: String,
    status: NodeStatus,
    reason: String,
}

/// `POST /memory/graph/{id}/status`
pub async fn set_status(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    Extension(meta): Extension<RequestMeta>,
    Path(id): Path<String>,
    form: Result<Form<StatusForm>, FormRejection>,
) -> Response {
    let done = async {
        let id = super::changes::record_id(&id)?;
        let form = filters::form(form)?;
        viewer.check_csrf(&form.csrf)?;
        state
            .engine
            .orchestrator_set_status(
                &viewer.caller,
                None,
                id,
                form.status,
                form.reason,
                meta.lineage(),
            )
            .await?;
        MemoryResult::Ok(id)
    }
    .await;
    match done {
        Ok(id) => Redirect::to(&format!("{}?done=status", node_href(&id))).into_response(),
        Err(e) => layout::error_page(Some(&viewer), &e),
    }
}
