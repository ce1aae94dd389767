//! Charts drawn on the server as SVG: a bar per band (a distribution) and a stacked bar per
//! day (a timeline). A few rectangles with their numbers as text and a `<title>` each (what
//! a screen reader and a hover say), sized by the viewBox so they scale with the card.
//! Written here rather than with the load report's plotting library: that one draws
//! fixed-size images with its own text layout, where these are parts of a page.

use maud::{Markup, html};

/// One bar, or one segment of a stacked bar.
#[derive(Debug, Clone)]
pub struct Bar {
    pub label: String,
    pub value: i64,
    /// Its colour class (`green`, `yellow`, `red`, `grey`, `accent`).
    pub colour: &'static str,
}

const WIDTH: f64 = 300.0;
const HEIGHT: f64 = 120.0;
const AXIS: f64 = 16.0;

/// A distribution: one bar per band, left to right, the count above each.
pub fn distribution(title: &str, bars: &[Bar]) -> Markup {
    let max = bars.iter().map(|b| b.value).max().unwrap_or(0).max(1) as f64;
    let slot = WIDTH / bars.len().max(1) as f64;
    let plot = HEIGHT - AXIS - 12.0;
    html! {
        figure.chart {
            figcaption { strong { (title) } }
            svg viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img" aria-label=(title) {
                @for (i, bar) in bars.iter().enumerate() {
                    @let h = (bar.value as f64 / max * plot).max(if bar.value > 0 { 1.0 } else { 0.0 });
                    @let x = i as f64 * slot + slot * 0.15;
                    @let y = HEIGHT - AXIS - h;
                    g {
                        title { (format!("{}: {}", bar.label, bar.value)) }
                        rect.(format!("fill-{}", bar.colour)) x=(fmt(x)) y=(fmt(y))
                            width=(fmt(slot * 0.7)) height=(fmt(h)) {}
                        text x=(fmt(x + slot * 0.35)) y=(fmt(y - 2.0)) text-anchor="middle" { (bar.value) }
                        text x=(fmt(x + slot * 0.35)) y=(fmt(HEIGHT - 4.0)) text-anchor="middle" { (bar.label) }
                    }
                }
            }
        }
    }
}

/// A timeline: one stacked bar per day (segments bottom up in the order given), a legend
/// of the segments, the first and last day under the axis.
pub fn stacked(
    title: &str,
    days: &[(String, Vec<Bar>)],
    legend: &[(&str, &'static str)],
) -> Markup {
    let max = days
        .iter()
        .map(|(_, segments)| segments.iter().map(|s| s.value).sum::<i64>())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let slot = WIDTH / days.len().max(1) as f64;
    let plot = HEIGHT - AXIS - 6.0;
    html! {
        figure.chart {
            figcaption {
                strong { (title) }
                " "
                span.legend {
                    @for (name, colour) in legend {
                        span { span.swatch.(colour) {} (name) }
                    }
                }
            }
            svg viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img" aria-label=(title) {
                @for (i, (day, segments)) in days.iter().enumerate() {
                    @let x = i as f64 * slot + slot * 0.1;
                    @let total: i64 = segments.iter().map(|s| s.value).sum();
                    g {
                        title {
                            (day) ": " (total)
                            @for s in segments { @if s.value > 0 { ", " (s.label) " " (s.value) } }
                        }
                        @let mut top = HEIGHT - AXIS;
                        @for s in segments {
                            @let h = s.value as f64 / max * plot;
                            @let y = { top -= h; top };
                            @if s.value > 0 {
                                rect.(format!("fill-{}", s.colour)) x=(fmt(x)) y=(fmt(y))
                                    width=(fmt(slot * 0.8)) height=(fmt(h.max(1.0))) {}
                            }
                        }
                    }
                }
                @if let (Some((first, _)), Some((last, _))) = (days.first(), days.last()) {
                    text x="0" y=(fmt(HEIGHT - 4.0)) { (first) }
                    text x=(fmt(WIDTH)) y=(fmt(HEIGHT - 4.0)) text-anchor="end" { (last) }
                }
            }
        }
    }
}

fn fmt(v: f64) -> String {
    format!("{v:.1}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(value: i64) -> Bar {
        Bar {
            label: format!("b{value}"),
            value,
            colour: "green",
        }
    }

    #[test]
    fn a_distribution_scales_its_bars_to_the_largest() {
        let svg = distribution("c", &[bar(0), bar(5), bar(10)]).into_string();
        assert_eq!(svg.matches("<rect").count(), 3);
        // The largest fills the plot (120 - 16 - 12 = 92), half of it 46.
        assert!(svg.contains(r#"height="92.0""#), "{svg}");
        assert!(svg.contains(r#"height="46.0""#), "{svg}");
        assert!(svg.contains("b10: 10"));
    }

    #[test]
    fn a_timeline_stacks_a_day_and_skips_empty_segments() {
        let days = vec![
            ("d1".to_owned(), vec![bar(2), bar(2)]),
            ("d2".to_owned(), vec![bar(0), bar(1)]),
        ];
        let svg = stacked("t", &days, &[("x", "green")]).into_string();
        assert_eq!(svg.matches("<rect").count(), 3);
        assert!(svg.contains("d1: 4"), "{svg}");
    }
}
