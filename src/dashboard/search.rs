//! Search across facts, rules and episodes, as `memory_search` sees them for this key
//! (hybrid by default; nothing is bumped by a person looking): each hit with its type,
//! score, what it says, and a link that opens it in the drawer; a time the words state
//! ("last week") is said, and the hits outside it are marked.

use std::sync::Arc;

use axum::Extension;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use butler_memory_actors::{MemoryResult, SearchInput};
use maud::html;
use serde::Deserialize;

use super::filters;
use super::layout::{self, Section};
use super::session::Viewer;
use super::widgets::{badge, drawer_link, excerpt};
use crate::app_state::AppState;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchForm {
    q: Option<String>,
    /// `fact`, `rule` or `episode`; none: all.
    r#type: Option<String>,
}

/// `GET /memory/search`
pub async fn search(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    RawQuery(raw): RawQuery,
) -> Response {
    let body = async {
        let form: SearchForm = filters::parse(raw.as_deref())?;
        let hits = match &form.q {
            None => None,
            Some(q) => {
                let types = match &form.r#type {
                    Some(t) => Some(vec![t.parse()?]),
                    None => None,
                };
                let input = SearchInput {
                    query: q.clone(),
                    types,
                    limit: Some(30),
                    ..SearchInput::default()
                };
                Some(state.engine.search_for_dashboard(&viewer.caller, input).await?)
            }
        };
        MemoryResult::Ok(html! {
            h1 { "Search" }
            form.filters method="get" action="/memory/search" {
                label { "Words or a question" input name="q" value=(form.q.clone().unwrap_or_default()) autofocus; }
                label { "Type"
                    select name="type" {
                        option value="" { "all" }
                        @for t in ["fact", "rule", "episode"] { option value=(t) selected[form.r#type.as_deref() == Some(t)] { (t) } }
                    }
                }
                button type="submit" { "Search" }
            }
            @if let Some(outcome) = hits {
                @if outcome.degraded { div.flash.error { "The embedder is unavailable: these results come from keywords alone." } }
                @if let Some(time) = &outcome.stated_time {
                    p.muted #stated-time {
                        "Read as a time: “" (time.phrase) "”, "
                        (time.since.format("%-d %b %Y %H:%M")) " to " (time.until.format("%-d %b %Y %H:%M")) " UTC. "
                        "Its episodes and facts come first; the others keep a share of their score (retrieval.stated_time_share)."
                    }
                }
                @if outcome.hits.is_empty() { p.muted { "Nothing found." } }
                table.records #results {
                    tbody {
                        @for hit in &outcome.hits {
                            @let c = &hit.candidate;
                            @let kind = c.memory_type().as_str();
                            tr {
                                td { (badge(kind)) }
                                td {
                                    (drawer_link(kind, &c.id, html! {
                                        @if let (Some(s), Some(p)) = (&c.subject, &c.predicate) { (s) " · " (p) ": " }
                                        (excerpt(&c.content, 200))
                                    }))
                                }
                                td.muted {
                                    (format!("{:.3}", hit.score))
                                    @if hit.scores.time_weight < 1.0 { br; "outside that time" }
                                }
                            }
                        }
                    }
                }
            }
        })
    }
    .await;
    layout::page_of(&viewer, "Search", Section::Search, body)
}
