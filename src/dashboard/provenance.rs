//! Why a record exists, as the drawer shows it: the episode it came from (and its butler),
//! the records linked to it both ways, a fact's every version (the supersession chain,
//! oldest first), what was derived from an episode, and its events in the audit stream
//! with who did what under which request.

use butler_memory_actors::{MemoryRecord, Provenance, Validity};
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use uuid::Uuid;

use super::widgets::{ago, badge, butler, drawer_link, event_words, excerpt, short};

/// The provenance sections of a record's drawer.
pub fn provenance_panel(p: &Provenance, now: DateTime<Utc>) -> Markup {
    let links = &p.record.links;
    html! {
        section #provenance {
            @if let Some(e) = &p.source_episode {
                h3 { "Source episode" }
                p {
                    (butler(&e.butler)) " "
                    (drawer_link("episode", &e.id, html! { (excerpt(&e.content, 160)) }))
                    " " span.muted { (ago(e.created_at, now)) }
                }
            }
            @if p.versions.len() > 1 {
                h3 { "Versions (oldest first)" }
                ol #versions {
                    @for v in &p.versions {
                        li.superseded[v.validity == Validity::Superseded] {
                            (drawer_link("fact", &v.id, html! { span.content { (v.content) } }))
                            " " (badge(v.validity.as_str()))
                            " " span.muted { (ago(v.created_at, now)) }
                        }
                    }
                }
            }
            @if !p.derived.is_empty() {
                h3 { "Derived from it" }
                ul { @for r in &p.derived { li { (record_line(r)) } } }
            }
            @if !links.outbound.is_empty() || !links.inbound.is_empty() {
                h3 { "Links" }
                ul {
                    @for l in &links.outbound {
                        li { (l.relation.as_str().replace('_', " ")) " → " (link_to(l.target_type.as_str(), &l.target_id)) }
                    }
                    @for l in &links.inbound {
                        li { (link_to(l.source_type.as_str(), &l.source_id)) " " (l.relation.as_str().replace('_', " ")) " this" }
                    }
                }
            }
            h3 { "Events" }
            table.records.events {
                tbody {
                    @for e in &p.events {
                        tr {
                            td { (event_words(&e.event_type)) }
                            td { (e.actor) }
                            td { (ago(e.occurred_at, now)) }
                            td.muted { @if let Some(r) = &e.request_id { "request " code { (r) } } }
                        }
                    }
                }
            }
        }
    }
}

fn link_to(memory_type: &str, id: &Uuid) -> Markup {
    drawer_link(memory_type, id, html! { (memory_type) " " (short(id)) })
}

/// One record in a list: its type, a link, and what it says.
fn record_line(record: &MemoryRecord) -> Markup {
    match record {
        MemoryRecord::Fact(f) => html! {
            (drawer_link("fact", &f.id, html! { "fact " (f.subject) " · " (f.predicate) })) ": " (excerpt(&f.content, 120))
        },
        MemoryRecord::Rule(r) => html! {
            (drawer_link("rule", &r.id, html! { "rule" })) ": " (excerpt(&r.content, 120))
        },
        MemoryRecord::Episode(e) => html! {
            (drawer_link("episode", &e.id, html! { "episode" })) ": " (excerpt(&e.content, 120))
        },
    }
}
