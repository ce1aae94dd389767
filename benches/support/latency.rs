//! Latency summaries: nearest-rank percentiles of a series of durations, in milliseconds,
//! computed one way for every bench so that their tables and JSON can be compared.

use std::time::Duration;

use serde_json::Value;

use super::round3;

/// Latency summary of one series, in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    pub count: usize,
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Latency {
    /// Nearest-rank percentiles (the smallest sample with at least p of the samples at or
    /// below it).
    pub fn of(samples: &[Duration]) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let rank = |p: f64| ms[((ms.len() as f64 * p).ceil() as usize).clamp(1, ms.len()) - 1];
        Latency {
            count: ms.len(),
            mean: ms.iter().sum::<f64>() / ms.len() as f64,
            p50: rank(0.50),
            p95: rank(0.95),
            p99: rank(0.99),
            max: ms[ms.len() - 1],
        }
    }

    pub fn json(&self) -> Value {
        serde_json::json!({
            "count": self.count,
            "mean_ms": round3(self.mean),
            "p50_ms": round3(self.p50),
            "p95_ms": round3(self.p95),
            "p99_ms": round3(self.p99),
            "max_ms": round3(self.max),
        })
    }
}
