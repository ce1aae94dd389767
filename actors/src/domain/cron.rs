//! Cron schedules of the lifecycle jobs, parsed by `croner` (POSIX cron with optional
//! seconds) when the configuration is loaded, evaluated in UTC on the engine clock.

use chrono::{DateTime, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds};

/// A parsed cron expression: a configuration value that is checked when it is loaded.
#[derive(Clone, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct CronSchedule {
    cron: Cron,
    expression: String,
}

impl CronSchedule {
    /// Parses a 5-field (or 6-field, with seconds) cron expression.
    pub fn parse(expression: &str) -> Result<CronSchedule, String> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expression)
            .map_err(|e| format!("invalid cron expression {expression:?}: {e}"))?;
        Ok(CronSchedule {
            cron,
            expression: expression.to_owned(),
        })
    }

    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The first scheduled time strictly after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron.find_next_occurrence(&t, false).ok()
    }

    /// The last scheduled time at or before `t`.
    pub fn last_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron.find_previous_occurrence(&t, true).ok()
    }
}

/// Shown as the expression it was written as (`check-config` prints it).
impl std::fmt::Debug for CronSchedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.expression, f)
    }
}

impl TryFrom<String> for CronSchedule {
    type Error = String;

    fn try_from(expression: String) -> Result<Self, Self::Error> {
        CronSchedule::parse(&expression)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn daily_at_three() {
        let s = CronSchedule::parse("0 3 * * *").unwrap();
        assert_eq!(
            s.next_after(at("2026-05-01T02:59:00Z")),
            Some(at("2026-05-01T03:00:00Z"))
        );
        assert_eq!(
            s.next_after(at("2026-05-01T03:00:00Z")),
            Some(at("2026-05-02T03:00:00Z"))
        );
        assert_eq!(
            s.last_at_or_before(at("2026-05-01T02:59:00Z")),
            Some(at("2026-04-30T03:00:00Z"))
        );
    }

    #[test]
    fn every_six_hours_and_seconds() {
        let s = CronSchedule::parse("0 */6 * * *").unwrap();
        assert_eq!(
            s.next_after(at("2026-05-01T07:00:00Z")),
            Some(at("2026-05-01T12:00:00Z"))
        );
        assert!(CronSchedule::parse("*/10 * * * * *").is_ok());
    }

    #[test]
    fn nonsense_is_refused_with_the_expression() {
        let e = CronSchedule::parse("every day").unwrap_err();
        assert!(e.contains("every day"), "{e}");
        assert!(CronSchedule::parse("61 * * * *").is_err());
    }
}
