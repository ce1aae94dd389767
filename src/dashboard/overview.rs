//! The overview (`/memory`) and a butler's page (`/butlers/{name}/memory`): cards a person
//! reads at a glance (facts by permanence, rules by maturity, active episodes, what is
//! fading, the consolidation backlog and when consolidation last ran), four charts
//! (confidence of facts, effectiveness of rules, episodes per day, lifecycle activity per
//! day) and the live feed. A butler's page is the same for what that butler sees, whoever
//! looks (`Engine::butler_stats` and its lists: the facts and rules of scope `global` or
//! its own, its episodes, the events of those), with the newest of them and links to all of
//! them; its lifecycle chart and last consolidation are its shard's runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use butler_memory_actors::{
    EpisodeQuery, FactQuery, MemoryResult, MemoryStats, Role, RuleQuery, Timeline, TimelineDay,
};
use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::charts::{self, Bar};
use super::layout::{self, Section};
use super::session::Viewer;
use super::widgets::{ago, badge, drawer_link, excerpt, meter};
use crate::app_state::AppState;

/// Days the timeline charts cover.
const TIMELINE_DAYS: u32 = 14;
/// Records of each type a butler's page lists.
const BUTLER_PAGE_ITEMS: u32 = 10;

/// `GET /memory`
pub async fn overview(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
) -> Response {
    if viewer.caller.role == Role::Operator {
        return Redirect::to("/operators").into_response();
    }
    match render(&state, &viewer, None).await {
        Ok(body) => layout::page(&viewer, "Overview", Section::Overview, body),
        Err(e) => layout::error_page(Some(&viewer), &e),
    }
}

/// `GET /butlers/{name}/memory`
pub async fn butler(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    Path(name): Path<String>,
) -> Response {
    let body = async {
        let summary = render(&state, &viewer, Some(name.clone())).await?;
        let records = butler_records(&state, &viewer, &name).await?;
        Ok::<_, butler_memory_actors::MemoryError>(html! { (summary) (records) })
    }
    .await;
    layout::page_of(&viewer, &name, Section::Overview, body)
}

async fn render(state: &AppState, viewer: &Viewer, butler: Option<String>) -> MemoryResult<Markup> {
    let engine = &state.engine;
    let caller = &viewer.caller;
    let stats = match &butler {
        Some(b) => engine.butler_stats(caller, b, None).await?,
        None => engine.stats(caller, None, None).await?,
    };
    let timeline = engine
        .timeline(caller, butler.clone(), Some(TIMELINE_DAYS))
        .await?;
    let events = super::feed::recent(state, viewer, butler.clone()).await?;
    let now = engine.clock().now();
    Ok(html! {
        h1 {
            @match &butler {
                Some(b) => { "Butler " (b) }
                None => { "Memory of " (caller.tenant_id) }
            }
        }
        div.layout {
            div {
                (cards(&stats, now))
                div.charts {
                    (confidence_chart(&stats))
                    (effectiveness_chart(&stats))
                    (episodes_chart(&timeline))
                    (lifecycle_chart(&timeline))
                }
            }
            div { (super::feed::panel(&events, now, butler.as_deref())) }
        }
    })
}

fn count(breakdown: &BTreeMap<String, BTreeMap<String, i64>>, dim: &str, key: &str) -> i64 {
    breakdown
        .get(dim)
        .and_then(|m| m.get(key))
        .copied()
        .unwrap_or(0)
}

fn cards(stats: &MemoryStats, now: DateTime<Utc>) -> Markup {
    let facts = &stats.facts.breakdown;
    let rules = &stats.rules.breakdown;
    let live_facts: i64 = facts
        .get("permanence")
        .map(|m| m.values().sum())
        .unwrap_or(0);
    let live_rules: i64 = rules.get("maturity").map(|m| m.values().sum()).unwrap_or(0);
    let episodes = &stats.episodes;
    let active_episodes = episodes.total - episodes.forgotten - episodes.expired;
    let fading = count(facts, "validity", "fading") + count(rules, "validity", "fading");
    let backlog = &stats.consolidation_backlog;
    let last_consolidation = stats.last_runs.get("consolidation").copied().flatten();
    html! {
        div.cards {
            div.card #card-facts {
                div.label { "Live facts" }
                div.value { (live_facts) }
                div.detail {
                    @for p in ["permanent", "stable", "standard", "volatile", "ephemeral"] {
                        @let n = count(facts, "permanence", p);
                        @if n > 0 { (badge(p)) (n) " " }
                    }
                }
            }
            div.card #card-rules {
                div.label { "Live rules" }
                div.value { (live_rules) }
                div.detail {
                    @for m in ["proven", "established", "candidate", "anti_pattern"] {
                        @let n = count(rules, "maturity", m);
                        @if n > 0 { (badge(m)) (n) " " }
                    }
                }
            }
            div.card #card-episodes {
                div.label { "Active episodes" }
                div.value { (active_episodes) }
                div.detail { (episodes.unembedded) " waiting for embedding" }
            }
            div.card #card-fading {
                div.label { "Fading" }
                div.value { (fading) }
                div.detail { "facts and rules losing confidence" }
            }
            div.card #card-backlog {
                div.label { "Consolidation backlog" }
                div.value { (backlog.size) }
                div.detail {
                    @if let Some(oldest) = backlog.oldest_created_at { "oldest " (ago(oldest, now)) } @else { "nothing waiting" }
                    br;
                    "last consolidation: "
                    @if let Some(t) = last_consolidation { (ago(t, now)) } @else { "never" }
                    br;
                    span #extractor { "extractor: " (extractor_line(&stats.consolidation_extractor)) }
                }
            }
        }
    }
}

/// What extracts now, and the local model's state: "local (ready)", or "heuristic (local
/// model unavailable: ...)" when the heuristic extractor stands in.
fn extractor_line(status: &butler_memory_actors::ExtractorStatus) -> String {
    match &status.local_model {
        Some(model) if status.active != status.configured => format!(
            "{} (local model {}: {})",
            status.active,
            model.state.as_str(),
            model.last_error.as_deref().unwrap_or("no reason given")
        ),
        Some(model) => format!("{} ({})", status.active, model.state.as_str()),
        None => status.active.clone(),
    }
}

/// One bar per band of a breakdown's dimension: (label, key, colour).
fn band_bars(
    breakdown: &BTreeMap<String, BTreeMap<String, i64>>,
    dim: &str,
    bands: &[(&str, &str, &'static str)],
) -> Vec<Bar> {
    bands
        .iter()
        .map(|(label, key, colour)| Bar {
            label: (*label).to_owned(),
            value: count(breakdown, dim, key),
            colour,
        })
        .collect()
}

fn confidence_chart(stats: &MemoryStats) -> Markup {
    let bands = [
        ("< .05", "below_0.05", "red"),
        (".05–.2", "0.05_to_0.2", "red"),
        (".2–.5", "0.2_to_0.5", "red"),
        (".5–.8", "0.5_to_0.8", "yellow"),
        ("≥ .8", "0.8_and_above", "green"),
    ];
    let bars = band_bars(&stats.facts.breakdown, "effective_confidence", &bands);
    charts::distribution("Confidence of live facts", &bars)
}

fn effectiveness_chart(stats: &MemoryStats) -> Markup {
    let bands = [
        ("unrated", "unrated", "grey"),
        ("< .3", "below_0.3", "red"),
        (".3–.6", "0.3_to_0.6", "yellow"),
        (".6–.8", "0.6_to_0.8", "yellow"),
        ("≥ .8", "0.8_and_above", "green"),
    ];
    let bars = band_bars(&stats.rules.breakdown, "effectiveness", &bands);
    charts::distribution("Effectiveness of live rules", &bars)
}

/// One stacked bar per day of the timeline: a segment per (key, colour) of the counts
/// `of` picks from the day.
fn day_bars(
    timeline: &Timeline,
    of: fn(&TimelineDay) -> &BTreeMap<String, i64>,
    series: &[(&str, &'static str)],
) -> Vec<(String, Vec<Bar>)> {
    timeline
        .days
        .iter()
        .map(|d| {
            let segments = series
                .iter()
                .map(|(key, colour)| Bar {
                    label: key.replace('_', " "),
                    value: of(d).get(*key).copied().unwrap_or(0),
                    colour,
                })
                .collect();
            (d.day.format("%b %-d").to_string(), segments)
        })
        .collect()
}

fn episodes_chart(timeline: &Timeline) -> Markup {
    let statuses = [
        ("consolidated", "green"),
        ("pending", "yellow"),
        ("failed", "grey"),
        ("dead_letter", "red"),
    ];
    charts::stacked(
        "Episodes per day",
        &day_bars(timeline, |d| &d.episodes, &statuses),
        &[
            ("consolidated", "green"),
            ("pending", "yellow"),
            ("dead letter", "red"),
        ],
    )
}

fn lifecycle_chart(timeline: &Timeline) -> Markup {
    let kinds = [
        ("consolidation", "accent"),
        ("decay_sweep", "yellow"),
        ("episode_cleanup", "grey"),
    ];
    charts::stacked(
        "Lifecycle changes per day",
        &day_bars(timeline, |d| &d.changes, &kinds),
        &[
            ("consolidation", "accent"),
            ("decay", "yellow"),
            ("cleanup", "grey"),
        ],
    )
}

/// The newest facts, rules and episodes a butler sees, each with a link to all of them (the
/// facts and playbook pages as it sees them, its episodes).
async fn butler_records(state: &AppState, viewer: &Viewer, name: &str) -> MemoryResult<Markup> {
    let engine = &state.engine;
    let caller = &viewer.caller;
    let facts = engine
        .butler_facts(
            caller,
            name,
            FactQuery {
                limit: Some(BUTLER_PAGE_ITEMS),
                ..FactQuery::default()
            },
        )
        .await?;
    let rules = engine
        .butler_rules(
            caller,
            name,
            RuleQuery {
                limit: Some(BUTLER_PAGE_ITEMS),
                ..RuleQuery::default()
            },
        )
        .await?;
    let episodes = engine
        .butler_episodes(
            caller,
            name,
            EpisodeQuery {
                limit: Some(BUTLER_PAGE_ITEMS),
                ..EpisodeQuery::default()
            },
        )
        .await?;
    Ok(html! {
        div.charts {
            section.panel {
                h2 { "Facts it sees " span.muted { (super::widgets::total(facts.total)) } }
                ul { @for f in &facts.items {
                    li { (drawer_link("fact", &f.id, html! { (f.subject) " · " (f.predicate) })) " " (meter(f.effective_confidence, "confidence")) }
                } }
                a href=(format!("/memory/facts?butler={name}")) { "All its facts →" }
            }
            section.panel {
                h2 { "Rules it sees " span.muted { (super::widgets::total(rules.total)) } }
                ul { @for r in &rules.items {
                    li { (badge(r.maturity.as_str())) (drawer_link("rule", &r.id, html! { (r.content) })) }
                } }
                a href=(format!("/memory/playbook?butler={name}")) { "All its rules →" }
            }
            section.panel {
                h2 { "Its episodes " span.muted { (super::widgets::total(episodes.total)) } }
                ul { @for e in &episodes.items {
                    li { (badge(e.consolidation_status.as_str())) (drawer_link("episode", &e.id, html! { (excerpt(&e.content, 80)) })) }
                } }
                a href=(format!("/memory/episodes?butler={name}")) { "All its episodes →" }
            }
        }
    })
}
