//! Confidence decay: `effective_confidence = confidence * exp(-decay_rate * days_since_last_confirmed)`
//! (memory_butler.md §6.2), computed from the injected clock at query time.

use chrono::{DateTime, Utc};

const MILLIS_PER_DAY: f64 = 86_400_000.0;

/// Days from `since` to `now` as a fraction; zero when `since` is in the future.
pub fn days_between(since: DateTime<Utc>, now: DateTime<Utc>) -> f64 {
    ((now - since).num_milliseconds() as f64 / MILLIS_PER_DAY).max(0.0)
}

/// The confidence left after decaying at `decay_rate` per day since the last confirmation.
pub fn effective_confidence(
    confidence: f64,
    decay_rate: f64,
    last_confirmed_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> f64 {
    confidence * (-decay_rate * days_between(last_confirmed_at, now)).exp()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;
    use proptest::prelude::*;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn standard_fact_halves_in_about_87_days() {
        let c = effective_confidence(1.0, 0.008, t0(), t0() + Duration::days(87));
        assert!((c - 0.5).abs() < 0.01, "{c}");
    }

    #[test]
    fn permanent_fact_never_decays() {
        let c = effective_confidence(0.9, 0.0, t0(), t0() + Duration::days(100_000));
        assert_eq!(c, 0.9);
    }

    proptest! {
        #[test]
        fn decay_is_monotone_and_bounded(
            confidence in 0.001f64..=1.0,
            rate in 0.0f64..1.0,
            d1 in 0i64..100_000,
            d2 in 0i64..100_000,
        ) {
            let (a, b) = (d1.min(d2), d1.max(d2));
            let ca = effective_confidence(confidence, rate, t0(), t0() + Duration::minutes(a));
            let cb = effective_confidence(confidence, rate, t0(), t0() + Duration::minutes(b));
            prop_assert!(cb <= ca);
            prop_assert!(ca <= confidence && cb >= 0.0);
        }

        #[test]
        fn future_confirmation_counts_as_now(confidence in 0.001f64..=1.0, rate in 0.0f64..1.0) {
            let c = effective_confidence(confidence, rate, t0() + Duration::days(1), t0());
            prop_assert_eq!(c, confidence);
        }
    }
}
