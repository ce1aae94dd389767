//! The load's report: per tool calls, rate, latency percentiles and errors by class; the
//! client's saturation; what reading back found; the server's counters over the run; the
//! machine's CPU and steal; each threshold with its measured value; and the timeline. As
//! JSON (everything) and as a table for a terminal.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use super::machine_cpu::CpuUse;
use super::recorder::{Recorder, ToolStats};
use super::threshold::{Metric, Threshold};
use super::verify::{Drain, ReadBack};

#[derive(Debug, Clone, Serialize)]
pub struct ToolReport {
    pub tool: String,
    pub calls: u64,
    /// Calls answered per second of the counted part.
    pub rate: f64,
    pub episodes: u64,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub p999_ms: Option<f64>,
    pub max_ms: Option<f64>,
    pub mean_ms: Option<f64>,
    pub errors: BTreeMap<String, u64>,
}

impl ToolReport {
    fn new(tool: &str, stats: &ToolStats, seconds: f64) -> ToolReport {
        let p = |q: f64| stats.percentile_ms(q).map(round3);
        ToolReport {
            tool: tool.to_owned(),
            calls: stats.calls,
            rate: round3(stats.calls as f64 / seconds.max(1e-9)),
            episodes: stats.episodes,
            p50_ms: p(50.0),
            p90_ms: p(90.0),
            p95_ms: p(95.0),
            p99_ms: p(99.0),
            p999_ms: p(99.9),
            max_ms: p(100.0),
            mean_ms: stats.mean_ms().map(round3),
            errors: stats.errors.clone(),
        }
    }
}

/// One bucket of the timeline.
#[derive(Debug, Clone, Serialize)]
pub struct Moment {
    /// Seconds from the end of the warm-up to the bucket's start.
    pub at: f64,
    pub tools: Vec<ToolReport>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThresholdResult {
    pub threshold: String,
    /// What was measured (`None`: nothing was, which breaches it).
    pub value: Option<f64>,
    pub ok: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Client {
    /// Calls that found `max_in_flight` calls unanswered and waited (their latency counts
    /// from when they were due).
    pub waits: u64,
    /// The latest a call was sent after it was due, in ms: the generator itself behind.
    pub worst_send_lag_ms: f64,
    /// Whether the generator could not keep the schedule: the figures then include its own
    /// delay, and the target's capacity is at most what was achieved.
    pub saturated: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub scenario: String,
    pub target: String,
    /// Seconds counted (the duration less the warm-up).
    pub counted_secs: f64,
    /// Calls scheduled in the counted part, and answered.
    pub scheduled: u64,
    pub answered: u64,
    pub failed: u64,
    pub tools: Vec<ToolReport>,
    pub client: Client,
    pub read_back: ReadBack,
    /// Ids acknowledged for two different writes.
    pub duplicated: u64,
    pub drain: Drain,
    /// The server's counters, after less before.
    pub server: BTreeMap<String, f64>,
    /// The server's gauges: [before, after].
    pub gauges: BTreeMap<String, [Option<f64>; 2]>,
    /// The machine's CPU over the load (the generator's machine; the service's too with
    /// `--spawn`), steal included; and CPU-seconds per thousand calls.
    pub cpu: serde_json::Value,
    pub cpu_seconds_per_1000_calls: f64,
    pub thresholds: Vec<ThresholdResult>,
    pub timeline: Vec<Moment>,
}

/// What the load measured, put together.
pub struct Measured<'a> {
    pub scenario: &'a str,
    pub target: &'a str,
    pub counted_secs: f64,
    pub scheduled: u64,
    pub recorder: &'a Recorder,
    pub read_back: ReadBack,
    pub drain: Drain,
    pub server: BTreeMap<String, f64>,
    pub gauges: BTreeMap<String, [Option<f64>; 2]>,
    pub cpu: CpuUse,
}

impl LoadReport {
    pub fn new(m: Measured<'_>, thresholds: &[Threshold]) -> LoadReport {
        let r = m.recorder;
        let (answered, failed) = r.totals();
        let tools = r
            .tools
            .iter()
            .map(|(t, s)| ToolReport::new(t, s, m.counted_secs))
            .collect();
        let worst_send_lag_ms = r.worst_send_lag.as_secs_f64() * 1000.0;
        let client = Client {
            waits: r.client_waits,
            worst_send_lag_ms: round3(worst_send_lag_ms),
            saturated: r.client_waits > 0 || worst_send_lag_ms > 100.0,
        };
        let timeline = r
            .timeline
            .iter()
            .enumerate()
            .map(|(i, tools)| Moment {
                at: i as f64 * r.bucket,
                tools: tools
                    .iter()
                    .map(|(t, s)| ToolReport::new(t, s, r.bucket))
                    .collect(),
            })
            .collect();
        let mut report = LoadReport {
            scenario: m.scenario.to_owned(),
            target: m.target.to_owned(),
            counted_secs: round3(m.counted_secs),
            scheduled: m.scheduled,
            answered,
            failed,
            tools,
            client,
            read_back: m.read_back,
            duplicated: r.duplicated,
            drain: m.drain,
            server: m.server,
            gauges: m.gauges,
            cpu: m.cpu.json(),
            cpu_seconds_per_1000_calls: round3(
                m.cpu.busy_seconds * 1000.0 / answered.max(1) as f64,
            ),
            thresholds: Vec::new(),
            timeline,
        };
        report.thresholds = thresholds
            .iter()
            .map(|t| {
                let value = report.value(r, &t.metric);
                ThresholdResult {
                    threshold: t.text.clone(),
                    value: value.map(round3),
                    ok: value.is_some_and(|v| t.holds(v)),
                }
            })
            .collect();
        report
    }

    /// What `metric` measured in this run.
    fn value(&self, r: &Recorder, metric: &Metric) -> Option<f64> {
        match metric {
            Metric::Latency { tool, percentile } => {
                let stats = r.tools.get(tool.as_str())?;
                match percentile {
                    Some(p) => stats.percentile_ms(*p),
                    None => stats.mean_ms(),
                }
            }
            Metric::ErrorRate { tool, class } => {
                let chosen: Vec<&ToolStats> = match tool {
                    Some(t) => vec![r.tools.get(t.as_str())?],
                    None => r.tools.values().collect(),
                };
                let calls: u64 = chosen.iter().map(|s| s.calls).sum();
                let failed: u64 = chosen
                    .iter()
                    .flat_map(|s| s.errors.iter())
                    .filter(|(c, _)| class.counts(c))
                    .map(|(_, n)| n)
                    .sum();
                (calls > 0).then(|| failed as f64 / calls as f64)
            }
            // An episode that could not be read back is not known to be stored.
            Metric::Lost => Some((self.read_back.lost + self.read_back.unverified) as f64),
            Metric::Duplicated => Some(self.duplicated as f64),
            Metric::ClientWaits => Some(self.client.waits as f64),
        }
    }

    /// Thresholds that did not hold.
    pub fn breached(&self) -> Vec<&ThresholdResult> {
        self.thresholds.iter().filter(|t| !t.ok).collect()
    }

    /// The report as a table for a terminal.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let ms = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.1}"));
        let _ = writeln!(
            out,
            "{} against {}: {:.0} s counted, {} calls scheduled, {} answered, {} failed",
            self.scenario,
            self.target,
            self.counted_secs,
            self.scheduled,
            self.answered,
            self.failed
        );
        let _ = writeln!(
            out,
            "{:<22} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9}  errors",
            "tool", "calls", "rate/s", "p50 ms", "p95 ms", "p99 ms", "max ms", "episodes"
        );
        for t in &self.tools {
            let errors = if t.errors.is_empty() {
                "-".to_owned()
            } else {
                t.errors
                    .iter()
                    .map(|(c, n)| format!("{c} {n}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let _ = writeln!(
                out,
                "{:<22} {:>8} {:>9.1} {:>8} {:>8} {:>8} {:>8} {:>9}  {errors}",
                t.tool,
                t.calls,
                t.rate,
                ms(t.p50_ms),
                ms(t.p95_ms),
                ms(t.p99_ms),
                ms(t.max_ms),
                t.episodes
            );
        }
        let _ = writeln!(
            out,
            "client: {} waits for a free slot, sent at most {:.1} ms late{}",
            self.client.waits,
            self.client.worst_send_lag_ms,
            if self.client.saturated {
                " (SATURATED: the figures include the generator's own delay)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            out,
            "read back: {} checked, {} lost, {} unverified; {} duplicated ids",
            self.read_back.checked, self.read_back.lost, self.read_back.unverified, self.duplicated
        );
        let drained = match self.drain.drained_secs {
            Some(s) => format!("drained {s:.1} s after the load"),
            None => "not drained".to_owned(),
        };
        let _ = writeln!(
            out,
            "embedding backlog: {} rows at the end, {drained}",
            self.drain
                .backlog_at_end
                .map_or("?".to_owned(), |b| format!("{b:.0}"))
        );
        if !self.server.is_empty() {
            let deltas: Vec<String> = self
                .server
                .iter()
                .map(|(k, v)| format!("{} +{v:.0}", k.trim_start_matches("butler_memory_")))
                .collect();
            let _ = writeln!(out, "server: {}", deltas.join(", "));
        }
        if let Some([Some(before), Some(after)]) = self.gauges.get("process_resident_memory_bytes")
        {
            let _ = writeln!(
                out,
                "server resident memory: {:.0} MB before, {:.0} MB after",
                before / 1e6,
                after / 1e6
            );
        }
        let _ = writeln!(
            out,
            "machine CPU: {:.1} busy CPU-s ({:.3} per 1,000 calls), steal {:.1}%",
            self.cpu["busy_cpu_seconds"].as_f64().unwrap_or(0.0),
            self.cpu_seconds_per_1000_calls,
            self.cpu["steal"].as_f64().unwrap_or(0.0) * 100.0
        );
        for t in &self.thresholds {
            let _ = writeln!(
                out,
                "{} {} (measured {})",
                if t.ok { "PASS" } else { "FAIL" },
                t.threshold,
                t.value.map_or("nothing".to_owned(), |v| format!("{v}"))
            );
        }
        out
    }
}

/// `x` rounded to three decimals: readable JSON, small diffs between runs.
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
