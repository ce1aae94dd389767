//! The machine's CPU accounting from `/proc/stat`: how busy the cores were over a run and
//! how much of them the hypervisor took (steal). Service, generator and PostgreSQL may share
//! the machine, and on a shared virtual machine a latency measured while half the CPU was
//! stolen is not the service's own, so the load generator and the benches report it next to
//! their latencies.

use serde_json::Value;

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
    /// The shares and CPU-seconds, to three decimals.
    pub fn json(&self) -> Value {
        let round3 = |x: f64| (x * 1000.0).round() / 1000.0;
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
