//! The live activity feed: the newest events of the audit stream the viewer may see (fact
//! created, rule promoted, supersession, expiry, inversion, ...), or on a butler's page of
//! what that butler sees, newest first, which the page polls every two seconds (htmx) so a
//! new episode shows up without a reload.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Response};
use butler_memory_actors::{Since, StoredEvent};
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use serde::Deserialize;

use super::layout;
use super::session::Viewer;
use super::widgets::{ago, drawer_link, event_words, short};
use crate::app_state::AppState;

/// Events the feed shows.
pub const FEED_LENGTH: u32 = 20;

#[derive(Debug, Deserialize)]
pub struct FeedQuery {
    butler: Option<String>,
}

/// `GET /memory/feed` (a fragment).
pub async fn feed(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    headers: axum::http::HeaderMap,
    Query(q): Query<FeedQuery>,
) -> Response {
    let butler = q.butler.filter(|b| !b.is_empty());
    match recent(&state, &viewer, butler).await {
        Ok(events) => Html(list(&events, state.engine.clock().now()).into_string()).into_response(),
        Err(e) => layout::error_in(&headers, &viewer, &e),
    }
}

/// The newest events of what the viewer may see or, on a butler's page (`butler`), of what
/// that butler sees.
pub async fn recent(
    state: &AppState,
    viewer: &Viewer,
    butler: Option<String>,
) -> butler_memory_actors::MemoryResult<Vec<StoredEvent>> {
    let (engine, caller) = (&state.engine, &viewer.caller);
    match butler {
        Some(b) => {
            engine
                .butler_activity(caller, &b, Since::Latest, Some(FEED_LENGTH))
                .await
        }
        None => {
            engine
                .activity_for_dashboard(caller, Since::Latest, None, None, Some(FEED_LENGTH))
                .await
        }
    }
}

/// The feed's panel: its first events, and the poll that keeps it current.
pub fn panel(events: &[StoredEvent], now: DateTime<Utc>, butler: Option<&str>) -> Markup {
    let source = match butler {
        Some(b) => format!("/memory/feed?butler={b}"),
        None => "/memory/feed".to_owned(),
    };
    html! {
        section.panel {
            h2 { "Activity" }
            div #feed hx-get=(source) hx-trigger="every 2s" hx-swap="innerHTML" {
                (list(events, now))
            }
        }
    }
}

fn list(events: &[StoredEvent], now: DateTime<Utc>) -> Markup {
    html! {
        @if events.is_empty() {
            p.muted { "Nothing has happened yet." }
        }
        ul.feed {
            @for e in events {
                li data-event=(e.event_type) {
                    strong { (event_words(&e.event_type)) } " "
                    (drawer_link(&e.entity_type, &e.entity_id, html! { (e.entity_type) " " (short(&e.entity_id)) }))
                    @if let Some(about) = about(e) { " · " span.muted { (about) } }
                    br;
                    span.when { (ago(e.occurred_at, now)) " · " (e.actor) }
                }
            }
        }
    }
}

/// What an event is about, when its payload names it in the clear (a fact's subject and
/// predicate, an episode's butler); never content.
fn about(event: &StoredEvent) -> Option<String> {
    let field = |name: &str| event.payload.get(name).and_then(|v| v.as_str());
    match (field("subject"), field("predicate"), field("butler")) {
        (Some(s), Some(p), _) => Some(format!("{s} · {p}")),
        (_, _, Some(b)) => Some(b.to_owned()),
        _ => None,
    }
}
