//! When calls are due: the arrival shapes of a scenario, open-loop. Each call's due time
//! comes from the shape alone, never from when earlier calls were answered, so a slow
//! service shows up as latency (counted from the due time), not as fewer calls.
//!
//! Deterministic shapes place the k-th call where the expected count of calls reaches k
//! (the inverse of the cumulative rate), so a ramp or a step change is exact whatever the
//! rates; `poisson` draws exponential gaps at its rate.

use rand::Rng as _;
use rand::rngs::SmallRng;
use serde::Deserialize;

/// How calls arrive, in calls per second across the whole population.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "shape", rename_all = "snake_case", deny_unknown_fields)]
pub enum Arrival {
    /// Evenly spaced.
    Constant { rate: f64 },
    /// Independent arrivals at an average rate (exponential gaps).
    Poisson { rate: f64 },
    /// `rate` for `burst_secs`, then nothing for `pause_secs`, again and again.
    Bursts {
        rate: f64,
        burst_secs: f64,
        pause_secs: f64,
    },
    /// From `from` to `to` calls per second, linearly over the whole duration.
    Ramp { from: f64, to: f64 },
    /// `[at_secs, rate]` pairs: each rate holds from its time until the next.
    Step { steps: Vec<(f64, f64)> },
}

impl Arrival {
    /// What is wrong with the shape's numbers, if anything.
    pub fn check(&self) -> Result<(), String> {
        let rate_ok = |r: f64| r >= 0.0 && r.is_finite();
        let ok = match self {
            Arrival::Constant { rate } | Arrival::Poisson { rate } => *rate > 0.0 && rate_ok(*rate),
            Arrival::Bursts {
                rate,
                burst_secs,
                pause_secs,
            } => *rate > 0.0 && rate_ok(*rate) && *burst_secs > 0.0 && rate_ok(*pause_secs),
            Arrival::Ramp { from, to } => rate_ok(*from) && rate_ok(*to) && from + to > 0.0,
            Arrival::Step { steps } => {
                !steps.is_empty()
                    && steps[0].0 == 0.0
                    && steps.windows(2).all(|w| w[0].0 < w[1].0)
                    && steps.iter().all(|(_, r)| rate_ok(*r))
                    && steps.iter().any(|(_, r)| *r > 0.0)
            }
        };
        if ok {
            Ok(())
        } else {
            Err("rates must be finite and not negative, with some positive; bursts need burst_secs > 0; steps start at 0 and go forward".into())
        }
    }

    /// The highest rate the shape reaches (for sizing and for saturation checks).
    pub fn peak_rate(&self) -> f64 {
        match self {
            Arrival::Constant { rate }
            | Arrival::Poisson { rate }
            | Arrival::Bursts { rate, .. } => *rate,
            Arrival::Ramp { from, to } => from.max(*to),
            Arrival::Step { steps } => steps.iter().map(|(_, r)| *r).fold(0.0, f64::max),
        }
    }
}

/// The due times of a run, one after another, in seconds from its start.
pub struct Schedule {
    arrival: Arrival,
    duration: f64,
    /// Calls placed so far.
    placed: u64,
    /// The last due time (Poisson's gaps add to it).
    last: f64,
}

impl Schedule {
    pub fn new(arrival: Arrival, duration: f64) -> Schedule {
        Schedule {
            arrival,
            duration,
            placed: 0,
            last: 0.0,
        }
    }

    /// The next call's due time, or `None` once the duration is over.
    pub fn next(&mut self, rng: &mut SmallRng) -> Option<f64> {
        let k = self.placed as f64;
        let at = match &self.arrival {
            Arrival::Constant { rate } => k / rate,
            Arrival::Poisson { rate } => {
                if self.placed == 0 {
                    0.0
                } else {
                    // Inverse transform: -ln(U) / rate, U in (0, 1].
                    let u: f64 = 1.0 - rng.random::<f64>();
                    self.last - u.ln() / rate
                }
            }
            Arrival::Bursts {
                rate,
                burst_secs,
                pause_secs,
            } => {
                let per_burst = rate * burst_secs;
                let cycle = (k / per_burst).floor();
                cycle * (burst_secs + pause_secs) + (k - cycle * per_burst) / rate
            }
            Arrival::Ramp { from, to } => {
                // Expected calls by t: from*t + slope*t²/2; solved for k.
                let slope = (to - from) / self.duration;
                if slope.abs() < 1e-12 {
                    k / from
                } else {
                    (-from + (from * from + 2.0 * slope * k).max(0.0).sqrt()) / slope
                }
            }
            Arrival::Step { steps } => step_time(steps, k),
        };
        if !at.is_finite() || at >= self.duration {
            return None;
        }
        self.placed += 1;
        self.last = at;
        Some(at)
    }
}

/// When the expected count of calls under `steps` reaches `k`.
fn step_time(steps: &[(f64, f64)], k: f64) -> f64 {
    let mut before = 0.0;
    for (i, (at, rate)) in steps.iter().enumerate() {
        let end = steps.get(i + 1).map_or(f64::INFINITY, |s| s.0);
        let calls = rate * (end - at);
        if *rate > 0.0 && before + calls > k {
            return at + (k - before) / rate;
        }
        before += calls;
    }
    f64::INFINITY
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn times(arrival: Arrival, duration: f64) -> Vec<f64> {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut schedule = Schedule::new(arrival, duration);
        std::iter::from_fn(|| schedule.next(&mut rng)).collect()
    }

    #[test]
    fn constant_is_evenly_spaced() {
        let t = times(Arrival::Constant { rate: 10.0 }, 2.0);
        assert_eq!(t.len(), 20);
        assert!((t[1] - t[0] - 0.1).abs() < 1e-9);
    }

    #[test]
    fn bursts_fall_silent_between() {
        let t = times(
            Arrival::Bursts {
                rate: 100.0,
                burst_secs: 1.0,
                pause_secs: 2.0,
            },
            6.0,
        );
        assert_eq!(t.len(), 200);
        assert!(t.iter().all(|x| (*x % 3.0) < 1.0), "nothing in a pause");
    }

    #[test]
    fn a_ramp_places_the_integral_of_its_rate() {
        // 0 -> 100/s over 10 s: 500 calls, the later seconds denser.
        let t = times(
            Arrival::Ramp {
                from: 0.0,
                to: 100.0,
            },
            10.0,
        );
        assert!((499..=501).contains(&t.len()), "{}", t.len());
        let first_half = t.iter().filter(|x| **x < 5.0).count();
        assert!((124..=126).contains(&first_half), "{first_half}");
    }

    #[test]
    fn steps_hold_each_rate_until_the_next_and_skip_silence() {
        let t = times(
            Arrival::Step {
                steps: vec![(0.0, 10.0), (1.0, 0.0), (2.0, 50.0)],
            },
            3.0,
        );
        assert_eq!(t.len(), 60);
        assert!(t.iter().all(|x| !(1.0..2.0).contains(x)));
    }

    #[test]
    fn poisson_averages_its_rate() {
        let t = times(Arrival::Poisson { rate: 200.0 }, 20.0);
        assert!((3700..4300).contains(&t.len()), "{}", t.len());
        assert!(t.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn bad_shapes_are_refused() {
        assert!(Arrival::Constant { rate: 0.0 }.check().is_err());
        assert!(
            Arrival::Step {
                steps: vec![(1.0, 5.0)]
            }
            .check()
            .is_err()
        );
        assert!(Arrival::Ramp { from: 0.0, to: 0.0 }.check().is_err());
    }
}
