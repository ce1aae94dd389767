//! The operators' page: whether the service is ready (database, migrations, embedder), this
//! instance's name and the scheduled sweeps it holds, its database pools' connections, and
//! the live actor tree (kind, key, status, queue depth, messages, restarts, last error),
//! refreshed every five seconds. An operator key sees every actor and no memory content;
//! an admin key the shared actors and its own tenant's shards.

use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use butler_memory_actors::{ActorKind, ActorSnapshot, MemoryResult};
use maud::{Markup, html};

use super::layout::{self, Section};
use super::session::Viewer;
use super::widgets::ago;
use crate::app_state::AppState;
use crate::http::actors::{visible_actors, visible_leases};

/// `GET /operators`
pub async fn page(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
) -> Response {
    match render(&state, &viewer).await {
        Ok(panel) => layout::page(
            &viewer,
            "Operators",
            Section::Operators,
            html! {
                h1 { "Service" }
                div #operators hx-get="/operators/panel" hx-trigger="every 5s" hx-swap="innerHTML" { (panel) }
            },
        ),
        Err(e) => layout::error_page(Some(&viewer), &e),
    }
}

/// `GET /operators/panel` (the fragment the page refreshes).
pub async fn panel(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    headers: HeaderMap,
) -> Response {
    let panel = render(&state, &viewer).await;
    layout::fragment_of(&headers, &viewer, "Operators", Section::Operators, panel)
}

async fn render(state: &AppState, viewer: &Viewer) -> MemoryResult<Markup> {
    let actors = visible_actors(&state.engine, &viewer.caller)?;
    let leases = visible_leases(&state.engine, &viewer.caller).await?;
    let readiness = state.engine.readiness().await;
    let now = state.engine.clock().now();
    let checks = [
        ("database", &readiness.database),
        ("migrations", &readiness.migrations),
        ("embedder", &readiness.embedder),
    ];
    let shards = actors.iter().filter(|a| a.kind == ActorKind::Shard).count();
    let pools = state.engine.pool_usage();
    let in_use: u32 = pools.iter().map(|p| p.in_use).sum();
    Ok(html! {
        div.cards {
            div.card #health {
                div.label { "Health" }
                div.value { @if readiness.is_ready() { "ready" } @else { "not ready" } }
                div.detail {
                    @for (name, check) in checks {
                        @match check {
                            Ok(()) => { span.badge.ok { (name) " ok" } }
                            Err(e) => { span.badge.warn title=(e) { (name) ": " (e) } }
                        }
                    }
                }
            }
            div.card { div.label { "Actors" } div.value { (actors.len()) } div.detail { (shards) " shards" } }
            div.card #instance {
                div.label { "This instance" }
                div.value { code { (state.engine.instance_id()) } }
                div.detail {
                    (leases.len()) " scheduled sweeps held"
                    @for l in &leases { br; (l.kind.as_str()) " of " code { (l.shard) } " (" (l.fire_at.format("%Y-%m-%d %H:%M")) ")" }
                }
            }
            // A pool with every connection in use is the one reads or writes wait for; not
            // the health pool, whose one connection the database watch pings on four times a
            // second (and this page's readiness check with it).
            div.card #pools {
                div.label { "Database connections" }
                div.value { (in_use) " in use" }
                div.detail { "in use / open (max) per pool" }
                div.detail {
                    @for p in &pools {
                        span.badge.(if p.in_use >= p.max && p.name != "health" { "warn" } else { "ok" })
                            title=(format!("{} connections: {} in use, {} open, at most {}", p.name, p.in_use, p.open, p.max)) {
                            b { (p.name) } " " (p.in_use) "/" (p.open) " (max " (p.max) ")"
                        }
                        " "
                    }
                }
            }
        }
        h2 { "Actor tree" }
        table.records #actors {
            thead { tr { th { "Kind" } th { "Key" } th { "Status" } th { "Queue" } th { "Handled" } th { "Restarts" } th { "Started" } th { "Last error" } } }
            tbody { @for a in &actors { (actor_row(a, now)) } }
        }
    })
}

fn actor_row(a: &ActorSnapshot, now: chrono::DateTime<chrono::Utc>) -> Markup {
    let kind = serde_json::to_value(a.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let status = serde_json::to_value(a.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    html! {
        tr {
            td { (kind) }
            td { code { (a.key) } }
            td { span.badge.(status) { (status) } }
            td { (a.queue_depth) }
            td { (a.messages_handled) }
            td { (a.restarts) }
            td { (ago(a.started_at, now)) }
            td { (a.last_error.clone().unwrap_or_default()) }
        }
    }
}
