//! `butler-memory load`: load testing as part of the product (docs/load.md). It drives any
//! deployment over MCP Streamable HTTP with bearer keys (`--url` and a keys file), or a
//! private service it starts (`--spawn`), with a scenario file: open-loop arrivals whose
//! latency counts from each call's due time (no coordinated omission), HDR histograms per
//! tool and error class, verification through the public API, and thresholds that make the
//! command exit non-zero (99) when one is breached.
//!
//! ```text
//! scenario.rs   the TOML scenario        arrival.rs   when calls are due
//! workload.rs   what each call says      target.rs    keys file, or a spawned service
//! endpoint.rs   the lean MCP poster      recorder.rs  histograms, errors, acknowledged ids
//! verify.rs     read-back, /metrics      threshold.rs pass/fail conditions
//! report.rs     JSON and the table       machine_cpu.rs  CPU and steal from /proc/stat
//! timetable.rs  every call in due order (sessions' calls at their think-time delays)
//! html.rs       the report for people: tables and plots in one HTML file
//! ```

pub mod arrival;
pub mod endpoint;
pub mod html;
pub mod machine_cpu;
pub mod recorder;
pub mod report;
pub mod scenario;
pub mod target;
pub mod threshold;
pub mod timetable;
pub mod verify;
pub mod workload;

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rand::SeedableRng as _;
use rand::rngs::SmallRng;
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};

use arrival::Schedule;
use endpoint::Endpoint;
pub use endpoint::Route;
use machine_cpu::MachineCpu;
use recorder::Recorder;
use report::{LoadReport, Measured};
use scenario::{Scenario, Tool};
use target::{Shard, Spawned};
use timetable::Timetable;
use workload::Workload;

/// What `butler-memory load` was asked.
pub struct LoadOptions {
    pub scenario: PathBuf,
    /// A running deployment's base URL, with `keys`.
    pub url: Option<String>,
    pub keys: Option<PathBuf>,
    /// The configuration of a spawned service (the global `--config`).
    pub config: Option<PathBuf>,
    /// Where to write the JSON report.
    pub json: Option<PathBuf>,
    /// Where to write the HTML report with plots.
    pub html: Option<PathBuf>,
    /// Overrides the scenario's duration (seconds).
    pub duration: Option<f64>,
    /// How calls are spread over the instances of `url`.
    pub route: Route,
}

/// Thresholds did not hold: the command exits with 99, as k6 does.
#[derive(Debug, thiserror::Error)]
#[error("{0} threshold(s) breached")]
pub struct Breached(pub usize);

/// Runs a load and reports it; `Err(Breached)` when a threshold did not hold.
pub async fn run(options: LoadOptions) -> anyhow::Result<LoadReport> {
    let text = std::fs::read_to_string(&options.scenario)
        .with_context(|| format!("reading {}", options.scenario.display()))?;
    let mut scenario = Scenario::parse(&text)
        .map_err(|why| anyhow::anyhow!("scenario {}: {why}", options.scenario.display()))?;
    if let Some(duration) = options.duration {
        scenario.duration_secs = duration;
        scenario.warmup_secs = scenario.warmup_secs.min(duration / 2.0);
    }
    if scenario.name.is_empty() {
        scenario.name = options
            .scenario
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
    }
    let connections = scenario.max_in_flight;
    let (spawned, base, mut shards) = match (&options.url, &options.keys) {
        (Some(url), Some(keys)) => (
            None,
            url.clone(),
            target::shards_from_keys(keys, &scenario.population)?,
        ),
        (None, None) => {
            let (spawned, shards) =
                Spawned::start(options.config.as_deref(), &scenario.population).await?;
            let base = spawned.base.clone();
            (Some(spawned), base, shards)
        }
        _ => anyhow::bail!("name both --url and --keys, or neither (--spawn)"),
    };
    let endpoint = Endpoint::at(&base, connections)?.with_route(options.route);
    if spawned.is_none() {
        let mut keys: Vec<(&str, &str)> = shards
            .iter()
            .map(|s| (s.tenant.as_str(), s.key.as_str()))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        endpoint.check(&keys).await?;
    }
    let result = async {
        set_up(&scenario, &endpoint, &mut shards).await?;
        measure(&scenario, &endpoint, &shards, &base).await
    }
    .await;
    if let Some(spawned) = spawned {
        spawned.stop();
    }
    let (report, recorder) = result?;
    if let Some(path) = &options.json {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &options.html {
        std::fs::write(path, html::render(&report, &recorder))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(report)
}

/// What the mix needs before the load: a rule per butler for feedback marks.
async fn set_up(
    scenario: &Scenario,
    endpoint: &Endpoint,
    shards: &mut [Shard],
) -> anyhow::Result<()> {
    if !scenario.mix.iter().any(|m| m.tool == Tool::MemoryMarkRule) {
        return Ok(());
    }
    for shard in shards.iter_mut() {
        let rule = endpoint
            .call_value(
                &shard.key,
                "memory_store_rule",
                json!({"content": "Confirm the day's plan before acting on it", "butler": shard.butler}),
            )
            .await
            .map_err(|class| anyhow::anyhow!("storing the rule marks rate: {class}"))?;
        shard.rule_id = rule["id"].as_str().map(str::to_owned);
    }
    Ok(())
}

/// The load, then what is checked after it.
async fn measure(
    scenario: &Scenario,
    endpoint: &Endpoint,
    shards: &[Shard],
    base: &str,
) -> anyhow::Result<(LoadReport, Recorder)> {
    let before = endpoint.metrics().await;
    let cpu_before = MachineCpu::now();
    let (recorder, scheduled) = drive(scenario, endpoint, shards).await;
    let cpu = cpu_before.until(&MachineCpu::now());
    let drain = verify::drain(
        endpoint,
        Duration::from_secs_f64(scenario.verify.drain_timeout_secs),
    )
    .await;
    let read_back = verify::read_back(
        endpoint,
        shards,
        &recorder.acknowledged,
        scenario.verify.sample,
    )
    .await;
    let after = endpoint.metrics().await;
    let mut server = BTreeMap::new();
    if let (Some(before), Some(after)) = (&before, &after) {
        for family in verify::COUNTED {
            if let Some(end) = verify::family_sum(after, family) {
                let start = verify::family_sum(before, family).unwrap_or(0.0);
                server.insert((*family).to_owned(), end - start);
            }
        }
    }
    let gauge = |text: &Option<String>, family: &str| {
        text.as_deref()
            .and_then(|t| verify::family_value(t, family))
    };
    let gauges = verify::GAUGED
        .iter()
        .map(|f| ((*f).to_owned(), [gauge(&before, f), gauge(&after, f)]))
        .collect();
    let report = LoadReport::new(
        Measured {
            scenario: &scenario.name,
            target: base,
            counted_secs: scenario.duration_secs - scenario.warmup_secs,
            scheduled,
            recorder: &recorder,
            read_back,
            drain,
            server,
            gauges,
            cpu,
        },
        &scenario.thresholds,
    );
    Ok((report, recorder))
}

/// One answered call, from its task to the recorder.
struct Done {
    tool: &'static str,
    shard: usize,
    /// Seconds from the start the call was due.
    due: f64,
    latency: Duration,
    outcome: Result<Vec<String>, String>,
}

/// Schedules every call of the scenario open-loop and records the answers; answers the
/// recorder and the count of calls scheduled in the counted part.
async fn drive(scenario: &Scenario, endpoint: &Endpoint, shards: &[Shard]) -> (Recorder, u64) {
    let mut rng = SmallRng::seed_from_u64(scenario.seed);
    let schedule = Schedule::new(scenario.arrival.clone(), scenario.duration_secs);
    let workload = Workload::new(scenario, shards.to_vec(), &mut rng);
    let mut timetable = Timetable::new(schedule, workload, scenario.duration_secs, &mut rng);
    let counted = scenario.duration_secs - scenario.warmup_secs;
    let recorder = Arc::new(Mutex::new(Recorder::new(bucket_secs(counted))));
    let slots = Arc::new(Semaphore::new(scenario.max_in_flight));
    let (done_tx, done_rx) = mpsc::unbounded_channel::<Done>();
    let started = Instant::now();
    let collector = tokio::spawn(collect(
        done_rx,
        recorder.clone(),
        scenario.warmup_secs,
        started,
        slots.clone(),
        scenario.max_in_flight,
    ));
    // The scheduler's own counts, kept here: no lock on its path.
    let (mut scheduled, mut client_waits, mut worst_send_lag) = (0u64, 0u64, Duration::ZERO);
    while let Some((at, call)) = timetable.next(&mut rng) {
        let due = started + Duration::from_secs_f64(at);
        tokio::time::sleep_until(due.into()).await;
        let permit = match slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                client_waits += u64::from(at >= scenario.warmup_secs);
                slots
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the semaphore is never closed")
            }
        };
        worst_send_lag = worst_send_lag.max(Instant::now().saturating_duration_since(due));
        scheduled += u64::from(at >= scenario.warmup_secs);
        let endpoint = endpoint.clone();
        let done_tx = done_tx.clone();
        tokio::spawn(async move {
            let mut outcome = endpoint.call(&call.key, call.name, call.args).await;
            // Only episodes are acknowledged writes to read back (a fact's or a mark's
            // answer has an id too).
            if !call.tool.stores_episodes()
                && let Ok(ids) = &mut outcome
            {
                ids.clear();
            }
            let latency = Instant::now().saturating_duration_since(due);
            drop(permit);
            let _ = done_tx.send(Done {
                tool: call.name,
                shard: call.shard,
                due: at,
                latency,
                outcome,
            });
        });
    }
    drop(done_tx);
    let _ = collector.await;
    let mut recorder = Arc::try_unwrap(recorder)
        .ok()
        .expect("every call has answered")
        .into_inner()
        .expect("the recorder");
    recorder.client_waits = client_waits;
    recorder.worst_send_lag = worst_send_lag;
    (recorder, scheduled)
}

/// The timeline's bucket: a second, or wider so that a long run has at most 600 buckets.
fn bucket_secs(counted: f64) -> f64 {
    (counted / 600.0).ceil().max(1.0)
}

/// Records answers as they come and shows a progress line every second.
async fn collect(
    mut done: mpsc::UnboundedReceiver<Done>,
    recorder: Arc<Mutex<Recorder>>,
    warmup: f64,
    started: Instant,
    slots: Arc<Semaphore>,
    max_in_flight: usize,
) {
    let terminal = std::io::stderr().is_terminal();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut second = recorder::ToolStatsWindow::default();
    loop {
        tokio::select! {
            answer = done.recv() => {
                let Some(d) = answer else { break };
                let mut r = recorder.lock().expect("the recorder");
                if let Ok(ids) = &d.outcome {
                    r.acknowledge(d.shard, ids);
                }
                let outcome = d.outcome.map(|ids| ids.len());
                second.record(d.latency, outcome.is_err());
                if d.due >= warmup {
                    r.record(d.tool, d.due - warmup, d.latency, &outcome);
                }
            }
            _ = tick.tick() => {
                let elapsed = started.elapsed().as_secs_f64();
                let in_flight = max_in_flight - slots.available_permits();
                let (calls, errors, p99) = second.take();
                let line = format!(
                    "{elapsed:>6.0} s  {calls:>6} calls/s  p99 {p99:>8.1} ms  {errors:>4} errors  {in_flight:>5} in flight{}",
                    if elapsed < warmup { "  (warm-up)" } else { "" }
                );
                if terminal {
                    eprint!("\r{line}");
                } else if (elapsed as u64).is_multiple_of(10) {
                    eprintln!("{line}");
                }
            }
        }
    }
    if terminal {
        eprintln!();
    }
}
