//! The time a query states: "what did we decide yesterday", "the plan from last week", "what
//! did she prefer in March", "on 5 May 2025", "three days ago". A read that names a time means
//! the memories of that time, so a search ranks them first (`reader::search`): episodes that
//! happened in it, facts that were true in it (superseded ones included, as with `as_of`),
//! everything else at a share of its score. It is a preference, not a filter: a misread phrase
//! reorders, it never hides an answer.
//!
//! English calendar words only, resolved against the read's clock in UTC: days, weeks (Monday
//! first), weekends, months, years, weekdays, "N units ago", dates written out or ISO. The
//! first phrase in the query is the one used. Not read: vague words ("recently", "lately"),
//! the future ("next week"; memories are of what has happened), seasons (the hemisphere is
//! unknown), numeric dates such as 5/3/2025 (day or month first is unknown), and a month name
//! alone unless a preposition or a day or year makes it one ("may I" is not May).

use chrono::{DateTime, Datelike, Days, Duration, Months, NaiveDate, NaiveTime, Utc, Weekday};
use serde::Serialize;

use super::time_window::TimeWindow;

/// A time a query states: the words and the span they mean.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct StatedTime {
    /// The words as the query has them.
    pub phrase: String,
    /// The span's first instant.
    pub since: DateTime<Utc>,
    /// The span's last instant (now for a span that has not ended).
    pub until: DateTime<Utc>,
}

impl StatedTime {
    /// The first time `text` states, read at `now`; `None` when it states none (or only a
    /// future one).
    pub fn find(text: &str, now: DateTime<Utc>) -> Option<StatedTime> {
        let words = words(text);
        (0..words.len()).find_map(|i| {
            let (end, span) = phrase_at(&words, i, now)?;
            let (since, until) = span.resolve(now)?;
            Some(StatedTime {
                phrase: text[words[i].start..words[end - 1].end].to_owned(),
                since,
                until,
            })
        })
    }

    /// The span as a read window.
    pub fn window(&self) -> TimeWindow {
        TimeWindow::Span {
            since: Some(self.since),
            until: Some(self.until),
        }
    }
}

/// A word of the query: lower-cased, with where it stands in the text.
struct Word {
    text: String,
    start: usize,
    end: usize,
}

/// The query's words: letters, digits and the hyphens of ISO dates; everything else parts them.
fn words(text: &str) -> Vec<Word> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices().chain([(text.len(), ' ')]) {
        let part = c.is_alphanumeric() || c == '-';
        match (start, part) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                out.push(Word {
                    text: text[s..i].to_lowercase(),
                    start: s,
                    end: i,
                });
                start = None;
            }
            _ => {}
        }
    }
    out
}

/// A span in calendar terms, before it is checked against now.
enum Span {
    /// Whole days, first to last.
    Days(NaiveDate, NaiveDate),
    /// From an instant to now ("since March", "the past week", "today").
    SinceThen(DateTime<Utc>),
    /// Between two instants.
    Between(DateTime<Utc>, DateTime<Utc>),
}

impl Span {
    /// The span's first and last instants; `None` when it starts after `now`.
    fn resolve(self, now: DateTime<Utc>) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let (since, until) = match self {
            Span::Days(first, last) => (midnight(first), midnight(last.succ_opt()?) - TICK),
            Span::SinceThen(since) => (since, now),
            Span::Between(since, until) => (since, until),
        };
        (since <= now).then_some((since, until.min(now)))
    }
}

/// The smallest step of a timestamp: a span's last instant is one before the next's first.
const TICK: Duration = Duration::microseconds(1);

fn midnight(day: NaiveDate) -> DateTime<Utc> {
    day.and_time(NaiveTime::MIN).and_utc()
}

/// A calendar unit a phrase counts in.
#[derive(Clone, Copy)]
enum Unit {
    Hour,
    Day,
    Week,
    Month,
    Year,
}

fn unit(word: &str) -> Option<Unit> {
    Some(match word.strip_suffix('s').unwrap_or(word) {
        "hour" => Unit::Hour,
        "day" => Unit::Day,
        "week" => Unit::Week,
        "month" => Unit::Month,
        "year" => Unit::Year,
        _ => return None,
    })
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// A month's number (1–12), by its name or its common three-letter form ("sept" too).
fn month(word: &str) -> Option<u32> {
    let word = if word == "sept" { "sep" } else { word };
    MONTHS
        .iter()
        .position(|m| *m == word || (word.len() == 3 && m.starts_with(word)))
        .map(|i| i as u32 + 1)
}

fn weekday(word: &str) -> Option<Weekday> {
    let day = word.strip_suffix('s').unwrap_or(word);
    day.parse::<Weekday>().ok().filter(|_| day.ends_with("day"))
}

/// A count written as digits or as a small number word.
fn count(word: &str) -> Option<u32> {
    const NUMBERS: [&str; 12] = [
        "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve",
    ];
    match word {
        "a" | "an" => Some(1),
        "few" => Some(3),
        "couple" => Some(2),
        _ => word
            .parse()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .or_else(|| {
                NUMBERS
                    .iter()
                    .position(|n| *n == word)
                    .map(|i| i as u32 + 1)
            }),
    }
}

/// A day of the month: "5", "5th", "21st".
fn day_of_month(word: &str) -> Option<u32> {
    let digits = ["st", "nd", "rd", "th"]
        .iter()
        .find_map(|s| word.strip_suffix(s))
        .unwrap_or(word);
    digits.parse().ok().filter(|d| (1..=31).contains(d))
}

/// A year: four digits from 1900 to 2199.
fn year(word: &str) -> Option<i32> {
    (word.len() == 4)
        .then(|| word.parse().ok())
        .flatten()
        .filter(|y| (1900..2200).contains(y))
}

/// Words that make a following month name or year a time ("in May", "since 2024").
fn leads_a_time(word: &str) -> bool {
    matches!(
        word,
        "in" | "during" | "since" | "on" | "of" | "from" | "throughout" | "through"
    )
}

/// The phrase starting at word `i`: the index after its last word and the span it means.
fn phrase_at(words: &[Word], i: usize, now: DateTime<Utc>) -> Option<(usize, Span)> {
    let at = |k: usize| words.get(k).map(|w| w.text.as_str());
    let today = now.date_naive();
    let w = at(i)?;
    if let Ok(day) = NaiveDate::parse_from_str(w, "%Y-%m-%d") {
        return Some((i + 1, Span::Days(day, day)));
    }
    match w {
        "today" | "tonight" => return Some((i + 1, Span::SinceThen(midnight(today)))),
        "yesterday" => {
            let day = today.pred_opt()?;
            return Some((i + 1, Span::Days(day, day)));
        }
        "the"
            if at(i + 1) == Some("day")
                && at(i + 2) == Some("before")
                && at(i + 3) == Some("yesterday") =>
        {
            let day = today.checked_sub_days(Days::new(2))?;
            return Some((i + 4, Span::Days(day, day)));
        }
        "the" if matches!(at(i + 1), Some("last" | "past" | "previous")) => {
            return relative_past(words, i + 1, now);
        }
        "last" | "past" | "previous" => return relative_past(words, i, now),
        "this" => return this(words, i, now),
        // Not "since since …": the phrase after it is read once, never recursively.
        "since" if at(i + 1) != Some("since") => {
            let (end, span) =
                phrase_at(words, i + 1, now).or_else(|| calendar(words, i + 1, today, true))?;
            let since = match span {
                Span::Days(first, _) => midnight(first),
                Span::SinceThen(since) | Span::Between(since, _) => since,
            };
            return Some((end, Span::SinceThen(since)));
        }
        _ => {}
    }
    if let Some(found) = ago(words, i, now) {
        return Some(found);
    }
    // A date or month: after a preposition, or written with its day or year.
    let lead = leads_a_time(w);
    let start = if lead { i + 1 } else { i };
    let start = if matches!(at(start), Some("early" | "mid" | "late" | "the")) {
        start + 1
    } else {
        start
    };
    if let Some(found) = calendar(words, start, today, lead) {
        return Some(found);
    }
    // A weekday: the latest one up to today ("on Monday", "Monday").
    let day = latest(today, weekday(at(start)?)?, 0)?;
    Some((start + 1, Span::Days(day, day)))
}

/// The latest `day` at least `skip` days before `today`.
fn latest(today: NaiveDate, day: Weekday, skip: u64) -> Option<NaiveDate> {
    let from = today.checked_sub_days(Days::new(skip))?;
    let back = (7 + from.weekday().num_days_from_monday() - day.num_days_from_monday()) % 7;
    from.checked_sub_days(Days::new(u64::from(back)))
}

/// "last week", "the previous month", "the past 3 days", "last Friday", "last March",
/// "last weekend" (`i` at "last", "past" or "previous").
fn relative_past(words: &[Word], i: usize, now: DateTime<Utc>) -> Option<(usize, Span)> {
    let at = |k: usize| words.get(k).map(|w| w.text.as_str());
    let today = now.date_naive();
    let rolling = at(i) == Some("past");
    let next = at(i + 1)?;
    // "the past 3 days", "the last two weeks": back from now.
    if let Some(n) = count(next).filter(|_| !matches!(next, "a" | "an")) {
        let unit = unit(at(i + 2)?)?;
        return Some((i + 3, Span::SinceThen(back(now, unit, n)?)));
    }
    if next == "weekend" {
        let sunday = latest(today, Weekday::Sun, 1)?;
        return Some((i + 2, Span::Days(sunday.pred_opt()?, sunday)));
    }
    if next == "night" {
        let day = today.pred_opt()?;
        return Some((i + 2, Span::Days(day, day)));
    }
    if let Some(day) = weekday(next) {
        let day = latest(today, day, 1)?;
        return Some((i + 2, Span::Days(day, day)));
    }
    if let Some(m) = month(next) {
        let this_year = NaiveDate::from_ymd_opt(today.year(), m, 1)?;
        let start = if this_year < first_of_month(today) {
            this_year
        } else {
            this_year.checked_sub_months(Months::new(12))?
        };
        return Some((i + 2, whole_month(start)?));
    }
    let unit = unit(next)?;
    if rolling {
        return Some((i + 2, Span::SinceThen(back(now, unit, 1)?)));
    }
    let span = match unit {
        Unit::Hour => Span::SinceThen(now - Duration::hours(1)),
        Unit::Day => {
            let day = today.pred_opt()?;
            Span::Days(day, day)
        }
        Unit::Week => {
            let monday = latest(today, Weekday::Mon, 0)?.checked_sub_days(Days::new(7))?;
            Span::Days(monday, monday.checked_add_days(Days::new(6))?)
        }
        Unit::Month => whole_month(first_of_month(today).checked_sub_months(Months::new(1))?)?,
        Unit::Year => whole_year(today.year() - 1)?,
    };
    Some((i + 2, span))
}

/// "this week", "this month", "this year", "this weekend", "this morning" (`i` at "this").
fn this(words: &[Word], i: usize, now: DateTime<Utc>) -> Option<(usize, Span)> {
    let today = now.date_naive();
    let next = words.get(i + 1)?.text.as_str();
    let since = match next {
        "morning" | "afternoon" | "evening" => today,
        "week" => latest(today, Weekday::Mon, 0)?,
        // On a weekday, "this weekend" is still to come.
        "weekend" if today.weekday().num_days_from_monday() >= 5 => latest(today, Weekday::Sat, 0)?,
        "month" => first_of_month(today),
        "year" => NaiveDate::from_ymd_opt(today.year(), 1, 1)?,
        _ => return None,
    };
    Some((i + 2, Span::SinceThen(midnight(since))))
}

/// "three days ago", "a week ago", "a couple of months ago": the day, or a span of one unit
/// centred on that moment.
fn ago(words: &[Word], i: usize, now: DateTime<Utc>) -> Option<(usize, Span)> {
    let at = |k: usize| words.get(k).map(|w| w.text.as_str());
    let mut k = i;
    if at(k) == Some("a") && matches!(at(k + 1), Some("few" | "couple")) {
        k += 1;
    }
    let n = count(at(k)?)?;
    k += 1;
    if at(k) == Some("of") {
        k += 1;
    }
    let unit = unit(at(k)?)?;
    if at(k + 1) != Some("ago") {
        return None;
    }
    let then = back(now, unit, n)?;
    let span = match unit {
        Unit::Hour => Span::Between(then - Duration::minutes(30), then + Duration::minutes(30)),
        Unit::Day => Span::Days(then.date_naive(), then.date_naive()),
        Unit::Week => {
            let day = then.date_naive();
            Span::Days(
                day.checked_sub_days(Days::new(3))?,
                day.checked_add_days(Days::new(3))?,
            )
        }
        Unit::Month => Span::Between(then - Duration::days(15), then + Duration::days(15)),
        Unit::Year => Span::Between(then - Duration::days(182), then + Duration::days(183)),
    };
    Some((k + 2, span))
}

/// `now` less `n` units.
fn back(now: DateTime<Utc>, unit: Unit, n: u32) -> Option<DateTime<Utc>> {
    match unit {
        Unit::Hour => now.checked_sub_signed(Duration::hours(i64::from(n))),
        Unit::Day => now.checked_sub_days(Days::new(u64::from(n))),
        Unit::Week => now.checked_sub_days(Days::new(7 * u64::from(n))),
        Unit::Month => now.checked_sub_months(Months::new(n)),
        Unit::Year => now.checked_sub_months(Months::new(12 * n)),
    }
}

/// A date or month at word `i`: "March 5[th][,] [2025]", "5[th] [of] March[,] [2025]",
/// "March[,] 2025", a year, or a month alone when `lead` (a preposition came before).
/// Without a year, the latest such day or month up to today.
fn calendar(words: &[Word], i: usize, today: NaiveDate, lead: bool) -> Option<(usize, Span)> {
    let at = |k: usize| words.get(k).map(|w| w.text.as_str());
    let w = at(i)?;
    if let Some(y) = year(w).filter(|_| lead) {
        return Some((i + 1, whole_year(y)?));
    }
    // "5th of March", "5 March"
    if let Some(d) = day_of_month(w) {
        let k = if at(i + 1) == Some("of") {
            i + 2
        } else {
            i + 1
        };
        let m = month(at(k)?)?;
        return day_in(words, k + 1, today, m, d);
    }
    let m = month(w)?;
    if let Some(d) = at(i + 1).and_then(day_of_month) {
        return day_in(words, i + 2, today, m, d);
    }
    if let Some(y) = at(i + 1).and_then(year) {
        return Some((i + 2, whole_month(NaiveDate::from_ymd_opt(y, m, 1)?)?));
    }
    if !lead {
        return None;
    }
    let this_year = NaiveDate::from_ymd_opt(today.year(), m, 1)?;
    let start = if this_year <= today {
        this_year
    } else {
        this_year.checked_sub_months(Months::new(12))?
    };
    Some((i + 1, whole_month(start)?))
}

/// Day `d` of month `m`, with the year at word `k` if there is one.
fn day_in(words: &[Word], k: usize, today: NaiveDate, m: u32, d: u32) -> Option<(usize, Span)> {
    if let Some(y) = words.get(k).and_then(|w| year(&w.text)) {
        let day = NaiveDate::from_ymd_opt(y, m, d)?;
        return Some((k + 1, Span::Days(day, day)));
    }
    let this_year = NaiveDate::from_ymd_opt(today.year(), m, d);
    let day = match this_year {
        Some(day) if day <= today => day,
        _ => NaiveDate::from_ymd_opt(today.year() - 1, m, d)?,
    };
    Some((k, Span::Days(day, day)))
}

fn first_of_month(day: NaiveDate) -> NaiveDate {
    day.with_day(1).unwrap_or(day)
}

fn whole_month(first: NaiveDate) -> Option<Span> {
    let next = first.checked_add_months(Months::new(1))?;
    Some(Span::Days(first, next.pred_opt()?))
}

fn whole_year(y: i32) -> Option<Span> {
    Some(Span::Days(
        NaiveDate::from_ymd_opt(y, 1, 1)?,
        NaiveDate::from_ymd_opt(y, 12, 31)?,
    ))
}

#[cfg(test)]
mod tests;
