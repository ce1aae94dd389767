//! A candidate query in a time window (`domain::time_window`): its filter with the window's
//! conditions, as a separate statement text, so the plans of reads without a window (nearly
//! all of them) keep the partial indexes of live facts they were made with.
//!
//! Facts: live or superseded (never retracted or expired), true at some moment of the
//! window (`valid_from` not after its end, `valid_until` after its start), and confident
//! enough as they were when they stopped being true, or at the window's end: a fact
//! superseded a year ago has not decayed since, as nobody could confirm it. Episodes: those
//! that happened in the window. Rules: those made by its end.
//!
//! A narrow window is read by index: a fact's `valid_from` from the shard index (migration
//! 39), an episode's time by the bounds its window implies (`index_bounds`, migration 38).
//! Without them a window before most of a tenant's memories was sought among all of them.

use std::borrow::Cow;

use chrono::{DateTime, Utc};

use super::Filter;
use crate::domain::memory_type::MemoryType;
use crate::domain::time_window::TimeWindow;
use crate::error::{MemoryError, MemoryResult};
use crate::store::columns::{effective_confidence, happened};

/// What a windowed fact filter selects instead of live facts only.
const FACTS_LIVE: &str = "f.validity IN ('active', 'fading')";
const FACTS_LIVE_OR_PAST: &str = "f.validity IN ('active', 'fading', 'superseded')";
/// When an episode happened (migration 35).
const HAPPENED: &str = happened!("e.");
/// The time the fact filter decays confidence to, without a window.
const DECAYED_TO_NOW: &str = effective_confidence!("f.", "$3");

/// A statement with the times its window adds, bound after the query's own parameters.
pub(super) struct Windowed {
    pub sql: Cow<'static, str>,
    pub times: Vec<DateTime<Utc>>,
}

impl Filter<'_> {
    /// `sql` (one of this module's candidate queries for `memory_type`, which binds `bound`
    /// parameters of its own) restricted to the filter's window; an internal error for a
    /// query without its type's filter.
    pub(super) fn windowed(
        &self,
        memory_type: MemoryType,
        sql: Cow<'static, str>,
        bound: usize,
    ) -> MemoryResult<Windowed> {
        let Some(window) = &self.window else {
            return Ok(Windowed {
                sql,
                times: Vec::new(),
            });
        };
        let mut times = Vec::new();
        let mut param = |time: DateTime<Utc>| {
            times.push(time);
            format!("${}", bound + times.len())
        };
        let (filter, windowed) = match memory_type {
            MemoryType::Episode => {
                // When it happened; an episode is never stored before it happened, so one
                // that happened since a time was also stored since then, which the
                // `(tenant_id, butler, created_at)` indexes can bound.
                let mut conditions = String::from(episode_filter!());
                let since = window.episodes_since().map(&mut param);
                let latest = window.latest().map(&mut param);
                if let Some(since) = &since {
                    conditions +=
                        &format!(" AND e.created_at >= {since} AND {HAPPENED} >= {since}");
                }
                if let Some(latest) = &latest {
                    conditions += &format!(" AND {HAPPENED} <= {latest}");
                    conditions += &index_bounds(since.as_deref(), latest);
                }
                (episode_filter!(), conditions)
            }
            MemoryType::Fact => {
                let reference = param(TimeWindow::reference(Some(window), self.now));
                let decayed_to =
                    format!("LEAST({reference}, COALESCE(f.valid_until, {reference}))");
                let mut conditions = fact_filter!()
                    .replace(FACTS_LIVE, FACTS_LIVE_OR_PAST)
                    .replace(DECAYED_TO_NOW, &DECAYED_TO_NOW.replace("$3", &decayed_to));
                if let Some(latest) = window.latest() {
                    conditions += &format!(" AND f.valid_from <= {}", param(latest));
                }
                if let Some(earliest) = window.earliest() {
                    conditions += &format!(
                        " AND (f.valid_until IS NULL OR f.valid_until > {})",
                        param(earliest)
                    );
                }
                (fact_filter!(), conditions)
            }
            MemoryType::Rule => {
                let mut conditions = String::from(rule_filter!());
                if let Some(latest) = window.latest() {
                    conditions += &format!(" AND r.created_at <= {}", param(latest));
                }
                (rule_filter!(), conditions)
            }
        };
        // A query without its type's filter would run unwindowed: a wrong answer, so an
        // error instead (every query of this module has it; the tests run each in a window).
        if !sql.contains(filter) {
            return Err(MemoryError::internal(format!(
                "a candidate query of {memory_type} lacks its type's filter"
            )));
        }
        Ok(Windowed {
            sql: Cow::Owned(sql.replace(filter, &windowed)),
            times,
        })
    }
}

/// What a window with an end implies of an episode, in terms its indexes serve: stored in
/// the window (`created_at`, the `(tenant_id, butler, created_at)` indexes), or said to have
/// happened in it (`occurred_at`, the partial index of migration 38). Implied, not
/// equivalent: the window's own conditions stay (an episode stored in the window may have
/// happened before it). Without it, nothing bounded a window from above, and a day last June
/// was sought among every episode stored since (docs/benchmarks.md, "A narrow window found by
/// its index").
fn index_bounds(since: Option<&str>, latest: &str) -> String {
    match since {
        Some(since) => format!(
            " AND (e.created_at BETWEEN {since} AND {latest} \
             OR e.occurred_at BETWEEN {since} AND {latest})"
        ),
        None => format!(" AND (e.created_at <= {latest} OR e.occurred_at <= {latest})"),
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::domain::search::SearchScope;

    fn scope() -> SearchScope {
        SearchScope {
            tenant_id: "t".into(),
            scopes: None,
            butlers: None,
        }
    }

    fn at(month: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, month, 1, 0, 0, 0).unwrap()
    }

    fn filter(scope: &SearchScope, window: Option<TimeWindow>) -> Filter<'_> {
        Filter {
            scope,
            now: at(6),
            min_confidence: 0.2,
            embedding_version: None,
            window,
        }
    }

    const FACTS: &str = concat!("SELECT 1 FROM facts f WHERE ", fact_filter!(), " LIMIT $6");

    #[test]
    fn without_a_window_the_statement_is_unchanged() {
        let scope = scope();
        let w = filter(&scope, None)
            .windowed(MemoryType::Fact, Cow::Borrowed(FACTS), 6)
            .unwrap();
        assert_eq!(w.sql, FACTS);
        assert!(w.times.is_empty());
    }

    #[test]
    fn an_as_of_fact_query_admits_superseded_facts_true_then() {
        let scope = scope();
        let window = TimeWindow::AsOf(at(3));
        let w = filter(&scope, Some(window))
            .windowed(MemoryType::Fact, Cow::Borrowed(FACTS), 6)
            .unwrap();
        assert!(w.sql.contains(FACTS_LIVE_OR_PAST), "{}", w.sql);
        assert!(!w.sql.contains("($3 - f.last_confirmed_at)"), "{}", w.sql);
        assert!(w.sql.contains("LEAST($7, COALESCE(f.valid_until, $7))"));
        assert!(w.sql.contains("f.valid_from <= $8"));
        assert!(w.sql.contains("f.valid_until > $9"));
        assert_eq!(w.times, vec![at(3), at(3), at(3)]);
    }

    #[test]
    fn a_query_without_its_types_filter_is_an_error_not_an_unwindowed_read() {
        let scope = scope();
        let window = Some(TimeWindow::AsOf(at(3)));
        let wrong = filter(&scope, window).windowed(MemoryType::Rule, Cow::Borrowed(FACTS), 6);
        assert!(wrong.is_err());
    }

    #[test]
    fn an_open_span_binds_only_its_bounds() {
        let scope = scope();
        let window = TimeWindow::Span {
            since: Some(at(2)),
            until: None,
        };
        let sql = concat!(
            "SELECT 1 FROM episodes e WHERE ",
            episode_filter!(),
            " LIMIT $6"
        );
        let w = filter(&scope, Some(window))
            .windowed(MemoryType::Episode, Cow::Borrowed(sql), 6)
            .unwrap();
        assert!(
            w.sql.ends_with(
                "AND e.created_at >= $7 AND COALESCE(e.occurred_at, e.created_at) >= $7 LIMIT $6"
            ),
            "{}",
            w.sql
        );
        assert_eq!(w.times, vec![at(2)]);
        // A fact query ranks at now (the span has no end) and needs no upper bound.
        let w = filter(&scope, Some(window))
            .windowed(MemoryType::Fact, Cow::Borrowed(FACTS), 7)
            .unwrap();
        assert_eq!(w.times, vec![at(6), at(2)]);
        assert!(!w.sql.contains("f.valid_from <="));
    }

    #[test]
    fn an_episode_window_with_an_end_is_also_bounded_by_what_its_indexes_serve() {
        let scope = scope();
        let sql = concat!(
            "SELECT 1 FROM episodes e WHERE ",
            episode_filter!(),
            " LIMIT $6"
        );
        let span = TimeWindow::Span {
            since: Some(at(2)),
            until: Some(at(3)),
        };
        let w = filter(&scope, Some(span))
            .windowed(MemoryType::Episode, Cow::Borrowed(sql), 6)
            .unwrap();
        assert!(
            w.sql.ends_with(
                "AND e.created_at >= $7 AND COALESCE(e.occurred_at, e.created_at) >= $7 \
                 AND COALESCE(e.occurred_at, e.created_at) <= $8 \
                 AND (e.created_at BETWEEN $7 AND $8 OR e.occurred_at BETWEEN $7 AND $8) LIMIT $6"
            ),
            "{}",
            w.sql
        );
        assert_eq!(w.times, vec![at(2), at(3)]);
        // As of a time: everything that had happened by then, stored by then or said to have.
        let w = filter(&scope, Some(TimeWindow::AsOf(at(3))))
            .windowed(MemoryType::Episode, Cow::Borrowed(sql), 6)
            .unwrap();
        assert!(
            w.sql.ends_with(
                "AND COALESCE(e.occurred_at, e.created_at) <= $7 \
                 AND (e.created_at <= $7 OR e.occurred_at <= $7) LIMIT $6"
            ),
            "{}",
            w.sql
        );
        assert_eq!(w.times, vec![at(3)]);
    }
}
