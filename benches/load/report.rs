//! What the load generator prints and writes: the run's summary (fleet, acknowledged and
//! stored episodes, the machine's CPU), a table per tool, the timeline second by second,
//! the embedding drain, and with `--json` all of it as JSON.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{CpuUse, Latency, round3};
use crate::traffic::{Run, Sample};
use crate::{Args, Drain, Stored};

/// The summary and the table per tool (calls, episodes, throughput, latency, errors by
/// class); returns the table as JSON.
pub fn print_summary(args: &Args, run: &Run, stored: &Stored) -> serde_json::Map<String, Value> {
    let Run {
        samples,
        started,
        load_secs,
        cpu,
        ..
    } = run;
    let (started, load_secs) = (*started, *load_secs);
    // Per tool: calls, episodes, throughput, latency, errors by class.
    let mut by_tool: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in samples {
        by_tool.entry(s.tool).or_default().push(s);
    }
    println!("## Load: bursty writes with concurrent readers\n");
    println!(
        "- {} tenants x {} butlers; writes {} episodes/s in bursts of {} s every {} s, {} episodes per call, {} writer connections{}; {} readers at {} reads/s ({} prompts); {:.1} s in all",
        args.tenants,
        args.butlers,
        args.rate,
        args.burst_secs,
        args.burst_secs + args.pause_secs,
        args.batch_size,
        args.writers,
        match (args.secrets, args.keyed) {
            (true, true) => ", every episode with secrets and an idempotency key",
            (true, false) => ", every episode with secrets",
            (false, true) => ", every episode with an idempotency key",
            (false, false) => "",
        },
        args.readers,
        args.read_rate,
        if args.fresh_prompts {
            "fresh"
        } else {
            "six repeated"
        },
        load_secs
    );
    println!(
        "- acknowledged episodes: {}, found in the database: {}, lost: {}; rows in the table: {}",
        stored.acked, stored.found, stored.lost, stored.rows
    );
    // Service, generator and PostgreSQL share the machine: its CPU over the load says how
    // close to saturation the run was, and steal how much the hypervisor took (latencies
    // from a run with much steal measure the host, not the service).
    println!(
        "- machine CPU during the load: {:.0}% user, {:.0}% system, {:.0}% idle, {:.0}% iowait, {:.0}% steal; {:.1} CPU-seconds busy, {:.2} per 1,000 episodes acked",
        cpu.user * 100.0,
        cpu.system * 100.0,
        cpu.idle * 100.0,
        cpu.iowait * 100.0,
        cpu.steal * 100.0,
        cpu.busy_seconds,
        cpu.busy_seconds * 1000.0 / (stored.acked.max(1) as f64)
    );
    if cpu.steal > 0.1 {
        println!(
            "- warning: the hypervisor took {:.0}% of the CPU during the load; latencies are not comparable with a run without steal",
            cpu.steal * 100.0
        );
    }
    println!();
    println!(
        "| tool | calls | ok | episodes acked | ok calls/s | episodes/s | p50 ms | p95 ms | p99 ms | max ms | errors |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let mut tools_json = serde_json::Map::new();
    for (tool, list) in &by_tool {
        let ok: Vec<&&Sample> = list.iter().filter(|s| s.outcome == "ok").collect();
        let latency = Latency::of(&ok.iter().map(|s| s.latency).collect::<Vec<_>>());
        let mut errors: BTreeMap<&str, usize> = BTreeMap::new();
        for s in list.iter().filter(|s| s.outcome != "ok") {
            *errors.entry(s.outcome.as_str()).or_default() += 1;
        }
        let episodes: usize = ok.iter().map(|s| s.episodes).sum();
        let active = if *tool == "memory_context" || *tool == "memory_search" {
            load_secs
        } else {
            // Writes count over the bursts, stretched by however long the service took to
            // answer the last one: a service that falls behind shows a lower rate.
            let last = list.iter().map(|s| s.done).max().unwrap_or(started);
            let pauses = (args.duration - active_write_secs(args)).max(0.0);
            active_write_secs(args).max((last - started).as_secs_f64() - pauses)
        };
        println!(
            "| {tool} | {} | {} | {episodes} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            list.len(),
            ok.len(),
            ok.len() as f64 / active,
            episodes as f64 / active,
            latency.p50,
            latency.p95,
            latency.p99,
            latency.max,
            if errors.is_empty() {
                "-".to_owned()
            } else {
                format!("{errors:?}")
            }
        );
        tools_json.insert(
            tool.to_string(),
            json!({"calls": list.len(), "ok": ok.len(), "episodes": episodes,
                   "ok_calls_per_second": round3(ok.len() as f64 / active),
                   "episodes_per_second": round3(episodes as f64 / active),
                   "latency": latency.json(), "errors": errors}),
        );
    }
    println!(
        "\nwrite throughput is over the bursts ({:.1} s scheduled), stretched to when the last write was answered; read throughput over the whole run",
        active_write_secs(args)
    );
    tools_json
}

/// Seconds of the run during which writes were scheduled.
fn active_write_secs(args: &Args) -> f64 {
    let period = args.burst_secs + args.pause_secs;
    let full = (args.duration / period).floor();
    let rest = (args.duration - full * period).min(args.burst_secs);
    (full * args.burst_secs + rest).max(1e-9)
}

/// Per second of the run (by when calls were answered) and per tool: calls, p95 and max
/// latency of the successful ones; and the machine's busy and stolen CPU in that second.
pub fn timeline(samples: &[Sample], started: Instant, cpu: &[CpuUse]) -> Value {
    let mut seconds: BTreeMap<u64, BTreeMap<&str, Vec<Duration>>> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.outcome == "ok") {
        let second = s.done.saturating_duration_since(started).as_secs();
        seconds
            .entry(second)
            .or_default()
            .entry(s.tool)
            .or_default()
            .push(s.latency);
    }
    Value::Array(
        seconds
            .into_iter()
            .map(|(second, tools)| {
                let tools: serde_json::Map<String, Value> = tools
                    .into_iter()
                    .map(|(tool, latencies)| {
                        let l = Latency::of(&latencies);
                        (
                            tool.to_owned(),
                            json!({"calls": l.count, "p95_ms": round3(l.p95), "max_ms": round3(l.max)}),
                        )
                    })
                    .collect();
                let cpu = cpu.get(second as usize).copied().unwrap_or_default();
                json!({"second": second, "tools": tools,
                       "cpu_busy": round3(1.0 - cpu.idle - cpu.iowait - cpu.steal),
                       "cpu_steal": round3(cpu.steal)})
            })
            .collect(),
    )
}

pub fn print_timeline(timeline: &Value) {
    println!("\n| second | CPU busy / steal | tool: calls, p95 ms, max ms |");
    println!("|---:|---|---|");
    for row in timeline.as_array().into_iter().flatten() {
        let tools: Vec<String> = row["tools"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(tool, t)| {
                format!(
                    "{}: {}, {:.1}, {:.1}",
                    tool.trim_start_matches("memory_"),
                    t["calls"],
                    t["p95_ms"].as_f64().unwrap_or(0.0),
                    t["max_ms"].as_f64().unwrap_or(0.0)
                )
            })
            .collect();
        println!(
            "| {} | {:.0}% / {:.0}% | {} |",
            row["second"],
            row["cpu_busy"].as_f64().unwrap_or(0.0) * 100.0,
            row["cpu_steal"].as_f64().unwrap_or(0.0) * 100.0,
            tools.join("; ")
        );
    }
}

/// How the embedding backlog drained after the load (or how much was left).
pub fn print_drain(drain: &Drain) {
    let Drain {
        backlog_at_end,
        waiting,
        secs: drain_secs,
        rate: drain_rate,
    } = *drain;
    if waiting == 0 {
        println!(
            "\nembedding backlog when the load ended: {backlog_at_end} rows; drained {drain_secs:.1} s after the end ({drain_rate:.0} rows/s)"
        );
    } else if drain_rate > 0.0 {
        println!(
            "\nembedding backlog when the load ended: {backlog_at_end} rows; {waiting} left after {drain_secs:.0} s ({drain_rate:.0} rows/s, about {:.0} s more)",
            waiting as f64 / drain_rate
        );
    } else {
        println!(
            "\nembedding backlog when the load ended: {backlog_at_end} rows; none embedded yet after {drain_secs:.0} s (the indexer resumes within its poll interval once writes calm down)"
        );
    }
}

/// Everything above as one JSON document (`--json`).
pub fn json(
    args: &Args,
    run: &Run,
    stored: &Stored,
    drain: &Drain,
    timeline: Value,
    tools: serde_json::Map<String, Value>,
) -> Value {
    json!({"args": {"tenants": args.tenants, "butlers": args.butlers, "rate": args.rate,
                    "burst_secs": args.burst_secs, "pause_secs": args.pause_secs,
                    "duration": args.duration, "batch_size": args.batch_size,
                    "writers": args.writers, "readers": args.readers,
                    "read_rate": args.read_rate, "fresh_prompts": args.fresh_prompts,
                    "secrets": args.secrets, "keyed": args.keyed,
                    "settle_secs": args.settle_secs},
           "seconds": round3(run.load_secs), "acknowledged": stored.acked, "found": stored.found,
           "lost": stored.lost, "backlog_at_end": drain.backlog_at_end, "backlog_left": drain.waiting,
           "drain_seconds": round3(drain.secs), "drain_rows_per_second": round3(drain.rate),
           "machine_cpu": run.cpu.json(), "timeline": timeline,
           "tools": tools})
}
