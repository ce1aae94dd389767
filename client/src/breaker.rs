//! A circuit breaker: after `threshold` failures in a row the service is not called for
//! `cooldown`; then one call may try (half open), and its outcome closes the circuit again or
//! opens it for another cooldown. A breaker of a handful of states and no timers, so it is
//! written here rather than taken from a crate built around its own service traits.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Breaker {
    threshold: u32,
    cooldown: Duration,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    /// Calls go through; this many failed in a row.
    Closed { failures: u32 },
    /// No calls until then.
    Open { until: Instant },
    /// One call is trying.
    HalfOpen,
}

impl Breaker {
    pub fn new(threshold: u32, cooldown: Duration) -> Self {
        Breaker {
            threshold: threshold.max(1),
            cooldown,
            state: State::Closed { failures: 0 },
        }
    }

    /// Whether a call may go out now. Past the cooldown an open breaker lets one through.
    pub fn allow(&mut self, now: Instant) -> bool {
        match self.state {
            State::Closed { .. } => true,
            State::Open { until } if now >= until => {
                self.state = State::HalfOpen;
                true
            }
            State::Open { .. } | State::HalfOpen => false,
        }
    }

    pub fn success(&mut self) {
        self.state = State::Closed { failures: 0 };
    }

    pub fn failure(&mut self, now: Instant) {
        self.state = match self.state {
            State::Closed { failures } if failures + 1 < self.threshold => State::Closed {
                failures: failures + 1,
            },
            _ => State::Open {
                until: now + self.cooldown,
            },
        };
    }

    pub fn is_open(&self) -> bool {
        !matches!(self.state, State::Closed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_opens_after_the_threshold_and_tries_once_after_the_cooldown() {
        let t0 = Instant::now();
        let mut breaker = Breaker::new(3, Duration::from_secs(5));
        for _ in 0..2 {
            assert!(breaker.allow(t0));
            breaker.failure(t0);
        }
        assert!(!breaker.is_open(), "two failures are not three");
        breaker.failure(t0);
        assert!(breaker.is_open());
        assert!(!breaker.allow(t0 + Duration::from_secs(4)));
        assert!(breaker.allow(t0 + Duration::from_secs(5)), "one trial");
        assert!(!breaker.allow(t0 + Duration::from_secs(5)), "only one");
        breaker.failure(t0 + Duration::from_secs(5));
        assert!(!breaker.allow(t0 + Duration::from_secs(9)), "open again");
        assert!(breaker.allow(t0 + Duration::from_secs(10)));
        breaker.success();
        assert!(!breaker.is_open());
        assert!(breaker.allow(t0 + Duration::from_secs(10)));
    }

    #[test]
    fn a_success_forgets_earlier_failures() {
        let t0 = Instant::now();
        let mut breaker = Breaker::new(2, Duration::from_secs(1));
        breaker.failure(t0);
        breaker.success();
        breaker.failure(t0);
        assert!(!breaker.is_open());
    }
}
