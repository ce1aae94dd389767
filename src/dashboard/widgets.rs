//! The small pieces every page draws the same way: a confidence bar coloured by its band
//! (green above 0.8, yellow from 0.5, red below, the number beside it), badges, times, and
//! the words for an audit event.

use chrono::{DateTime, Utc};
use maud::{Markup, html};
use uuid::Uuid;

/// The colour band of a confidence or effectiveness (the plan's dashboard colours).
pub fn band(value: f64) -> &'static str {
    if value > 0.8 {
        "green"
    } else if value >= 0.5 {
        "yellow"
    } else {
        "red"
    }
}

/// A bar from 0 to 1 in its band's colour, with the value printed. SVG, because the
/// Content-Security-Policy allows no inline style.
pub fn meter(value: f64, title: &str) -> Markup {
    let width = (value.clamp(0.0, 1.0) * 100.0).round();
    html! {
        svg.meter viewBox="0 0 100 8" width="90" height="8" role="meter"
            aria-label=(title) aria-valuemin="0" aria-valuemax="1"
            aria-valuenow=(format!("{value:.2}")) {
            title { (format!("{title} {value:.2}")) }
            rect.track width="100" height="8" rx="4" {}
            rect.(format!("fill-{}", band(value))) width=(width) height="8" rx="4" {}
        }
        span.num { (format!("{value:.2}")) }
    }
}

/// A badge with a class of its own (`permanence`, `status`, ...).
pub fn badge(text: &str) -> Markup {
    html! { span.badge.(text) { (text.replace('_', " ")) } }
}

/// A butler's badge, linking to its page.
pub fn butler(name: &str) -> Markup {
    html! { a.badge.butler href=(format!("/butlers/{name}/memory")) { (name) } }
}

/// "3 min ago", with the exact time on hover.
pub fn ago(when: DateTime<Utc>, now: DateTime<Utc>) -> Markup {
    let seconds = (now - when).num_seconds();
    let text = match seconds {
        s if s < 0 => "just now".to_owned(),
        s if s < 60 => format!("{s} s ago"),
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 86_400 => format!("{} h ago", s / 3600),
        s => format!("{} d ago", s / 86_400),
    };
    html! { time datetime=(when.to_rfc3339()) title=(when.to_rfc3339()) { (text) } }
}

/// A moment to the minute: "2025-10-12 16:30 UTC" (when a fact held, when an episode
/// happened).
pub fn moment(when: DateTime<Utc>) -> String {
    when.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// A list's total, in parentheses: "(1,204)", or "(many)" when it was too slow to count.
pub fn total(total: Option<i64>) -> String {
    match total {
        Some(n) => format!("({n})"),
        None => "(many)".to_owned(),
    }
}

/// The link to a list's next page (its filters kept), when there is one.
pub fn next_page(path: &str, raw_query: Option<&str>, next: Option<Uuid>) -> Markup {
    html! {
        @if let Some(next) = next {
            p.pager { a href=(format!("{path}?{}", super::filters::with_cursor(raw_query, &next))) { "Next page →" } }
        }
    }
}

/// The first eight characters of an id.
pub fn short(id: &Uuid) -> String {
    id.to_string()[..8].to_owned()
}

/// Where a record's page is.
pub fn record_href(memory_type: &str, id: &Uuid) -> String {
    match memory_type {
        "fact" => format!("/memory/facts/{id}"),
        "rule" => format!("/memory/rules/{id}"),
        _ => format!("/memory/episodes/{id}"),
    }
}

/// A link to a record that opens it in the drawer (and is a plain link without script).
pub fn drawer_link(memory_type: &str, id: &Uuid, text: Markup) -> Markup {
    let href = record_href(memory_type, id);
    html! {
        a href=(href) hx-get=(href) hx-target="#drawer" hx-swap="innerHTML" { (text) }
    }
}

/// The words for an audit event type (`fact_superseded` reads "fact superseded").
pub fn event_words(event_type: &str) -> String {
    event_type.replace('_', " ")
}

/// The first `chars` characters of a text, with an ellipsis when cut.
pub fn excerpt(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_follow_the_plan() {
        assert_eq!(band(0.95), "green");
        assert_eq!(band(0.8), "yellow");
        assert_eq!(band(0.5), "yellow");
        assert_eq!(band(0.49), "red");
    }

    #[test]
    fn times_read_as_how_long_ago() {
        let now = Utc::now();
        let text = ago(now - chrono::Duration::minutes(3), now).into_string();
        assert!(text.contains("3 min ago"), "{text}");
    }
}
