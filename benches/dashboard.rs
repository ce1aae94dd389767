//! The dashboard's reads on a large tenant: `GET /api/memory/stats` (issue 20: ≤ 20 ms p95
//! with 1,000,000 facts and 100,000 episodes in the tenant), the list pages (≤ 50 ms p95) and
//! the web pages a signed-in browser loads (overview, facts, episodes), against the scan of
//! the tables that the projections replaced.
//!
//! Runs a private service in-process (embedded PostgreSQL in a temporary directory), loads
//! the rows straight into the tables with `generate_series` INSERTs (the projections'
//! triggers count the facts and rules as any write would; the episodes, which the group
//! commit counts itself, are counted after the load as the migration counts existing rows),
//! then calls each endpoint `--reads` times one after
//! another with an admin key and reports nearest-rank percentiles, the machine's CPU and
//! steal over each series, and CPU per call. The indexer is left idle (its poll is an hour
//! away and nothing tells it of the loaded rows), so the reads do not share the cores with
//! a million embeddings.
//!
//!     cargo bench --bench dashboard
//!     cargo bench --bench dashboard -- --facts 100000 --episodes 10000 --json out.json

#[path = "support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use butler_memory_actors::StatsFilter;
use clap::Parser;
use serde_json::{Value, json};

use support::{Key, Latency, MachineCpu, Service, round3, write_json};

const TENANT: &str = "bench";
const ADMIN_KEY: &str = "dashboard-bench-admin-key-0";

#[derive(Parser)]
struct Args {
    /// Facts in the tenant.
    #[arg(long, default_value_t = 1_000_000)]
    facts: u64,
    /// Episodes in the tenant.
    #[arg(long, default_value_t = 100_000)]
    episodes: u64,
    /// Rules in the tenant.
    #[arg(long, default_value_t = 10_000)]
    rules: u64,
    /// Calls of each endpoint.
    #[arg(long, default_value_t = 300)]
    reads: usize,
    /// Also write the numbers as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    butler_memory_actors::install_tls_provider();
    let extra = "[lifecycle]\ncatch_up_missed_runs = false\ndecay_sweep_cron = \"0 3 29 2 *\"\n\
                 episode_cleanup_cron = \"0 4 29 2 *\"\nconsolidation_cron = \"0 5 29 2 *\"\n\
                 [consolidation]\ntrigger_backlog_size = 1000000000\ntrigger_backlog_age_secs = 1000000000.0\n\
                 [indexer]\npoll_interval_ms = 3600000\n\
                 [log]\nlevel = \"warn,rmcp=error,sqlx=error\"\n";
    let service = Service::start(&[Key::admin(ADMIN_KEY, TENANT)], extra).await?;
    let load_s = load(&service, &args).await?;
    let base = format!("http://{}", service.address);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let session = sign_in(&http, &base).await?;

    let mut results = Vec::new();
    // The first read counts the confidence bands (a scan, once per tenant and bound).
    let first = timed(&http, &base, "/api/memory/stats", None).await?;
    eprintln!(
        "first stats read (bands counted): {:.1} ms",
        first.as_secs_f64() * 1e3
    );
    for path in [
        "/api/memory/stats",
        "/api/memory/stats?butler=b3",
        "/api/memory/stats?scope=global",
        "/api/butlers/b3/memory/stats",
        "/api/memory/facts",
        "/api/memory/facts?subject=subject-42",
        "/api/memory/facts?permanence=volatile&min_confidence=0.5",
        "/api/butlers/b3/memory/facts",
        "/api/memory/rules",
        "/api/memory/episodes",
        "/api/memory/episodes?butler=b3&consolidation_status=pending",
        "/api/memory/timeline",
        "/api/memory/activity?limit=50",
    ] {
        results.push(series(&http, &base, path, None, args.reads).await?);
    }
    // The dashboard's pages, as a signed-in browser asks for them.
    for path in [
        "/memory",
        "/butlers/b3/memory",
        "/memory/facts?subject=subject-42",
        "/memory/episodes",
    ] {
        results.push(series(&http, &base, path, Some(&session), args.reads).await?);
    }
    let scans = scans(&service, 5).await?;
    report(&args, load_s, first, &results, &scans)?;
    service.stop().await
}

/// Loads the rows in chunks, each in a transaction without the statement timeout, then
/// vacuums and analyses; returns the seconds that took.
async fn load(service: &Service, args: &Args) -> anyhow::Result<f64> {
    let pool = service.state.engine.store().pool().clone();
    let started = Instant::now();
    // Facts: 5,000 subjects, five permanence classes, confirmation ages over 400 days, a
    // tenth in each butler's scope, the rest global; a tenth superseded.
    let facts =
        "INSERT INTO facts (id, tenant_id, subject, predicate, content, permanence, decay_rate,
                                    scope, validity, source_butler, created_at, last_confirmed_at,
                                    last_referenced_at, valid_from)
                 SELECT uuidv7(), $1, 'subject-' || (i % 5000), 'p' || i, 'synthetic fact ' || i,
                        (ARRAY['permanent','stable','standard','volatile','ephemeral'])[1 + i % 5],
                        (ARRAY[0.0, 0.002, 0.008, 0.03, 0.1])[1 + i % 5],
                        CASE WHEN i % 10 = 0 THEN 'b' || (i / 10 % 10) ELSE 'global' END,
                        CASE WHEN i % 10 = 7 THEN 'superseded' ELSE 'active' END,
                        'b' || (i % 10), now() - interval '400 days',
                        now() - make_interval(days => ((i / 5) % 400)::int),
                        now() - make_interval(days => ((i / 5) % 400)::int),
                        now() - interval '400 days'
                 FROM generate_series($2::bigint, $3::bigint) AS i";
    // Episodes: ten butlers, over the last 14 days, a fifth still pending.
    let episodes =
        "INSERT INTO episodes (id, tenant_id, butler, content, importance, consolidation_status,
                                         created_at, last_referenced_at, expires_at)
                    SELECT uuidv7(), $1, 'b' || (i % 10), 'synthetic episode ' || i, 5,
                           CASE WHEN i % 5 = 0 THEN 'pending' ELSE 'consolidated' END,
                           now() - make_interval(secs => (i % 1209600)::double precision),
                           now(), now() + interval '30 days'
                    FROM generate_series($2::bigint, $3::bigint) AS i";
    let rules = "INSERT INTO rules (id, tenant_id, content, scope, maturity, validity, confidence,
                                   decay_rate, effectiveness_score, applied_count, success_count,
                                   source_butler, created_at, last_confirmed_at, last_referenced_at)
                 SELECT uuidv7(), $1, 'synthetic rule ' || i, 'global',
                        (ARRAY['candidate','established','proven'])[1 + i % 3], 'active',
                        0.5 + (i % 5) / 10.0, 0.008, (i % 10) / 10.0, i % 7, (i % 7) / 2,
                        'b' || (i % 10), now(), now() - make_interval(days => (i % 60)::int), now()
                 FROM generate_series($2::bigint, $3::bigint) AS i";
    for (what, sql, count) in [
        ("facts", facts, args.facts),
        ("episodes", episodes, args.episodes),
        ("rules", rules, args.rules),
    ] {
        const CHUNK: u64 = 100_000;
        let mut from = 1u64;
        while from <= count {
            let to = (from + CHUNK - 1).min(count);
            let mut tx = pool.begin().await?;
            sqlx::query("SET LOCAL statement_timeout = 0")
                .execute(&mut *tx)
                .await?;
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(TENANT)
                .bind(from as i64)
                .bind(to as i64)
                .execute(&mut *tx)
                .await
                .map_err(|e| anyhow::anyhow!("loading {what} {from}..={to}: {e:?}"))?;
            tx.commit().await?;
            from = to + 1;
        }
        eprintln!("loaded {count} {what}");
    }
    // New episodes are counted by the statement that stores them (store/episodes.rs), which
    // this load bypasses: count the loaded ones as the migration counts existing rows.
    for sql in [
        "INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n, compacted)
         SELECT r.tenant_id, 'episode', r.butler, k.dim, k.key, count(*), true
         FROM episodes r, episode_count_keys(r.consolidation_status, r.forgotten_at IS NOT NULL,
                                             r.embedding_version_id) k
         WHERE r.tenant_id = $1 GROUP BY 1, 2, 3, 4, 5",
        "INSERT INTO memory_days (tenant_id, butler, day, status, n, compacted)
         SELECT tenant_id, butler, (created_at AT TIME ZONE 'UTC')::date, consolidation_status, count(*), true
         FROM episodes WHERE tenant_id = $1 AND forgotten_at IS NULL GROUP BY 1, 2, 3, 4",
    ] {
        sqlx::query(sql).bind(TENANT).execute(&pool).await?;
    }
    service
        .state
        .engine
        .store()
        .compact_counts()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut conn = pool.acquire().await?;
    for sql in [
        "SET statement_timeout = 0",
        "VACUUM ANALYZE facts, episodes, rules, memory_counts",
        "RESET statement_timeout",
    ] {
        sqlx::raw_sql(sql).execute(&mut *conn).await.context(sql)?;
    }
    let load_s = started.elapsed().as_secs_f64();
    eprintln!("loaded in {load_s:.1} s");
    Ok(load_s)
}

/// Signs in to the dashboard; answers the session cookie.
async fn sign_in(http: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    let response = http
        .post(format!("{base}/sign-in"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(format!("key={ADMIN_KEY}"))
        .send()
        .await?;
    let cookie = response
        .headers()
        .get("set-cookie")
        .context("no session cookie")?
        .to_str()?;
    Ok(cookie.split(';').next().unwrap_or_default().to_owned())
}

/// One call: with the admin key, or as a signed-in browser (`session`).
async fn timed(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    session: Option<&str>,
) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let request = http.get(format!("{base}{path}"));
    let request = match session {
        Some(cookie) => request.header("Cookie", cookie),
        None => request.header("Authorization", format!("Bearer {ADMIN_KEY}")),
    };
    let response = request.send().await?;
    let status = response.status();
    let body = response.bytes().await?;
    anyhow::ensure!(
        status.is_success(),
        "{path}: {status} {}",
        String::from_utf8_lossy(&body)
    );
    Ok(t.elapsed())
}

/// `reads` calls of one path, one after another.
async fn series(
    http: &reqwest::Client,
    base: &str,
    path: &str,
    session: Option<&str>,
    reads: usize,
) -> anyhow::Result<Value> {
    let cpu = MachineCpu::now();
    let started = Instant::now();
    let mut samples = Vec::with_capacity(reads);
    for _ in 0..reads {
        samples.push(timed(http, base, path, session).await?);
    }
    let wall = started.elapsed().as_secs_f64();
    let used = cpu.until(&MachineCpu::now());
    let latency = Latency::of(&samples);
    eprintln!(
        "{path}: p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, steal {:.1}%",
        latency.p50,
        latency.p95,
        latency.p99,
        used.steal * 100.0
    );
    Ok(json!({
        "path": path,
        "latency": latency.json(),
        "calls_per_s": round3(reads as f64 / wall),
        "cpu_ms_per_call": round3(used.busy_seconds * 1e3 / reads as f64),
        "cpu": used.json(),
    }))
}

/// The scans the projections replaced (`store/stats.rs`), timed directly on the store.
async fn scans(service: &Service, runs: usize) -> anyhow::Result<Value> {
    let store = service.state.engine.store();
    let filter = StatsFilter {
        tenant_id: TENANT.into(),
        scopes: None,
        butlers: None,
    };
    let now = chrono::Utc::now();
    let mut samples = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let e = |e: butler_memory_actors::MemoryError| anyhow::anyhow!("{e}");
        store.episode_stats(&filter, now, 1).await.map_err(e)?;
        store.fact_stats(&filter, now, 1).await.map_err(e)?;
        store.rule_stats(&filter, now, 1).await.map_err(e)?;
        samples.push(t.elapsed());
    }
    let latency = Latency::of(&samples);
    eprintln!(
        "scanned stats (before the projections): p50 {:.1} ms",
        latency.p50
    );
    Ok(latency.json())
}

fn report(
    args: &Args,
    load_s: f64,
    first: Duration,
    results: &[Value],
    scans: &Value,
) -> anyhow::Result<()> {
    println!(
        "\n{} facts, {} episodes, {} rules in one tenant (loaded in {load_s:.0} s); {} calls each\n",
        args.facts, args.episodes, args.rules, args.reads
    );
    println!(
        "| endpoint | p50 ms | p95 ms | p99 ms | CPU ms/call | steal |\n|---|---|---|---|---|---|"
    );
    for r in results {
        let l = &r["latency"];
        println!(
            "| `{}` | {} | {} | {} | {} | {:.1}% |",
            r["path"].as_str().unwrap_or_default(),
            l["p50_ms"],
            l["p95_ms"],
            l["p99_ms"],
            r["cpu_ms_per_call"],
            r["cpu"]["steal"].as_f64().unwrap_or(0.0) * 100.0
        );
    }
    println!(
        "\nfirst stats read (counts the bands): {:.1} ms; the scans it replaced: p50 {} ms",
        first.as_secs_f64() * 1e3,
        scans["p50_ms"]
    );
    if let Some(path) = &args.json {
        write_json(
            path,
            &json!({
                "facts": args.facts, "episodes": args.episodes, "rules": args.rules,
                "load_s": round3(load_s),
                "first_stats_ms": round3(first.as_secs_f64() * 1e3),
                "scanned_stats": scans,
                "endpoints": results,
            }),
        )?;
    }
    Ok(())
}
