//! Read latency under concurrent load: `memory_search` and `memory_context` as butlers call
//! them at session start, against one tenant holding 2,000 active facts, 200 rules and 350
//! episodes.
//!
//! Runs a private service in-process (embedded PostgreSQL in a temporary directory, the
//! real MiniLM embedder from `.deps/`), seeds it with deterministic synthetic memories
//! through MCP, waits until every row is embedded, then runs `--clients` closed-loop MCP
//! clients (each its own connection, a butler key bound to `bench`). Each client sends
//! `--requests-per-client` requests, alternating the two tools, with prompts drawn from a
//! fixed set of 60 (so prompts repeat, as session-start prompts do), each request after the
//! previous one answered. A short untimed warm-up comes first; the timed phase starts for
//! all clients together.
//!
//!     cargo bench --bench retrieval_latency
//!     cargo bench --bench retrieval_latency -- --clients 50 --requests-per-client 40 --json out.json
//!
//! Prints count, errors, p50/p95/p99/max latency and throughput per tool. Client and
//! service share the machine, so the numbers include the client's own CPU use.

#[path = "retrieval_latency/corpus.rs"]
mod corpus;
#[path = "support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt as _;
use serde_json::{Value, json};

use corpus::{PROMPTS, episode_text, fact_text, rule_text};
use support::{Key, Latency, McpClient, Rng, Service, round3};

const TENANT: &str = "bench";
const BUTLER: &str = "bench";
const BUTLER_KEY: &str = "retrieval-bench-butler-key";

/// The contract's p95 objectives (memory_butler.md), printed next to the measurements.
const SEARCH_P95_TARGET_MS: f64 = 350.0;
const CONTEXT_P95_TARGET_MS: f64 = 250.0;

#[derive(Parser)]
struct Args {
    /// Concurrent MCP clients, each with its own connection.
    #[arg(long, default_value_t = 50)]
    clients: usize,
    /// Timed requests per client (alternating memory_search and memory_context).
    #[arg(long, default_value_t = 40)]
    requests_per_client: usize,
    /// Total requests per second across all clients in the timed phase (each client paced
    /// at rate / clients); absent, clients send back to back (closed loop, saturation).
    #[arg(long)]
    rate: Option<f64>,
    /// Untimed requests per client before the timed phase (enough that, across clients,
    /// every prompt has been asked once: the timed phase measures the steady state).
    #[arg(long, default_value_t = 4)]
    warmup: usize,
    /// Also write the numbers as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Seed of the synthetic memories and of the prompt draws.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[arg(long, default_value_t = 2000)]
    facts: usize,
    #[arg(long, default_value_t = 200)]
    rules: usize,
    #[arg(long, default_value_t = 350)]
    episodes: usize,
    /// Store calls in flight while seeding.
    #[arg(long, default_value_t = 8)]
    store_concurrency: usize,
    /// `limit` of memory_search (the tool's default when absent).
    #[arg(long)]
    search_limit: Option<u32>,
    /// `token_budget` of memory_context (the service's default when absent).
    #[arg(long)]
    token_budget: Option<u32>,
    /// `as_of` of both tools (RFC 3339 or a date): reads in a time window, which take the
    /// windowed statements (facts live or superseded).
    #[arg(long)]
    as_of: Option<String>,
    /// Extra service configuration (TOML layered over the defaults), e.g. retrieval workers.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The cluster directory of a PostgreSQL server whose CPU over the timed phase is
    /// reported per request (repeat for several: a primary and its replica).
    #[arg(long)]
    postgres_cpu: Vec<PathBuf>,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Arc::new(Args::parse());
    anyhow::ensure!(args.clients > 0, "--clients must be at least 1");
    let keys = [Key::butler(BUTLER_KEY, TENANT, BUTLER)];
    let extra = support::extra_toml(args.config.as_ref())?;
    let service = Service::start(&keys, &extra).await?;
    let outcome = run(args.clone(), &service).await;
    service.stop().await?;
    outcome
}

/// Seed, measure, report.
async fn run(args: Arc<Args>, service: &Service) -> anyhow::Result<()> {
    let seeded = prepare(&args, service).await?;
    let cpu_before = postgres_cpu(&args)?;
    let (samples, wall) = measure(args.clone(), service).await?;
    let cpu_after = postgres_cpu(&args)?;
    for ((dir, before), after) in args.postgres_cpu.iter().zip(cpu_before).zip(cpu_after) {
        eprintln!(
            "PostgreSQL {}: {:.3} CPU-s over the timed phase, {:.2} CPU-ms per request",
            dir.display(),
            after - before,
            (after - before) * 1000.0 / samples.len().max(1) as f64
        );
    }
    print_cache_metrics(service).await?;
    report(&args, &samples, wall, &seeded)
}

/// CPU seconds used so far by each `--postgres-cpu` server.
fn postgres_cpu(args: &Args) -> anyhow::Result<Vec<f64>> {
    args.postgres_cpu
        .iter()
        .map(|dir| support::postgres_cpu_seconds(dir))
        .collect()
}

// ---- seeding ------------------------------------------------------------------------------

/// How the tenant was seeded: the store and embedding-drain times, and `memory_stats` after.
struct Seeded {
    stored: Duration,
    drained: Duration,
    stats: Value,
}

/// Probes both tools, seeds the tenant, waits until every row is embedded and the planner's
/// statistics are fresh, and says what the tenant holds.
async fn prepare(args: &Args, service: &Service) -> anyhow::Result<Seeded> {
    let seeder = service.client(BUTLER_KEY).await?;
    // Fail in a second, not after seeding, if either tool is missing or broken.
    seeder
        .try_call("memory_search", json!({"query": "probe"}))
        .await?;
    seeder
        .try_call(
            "memory_context",
            json!({"trigger_prompt": "probe", "butler": BUTLER}),
        )
        .await?;
    let stored = seed(&seeder, args).await?;
    let started = Instant::now();
    service.flush().await?;
    let drained = started.elapsed();
    service.analyze().await?;
    let stats = seeder.try_call("memory_stats", json!({})).await?;
    seeder.close().await;
    let memories = args.facts + args.rules + args.episodes;
    eprintln!(
        "seeded {memories} memories in {:.1} s ({:.0}/s), embedded {:.1} s after the last write; \
         memory_stats: active facts {}, active rules {}, episodes {}, unembedded episodes {}",
        stored.as_secs_f64(),
        memories as f64 / stored.as_secs_f64().max(1e-9),
        drained.as_secs_f64(),
        stats["facts"]["breakdown"]["validity"]["active"],
        stats["rules"]["breakdown"]["validity"]["active"],
        stats["episodes"]["total"],
        stats["episodes"]["unembedded"],
    );
    Ok(Seeded {
        stored,
        drained,
        stats,
    })
}

/// Stores the synthetic memories through MCP, several calls in flight.
async fn seed(client: &McpClient, args: &Args) -> anyhow::Result<Duration> {
    let mut rng = Rng::new(args.seed);
    let permanences = ["permanent", "stable", "standard", "volatile"];
    let mut calls: Vec<(&'static str, Value)> = Vec::new();
    for i in 0..args.facts {
        let (subject, stem, content, tag) = fact_text(&mut rng);
        calls.push((
            "memory_store_fact",
            json!({
                "subject": subject,
                // Unique per fact: a second fact with the same key would supersede the first.
                "predicate": format!("{stem}_{i}"),
                "content": content,
                "importance": rng.below(9) + 1,
                "permanence": rng.pick(&permanences),
                "scope": if i.is_multiple_of(3) { "global" } else { BUTLER },
                "tags": [tag],
            }),
        ));
    }
    for i in 0..args.rules {
        let (content, tag) = rule_text(&mut rng);
        calls.push((
            "memory_store_rule",
            json!({
                "content": content,
                "scope": if i.is_multiple_of(2) { "global" } else { BUTLER },
                "tags": [tag],
                "importance": rng.below(9) + 1,
            }),
        ));
    }
    for i in 0..args.episodes {
        calls.push((
            "memory_store_episode",
            json!({
                "content": episode_text(&mut rng, i),
                "butler": BUTLER,
                "session_id": format!("bench-session-{}", i / 5),
                "importance": rng.below(9) + 1,
                "ttl_days": 3650,
            }),
        ));
    }
    let started = Instant::now();
    let mut stream = futures::stream::iter(calls)
        .map(|(tool, args)| client.try_call(tool, args))
        .buffer_unordered(args.store_concurrency.max(1));
    while let Some(stored) = stream.next().await {
        stored?;
    }
    Ok(started.elapsed())
}

// ---- the load -----------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tool {
    Search,
    Context,
}

impl Tool {
    fn name(self) -> &'static str {
        match self {
            Tool::Search => "memory_search",
            Tool::Context => "memory_context",
        }
    }
}

/// One timed request.
struct Sample {
    tool: Tool,
    latency: Duration,
    error: Option<String>,
    /// Answered from the keyword path only (the query embedding was not available in time).
    degraded: bool,
    /// memory_search: results returned; memory_context: tokens_used.
    size: f64,
}

/// Runs every client's loop at once; returns their timed samples and the timed phase's
/// wall time (from the first client's start to the last client's end).
async fn measure(args: Arc<Args>, service: &Service) -> anyhow::Result<(Vec<Sample>, Duration)> {
    // Connect every client before any starts, so that no client waits at the barrier for
    // one that failed to connect.
    let mut clients = Vec::with_capacity(args.clients);
    for _ in 0..args.clients {
        clients.push(service.client(BUTLER_KEY).await?);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(args.clients));
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| tokio::spawn(client_loop(client, i, args.clone(), barrier.clone())))
        .collect();
    let mut samples = Vec::new();
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    for task in tasks {
        let (s, began, ended) = task.await?;
        samples.extend(s);
        first = Some(first.map_or(began, |f| f.min(began)));
        last = Some(last.map_or(ended, |l| l.max(ended)));
    }
    let wall = match (first, last) {
        (Some(f), Some(l)) => l - f,
        _ => Duration::ZERO,
    };
    Ok((samples, wall))
}

/// One client's closed loop: warm-up, wait for every client, then the timed requests.
async fn client_loop(
    client: McpClient,
    index: usize,
    args: Arc<Args>,
    start: Arc<tokio::sync::Barrier>,
) -> (Vec<Sample>, Instant, Instant) {
    let mut rng = Rng::new(args.seed ^ (index as u64 + 1).wrapping_mul(0x5851_F42D_4C95_7F2D));
    let mut samples = Vec::with_capacity(args.requests_per_client);
    let mut began = Instant::now();
    // Paced clients start evenly spread over one interval, so arrivals are smooth.
    let interval = args
        .rate
        .map(|rate| Duration::from_secs_f64(args.clients as f64 / rate.max(1e-9)));
    let mut next = Instant::now();
    for r in 0..args.warmup + args.requests_per_client {
        if r == args.warmup {
            start.wait().await;
            began = Instant::now();
            if let Some(interval) = interval {
                next = began + interval.mul_f64(index as f64 / args.clients as f64);
            }
        }
        if r >= args.warmup
            && let Some(interval) = interval
        {
            tokio::time::sleep_until(next.into()).await;
            next += interval;
        }
        // Alternate, and start half the clients on each tool so both run at all times.
        let tool = if (index + r).is_multiple_of(2) {
            Tool::Search
        } else {
            Tool::Context
        };
        let prompt = *rng.pick(PROMPTS);
        let call = match tool {
            Tool::Search => {
                let mut a = json!({"query": prompt});
                if let Some(limit) = args.search_limit {
                    a["limit"] = json!(limit);
                }
                if let Some(as_of) = &args.as_of {
                    a["as_of"] = json!(as_of);
                }
                a
            }
            Tool::Context => {
                let mut a = json!({"trigger_prompt": prompt, "butler": BUTLER});
                if let Some(budget) = args.token_budget {
                    a["token_budget"] = json!(budget);
                }
                if let Some(as_of) = &args.as_of {
                    a["as_of"] = json!(as_of);
                }
                a
            }
        };
        let t = Instant::now();
        let answer = client.try_call(tool.name(), call).await;
        let latency = t.elapsed();
        if r < args.warmup {
            continue;
        }
        let (error, degraded, size) = match answer {
            Ok(body) => (
                None,
                body["degraded"].as_bool() == Some(true),
                match tool {
                    Tool::Search => body["results"].as_array().map_or(0, Vec::len) as f64,
                    Tool::Context => body["tokens_used"].as_f64().unwrap_or(0.0),
                },
            ),
            Err(e) => (Some(format!("{e:#}")), false, 0.0),
        };
        samples.push(Sample {
            tool,
            latency,
            error,
            degraded,
            size,
        });
    }
    let ended = Instant::now();
    client.close().await;
    (samples, began, ended)
}

// ---- the report ---------------------------------------------------------------------------

/// What the service's caches did during the run, from its own metrics.
async fn print_cache_metrics(service: &Service) -> anyhow::Result<()> {
    let metrics = reqwest::get(format!("http://{}/metrics", service.address))
        .await?
        .text()
        .await?;
    for line in metrics.lines().filter(|l| l.contains("cache_total{")) {
        eprintln!("{line}");
    }
    Ok(())
}

fn report(args: &Args, samples: &[Sample], wall: Duration, seeded: &Seeded) -> anyhow::Result<()> {
    let Seeded {
        stored,
        drained,
        stats,
    } = seeded;
    let wall_s = wall.as_secs_f64().max(1e-9);
    println!("## Retrieval latency under load");
    println!();
    println!(
        "- one tenant: {} facts, {} rules, {} episodes (seed {}), seeded in {:.1} s, embedding drain {:.1} s",
        args.facts,
        args.rules,
        args.episodes,
        args.seed,
        stored.as_secs_f64(),
        drained.as_secs_f64()
    );
    let pacing = match args.rate {
        Some(rate) => format!("clients paced at {rate} requests/s in total"),
        None => "closed-loop clients (back to back)".to_owned(),
    };
    println!(
        "- {} {pacing} x {} timed requests (after {} warm-up each), alternating tools, {} distinct prompts; timed phase {:.1} s",
        args.clients,
        args.requests_per_client,
        args.warmup,
        PROMPTS.len(),
        wall_s
    );
    println!();
    println!(
        "| tool | requests | errors | degraded | p50 ms | p95 ms | p99 ms | max ms | mean ms | req/s | p95 target ms | mean size |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut tools = serde_json::Map::new();
    let all: Vec<Duration> = samples.iter().map(|s| s.latency).collect();
    for (tool, target, size_label) in [
        (Tool::Search, SEARCH_P95_TARGET_MS, "results"),
        (Tool::Context, CONTEXT_P95_TARGET_MS, "tokens_used"),
    ] {
        let mine: Vec<&Sample> = samples.iter().filter(|s| s.tool == tool).collect();
        let latencies: Vec<Duration> = mine.iter().map(|s| s.latency).collect();
        let ok: Vec<&&Sample> = mine.iter().filter(|s| s.error.is_none()).collect();
        let errors = mine.len() - ok.len();
        let degraded = ok.iter().filter(|s| s.degraded).count();
        // fold, not sum: an empty f64 sum is -0.0.
        let mean_size = ok.iter().map(|s| s.size).fold(0.0, |a, b| a + b) / ok.len().max(1) as f64;
        let l = Latency::of(&latencies);
        let throughput = mine.len() as f64 / wall_s;
        println!(
            "| {} | {} | {errors} | {degraded} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {throughput:.1} | {target:.0} | {mean_size:.1} {size_label} |",
            tool.name(),
            l.count,
            l.p50,
            l.p95,
            l.p99,
            l.max,
            l.mean
        );
        let first_error = mine.iter().find_map(|s| s.error.clone());
        let mut entry = l.json();
        entry["errors"] = json!(errors);
        entry["degraded"] = json!(degraded);
        entry["throughput_per_s"] = json!(round3(throughput));
        entry["p95_target_ms"] = json!(target);
        entry[format!("mean_{size_label}")] = json!(round3(mean_size));
        entry["first_error"] = json!(first_error);
        tools.insert(tool.name().into(), entry);
    }
    let l = Latency::of(&all);
    println!(
        "| all | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | | |",
        l.count,
        samples.iter().filter(|s| s.error.is_some()).count(),
        samples.iter().filter(|s| s.degraded).count(),
        l.p50,
        l.p95,
        l.p99,
        l.max,
        l.mean,
        l.count as f64 / wall_s
    );
    for (name, entry) in &tools {
        if let Some(e) = entry["first_error"].as_str() {
            println!("\n{name}: first error: {e}");
        }
    }
    if let Some(path) = &args.json {
        let value = json!({
            "bench": "retrieval_latency",
            "facts": args.facts,
            "rules": args.rules,
            "episodes": args.episodes,
            "seed": args.seed,
            "clients": args.clients,
            "requests_per_client": args.requests_per_client,
            "warmup_per_client": args.warmup,
            "prompts": PROMPTS.len(),
            "search_limit": args.search_limit,
            "token_budget": args.token_budget,
            "as_of": args.as_of,
            "seed_seconds": round3(stored.as_secs_f64()),
            "drain_seconds": round3(drained.as_secs_f64()),
            "timed_seconds": round3(wall_s),
            "memory_stats": stats,
            "tools": tools,
            "all": l.json(),
        });
        support::write_json(path, &value)?;
    }
    Ok(())
}
