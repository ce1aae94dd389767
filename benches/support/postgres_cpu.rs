//! CPU time of one PostgreSQL server on this machine: its postmaster and every process it
//! started (backends, WAL sender or receiver, checkpointer), alive or already reaped (their
//! time is then in the postmaster's `cutime`/`cstime`), from `/proc`. Benches compare a
//! primary's and a replica's share of the same reads. Also one process's own CPU time (the
//! local model's server).

use std::path::Path;

/// Seconds of CPU (user and system) the server on `cluster_dir` has used so far.
pub fn postgres_cpu_seconds(cluster_dir: &Path) -> anyhow::Result<f64> {
    let pid_file = cluster_dir.join("postmaster.pid");
    let text = std::fs::read_to_string(&pid_file)
        .map_err(|e| anyhow::anyhow!("{}: {e}", pid_file.display()))?;
    let postmaster: u32 = text
        .lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("{}: no pid", pid_file.display()))?;
    let mut ticks = 0u64;
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Some(stat) = read_stat(pid) else {
            continue;
        };
        if pid == postmaster {
            // Its own time, and that of the children it has reaped.
            ticks += stat.utime + stat.stime + stat.cutime + stat.cstime;
        } else if stat.ppid == postmaster {
            ticks += stat.utime + stat.stime;
        }
    }
    // /proc reports in USER_HZ, 100 per second on every common platform.
    Ok(ticks as f64 / 100.0)
}

/// Seconds of CPU (user and system) process `pid` has used so far; `None` when it is gone.
pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = read_stat(pid)?;
    Some((stat.utime + stat.stime) as f64 / 100.0)
}

struct Stat {
    ppid: u32,
    utime: u64,
    stime: u64,
    cutime: u64,
    cstime: u64,
}

fn read_stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields start after it.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14).
    let number = |i: usize| fields.get(i)?.parse::<u64>().ok();
    Some(Stat {
        ppid: number(1)? as u32,
        utime: number(11)?,
        stime: number(12)?,
        cutime: number(13)?,
        cstime: number(14)?,
    })
}
