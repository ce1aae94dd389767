//! A scenario's pass/fail conditions, k6-style, as short sentences:
//!
//! ```text
//! memory_context p95 < 250ms          a tool's latency: p50 p90 p95 p99 p999 max mean (us, ms, s)
//! errors rate < 0.1%                  calls that failed, of all calls (or a fraction: 0.001)
//! errors{class!="overloaded"} rate < 0.1%   ... only of a class, or all but one
//! memory_search errors rate < 1%      ... of one tool
//! lost == 0                           acknowledged episodes not read back
//! duplicated == 0                     ids acknowledged for two different writes
//! client_waits == 0                   calls that waited for the client's concurrency cap
//! ```
//!
//! Comparisons: `<`, `<=`, `>`, `>=`, `==`. A run breaches a threshold when the condition does
//! not hold, or when what it names was never measured (a tool never called).

use serde::Deserialize;

/// What a threshold measures.
#[derive(Debug, Clone, PartialEq)]
pub enum Metric {
    /// A tool's latency percentile (`None`: the mean; `Some(100.0)`: the maximum), in ms.
    Latency {
        tool: String,
        percentile: Option<f64>,
    },
    /// The share of failed calls, of one tool or all, of one class, all but one, or any.
    ErrorRate {
        tool: Option<String>,
        class: ClassFilter,
    },
    Lost,
    Duplicated,
    ClientWaits,
}

/// Which error classes an error rate counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassFilter {
    Any,
    Only(String),
    AllBut(String),
}

impl ClassFilter {
    pub fn counts(&self, class: &str) -> bool {
        match self {
            ClassFilter::Any => true,
            ClassFilter::Only(c) => c == class,
            ClassFilter::AllBut(c) => c != class,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    Equal,
}

/// One condition, as written and as parsed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "String")]
pub struct Threshold {
    pub text: String,
    pub metric: Metric,
    pub comparison: Comparison,
    /// In the metric's unit: ms for latency, a fraction for rates, a count otherwise.
    pub limit: f64,
}

impl TryFrom<String> for Threshold {
    type Error = String;

    fn try_from(text: String) -> Result<Threshold, String> {
        let why = |what: &str| format!("threshold `{text}`: {what}");
        let (left, comparison, right) = split_comparison(&text)
            .ok_or_else(|| why("needs one comparison: <, <=, >, >= or =="))?;
        let words: Vec<&str> = left.split_whitespace().collect();
        let (metric, unit) = match words.as_slice() {
            ["lost"] => (Metric::Lost, Unit::Count),
            ["duplicated"] => (Metric::Duplicated, Unit::Count),
            ["client_waits"] => (Metric::ClientWaits, Unit::Count),
            [errors, "rate"] if errors.starts_with("errors") => (
                Metric::ErrorRate {
                    tool: None,
                    class: class_filter(errors).ok_or_else(|| why("a bad class filter"))?,
                },
                Unit::Fraction,
            ),
            [tool, errors, "rate"] if errors.starts_with("errors") => (
                Metric::ErrorRate {
                    tool: Some((*tool).to_owned()),
                    class: class_filter(errors).ok_or_else(|| why("a bad class filter"))?,
                },
                Unit::Fraction,
            ),
            [tool, stat] => {
                let percentile = match *stat {
                    "mean" => None,
                    "max" => Some(100.0),
                    "p999" => Some(99.9),
                    p => Some(
                        p.strip_prefix('p')
                            .and_then(|n| n.parse::<f64>().ok())
                            .filter(|n| (0.0..100.0).contains(n))
                            .ok_or_else(|| {
                                why("a latency is p50, p90, p95, p99, p999, max or mean")
                            })?,
                    ),
                };
                (
                    Metric::Latency {
                        tool: (*tool).to_owned(),
                        percentile,
                    },
                    Unit::Duration,
                )
            }
            _ => return Err(why("names no metric (see docs/load.md)")),
        };
        let limit = unit
            .parse(right.trim())
            .ok_or_else(|| why(unit.expected()))?;
        Ok(Threshold {
            text: text.clone(),
            metric,
            comparison,
            limit,
        })
    }
}

impl Threshold {
    /// Whether `value` (in the metric's unit) meets the condition.
    pub fn holds(&self, value: f64) -> bool {
        match self.comparison {
            Comparison::Less => value < self.limit,
            Comparison::LessOrEqual => value <= self.limit,
            Comparison::Greater => value > self.limit,
            Comparison::GreaterOrEqual => value >= self.limit,
            Comparison::Equal => (value - self.limit).abs() < 1e-9,
        }
    }
}

fn split_comparison(text: &str) -> Option<(&str, Comparison, &str)> {
    // Two-character operators first, so `<=` is not read as `<`.
    for (op, comparison) in [
        ("<=", Comparison::LessOrEqual),
        (">=", Comparison::GreaterOrEqual),
        ("==", Comparison::Equal),
        ("<", Comparison::Less),
        (">", Comparison::Greater),
    ] {
        if let Some(at) = text.find(op) {
            let rest = &text[at + op.len()..];
            if rest.contains(['<', '>', '=']) {
                return None;
            }
            return Some((&text[..at], comparison, rest));
        }
    }
    None
}

/// `errors`, `errors{class="x"}` or `errors{class!="x"}`.
fn class_filter(word: &str) -> Option<ClassFilter> {
    let inner = word.strip_prefix("errors")?;
    if inner.is_empty() {
        return Some(ClassFilter::Any);
    }
    let inner = inner.strip_prefix('{')?.strip_suffix('}')?;
    let quoted = |v: &str| v.strip_prefix('"')?.strip_suffix('"').map(str::to_owned);
    if let Some(v) = inner.strip_prefix("class!=") {
        return quoted(v).map(ClassFilter::AllBut);
    }
    inner
        .strip_prefix("class=")
        .and_then(quoted)
        .map(ClassFilter::Only)
}

#[derive(Clone, Copy)]
enum Unit {
    Duration,
    Fraction,
    Count,
}

impl Unit {
    fn parse(self, text: &str) -> Option<f64> {
        let number = |t: &str| t.trim().parse::<f64>().ok().filter(|n| n.is_finite());
        match self {
            Unit::Duration => {
                let (n, scale) = if let Some(n) = text.strip_suffix("ms") {
                    (n, 1.0)
                } else if let Some(n) = text.strip_suffix("us") {
                    (n, 0.001)
                } else if let Some(n) = text.strip_suffix('s') {
                    (n, 1000.0)
                } else {
                    return None;
                };
                number(n).map(|n| n * scale)
            }
            Unit::Fraction => match text.strip_suffix('%') {
                Some(n) => number(n).map(|n| n / 100.0),
                None => number(text),
            },
            Unit::Count => number(text),
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Unit::Duration => "a latency limit needs a unit: 250ms, 1.5s, 800us",
            Unit::Fraction => "a rate limit is a percentage (0.1%) or a fraction (0.001)",
            Unit::Count => "a count limit is a number",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Threshold, String> {
        Threshold::try_from(text.to_owned())
    }

    #[test]
    fn latencies_with_units() {
        let t = parse("memory_context p95 < 250ms").unwrap();
        assert_eq!(
            t.metric,
            Metric::Latency {
                tool: "memory_context".into(),
                percentile: Some(95.0)
            }
        );
        assert_eq!(t.limit, 250.0);
        assert!(t.holds(249.9) && !t.holds(250.0));
        assert_eq!(parse("memory_search max <= 1.5s").unwrap().limit, 1500.0);
        assert_eq!(parse("memory_search p999 < 800us").unwrap().limit, 0.8);
        assert!(parse("memory_search p95 < 250").is_err(), "no unit");
    }

    #[test]
    fn error_rates_with_class_filters() {
        let t = parse(r#"errors{class!="overloaded"} rate < 0.1%"#).unwrap();
        assert_eq!(
            t.metric,
            Metric::ErrorRate {
                tool: None,
                class: ClassFilter::AllBut("overloaded".into())
            }
        );
        assert!((t.limit - 0.001).abs() < 1e-12);
        let t = parse(r#"memory_search errors{class="unavailable"} rate <= 0.01"#).unwrap();
        assert_eq!(
            t.metric,
            Metric::ErrorRate {
                tool: Some("memory_search".into()),
                class: ClassFilter::Only("unavailable".into())
            }
        );
        assert!(parse("errors{class~\"x\"} rate < 1%").is_err());
    }

    #[test]
    fn counts_and_nonsense() {
        let t = parse("lost == 0").unwrap();
        assert!(t.holds(0.0) && !t.holds(1.0));
        assert!(parse("duplicated == 0").is_ok());
        assert!(parse("client_waits <= 10").is_ok());
        assert!(parse("lost").is_err());
        assert!(parse("lost < 1 < 2").is_err());
        assert!(parse("happiness > 3").is_err());
    }
}
