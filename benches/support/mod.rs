//! What the in-process benchmarks share: a private service on the embedded PostgreSQL in a
//! temporary directory, an MCP client over Streamable HTTP, a seeded random source and
//! latency percentiles.

// Each bench binary compiles this module on its own and uses a subset of it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use butler_memory::app_state::AppState;
use butler_memory::config::Config;
pub use butler_memory::testkit::McpClient;
use butler_memory::testkit::{TestService, assets_toml};
use serde_json::Value;

/// One `[[auth.keys]]` entry.
pub struct Key {
    pub key: String,
    pub tenant: String,
    /// `None`: an admin key; `Some(butler)`: a butler key bound to that butler.
    pub butler: Option<String>,
}

impl Key {
    pub fn admin(key: impl Into<String>, tenant: impl Into<String>) -> Key {
        Key {
            key: key.into(),
            tenant: tenant.into(),
            butler: None,
        }
    }

    pub fn butler(
        key: impl Into<String>,
        tenant: impl Into<String>,
        butler: impl Into<String>,
    ) -> Key {
        Key {
            key: key.into(),
            tenant: tenant.into(),
            butler: Some(butler.into()),
        }
    }

    fn toml(&self) -> String {
        let role = match &self.butler {
            None => "role = \"admin\"".to_owned(),
            Some(b) => format!("role = \"butler\"\nbutler = \"{b}\""),
        };
        format!(
            "[[auth.keys]]\nkey = \"{}\"\ntenant = \"{}\"\n{role}\n",
            self.key, self.tenant
        )
    }
}

/// A private service for a bench: the test kit's launcher, on a runtime of its own, with
/// the bench's keys and the `.deps/` installs of this checkout.
pub struct Service {
    pub address: SocketAddr,
    pub state: Arc<AppState>,
    service: TestService,
}

impl Service {
    /// Starts the service with `keys`, the default configuration, the `.deps/` installs of
    /// this checkout, and `extra` TOML (from `--config`) layered on top of all that.
    pub async fn start(keys: &[Key], extra: &str) -> anyhow::Result<Service> {
        let keys: String = keys.iter().map(Key::toml).collect();
        let toml = format!(
            r#"
listen = "127.0.0.1:0"
[log]
# rmcp's client logs every tool error it receives as a warning; the benches count them.
level = "warn,rmcp=error"
[auth]
bootstrap_admin_key = false
{keys}
"#
        );
        let config = Config::from_toml_layers(&[&assets_toml(), &toml, extra])
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        butler_memory::telemetry::init_logging(&config.edge.log);
        let service = TestService::start_apart(config).await?;
        Ok(Service {
            address: service.address,
            state: service.state.clone(),
            service,
        })
    }

    /// Barrier: every committed row is embedded.
    pub async fn flush(&self) -> anyhow::Result<()> {
        self.state
            .engine
            .flush()
            .await
            .map_err(|e| anyhow::anyhow!("flush: {e}"))
    }

    /// Refreshes the planner's statistics, as autovacuum does within a minute of a bulk
    /// load: measurements of a steady state should not depend on the daemon's timing.
    pub async fn analyze(&self) -> anyhow::Result<()> {
        sqlx::raw_sql("ANALYZE episodes, facts, rules")
            .execute(self.state.engine.store().pool())
            .await
            .context("ANALYZE")?;
        Ok(())
    }

    pub async fn client(&self, key: &str) -> anyhow::Result<McpClient> {
        McpClient::connect(&self.service.url("/mcp"), key).await
    }

    /// Clean stop, the way a signal would do it (stops the embedded PostgreSQL too).
    pub async fn stop(self) -> anyhow::Result<()> {
        Ok(self.service.stop().await?)
    }
}

/// SplitMix64: a tiny deterministic generator, so the same seed gives the same data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`; the modulo bias is irrelevant at these sizes).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

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
    /// below it), as write_latency prints them.
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

pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Reads `--config FILE` (extra TOML), or nothing.
pub fn extra_toml(path: Option<&PathBuf>) -> anyhow::Result<String> {
    match path {
        None => Ok(String::new()),
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())),
    }
}

/// Writes `value` as pretty JSON to `path`.
pub fn write_json(path: &Path, value: &Value) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(value)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

/// The machine's CPU time by kind, from the first line of `/proc/stat` (clock ticks), so a
/// run can say how busy the cores were and how much of them the hypervisor took (steal):
/// on a shared virtual machine a latency measured while half the CPU was stolen is not the
/// service's own.
#[derive(Debug, Clone, Copy, Default)]
pub struct MachineCpu {
    user: u64,
    system: u64,
    idle: u64,
    iowait: u64,
    steal: u64,
    /// Everything else (nice, irq, softirq).
    other: u64,
}

impl MachineCpu {
    /// Now, or all zeros where `/proc/stat` cannot be read (not Linux).
    pub fn now() -> MachineCpu {
        let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
            return MachineCpu::default();
        };
        let fields: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        let field = |i: usize| fields.get(i).copied().unwrap_or(0);
        // user nice system idle iowait irq softirq steal
        MachineCpu {
            user: field(0),
            system: field(2),
            idle: field(3),
            iowait: field(4),
            steal: field(7),
            other: field(1) + field(5) + field(6),
        }
    }

    /// What was spent between `self` and the later `end`.
    pub fn until(&self, end: &MachineCpu) -> CpuUse {
        let d = |a: u64, b: u64| b.saturating_sub(a) as f64;
        let (user, system, idle, iowait, steal, other) = (
            d(self.user, end.user),
            d(self.system, end.system),
            d(self.idle, end.idle),
            d(self.iowait, end.iowait),
            d(self.steal, end.steal),
            d(self.other, end.other),
        );
        let total = (user + system + idle + iowait + steal + other).max(1.0);
        // Linux reports /proc/stat in USER_HZ, 100 per second on every common platform.
        CpuUse {
            user: user / total,
            system: system / total,
            idle: idle / total,
            iowait: iowait / total,
            steal: steal / total,
            busy_seconds: (user + system + other) / 100.0,
        }
    }
}

/// Shares of the machine's CPU time over an interval, and the CPU-seconds spent working.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuUse {
    pub user: f64,
    pub system: f64,
    pub idle: f64,
    pub iowait: f64,
    pub steal: f64,
    pub busy_seconds: f64,
}

impl CpuUse {
    pub fn json(&self) -> Value {
        serde_json::json!({
            "user": round3(self.user),
            "system": round3(self.system),
            "idle": round3(self.idle),
            "iowait": round3(self.iowait),
            "steal": round3(self.steal),
            "busy_cpu_seconds": round3(self.busy_seconds),
        })
    }
}
