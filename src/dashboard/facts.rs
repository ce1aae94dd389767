//! Facts: grouped by subject, each with its predicate, content, a confidence bar coloured
//! by band, its permanence, when it was last confirmed; a superseded fact struck through
//! with a link to what replaced it; filters (subject, words, source butler, confidence
//! threshold, permanence, state), and a butler's view (`butler`: what that butler sees, the
//! link from its page). A fact opens in the drawer with its provenance (source
//! episode and butler, linked records, every version, its events) and, for an admin, the
//! forms that correct it (a new version that supersedes it) or forget it.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Extension;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use butler_memory_actors::{
    Fact, FactEdit, FactQuery, MemoryRecord, MemoryResult, MemoryType, Permanence, Validity,
};
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use serde::Deserialize;
use uuid::Uuid;

use super::filters;
use super::layout::{self, Section};
use super::provenance::provenance_panel;
use super::session::Viewer;
use super::widgets::{ago, badge, drawer_link, meter, moment};
use crate::app_state::AppState;
use crate::http::request_meta::RequestMeta;

/// Facts a page lists (the API's largest page).
const PAGE: u32 = 200;

/// `GET /memory/facts`
pub async fn list(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    RawQuery(raw): RawQuery,
) -> Response {
    let body = async {
        let (butler, rest) = filters::view(raw.as_deref());
        let mut query: FactQuery = filters::parse(Some(&rest))?;
        query.limit = Some(query.limit.unwrap_or(PAGE));
        let shown = query.clone();
        let (engine, caller) = (&state.engine, &viewer.caller);
        let page = match &butler {
            Some(b) => engine.butler_facts(caller, b, query).await?,
            None => engine.list_facts(caller, query).await?,
        };
        let now = state.engine.clock().now();
        Ok(html! {
            h1 {
                "Facts "
                @if let Some(b) = &butler { "butler " (b) " sees " }
                span.muted { (super::widgets::total(page.total)) }
            }
            (filter_form(&shown, butler.as_deref()))
            @if let Some(done) = super::changes::done_note(raw.as_deref()) { div.flash role="status" { (done) } }
            (grouped(&page.items, now))
            (super::widgets::next_page("/memory/facts", raw.as_deref(), page.next_cursor))
        })
    }
    .await;
    layout::page_of(&viewer, "Facts", Section::Facts, body)
}

fn filter_form(q: &FactQuery, butler: Option<&str>) -> Markup {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let permanence = q.permanence.map(|p| p.as_str());
    let validity = q.validity.map(|v| v.as_str());
    html! {
        form.filters method="get" action="/memory/facts" {
            label { "Seen by butler" input name="butler" value=(butler.unwrap_or_default()); }
            label { "Subject" input name="subject" value=(text(&q.subject)); }
            label { "Words" input name="q" value=(text(&q.q)); }
            label { "Source butler" input name="source_butler" value=(text(&q.source_butler)); }
            label { "Confidence at least"
                input name="min_confidence" type="number" min="0" max="1" step="0.05"
                    value=(q.min_confidence.map(|c| c.to_string()).unwrap_or_default());
            }
            label { "Permanence"
                select name="permanence" {
                    option value="" { "any" }
                    @for p in Permanence::ALL { option value=(p.as_str()) selected[permanence == Some(p.as_str())] { (p.as_str()) } }
                }
            }
            label { "State"
                select name="validity" {
                    option value="" { "any" }
                    @for v in Validity::ALL { option value=(v.as_str()) selected[validity == Some(v.as_str())] { (v.as_str()) } }
                }
            }
            button type="submit" { "Filter" }
            a href="/memory/facts" { "Clear" }
        }
    }
}

/// The page's facts by subject (subjects in order of their newest fact), each superseded
/// fact linked to the version that replaced it when that version is on the page, else to
/// its own history.
fn grouped(facts: &[Fact], now: DateTime<Utc>) -> Markup {
    let mut subjects: Vec<&str> = Vec::new();
    let mut by_subject: HashMap<&str, Vec<&Fact>> = HashMap::new();
    for fact in facts {
        let group = by_subject.entry(fact.subject.as_str()).or_default();
        if group.is_empty() {
            subjects.push(fact.subject.as_str());
        }
        group.push(fact);
    }
    let replaced_by: HashMap<Uuid, Uuid> = facts
        .iter()
        .filter_map(|f| f.supersedes_id.map(|old| (old, f.id)))
        .collect();
    html! {
        @if facts.is_empty() { p.muted { "No fact matches." } }
        @for subject in subjects {
            section.subject {
                h2 { (subject) }
                table.records {
                    thead { tr { th { "Predicate" } th { "Content" } th { "Confidence" } th { "Permanence" } th { "Last confirmed" } th { "State" } } }
                    tbody {
                        @for f in &by_subject[subject] {
                            @let superseded = f.validity == Validity::Superseded;
                            tr.superseded[superseded] data-fact=(f.id) {
                                td { (drawer_link("fact", &f.id, html! { (f.predicate) })) }
                                td.content { (f.content) }
                                td { (meter(f.effective_confidence, "confidence")) }
                                td { (badge(f.permanence.as_str())) }
                                td { (ago(f.last_confirmed_at, now)) }
                                td {
                                    (badge(f.validity.as_str()))
                                    @if superseded {
                                        @match replaced_by.get(&f.id) {
                                            Some(new) => { (drawer_link("fact", new, html! { "replaced by →" })) }
                                            None => { (drawer_link("fact", &f.id, html! { "see versions →" })) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `GET /memory/facts/{id}`: the drawer (htmx) or a page.
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
            .provenance(&viewer.caller, MemoryType::Fact, id)
            .await?;
        let MemoryRecord::Fact(fact) = &provenance.record.record else {
            return Err(butler_memory_actors::MemoryError::internal("a fact's provenance answered another type"));
        };
        let now = state.engine.clock().now();
        Ok(html! {
            div.drawer-head {
                h2 { (fact.subject) " · " (fact.predicate) }
                button.quiet type="button" data-close-drawer { "Close" }
            }
            p.content.superseded[fact.validity == Validity::Superseded] { span.content { (fact.content) } }
            dl.fields {
                dt { "Confidence" } dd { (meter(fact.effective_confidence, "confidence")) " (stored " (format!("{:.2}", fact.confidence)) ")" }
                dt { "State" } dd { (badge(fact.validity.as_str())) }
                dt { "Permanence" } dd { (badge(fact.permanence.as_str())) }
                dt { "Scope" } dd { (fact.scope) }
                dt { "Importance" } dd { (fact.importance) }
                dt { "Source butler" } dd { @if let Some(b) = &fact.source_butler { (super::widgets::butler(b)) } @else { "—" } }
                dt { "True" } dd {
                    "from " (moment(fact.valid_from))
                    @if let Some(until) = fact.valid_until { " until " (moment(until)) } @else { " on" }
                }
                dt { "Created" } dd { (ago(fact.created_at, now)) }
                dt { "Last confirmed" } dd { (ago(fact.last_confirmed_at, now)) }
                dt { "Id" } dd { code { (fact.id) } }
            }
            @if viewer.can_write() { (change_forms(&viewer, fact)) }
            (provenance_panel(&provenance, now))
        })
    }
    .await;
    layout::fragment_of(&headers, &viewer, "Fact", Section::Facts, body)
}

fn change_forms(viewer: &Viewer, fact: &Fact) -> Markup {
    let live = matches!(fact.validity, Validity::Active | Validity::Fading);
    html! {
        @if live {
            details.panel open {
                summary { "Correct this fact" }
                form method="post" action=(format!("/memory/facts/{}/edit", fact.id)) {
                    input type="hidden" name="csrf" value=(viewer.csrf);
                    label { "What is true now" textarea name="content" rows="3" required { (fact.content) } }
                    label { "Permanence "
                        select name="permanence" {
                            @for p in Permanence::ALL { option value=(p.as_str()) selected[*p == fact.permanence] { (p.as_str()) } }
                        }
                    }
                    " "
                    button type="submit" { "Save as a new version" }
                    p.muted { "The fact keeps its history: the new version supersedes this one." }
                }
            }
            form method="post" action=(format!("/memory/fact/{}/forget", fact.id)) {
                input type="hidden" name="csrf" value=(viewer.csrf);
                input name="reason" placeholder="Why forget it (recorded)";
                " "
                button.danger type="submit" { "Forget" }
            }
        }
        @if fact.validity == Validity::Retracted {
            form method="post" action=(format!("/memory/fact/{}/restore", fact.id)) {
                input type="hidden" name="csrf" value=(viewer.csrf);
                button type="submit" { "Restore" }
            }
        }
    }
}

#[derive(Deserialize)]
pub struct EditForm {
    csrf: String,
    content: String,
    permanence: Option<Permanence>,
}

/// `POST /memory/facts/{id}/edit`: a new version supersedes the fact; back to its subject.
pub async fn edit(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    Extension(meta): Extension<RequestMeta>,
    Path(id): Path<String>,
    form: Result<Form<EditForm>, FormRejection>,
) -> Response {
    let done = async {
        let id = super::changes::record_id(&id)?;
        let form = filters::form(form)?;
        viewer.check_csrf(&form.csrf)?;
        let edit = FactEdit {
            content: form.content,
            confidence: None,
            importance: None,
            permanence: form.permanence,
            tags: None,
            metadata: None,
        };
        let stored = state
            .engine
            .edit_fact(&viewer.caller, id, edit, meta.lineage())
            .await?;
        MemoryResult::Ok(stored.fact.subject)
    }
    .await;
    match done {
        Ok(subject) => Redirect::to(&format!(
            "/memory/facts?{}",
            serde_urlencoded::to_string([("subject", subject.as_str()), ("done", "edited")])
                .unwrap_or_default()
        ))
        .into_response(),
        Err(e) => layout::error_page(Some(&viewer), &e),
    }
}
