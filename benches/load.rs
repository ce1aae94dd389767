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

#[path = "load/report.rs"]
mod report;
#[path = "support/mod.rs"]
mod support;
#[path = "load/traffic.rs"]
mod traffic;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use serde_json::json;

use butler_memory::load::endpoint::Endpoint;
use support::{Key, Service};
use traffic::Sample;

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
    /// Put secrets in every episode (a card number and an AWS-style key, both masked by the
    /// default redaction policy, and an e-mail address, kept): redaction's worst case.
    #[arg(long)]
    secrets: bool,
    /// Send every episode with an idempotency key of its own (all distinct, so all are
    /// stored): the write path of a client that retries safely, keys checked and kept.
    #[arg(long)]
    keyed: bool,
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
    /// Turn off the triggers that keep the stats' projections (migration 19), to measure
    /// what they cost the write path by difference. Never how the service runs.
    #[arg(long)]
    without_projections: bool,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

impl Args {
    /// The command line, with `--smoke`'s settings applied, checked.
    fn resolved() -> anyhow::Result<Args> {
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
        Ok(args)
    }
}

/// A butler the generator writes as.
#[derive(Clone)]
struct Butler {
    key: String,
    name: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::resolved()?;
    let (keys, butlers) = fleet(&args);
    let service = start(&args, &keys).await?;
    let endpoint = Endpoint::new(service.address, args.writers + args.readers)?;
    if !args.smoke {
        tokio::time::sleep(Duration::from_secs_f64(args.settle_secs)).await;
    }
    open_connections(&args, &endpoint, &butlers).await?;
    let run = traffic::run(&args, &endpoint, &butlers).await?;
    let stored = check_stored(&service, &run.samples).await?;
    let tools = report::print_summary(&args, &run, &stored);
    let timeline = run.timeline();
    if args.timeline {
        report::print_timeline(&timeline);
    }
    let drain = drain(&service, &args, run.load_ended).await?;
    report::print_drain(&drain);
    if let Some(path) = &args.json {
        let value = report::json(&args, &run, &stored, &drain, timeline, tools);
        support::write_json(path, &value)?;
    }
    service.stop().await?;
    anyhow::ensure!(
        stored.lost == 0,
        "{} acknowledged episodes are missing",
        stored.lost
    );
    Ok(())
}

/// `--tenants` tenants, each with an admin key and `--butlers` butlers with a key each.
fn fleet(args: &Args) -> (Vec<Key>, Vec<Butler>) {
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
    (keys, butlers)
}

/// The service, with the fleet's keys and `--config`.
async fn start(args: &Args, keys: &[Key]) -> anyhow::Result<Service> {
    // The write path is measured, not a catch-up of the daily sweeps at the first tick.
    let extra = format!(
        "[lifecycle]\ncatch_up_missed_runs = false\n{}",
        support::extra_toml(args.config.as_ref())?
    );
    let service = Service::start(keys, &extra).await?;
    if args.without_projections {
        for table in ["episodes", "facts", "rules"] {
            let sql = format!("ALTER TABLE {table} DISABLE TRIGGER USER");
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(service.state.engine.store().pool())
                .await?;
        }
    }
    Ok(service)
}

/// Every connection the generator will use is opened before the clock starts: the run
/// measures the service, not TCP handshakes.
async fn open_connections(
    args: &Args,
    endpoint: &Endpoint,
    butlers: &[Butler],
) -> anyhow::Result<()> {
    let opened = (0..args.writers + args.readers).map(|_| async {
        let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        let response = endpoint
            .post(&butlers[0].key, list)
            .await?
            .error_for_status()?;
        // Read to the end, so that the connection goes back to the pool.
        response.bytes().await.map(|_| ())
    });
    for opened in futures::future::join_all(opened).await {
        opened?;
    }
    Ok(())
}

/// Acknowledged episodes and how many of them the database holds.
struct Stored {
    /// Episode ids the service acknowledged.
    acked: usize,
    /// Of those, in the `episodes` table.
    found: i64,
    lost: i64,
    /// Rows in the `episodes` table.
    rows: i64,
}

/// Every acknowledged episode must be in the database: counts the acknowledged ids that are.
async fn check_stored(service: &Service, samples: &[Sample]) -> anyhow::Result<Stored> {
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
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM episodes")
        .fetch_one(&pool)
        .await?;
    Ok(Stored {
        acked: acked.len(),
        found,
        lost: acked.len() as i64 - found,
        rows,
    })
}

/// How the embedding backlog drained after the load.
#[derive(Clone, Copy)]
struct Drain {
    /// Rows waiting for their embedding when the load ended (read after the report).
    backlog_at_end: i64,
    /// Rows still waiting when the wait ended.
    waiting: i64,
    /// From the end of the load to the end of the wait.
    secs: f64,
    /// Rows embedded per second over the wait.
    rate: f64,
}

/// Then the embedding backlog drains (or not within --drain-timeout): how long after the
/// load ended, and at what rate.
async fn drain(service: &Service, args: &Args, load_ended: Instant) -> anyhow::Result<Drain> {
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
    let secs = load_ended.elapsed().as_secs_f64();
    Ok(Drain {
        backlog_at_end,
        waiting,
        secs,
        rate: (backlog_at_end - waiting) as f64 / secs.max(1e-9),
    })
}
