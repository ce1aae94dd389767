//! The playbook: rules grouped Proven → Established → Candidate, then anti-patterns (with
//! a warning mark); each with its scope, an effectiveness bar, how often it was applied,
//! helped and harmed, and (for an admin) one form to promote, demote, disable or enable it
//! with a reason: each an audited transition; a disabled rule never reaches retrieval. A
//! rule opens with its application history and provenance. Filters: words, scope, source
//! butler, and a butler's view (`butler`: what that butler sees, the link from its page).

use std::sync::Arc;

use axum::extract::rejection::FormRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use butler_memory_actors::{
    Governance, Maturity, MemoryError, MemoryRecord, MemoryResult, MemoryType, Rule, RuleQuery,
    Validity,
};
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use serde::Deserialize;

use super::filters;
use super::layout::{self, Section};
use super::provenance::provenance_panel;
use super::session::Viewer;
use super::widgets::{ago, badge, drawer_link, meter};
use crate::app_state::AppState;
use crate::http::request_meta::RequestMeta;

/// Rules a page lists.
const PAGE: u32 = 200;

/// The playbook's sections, in the order a person reads them.
const SECTIONS: [(Maturity, &str); 4] = [
    (Maturity::Proven, "Proven"),
    (Maturity::Established, "Established"),
    (Maturity::Candidate, "Candidate"),
    (Maturity::AntiPattern, "⚠ Anti-patterns"),
];

/// `GET /memory/playbook`
pub async fn list(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    RawQuery(raw): RawQuery,
) -> Response {
    let body = async {
        let (butler, rest) = filters::view(raw.as_deref());
        let mut query: RuleQuery = filters::parse(Some(&rest))?;
        query.limit = Some(query.limit.unwrap_or(PAGE));
        let shown = query.clone();
        let (engine, caller) = (&state.engine, &viewer.caller);
        let page = match &butler {
            Some(b) => engine.butler_rules(caller, b, query).await?,
            None => engine.list_rules(caller, query).await?,
        };
        let now = state.engine.clock().now();
        let live: Vec<&Rule> = page
            .items
            .iter()
            .filter(|r| matches!(r.validity, Validity::Active | Validity::Fading))
            .collect();
        let gone = page.items.len() - live.len();
        Ok(html! {
            h1 {
                "Playbook "
                @if let Some(b) = &butler { "of butler " (b) " " }
                span.muted { (super::widgets::total(page.total)) }
            }
            (filter_form(&shown, butler.as_deref()))
            @if let Some(done) = super::changes::done_note(raw.as_deref()) { div.flash role="status" { (done) } }
            @for (maturity, title) in SECTIONS {
                @let rules: Vec<&&Rule> = live.iter().filter(|r| r.maturity == maturity).collect();
                @if !rules.is_empty() {
                    section data-maturity=(maturity.as_str()) {
                        h2 { (title) " " span.muted { "(" (rules.len()) ")" } }
                        @for r in rules { (rule_card(&viewer, r, now)) }
                    }
                }
            }
            @if live.is_empty() { p.muted { "No live rule matches." } }
            @if gone > 0 {
                p.muted { (gone) " superseded, expired or forgotten rules on this page are not shown; "
                    a href="/memory/playbook?validity=retracted" { "see forgotten ones" } "." }
            }
            (super::widgets::next_page("/memory/playbook", raw.as_deref(), page.next_cursor))
        })
    }
    .await;
    layout::page_of(&viewer, "Playbook", Section::Playbook, body)
}

fn filter_form(q: &RuleQuery, butler: Option<&str>) -> Markup {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    html! {
        form.filters method="get" action="/memory/playbook" {
            label { "Seen by butler" input name="butler" value=(butler.unwrap_or_default()); }
            label { "Words" input name="q" value=(text(&q.q)); }
            label { "Scope" input name="scope" value=(text(&q.scope)); }
            label { "Source butler" input name="source_butler" value=(text(&q.source_butler)); }
            button type="submit" { "Filter" }
            a href="/memory/playbook" { "Clear" }
        }
    }
}

fn rule_card(viewer: &Viewer, r: &Rule, now: DateTime<Utc>) -> Markup {
    let anti = r.maturity == Maturity::AntiPattern;
    html! {
        div.rule.anti_pattern[anti].disabled[r.disabled_at.is_some()] data-rule=(r.id) {
            div {
                @if anti { span.badge.warn title="anti-pattern: what not to do" { "⚠ anti-pattern" } }
                (badge(r.maturity.as_str()))
                span.badge { "scope " (r.scope) }
                @if r.disabled_at.is_some() { span.badge.warn { "disabled" } }
                (drawer_link("rule", &r.id, html! { (r.content) }))
            }
            div.counts {
                "effectiveness " (meter(r.effectiveness_score, "effectiveness"))
                " · applied " (r.applied_count) " · helped " (r.success_count) " · harmed " (r.harmful_count)
                @if let Some(t) = r.last_applied_at { " · last applied " (ago(t, now)) }
            }
            @if viewer.can_write() { (govern_form(viewer, r)) }
        }
    }
}

fn govern_form(viewer: &Viewer, r: &Rule) -> Markup {
    let anti = r.maturity == Maturity::AntiPattern;
    html! {
        form.govern method="post" action=(format!("/memory/rules/{}/govern", r.id)) {
            input type="hidden" name="csrf" value=(viewer.csrf);
            input name="reason" placeholder="Why (recorded with the decision)" required aria-label="Reason";
            @if !anti && r.maturity != Maturity::Proven { button.quiet type="submit" name="decision" value="promote" { "Promote" } }
            @if !anti && r.maturity != Maturity::Candidate { button.quiet type="submit" name="decision" value="demote" { "Demote" } }
            @if r.disabled_at.is_none() {
                button.danger type="submit" name="decision" value="disable" { "Disable" }
            } @else {
                button type="submit" name="decision" value="enable" { "Enable" }
            }
        }
    }
}

#[derive(Deserialize)]
pub struct GovernForm {
    csrf: String,
    decision: Governance,
    reason: String,
}

/// `POST /memory/rules/{id}/govern`
pub async fn govern(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    Extension(meta): Extension<RequestMeta>,
    Path(id): Path<String>,
    form: Result<Form<GovernForm>, FormRejection>,
) -> Response {
    let done = async {
        let id = super::changes::record_id(&id)?;
        let form = filters::form(form)?;
        viewer.check_csrf(&form.csrf)?;
        state
            .engine
            .govern_rule(
                &viewer.caller,
                id,
                form.decision,
                form.reason,
                meta.lineage(),
            )
            .await?;
        MemoryResult::Ok(())
    }
    .await;
    match done {
        Ok(()) => Redirect::to("/memory/playbook?done=governed").into_response(),
        Err(e) => layout::error_page(Some(&viewer), &e),
    }
}

/// `GET /memory/rules/{id}`: the drawer (htmx) or a page.
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
            .provenance(&viewer.caller, MemoryType::Rule, id)
            .await?;
        let MemoryRecord::Rule(rule) = &provenance.record.record else {
            return Err(MemoryError::internal("a rule's provenance answered another type"));
        };
        let applications = state
            .engine
            .rule_applications(&viewer.caller, id, None, Some(50))
            .await?;
        let now = state.engine.clock().now();
        Ok(html! {
            div.drawer-head {
                h2 { "Rule " (badge(rule.maturity.as_str())) }
                button.quiet type="button" data-close-drawer { "Close" }
            }
            p { (rule.content) }
            @if let Some(original) = &rule.original_content { p.muted { "First written as: " (original) } }
            dl.fields {
                dt { "Effectiveness" } dd { (meter(rule.effectiveness_score, "effectiveness")) }
                dt { "Confidence" } dd { (meter(rule.effective_confidence, "confidence")) }
                dt { "State" } dd { (badge(rule.validity.as_str())) @if rule.disabled_at.is_some() { span.badge.warn { "disabled" } } }
                dt { "Scope" } dd { (rule.scope) }
                dt { "Applied" } dd { (rule.applied_count) " · helped " (rule.success_count) " · harmed " (rule.harmful_count) }
                dt { "Id" } dd { code { (rule.id) } }
            }
            @if viewer.can_write() && matches!(rule.validity, Validity::Active | Validity::Fading) { (govern_form(&viewer, rule)) }
            h3 { "Applications " span.muted { (super::widgets::total(applications.total)) } }
            @if applications.items.is_empty() { p.muted { "Not applied yet." } }
            table.records {
                tbody {
                    @for a in &applications.items {
                        tr {
                            td { (badge(&a.outcome)) }
                            td { @if let Some(b) = &a.butler { (super::widgets::butler(b)) } }
                            td { (a.reason.clone().unwrap_or_default()) }
                            td { (ago(a.created_at, now)) }
                        }
                    }
                }
            }
            (provenance_panel(&provenance, now))
        })
    }
    .await;
    layout::fragment_of(&headers, &viewer, "Rule", Section::Playbook, body)
}
