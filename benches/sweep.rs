//! The daily decay sweep over a large shard: how long it takes for `--facts` live facts
//! (default 1,000,000) in one `(tenant, butler)` shard, against the contract's 30 minutes.
//!
//! Runs a private service in-process (embedded PostgreSQL in a temporary directory), loads
//! the facts straight into the `facts` table with one `generate_series` INSERT (a write path
//! benchmark this is not: through MCP a million facts would take over an hour of embedding),
//! with a deterministic mix of permanence classes and confirmation ages so that a known
//! share of them fade or expire, then calls `memory_run_sweep` over MCP with an admin key,
//! twice: the first run makes the transitions, the second finds nothing to change (the
//! idempotent steady state, which is what most daily runs look like). A concurrent writer
//! stores episodes into the same shard during the first run and reports its worst latency:
//! the sweep runs in bounded steps, so writes wait for at most one page.
//!
//!     cargo bench --bench sweep
//!     cargo bench --bench sweep -- --facts 100000 --json out.json

#[path = "support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use serde_json::{Value, json};

use support::{Key, Latency, McpClient, Service, round3};

const TENANT: &str = "bench";
const BUTLER: &str = "sweeps";
const ADMIN_KEY: &str = "sweep-bench-admin-key-0000";
const BUTLER_KEY: &str = "sweep-bench-butler-key-000";

/// The contract's bound on the daily sweep.
const CONTRACT_SECONDS: f64 = 30.0 * 60.0;

#[derive(Parser)]
struct Args {
    /// Live facts in the shard.
    #[arg(long, default_value_t = 1_000_000)]
    facts: u64,
    /// Rows per sweep step (`lifecycle.sweep_page_size`).
    #[arg(long, default_value_t = 1000)]
    page_size: u32,
    /// Also write the numbers as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Extra service configuration (TOML layered over the defaults), e.g. the page size.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let service = start(&args).await?;
    let load_s = load_facts(&service, args.facts).await?;
    let admin = service.client(ADMIN_KEY).await?;
    let butler = service.client(BUTLER_KEY).await?;
    // A writer into the same shard while the first sweep runs.
    let sweeping = Arc::new(AtomicBool::new(true));
    let writer = spawn_writer(butler, sweeping.clone());
    let runs = run_sweeps(&admin, &args, &sweeping).await?;
    let (samples, errors) = writer.await?;
    report(&args, load_s, &runs, &samples, errors)?;
    admin.close().await;
    service.stop().await
}

/// The service with an admin key and a butler key for the shard, and only the measured
/// sweeps.
async fn start(args: &Args) -> anyhow::Result<Service> {
    // Only the measured sweeps run: no catch-up sweep at start, no scheduled ones.
    let extra = format!(
        "[lifecycle]\ncatch_up_missed_runs = false\ndecay_sweep_cron = \"0 3 29 2 *\"\nsweep_page_size = {}\n{}",
        args.page_size,
        support::extra_toml(args.config.as_ref())?
    );
    Service::start(
        &[
            Key::admin(ADMIN_KEY, TENANT),
            Key::butler(BUTLER_KEY, TENANT, BUTLER),
        ],
        &extra,
    )
    .await
}

/// Loads `facts` live facts into the shard straight into the table, vacuums and analyses
/// it; returns the seconds that took.
async fn load_facts(service: &Service, facts: u64) -> anyhow::Result<f64> {
    let pool = service.state.engine.store().pool().clone();

    // Permanence cycles over five classes; confirmation ages spread over 0-399 days. Of
    // each 2,000 facts: permanent never move; stable (0.002/day) never drop below 0.2 in
    // 400 days; standard fades after 201 days and expires after 374; volatile fades after
    // 53 and expires after 100; ephemeral fades after 16 and expires after 30.
    let started = Instant::now();
    // In chunks, each in a transaction without the service's statement timeout.
    const CHUNK: u64 = 100_000;
    let mut from = 1u64;
    while from <= facts {
        let to = (from + CHUNK - 1).min(facts);
        let mut tx = pool.begin().await?;
        sqlx::query("SET LOCAL statement_timeout = 0")
            .execute(&mut *tx)
            .await?;
        sqlx::query(
            "INSERT INTO facts (id, tenant_id, subject, predicate, content, permanence, decay_rate,
                                scope, validity, source_butler, created_at, last_confirmed_at,
                                last_referenced_at, valid_from)
             SELECT gen_random_uuid(), $1, 'user', 'p' || i, 'synthetic fact number ' || i,
                    (ARRAY['permanent','stable','standard','volatile','ephemeral'])[1 + i % 5],
                    (ARRAY[0.0, 0.002, 0.008, 0.03, 0.1])[1 + i % 5],
                    'global', 'active', $2, now() - interval '400 days',
                    now() - make_interval(days => ((i / 5) % 400)::int),
                    now() - make_interval(days => ((i / 5) % 400)::int),
                    now() - interval '400 days'
             FROM generate_series($3::bigint, $4::bigint) AS i",
        )
        .bind(TENANT)
        .bind(BUTLER)
        .bind(from as i64)
        .bind(to as i64)
        .execute(&mut *tx)
        .await
        .with_context(|| format!("loading facts {from}..={to}"))?;
        tx.commit().await?;
        from = to + 1;
    }
    {
        let mut conn = pool.acquire().await?;
        for sql in [
            "SET statement_timeout = 0",
            "VACUUM ANALYZE facts",
            "RESET statement_timeout",
        ] {
            sqlx::raw_sql(sql).execute(&mut *conn).await.context(sql)?;
        }
    }
    let load_s = started.elapsed().as_secs_f64();
    eprintln!("loaded {facts} facts in {load_s:.1} s");
    Ok(load_s)
}

/// Stores episodes into the shard, one every 20 ms after the last answer, while `sweeping`
/// holds; returns every call's latency and the errors.
fn spawn_writer(
    butler: McpClient,
    sweeping: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(Vec<Duration>, u64)> {
    tokio::spawn(async move {
        let mut samples = Vec::new();
        let mut errors = 0u64;
        let mut i = 0u64;
        while sweeping.load(Ordering::Relaxed) {
            let t = Instant::now();
            let stored = butler
                .try_call(
                    "memory_store_episode",
                    json!({"content": format!("write during the sweep {i}"), "butler": BUTLER}),
                )
                .await;
            samples.push(t.elapsed());
            if stored.is_err() {
                errors += 1;
            }
            i += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (samples, errors)
    })
}

/// Two sweeps of the shard, the first with the writer running (stopped when it ends);
/// returns each run's numbers.
async fn run_sweeps(
    admin: &McpClient,
    args: &Args,
    sweeping: &AtomicBool,
) -> anyhow::Result<Vec<Value>> {
    let mut runs = Vec::new();
    for run in 1..=2 {
        let t = Instant::now();
        let report = admin
            .try_call_within(
                "memory_run_sweep",
                json!({"kinds": ["decay_sweep"], "butler": BUTLER}),
                Duration::from_secs_f64(CONTRACT_SECONDS),
            )
            .await?;
        let seconds = t.elapsed().as_secs_f64();
        if run == 1 {
            sweeping.store(false, Ordering::Relaxed);
        }
        let shard = report["reports"]
            .as_array()
            .and_then(|r| r.first())
            .cloned()
            .unwrap_or(Value::Null);
        eprintln!("run {run}: {seconds:.1} s, {}", shard["changes"]);
        runs.push(json!({
            "run": run,
            "seconds": round3(seconds),
            "scanned": shard["scanned"],
            "changes": shard["changes"],
            "facts_per_second": round3(args.facts as f64 / seconds),
        }));
    }
    Ok(runs)
}

/// The table, the writer's latency, and with `--json` the same as JSON.
fn report(
    args: &Args,
    load_s: f64,
    runs: &[Value],
    samples: &[Duration],
    errors: u64,
) -> anyhow::Result<()> {
    let writes = Latency::of(samples);
    println!("## Decay sweep over one shard\n");
    println!(
        "- {} live facts in one shard, loaded in {load_s:.1} s; {} rows per step; contract: {} s\n",
        args.facts, args.page_size, CONTRACT_SECONDS
    );
    println!("| run | seconds | live facts scanned | facts/s | changes |");
    println!("|---:|---:|---:|---:|---|");
    for r in runs {
        println!(
            "| {} | {} | {} | {} | {} |",
            r["run"], r["seconds"], r["scanned"], r["facts_per_second"], r["changes"]
        );
    }
    println!(
        "\nwrites into the same shard during run 1: {} calls, {errors} errors, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        samples.len(),
        writes.p50,
        writes.p99,
        writes.max
    );
    if let Some(path) = &args.json {
        support::write_json(
            path,
            &json!({"facts": args.facts, "page_size": args.page_size, "load_seconds": round3(load_s), "runs": runs,
                    "writes_during_sweep": writes.json(), "write_errors": errors}),
        )?;
    }
    Ok(())
}
