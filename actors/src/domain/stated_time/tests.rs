//! What `StatedTime::find` reads, at a pinned Thursday.

use chrono::TimeZone;

use super::*;

/// Thursday 2026-11-26, 15:00 UTC.
fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 26, 15, 0, 0).unwrap()
}

/// The phrase found in `query` and the days its span covers, first and last
/// (`YYYY-MM-DD`).
fn read(query: &str) -> Option<(String, String, String)> {
    StatedTime::find(query, now()).map(|s| {
        assert!(s.since <= s.until && s.until <= now(), "{query}: {s:?}");
        let day = |t: DateTime<Utc>| t.date_naive().to_string();
        (s.phrase, day(s.since), day(s.until))
    })
}

/// Each `(query, phrase, first day, last day)` reads as that phrase and span.
fn reads_as(cases: &[(&str, &str, &str, &str)]) {
    for (query, phrase, first, last) in cases {
        let expected = (
            (*phrase).to_owned(),
            (*first).to_owned(),
            (*last).to_owned(),
        );
        assert_eq!(read(query), Some(expected), "{query}");
    }
}

#[test]
fn days_relative_to_today() {
    reads_as(&[
        (
            "what did we decide yesterday?",
            "yesterday",
            "2026-11-25",
            "2026-11-25",
        ),
        ("anything new today", "today", "2026-11-26", "2026-11-26"),
        (
            "the plan from the day before yesterday",
            "the day before yesterday",
            "2026-11-24",
            "2026-11-24",
        ),
        (
            "what did I eat last night",
            "last night",
            "2026-11-25",
            "2026-11-25",
        ),
    ]);
    let today = StatedTime::find("what happened today", now()).unwrap();
    assert_eq!(today.until, now(), "a span that has not ended ends now");
}

#[test]
fn calendar_weeks_months_and_years_before_this_one() {
    // Monday 16 to Sunday 22 November: the week before the one holding Thursday the 26th.
    reads_as(&[
        (
            "notes from last week",
            "last week",
            "2026-11-16",
            "2026-11-22",
        ),
        (
            "the previous month's budget",
            "the previous month",
            "2026-10-01",
            "2026-10-31",
        ),
        (
            "where did I travel last year",
            "last year",
            "2025-01-01",
            "2025-12-31",
        ),
        (
            "what about last weekend?",
            "last weekend",
            "2026-11-21",
            "2026-11-22",
        ),
        (
            "this week's meetings",
            "this week",
            "2026-11-23",
            "2026-11-26",
        ),
        ("goals this year", "this year", "2026-01-01", "2026-11-26"),
        (
            "the past 3 days",
            "the past 3 days",
            "2026-11-23",
            "2026-11-26",
        ),
        (
            "in the past week",
            "the past week",
            "2026-11-19",
            "2026-11-26",
        ),
    ]);
}

#[test]
fn months_and_dates_take_the_latest_that_has_begun() {
    reads_as(&[
        (
            "what did the user prefer in March",
            "in March",
            "2026-03-01",
            "2026-03-31",
        ),
        // December has not begun this year: the last one did.
        (
            "the party in December",
            "in December",
            "2025-12-01",
            "2025-12-31",
        ),
        // The latest March before this month, as "last March" is said in November.
        ("last March", "last March", "2026-03-01", "2026-03-31"),
        ("last November", "last November", "2025-11-01", "2025-11-30"),
        (
            "in March 2024?",
            "in March 2024",
            "2024-03-01",
            "2024-03-31",
        ),
        (
            "who called on May 3, 2023",
            "on May 3, 2023",
            "2023-05-03",
            "2023-05-03",
        ),
        (
            "what happened on 3 June, 2023",
            "on 3 June, 2023",
            "2023-06-03",
            "2023-06-03",
        ),
        (
            "the 5th of March",
            "the 5th of March",
            "2026-03-05",
            "2026-03-05",
        ),
        (
            "on December 24th",
            "on December 24th",
            "2025-12-24",
            "2025-12-24",
        ),
        ("trips in 2024", "in 2024", "2024-01-01", "2024-12-31"),
        (
            "logs of 2026-02-14",
            "2026-02-14",
            "2026-02-14",
            "2026-02-14",
        ),
        ("since March", "since March", "2026-03-01", "2026-11-26"),
    ]);
}

#[test]
fn weekdays_and_ago() {
    reads_as(&[
        (
            "what did I do on Monday",
            "on Monday",
            "2026-11-23",
            "2026-11-23",
        ),
        ("on Thursday", "on Thursday", "2026-11-26", "2026-11-26"),
        ("last Thursday", "last Thursday", "2026-11-19", "2026-11-19"),
        (
            "three days ago",
            "three days ago",
            "2026-11-23",
            "2026-11-23",
        ),
        (
            "a couple of weeks ago",
            "a couple of weeks ago",
            "2026-11-09",
            "2026-11-15",
        ),
        ("2 months ago", "2 months ago", "2026-09-11", "2026-10-11"),
    ]);
}

#[test]
fn words_that_are_not_a_time_state_none() {
    for query in [
        "may I ask what tea she likes",
        "what was the march about",
        "the 5 reasons",
        "the year of the dragon",
        "which day do you prefer",
        "recently opened cafes",
        "what happens next week",
        "plans for this weekend",
        "2024 goals",
        "on February 30, 2025",
        "",
    ] {
        assert_eq!(read(query), None, "{query}");
    }
}

#[test]
fn the_first_phrase_is_the_one_used() {
    reads_as(&[(
        "in May 2025 and last week",
        "in May 2025",
        "2025-05-01",
        "2025-05-31",
    )]);
}

#[test]
fn a_long_query_is_read_in_one_pass() {
    let query = "since ".repeat(6000) + "nothing";
    assert_eq!(read(&query), None);
    let query = "since ".repeat(6000) + "March";
    assert_eq!(read(&query).unwrap().0, "since March");
}
