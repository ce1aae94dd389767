//! Episodes: a chronological stream (newest first), each with its butler, importance and
//! consolidation status, expandable to its whole content; filters (butler, a date range,
//! consolidated / pending / failed / dead letter); and for an admin, dead letters sent back
//! to consolidation.

use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use butler_memory_actors::{
    Episode, EpisodeQuery, ErrorCode, MemoryError, MemoryRecord, MemoryResult, MemoryType,
};
use chrono::{DateTime, NaiveDate, Utc};
use maud::{Markup, html};
use serde::Deserialize;
use uuid::Uuid;

use super::filters;
use super::layout::{self, Section};
use super::provenance::provenance_panel;
use super::session::Viewer;
use super::widgets::{ago, badge, butler, drawer_link, moment};
use crate::app_state::AppState;

/// Episodes a page lists.
const PAGE: u32 = 100;

/// The page's filters: days (a date picker's `YYYY-MM-DD`) where the API takes times.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EpisodeFilters {
    butler: Option<String>,
    /// The first day shown (UTC).
    from: Option<NaiveDate>,
    /// The last day shown (UTC), included.
    to: Option<NaiveDate>,
    consolidation_status: Option<String>,
    cursor: Option<Uuid>,
}

impl EpisodeFilters {
    fn query(&self) -> MemoryResult<EpisodeQuery> {
        let midnight = |d: NaiveDate| d.and_time(chrono::NaiveTime::MIN).and_utc();
        let status = match &self.consolidation_status {
            None => None,
            Some(s) => Some(serde_json::from_value(serde_json::json!(s)).map_err(|_| {
                MemoryError::new(
                    ErrorCode::UnknownValue,
                    format!("`{s}` is not a consolidation status"),
                )
            })?),
        };
        Ok(EpisodeQuery {
            butler: self.butler.clone(),
            from: self.from.map(midnight),
            to: self.to.and_then(|d| d.succ_opt()).map(midnight),
            consolidation_status: status,
            limit: Some(PAGE),
            cursor: self.cursor,
        })
    }
}

/// `GET /memory/episodes`
pub async fn list(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    RawQuery(raw): RawQuery,
) -> Response {
    let body = async {
        let shown: EpisodeFilters = filters::parse(raw.as_deref())?;
        let page = state
            .engine
            .list_episodes(&viewer.caller, shown.query()?)
            .await?;
        let now = state.engine.clock().now();
        let dead = page
            .items
            .iter()
            .filter(|e| e.consolidation_status.as_str() == "dead_letter")
            .count();
        Ok(html! {
            h1 { "Episodes " span.muted { (super::widgets::total(page.total)) } }
            (filter_form(&shown))
            @if let Some(done) = super::changes::done_note(raw.as_deref()) { div.flash role="status" { (done) } }
            @if viewer.can_write() && dead > 0 {
                form.panel method="post" action="/memory/episodes/requeue" {
                    input type="hidden" name="csrf" value=(viewer.csrf);
                    (dead) " dead letters on this page. "
                    button type="submit" { "Requeue all dead letters" }
                }
            }
            @if page.items.is_empty() { p.muted { "No episode matches." } }
            div #episodes {
                @for e in &page.items { (episode(&viewer, e, now)) }
            }
            (super::widgets::next_page("/memory/episodes", raw.as_deref(), page.next_cursor))
        })
    }
    .await;
    layout::page_of(&viewer, "Episodes", Section::Episodes, body)
}

fn filter_form(f: &EpisodeFilters) -> Markup {
    let status = f.consolidation_status.as_deref();
    html! {
        form.filters method="get" action="/memory/episodes" {
            label { "Butler" input name="butler" value=(f.butler.clone().unwrap_or_default()); }
            label { "From" input type="date" name="from" value=(f.from.map(|d| d.to_string()).unwrap_or_default()); }
            label { "To" input type="date" name="to" value=(f.to.map(|d| d.to_string()).unwrap_or_default()); }
            label { "Consolidation"
                select name="consolidation_status" {
                    option value="" { "any" }
                    @for s in ["pending", "consolidated", "failed", "dead_letter"] {
                        option value=(s) selected[status == Some(s)] { (s.replace('_', " ")) }
                    }
                }
            }
            button type="submit" { "Filter" }
            a href="/memory/episodes" { "Clear" }
        }
    }
}

fn episode(viewer: &Viewer, e: &Episode, now: DateTime<Utc>) -> Markup {
    let status = e.consolidation_status.as_str();
    html! {
        details.episode data-episode=(e.id) {
            summary {
                (ago(e.created_at, now)) " " (butler(&e.butler)) " "
                span.badge { "importance " (e.importance) } " "
                (badge(status)) " "
                (super::widgets::excerpt(&e.content, 120))
            }
            div.content { (e.content) }
            dl.fields {
                @if let Some(s) = &e.session_id { dt { "Session" } dd { (s) } }
                @if let Some(happened) = e.occurred_at {
                    dt { "Happened" } dd.happened { (moment(happened)) ", stored " (ago(e.created_at, now)) }
                }
                dt { "Consolidation" } dd { (status.replace('_', " ")) ", " (e.consolidation_attempts) " attempts" }
                @if let Some(err) = &e.last_consolidation_error { dt { "Last error" } dd { (err) } }
                dt { "Expires" } dd { (e.expires_at.format("%Y-%m-%d")) }
            }
            (drawer_link("episode", &e.id, html! { "Provenance and what was derived →" }))
            @if viewer.can_write() && status == "dead_letter" {
                form.inline method="post" action="/memory/episodes/requeue" {
                    input type="hidden" name="csrf" value=(viewer.csrf);
                    input type="hidden" name="id" value=(e.id);
                    " " button.quiet type="submit" { "Requeue" }
                }
            }
        }
    }
}

#[derive(Deserialize)]
pub struct RequeueForm {
    csrf: String,
    /// One dead letter; none: all of the tenant's.
    id: Option<Uuid>,
}

/// `POST /memory/episodes/requeue`
pub async fn requeue(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    form: Result<Form<RequeueForm>, FormRejection>,
) -> Response {
    let done = async {
        let form = filters::form(form)?;
        viewer.check_csrf(&form.csrf)?;
        state
            .engine
            .requeue_dead_letters(&viewer.caller, form.id.map(|id| vec![id]))
            .await
    }
    .await;
    match done {
        Ok(_) => Redirect::to("/memory/episodes?done=requeued").into_response(),
        Err(e) => layout::error_page(Some(&viewer), &e),
    }
}

/// `GET /memory/episodes/{id}`: the drawer (htmx) or a page.
pub async fn detail(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let body = async {
        let id = super::changes::record_id(&id)?;
        let provenance = state
            .engine
            .provenance(&viewer.caller, MemoryType::Episode, id)
            .await?;
        let MemoryRecord::Episode(e) = &provenance.record.record else {
            return Err(MemoryError::internal(
                "an episode's provenance answered another type",
            ));
        };
        let now = state.engine.clock().now();
        Ok(html! {
            div.drawer-head {
                h2 { "Episode " (butler(&e.butler)) }
                button.quiet type="button" data-close-drawer { "Close" }
            }
            p.content { (e.content) }
            dl.fields {
                dt { "Stored" } dd { (ago(e.created_at, now)) }
                @if let Some(happened) = e.occurred_at {
                    dt { "Happened" } dd { (moment(happened)) }
                }
                dt { "Importance" } dd { (e.importance) }
                dt { "Consolidation" } dd { (badge(e.consolidation_status.as_str())) }
                dt { "Id" } dd { code { (e.id) } }
            }
            (provenance_panel(&provenance, now))
        })
    }
    .await;
    layout::fragment_of(&headers, &viewer, "Episode", Section::Episodes, body)
}
