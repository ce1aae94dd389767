//! What the load measured: per tool an HDR histogram of latencies (from each call's due
//! time), its calls, errors by class and episodes acknowledged; the same per time bucket
//! for the timeline; and the acknowledged episode ids the verifier reads back.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use hdrhistogram::Histogram;

/// Latencies are recorded in microseconds, from 1 µs to 10 minutes, to 3 significant digits.
const MAX_MICROS: u64 = 600_000_000;

fn histogram(digits: u8) -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_MICROS, digits).expect("valid histogram bounds")
}

/// One tool's figures.
#[derive(Clone)]
pub struct ToolStats {
    pub latency: Histogram<u64>,
    pub calls: u64,
    pub episodes: u64,
    pub errors: BTreeMap<String, u64>,
}

impl ToolStats {
    fn new(digits: u8) -> ToolStats {
        ToolStats {
            latency: histogram(digits),
            calls: 0,
            episodes: 0,
            errors: BTreeMap::new(),
        }
    }

    fn record(&mut self, latency: Duration, outcome: &Result<usize, String>) {
        let micros = (latency.as_micros() as u64).clamp(1, MAX_MICROS);
        self.latency.saturating_record(micros);
        self.calls += 1;
        match outcome {
            Ok(episodes) => self.episodes += *episodes as u64,
            Err(class) => *self.errors.entry(class.clone()).or_default() += 1,
        }
    }

    pub fn failed(&self) -> u64 {
        self.errors.values().sum()
    }

    /// A latency percentile in milliseconds (`None` when nothing was recorded).
    pub fn percentile_ms(&self, percentile: f64) -> Option<f64> {
        (self.calls > 0).then(|| self.latency.value_at_quantile(percentile / 100.0) as f64 / 1000.0)
    }

    pub fn mean_ms(&self) -> Option<f64> {
        (self.calls > 0).then(|| self.latency.mean() / 1000.0)
    }
}

/// Everything recorded, for the counted part of the run (after the warm-up).
pub struct Recorder {
    pub tools: BTreeMap<&'static str, ToolStats>,
    /// Per bucket of `bucket` seconds from the start of the counted part.
    pub timeline: Vec<BTreeMap<&'static str, ToolStats>>,
    pub bucket: f64,
    /// Acknowledged episodes: (shard index, id).
    pub acknowledged: Vec<(usize, u128)>,
    /// Ids acknowledged more than once (for two different writes).
    pub duplicated: u64,
    seen: HashSet<u128>,
    /// Calls that found `max_in_flight` calls unanswered and waited for one.
    pub client_waits: u64,
    /// The longest a call was sent after it was due (the client's own lag).
    pub worst_send_lag: Duration,
}

impl Recorder {
    /// `bucket`: the timeline's resolution in seconds.
    pub fn new(bucket: f64) -> Recorder {
        Recorder {
            tools: BTreeMap::new(),
            timeline: Vec::new(),
            bucket,
            acknowledged: Vec::new(),
            duplicated: 0,
            seen: HashSet::new(),
            client_waits: 0,
            worst_send_lag: Duration::ZERO,
        }
    }

    /// One answered call, due `at` seconds into the counted part.
    pub fn record(
        &mut self,
        tool: &'static str,
        at: f64,
        latency: Duration,
        outcome: &Result<usize, String>,
    ) {
        self.tools
            .entry(tool)
            .or_insert_with(|| ToolStats::new(3))
            .record(latency, outcome);
        let index = (at.max(0.0) / self.bucket) as usize;
        if self.timeline.len() <= index {
            self.timeline.resize_with(index + 1, BTreeMap::new);
        }
        // Two digits per bucket: enough for a plot, a tenth of the memory over an hour.
        self.timeline[index]
            .entry(tool)
            .or_insert_with(|| ToolStats::new(2))
            .record(latency, outcome);
    }

    /// Episode ids an answer acknowledged for shard `shard`.
    pub fn acknowledge(&mut self, shard: usize, ids: &[String]) {
        for id in ids {
            let Ok(id) = uuid::Uuid::parse_str(id) else {
                continue;
            };
            let id = id.as_u128();
            if self.seen.insert(id) {
                self.acknowledged.push((shard, id));
            } else {
                self.duplicated += 1;
            }
        }
    }

    /// All calls and all failures, of every tool.
    pub fn totals(&self) -> (u64, u64) {
        self.tools
            .values()
            .fold((0, 0), |(c, f), t| (c + t.calls, f + t.failed()))
    }
}

/// The last second's calls, failures and latencies, for the progress line.
pub struct ToolStatsWindow {
    latency: Histogram<u64>,
    calls: u64,
    errors: u64,
}

impl Default for ToolStatsWindow {
    fn default() -> Self {
        ToolStatsWindow {
            latency: histogram(2),
            calls: 0,
            errors: 0,
        }
    }
}

impl ToolStatsWindow {
    pub fn record(&mut self, latency: Duration, failed: bool) {
        self.latency
            .saturating_record((latency.as_micros() as u64).clamp(1, MAX_MICROS));
        self.calls += 1;
        self.errors += u64::from(failed);
    }

    /// Calls, errors and p99 (ms) since the last take; starts the next window.
    pub fn take(&mut self) -> (u64, u64, f64) {
        let p99 = self.latency.value_at_quantile(0.99) as f64 / 1000.0;
        let out = (self.calls, self.errors, p99);
        *self = ToolStatsWindow::default();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_errors_and_duplicates() {
        let mut r = Recorder::new(1.0);
        for ms in 1..=100 {
            r.record(
                "memory_search",
                ms as f64 / 50.0,
                Duration::from_millis(ms),
                &Ok(0),
            );
        }
        r.record(
            "memory_search",
            0.5,
            Duration::from_millis(5),
            &Err("overloaded".into()),
        );
        let s = &r.tools["memory_search"];
        assert_eq!((s.calls, s.failed()), (101, 1));
        let p95 = s.percentile_ms(95.0).unwrap();
        assert!((94.0..=96.1).contains(&p95), "{p95}");
        assert_eq!(r.timeline.len(), 3);
        let id = uuid::Uuid::now_v7().to_string();
        r.acknowledge(0, std::slice::from_ref(&id));
        r.acknowledge(1, &[id, "not an id".into()]);
        assert_eq!((r.acknowledged.len(), r.duplicated), (1, 1));
        assert_eq!(r.totals(), (101, 1));
    }
}
