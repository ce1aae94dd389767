//! The load generator: bursty episode writes with concurrent readers, over MCP Streamable
//! HTTP with bearer keys, against a private service started in-process (embedded
//! PostgreSQL in a temporary directory, the real embedder), as a fleet of butlers drives it.
//!
//! Writes are open-loop: `--rate` episodes per second are scheduled during each burst of
//! `--burst-secs`, followed by `--pause-secs` of silence, for `--duration` seconds in all,
//! spread over `--tenants` x `--butlers` butlers and sent by `--writers` connections
//! (`memory_store_episode`, or `memory_ingest_batch` of `--batch-size` episodes). A call
//! that finds every writer busy waits for one: its latency counts from when it was due, so
//! a saturated service shows up as latency, not as a quietly lower rate. Readers call
//! `memory_context` and `memory_search` (alternating) at `--read-rate` per second in all.
//!
//! At the end it checks that every acknowledged episode is in the database (count and
//! ids), then waits for the embedding backlog to drain and reports how long that took.
//! Output: a table per tool (calls, episodes, throughput, p50/p95/p99/max, errors by
//! class), the machine's CPU over the load (steal included), with `--timeline` latency second
//! by second, and with `--json` all of it as JSON.
//!
//!     cargo bench --bench load -- --rate 2000 --duration 60 --burst-secs 60
//!     cargo bench --bench load -- --rate 10000 --batch-size 500 --duration 30
//!     cargo test --bench load -- --smoke       # a few seconds, as CI runs it

#[path = "support/mod.rs"]
mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use support::{Key, Latency, MachineCpu, Rng, Service, round3};

/// The service runs in this process, so it gets the allocator its binary uses (src/main.rs).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Clone)]
struct Args {
    /// Tenants, each with its own admin key and butler keys.
    #[arg(long, default_value_t = 2)]
    tenants: usize,
    /// Butlers per tenant (one shard each).
    #[arg(long, default_value_t = 4)]
    butlers: usize,
    /// Episodes per second during a burst, across all butlers.
    #[arg(long, default_value_t = 2000.0)]
    rate: f64,
    /// Length of a burst.
    #[arg(long, default_value_t = 10.0)]
    burst_secs: f64,
    /// Silence between bursts.
    #[arg(long, default_value_t = 5.0)]
    pause_secs: f64,
    /// Total length of the run (bursts and pauses).
    #[arg(long, default_value_t = 30.0)]
    duration: f64,
    /// Episodes per call: 1 sends memory_store_episode, more send memory_ingest_batch.
    #[arg(long, default_value_t = 1)]
    batch_size: usize,
    /// Write connections (calls in flight at most).
    #[arg(long, default_value_t = 64)]
    writers: usize,
    /// Reader connections.
    #[arg(long, default_value_t = 4)]
    readers: usize,
    /// Reads per second across all readers (memory_context and memory_search alternating).
    #[arg(long, default_value_t = 20.0)]
    read_rate: f64,
    /// Give every read a prompt of its own (one of six, numbered), so that each pays for its
    /// query embedding as a fleet's new prompts do; otherwise readers repeat six prompts,
    /// whose embeddings the service caches after their first use.
    #[arg(long)]
    fresh_prompts: bool,
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Seconds between the service's start and the first call: a fresh embedded cluster
    /// vacuums and analyses its catalogs in its first seconds, which a service that has been
    /// running does not do when a burst comes.
    #[arg(long, default_value_t = 3.0)]
    settle_secs: f64,
    /// How long to wait for the embedding backlog to drain after the load (the rest is
    /// estimated from the rate).
    #[arg(long, default_value_t = 1800.0)]
    drain_timeout: f64,
    /// A short run for CI: 3 s at 100 episodes/s, batches of 10, 2 readers.
    #[arg(long)]
    smoke: bool,
    /// Also write the numbers as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also print latency second by second (calls, p95 and max per tool), to see whether
    /// slow calls come together (a background job) or spread out (steady contention).
    #[arg(long)]
    timeline: bool,
    /// Extra service configuration (TOML layered over the defaults).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

/// One finished call.
struct Sample {
    tool: &'static str,
    episodes: usize,
    latency: Duration,
    /// `ok` or the error class.
    outcome: String,
    ids: Vec<String>,
    /// When the answer came.
    done: Instant,
}

/// A butler the generator writes as.
#[derive(Clone)]
struct Butler {
    key: String,
    name: String,
}

const PROMPTS: &[&str] = &[
    "Plan the week's meals",
    "Remind me about the dentist",
    "What did we decide about the trip?",
    "Summarise yesterday's calls",
    "Any allergies to keep in mind?",
    "Book a table for Friday",
];

/// One JSON-RPC message to the MCP endpoint (stateless Streamable HTTP POST).
async fn post(
    http: &reqwest::Client,
    url: &reqwest::Url,
    key: &str,
    message: Value,
) -> reqwest::Result<reqwest::Response> {
    http.post(url.clone())
        .bearer_auth(key)
        .header("Accept", "application/json, text/event-stream")
        .json(&message)
        .send()
        .await
}

/// The parts of a tool call's answer the generator reads: it runs beside the service on
/// the same cores, so it skips over the rest of each answer (the stored record, the context
/// block) instead of building it as a JSON tree.
#[derive(Deserialize)]
struct Reply {
    result: Option<ToolResult>,
}

#[derive(Deserialize)]
struct ToolResult {
    #[serde(rename = "isError", default)]
    is_error: bool,
    #[serde(rename = "structuredContent", default)]
    content: Answer,
}

/// A stored episode's `id`, a batch's `ids`, an error's `class`.
#[derive(Deserialize, Default)]
struct Answer {
    id: Option<String>,
    ids: Option<Vec<String>>,
    class: Option<String>,
}

/// One MCP tool call over Streamable HTTP (stateless JSON-RPC POST): `Ok(the ids it
/// stored)` or `Err(error class)`.
async fn call(
    http: &reqwest::Client,
    url: &reqwest::Url,
    key: &str,
    tool: &str,
    args: Value,
) -> Result<Vec<String>, String> {
    let response = post(
        http,
        url,
        key,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": tool, "arguments": args}}),
    )
    .await
    .map_err(|_| "transport".to_owned())?;
    let body = response.bytes().await.map_err(|_| "transport".to_owned())?;
    let reply: Reply = serde_json::from_slice(&body).map_err(|_| "protocol".to_owned())?;
    let result = reply.result.ok_or_else(|| "protocol".to_owned())?;
    let answer = result.content;
    if result.is_error {
        return Err(answer.class.unwrap_or_else(|| "unknown".to_owned()));
    }
    Ok(answer
        .ids
        .unwrap_or_else(|| answer.id.into_iter().collect()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if args.smoke {
        args.rate = 100.0;
        args.duration = 3.0;
        args.burst_secs = 2.0;
        args.pause_secs = 1.0;
        args.batch_size = 10;
        args.writers = 4;
        args.readers = 2;
        args.read_rate = 10.0;
    }
    anyhow::ensure!(
        args.rate > 0.0 && args.batch_size > 0,
        "rate and batch size must be positive"
    );
    // The write path is measured, not a catch-up of the daily sweeps at the first tick.
    let extra = format!(
        "[lifecycle]\ncatch_up_missed_runs = false\n{}",
        support::extra_toml(args.config.as_ref())?
    );
    let mut keys = Vec::new();
    let mut butlers = Vec::new();
    for t in 0..args.tenants {
        let tenant = format!("load-{t}");
        keys.push(Key::admin(format!("load-admin-{t}-000000000"), &tenant));
        for b in 0..args.butlers {
            let key = format!("load-butler-{t}-{b}-0000000");
            let name = format!("butler-{b}");
            keys.push(Key::butler(&key, &tenant, &name));
            butlers.push(Butler { key, name });
        }
    }
    let service = Service::start(&keys, &extra).await?;
    let url: reqwest::Url = format!("http://{}/mcp", service.address).parse()?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.writers + args.readers)
        .build()?;
    if !args.smoke {
        tokio::time::sleep(Duration::from_secs_f64(args.settle_secs)).await;
    }
    // Every connection the generator will use is opened before the clock starts: the run
    // measures the service, not TCP handshakes.
    let opened = (0..args.writers + args.readers).map(|_| async {
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        let response = post(&http, &url, &butlers[0].key, list)
            .await?
            .error_for_status()?;
        // Read to the end, so that the connection goes back to the pool.
        response.bytes().await.map(|_| ())
    });
    for opened in futures::future::join_all(opened).await {
        opened?;
    }
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();

    // The write schedule: calls due at fixed intervals inside bursts.
    let call_rate = args.rate / args.batch_size as f64;
    let (due_tx, due_rx) = mpsc::unbounded_channel::<(Instant, usize)>();
    let due_rx = Arc::new(tokio::sync::Mutex::new(due_rx));
    let started = Instant::now();
    let cpu_at_start = MachineCpu::now();
    // The machine's CPU second by second, for the timeline: a stall with steal is the host's.
    let cpu_seconds: Arc<Mutex<Vec<support::CpuUse>>> = Arc::default();
    let cpu_sampler = {
        let cpu_seconds = cpu_seconds.clone();
        tokio::spawn(async move {
            let mut last = MachineCpu::now();
            let mut tick = tokio::time::interval_at(
                (started + Duration::from_secs(1)).into(),
                Duration::from_secs(1),
            );
            loop {
                tick.tick().await;
                let now = MachineCpu::now();
                cpu_seconds.lock().unwrap().push(last.until(&now));
                last = now;
            }
        })
    };
    let end = started + Duration::from_secs_f64(args.duration);
    let scheduler = {
        let args = args.clone();
        tokio::spawn(async move {
            let period = args.burst_secs + args.pause_secs;
            let mut n = 0usize;
            let mut at = 0.0f64;
            while at < args.duration {
                let in_period = at % period;
                if in_period >= args.burst_secs {
                    at += period - in_period;
                    continue;
                }
                let due = started + Duration::from_secs_f64(at);
                tokio::time::sleep_until(due.into()).await;
                if due_tx.send((due, n)).is_err() {
                    return;
                }
                n += 1;
                at += 1.0 / call_rate;
            }
        })
    };
    let mut writers = Vec::new();
    for _ in 0..args.writers {
        let (http, url, samples, due_rx, butlers) = (
            http.clone(),
            url.clone(),
            samples.clone(),
            due_rx.clone(),
            butlers.clone(),
        );
        let batch_size = args.batch_size;
        writers.push(tokio::spawn(async move {
            loop {
                let next = due_rx.lock().await.recv().await;
                let Some((due, n)) = next else { return };
                let butler = &butlers[n % butlers.len()];
                let episode = |i: usize| {
                    json!({"content": format!("Load episode {n}.{i}: the user asked {} about the plan for day {}", butler.name, n % 31),
                           "butler": butler.name, "session_id": format!("s{}", n / 20)})
                };
                let (tool, request) = if batch_size == 1 {
                    ("memory_store_episode", episode(0))
                } else {
                    let episodes: Vec<Value> = (0..batch_size).map(episode).collect();
                    ("memory_ingest_batch", json!({"episodes": episodes}))
                };
                let result = call(&http, &url, &butler.key, tool, request).await;
                let latency = due.elapsed();
                let (outcome, ids) = match result {
                    Ok(ids) => ("ok".to_owned(), ids),
                    Err(class) => (class, Vec::new()),
                };
                samples.lock().unwrap().push(Sample {
                    tool,
                    episodes: batch_size,
                    latency,
                    outcome,
                    ids,
                    done: Instant::now(),
                });
            }
        }));
    }
    let mut readers = Vec::new();
    for r in 0..args.readers {
        let (http, url, samples, butlers) =
            (http.clone(), url.clone(), samples.clone(), butlers.clone());
        let interval = Duration::from_secs_f64(args.readers as f64 / args.read_rate.max(0.001));
        let mut rng = Rng::new(args.seed + r as u64);
        let fresh_prompts = args.fresh_prompts;
        readers.push(tokio::spawn(async move {
            let mut i = 0usize;
            let mut next = Instant::now() + interval.mul_f64(r as f64 / 4.0);
            while next < end {
                tokio::time::sleep_until(next.into()).await;
                let butler = rng.pick(&butlers).clone();
                let prompt = if fresh_prompts {
                    format!("{} (request {r}.{i})", rng.pick(PROMPTS))
                } else {
                    rng.pick(PROMPTS).to_string()
                };
                let (tool, request) = if i.is_multiple_of(2) {
                    (
                        "memory_context",
                        json!({"trigger_prompt": prompt, "butler": butler.name}),
                    )
                } else {
                    ("memory_search", json!({"query": prompt}))
                };
                let t = Instant::now();
                let result = call(&http, &url, &butler.key, tool, request).await;
                samples.lock().unwrap().push(Sample {
                    tool,
                    episodes: 0,
                    latency: t.elapsed(),
                    outcome: result.err().unwrap_or_else(|| "ok".to_owned()),
                    ids: Vec::new(),
                    done: Instant::now(),
                });
                i += 1;
                next += interval;
            }
        }));
    }
    scheduler.await?;
    for w in writers {
        w.await?;
    }
    for r in readers {
        r.await?;
    }
    let load_secs = started.elapsed().as_secs_f64();
    let load_ended = Instant::now();
    let cpu = cpu_at_start.until(&MachineCpu::now());
    let samples = std::mem::take(&mut *samples.lock().unwrap());

    // Every acknowledged episode must be in the database.
    let acked: Vec<uuid::Uuid> = samples
        .iter()
        .flat_map(|s| s.ids.iter())
        .map(|id| id.parse())
        .collect::<Result<_, _>>()
        .context("an acknowledged id is not a UUID")?;
    let pool = service.state.engine.store().pool().clone();
    let mut found = 0i64;
    for chunk in acked.chunks(10_000) {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM episodes WHERE id = ANY($1)")
            .bind(chunk)
            .fetch_one(&pool)
            .await?;
        found += n;
    }
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM episodes")
        .fetch_one(&pool)
        .await?;
    let lost = acked.len() as i64 - found;

    // Per tool: calls, episodes, throughput, latency, errors by class.
    let mut by_tool: BTreeMap<&str, Vec<&Sample>> = BTreeMap::new();
    for s in &samples {
        by_tool.entry(s.tool).or_default().push(s);
    }
    println!("## Load: bursty writes with concurrent readers\n");
    println!(
        "- {} tenants x {} butlers; writes {} episodes/s in bursts of {} s every {} s, {} episodes per call, {} writer connections; {} readers at {} reads/s ({} prompts); {:.1} s in all",
        args.tenants,
        args.butlers,
        args.rate,
        args.burst_secs,
        args.burst_secs + args.pause_secs,
        args.batch_size,
        args.writers,
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
        "- acknowledged episodes: {}, found in the database: {found}, lost: {lost}; rows in the table: {stored}",
        acked.len()
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
        cpu.busy_seconds * 1000.0 / (acked.len().max(1) as f64)
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
            let pauses = (args.duration - active_write_secs(&args)).max(0.0);
            active_write_secs(&args).max((last - started).as_secs_f64() - pauses)
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
        active_write_secs(&args)
    );
    cpu_sampler.abort();
    let timeline = timeline(&samples, started, &cpu_seconds.lock().unwrap());
    if args.timeline {
        print_timeline(&timeline);
    }
    // Then the embedding backlog drains (or not within --drain-timeout): how long after
    // the load ended, and at what rate.
    let backlog = || async {
        service
            .state
            .engine
            .store()
            .embedding_backlog()
            .await
            .map(|(waiting, _)| waiting)
            .map_err(|e| anyhow::anyhow!("{e}"))
    };
    let backlog_at_end = backlog().await?;
    let drain_limit = Duration::from_secs_f64(args.drain_timeout);
    let mut waiting = backlog_at_end;
    while waiting > 0 && load_ended.elapsed() < drain_limit {
        tokio::time::sleep(Duration::from_millis(250)).await;
        waiting = backlog().await?;
    }
    let drain_secs = load_ended.elapsed().as_secs_f64();
    let drain_rate = (backlog_at_end - waiting) as f64 / drain_secs.max(1e-9);
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
    if let Some(path) = &args.json {
        support::write_json(
            path,
            &json!({"args": {"tenants": args.tenants, "butlers": args.butlers, "rate": args.rate,
                             "burst_secs": args.burst_secs, "pause_secs": args.pause_secs,
                             "duration": args.duration, "batch_size": args.batch_size,
                             "writers": args.writers, "readers": args.readers,
                             "read_rate": args.read_rate, "fresh_prompts": args.fresh_prompts,
                             "settle_secs": args.settle_secs},
                    "seconds": round3(load_secs), "acknowledged": acked.len(), "found": found,
                    "lost": lost, "backlog_at_end": backlog_at_end, "backlog_left": waiting,
                    "drain_seconds": round3(drain_secs), "drain_rows_per_second": round3(drain_rate),
                    "machine_cpu": cpu.json(), "timeline": timeline,
                    "tools": tools_json}),
        )?;
    }
    service.stop().await?;
    anyhow::ensure!(lost == 0, "{lost} acknowledged episodes are missing");
    Ok(())
}

/// Per second of the run (by when calls were answered) and per tool: calls, p95 and max
/// latency of the successful ones; and the machine's busy and stolen CPU in that second.
fn timeline(samples: &[Sample], started: Instant, cpu: &[support::CpuUse]) -> Value {
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

fn print_timeline(timeline: &Value) {
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

/// Seconds of the run during which writes were scheduled.
fn active_write_secs(args: &Args) -> f64 {
    let period = args.burst_secs + args.pause_secs;
    let full = (args.duration / period).floor();
    let rest = (args.duration - full * period).min(args.burst_secs);
    (full * args.burst_secs + rest).max(1e-9)
}
