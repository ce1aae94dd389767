//! Time-aware reads: `as_of`, `since` and `until` on `memory_search`, `memory_recall` and
//! `memory_context`. A fact is selected by its validity time (when it became true, when it
//! stopped: `valid_from`, `valid_until`), so a read about last March finds the fact that was
//! true then even if it has been superseded since; an episode by when it happened; a rule by
//! when it was made. Without a window a read sees what is live now, and a superseded fact is
//! never found.
//!
//! Times are RFC 3339, or a calendar date (UTC): `since` a date starts at its first instant,
//! `as_of` and `until` a date end at its last, so `until: "2026-03-31"` covers that day.

use chrono::{DateTime, Duration, NaiveDate, NaiveTime, Utc};

use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// When a read looks: a moment (`as_of`) or a span (`since` and/or `until`, inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeWindow {
    AsOf(DateTime<Utc>),
    Span {
        since: Option<DateTime<Utc>>,
        until: Option<DateTime<Utc>>,
    },
}

/// Which end of a day a calendar date stands for.
#[derive(Debug, Clone, Copy)]
enum DayEnd {
    First,
    Last,
}

impl TimeWindow {
    /// The window a caller asked for (`None` when it asked for none): `as_of` alone, or
    /// `since` and/or `until` with `since` not after `until`.
    pub fn parse(
        as_of: Option<&str>,
        since: Option<&str>,
        until: Option<&str>,
    ) -> MemoryResult<Option<TimeWindow>> {
        let as_of = as_of
            .map(|t| parse_time("as_of", t, DayEnd::Last))
            .transpose()?;
        let since = since
            .map(|t| parse_time("since", t, DayEnd::First))
            .transpose()?;
        let until = until
            .map(|t| parse_time("until", t, DayEnd::Last))
            .transpose()?;
        match (as_of, since, until) {
            (None, None, None) => Ok(None),
            (Some(at), None, None) => Ok(Some(TimeWindow::AsOf(at))),
            (Some(_), _, _) => Err(MemoryError::new(
                ErrorCode::InvalidTimeWindow,
                "`as_of` names a moment: it cannot be combined with `since` or `until`",
            )),
            (None, Some(s), Some(u)) if s > u => Err(MemoryError::new(
                ErrorCode::InvalidTimeWindow,
                "`since` is after `until`",
            )),
            (None, since, until) => Ok(Some(TimeWindow::Span { since, until })),
        }
    }

    /// The earliest moment a selected fact was true at: it must not have stopped before.
    pub fn earliest(&self) -> Option<DateTime<Utc>> {
        match *self {
            TimeWindow::AsOf(at) => Some(at),
            TimeWindow::Span { since, .. } => since,
        }
    }

    /// The latest moment the window covers: nothing that starts after it is selected.
    pub fn latest(&self) -> Option<DateTime<Utc>> {
        match *self {
            TimeWindow::AsOf(at) => Some(at),
            TimeWindow::Span { until, .. } => until,
        }
    }

    /// The earliest episode selected: an `as_of` read sees everything that had happened by
    /// then, a span only what happened within it.
    pub fn episodes_since(&self) -> Option<DateTime<Utc>> {
        match *self {
            TimeWindow::AsOf(_) => None,
            TimeWindow::Span { since, .. } => since,
        }
    }

    /// Whether an episode that happened at `at` is in the window.
    pub fn admits_episode(&self, at: DateTime<Utc>) -> bool {
        self.episodes_since().is_none_or(|s| at >= s) && self.latest().is_none_or(|l| at <= l)
    }

    /// Whether a fact true from `valid_from` until `valid_until` (`None`: still true) was
    /// true at some moment of the window.
    pub fn admits_fact(
        &self,
        valid_from: DateTime<Utc>,
        valid_until: Option<DateTime<Utc>>,
    ) -> bool {
        self.latest().is_none_or(|l| valid_from <= l)
            && self
                .earliest()
                .is_none_or(|e| valid_until.is_none_or(|u| u > e))
    }

    /// The time a read in this window is ranked at: recency and decayed confidence as they
    /// were at the window's end (never later than `now`).
    pub fn reference(window: Option<&TimeWindow>, now: DateTime<Utc>) -> DateTime<Utc> {
        window
            .and_then(TimeWindow::latest)
            .map_or(now, |latest| latest.min(now))
    }

    /// A stable spelling for result-cache keys.
    pub fn key(window: Option<&TimeWindow>) -> String {
        match window {
            None => String::new(),
            Some(TimeWindow::AsOf(at)) => format!("as_of={}", at.to_rfc3339()),
            Some(TimeWindow::Span { since, until }) => format!(
                "since={}|until={}",
                since.map(|t| t.to_rfc3339()).unwrap_or_default(),
                until.map(|t| t.to_rfc3339()).unwrap_or_default()
            ),
        }
    }
}

/// When a fact became true, as a caller states it (`valid_from`): RFC 3339 or a date (its
/// first instant).
pub fn parse_valid_from(text: &str) -> MemoryResult<DateTime<Utc>> {
    parse_time("valid_from", text, DayEnd::First)
}

/// When an episode happened, as a caller states it (`occurred_at`): RFC 3339 or a date (its
/// first instant).
pub fn parse_occurred_at(text: &str) -> MemoryResult<DateTime<Utc>> {
    parse_time("occurred_at", text, DayEnd::First)
}

fn parse_time(field: &str, text: &str, end: DayEnd) -> MemoryResult<DateTime<Utc>> {
    let text = text.trim();
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(day) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        let first = day.and_time(NaiveTime::MIN).and_utc();
        return Ok(match end {
            DayEnd::First => first,
            DayEnd::Last => first + Duration::days(1) - Duration::microseconds(1),
        });
    }
    Err(MemoryError::new(
        ErrorCode::InvalidTime,
        format!("`{field}` must be an RFC 3339 time (2026-03-01T09:00:00Z) or a date (2026-03-01)"),
    ))
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(y: i32, m: u32, d: u32, h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, h, 0, 0).unwrap()
    }

    #[test]
    fn no_window_is_none() {
        assert_eq!(TimeWindow::parse(None, None, None).unwrap(), None);
    }

    #[test]
    fn dates_cover_whole_days() {
        let w = TimeWindow::parse(None, Some("2026-03-01"), Some("2026-03-31"))
            .unwrap()
            .unwrap();
        assert_eq!(w.earliest(), Some(at(2026, 3, 1, 0)));
        let last = w.latest().unwrap();
        assert!(last > at(2026, 3, 31, 23) && last < at(2026, 4, 1, 0));
        let w = TimeWindow::parse(Some("2026-03-15"), None, None)
            .unwrap()
            .unwrap();
        assert!(w.latest().unwrap() > at(2026, 3, 15, 23));
    }

    #[test]
    fn rfc3339_keeps_its_instant_in_utc() {
        let w = TimeWindow::parse(Some("2026-03-15T10:00:00+02:00"), None, None)
            .unwrap()
            .unwrap();
        assert_eq!(w, TimeWindow::AsOf(at(2026, 3, 15, 8)));
    }

    #[test]
    fn bad_windows_are_refused_with_their_code() {
        let code = |r: MemoryResult<Option<TimeWindow>>| r.unwrap_err().code;
        assert_eq!(
            code(TimeWindow::parse(Some("March"), None, None)),
            ErrorCode::InvalidTime
        );
        assert_eq!(
            code(TimeWindow::parse(None, Some("2026-13-01"), None)),
            ErrorCode::InvalidTime
        );
        assert_eq!(
            code(TimeWindow::parse(
                Some("2026-03-01"),
                Some("2026-02-01"),
                None
            )),
            ErrorCode::InvalidTimeWindow
        );
        assert_eq!(
            code(TimeWindow::parse(
                None,
                Some("2026-04-01"),
                Some("2026-03-01")
            )),
            ErrorCode::InvalidTimeWindow
        );
    }

    #[test]
    fn as_of_sees_every_earlier_episode_a_span_only_its_own() {
        let as_of = TimeWindow::AsOf(at(2026, 3, 15, 0));
        assert!(as_of.admits_episode(at(2025, 1, 1, 0)));
        assert!(!as_of.admits_episode(at(2026, 3, 16, 0)));
        let span = TimeWindow::Span {
            since: Some(at(2026, 3, 1, 0)),
            until: None,
        };
        assert!(!span.admits_episode(at(2026, 2, 28, 0)));
        assert!(span.admits_episode(at(2027, 1, 1, 0)));
    }

    #[test]
    fn a_window_ranks_at_its_end_but_never_after_now() {
        let now = at(2026, 5, 1, 0);
        assert_eq!(TimeWindow::reference(None, now), now);
        let past = TimeWindow::AsOf(at(2026, 3, 1, 0));
        assert_eq!(TimeWindow::reference(Some(&past), now), at(2026, 3, 1, 0));
        let future = TimeWindow::Span {
            since: None,
            until: Some(at(2027, 1, 1, 0)),
        };
        assert_eq!(TimeWindow::reference(Some(&future), now), now);
    }
}
