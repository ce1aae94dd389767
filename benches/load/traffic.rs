//! The load itself: the open-loop write schedule, the writer connections that serve it, the
//! paced readers, and the machine's CPU sampled second by second while they run. Every
//! finished call becomes a [`Sample`]; its latency counts from when the call was due (a
//! write) or sent (a read).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::support::{CpuUse, MachineCpu, Rng};
use crate::{Args, Butler};
use butler_memory::load::endpoint::Endpoint;

/// One finished call.
pub struct Sample {
    pub tool: &'static str,
    pub episodes: usize,
    pub latency: Duration,
    /// `ok` or the error class.
    pub outcome: String,
    pub ids: Vec<String>,
    /// When the answer came.
    pub done: Instant,
}

type Samples = Arc<Mutex<Vec<Sample>>>;

/// The write calls due: when each was due, and its number.
type Due = Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<(Instant, usize)>>>;

const PROMPTS: &[&str] = &[
    "Plan the week's meals",
    "Remind me about the dentist",
    "What did we decide about the trip?",
    "Summarise yesterday's calls",
    "Any allergies to keep in mind?",
    "Book a table for Friday",
];

/// What the load left behind.
pub struct Run {
    /// Every finished call.
    pub samples: Vec<Sample>,
    /// When the clock started (the schedule's time zero).
    pub started: Instant,
    /// From the start to when the last writer and reader finished.
    pub load_secs: f64,
    pub load_ended: Instant,
    /// The machine's CPU over the load.
    pub cpu: CpuUse,
    /// The machine's CPU second by second, still being sampled until [`Run::timeline`].
    cpu_seconds: Arc<Mutex<Vec<CpuUse>>>,
    cpu_sampler: JoinHandle<()>,
}

impl Run {
    /// Stops the per-second CPU sampler and lays the samples out second by second.
    pub fn timeline(&self) -> Value {
        self.cpu_sampler.abort();
        crate::report::timeline(
            &self.samples,
            self.started,
            &self.cpu_seconds.lock().unwrap(),
        )
    }
}

/// Runs the load: writes on the schedule, reads at their rate, until `--duration` is over
/// and every call has been answered.
pub async fn run(args: &Args, endpoint: &Endpoint, butlers: &[Butler]) -> anyhow::Result<Run> {
    let samples: Samples = Arc::default();

    // The write schedule: calls due at fixed intervals inside bursts.
    let (due_tx, due_rx) = mpsc::unbounded_channel::<(Instant, usize)>();
    let due_rx: Due = Arc::new(tokio::sync::Mutex::new(due_rx));
    let started = Instant::now();
    let cpu_at_start = MachineCpu::now();
    // The machine's CPU second by second, for the timeline: a stall with steal is the host's.
    let cpu_seconds: Arc<Mutex<Vec<CpuUse>>> = Arc::default();
    let cpu_sampler = spawn_cpu_sampler(started, cpu_seconds.clone());
    let end = started + Duration::from_secs_f64(args.duration);
    let scheduler = spawn_scheduler(args, started, due_tx);
    let writers = spawn_writers(args, endpoint, butlers, &samples, &due_rx);
    let readers = spawn_readers(args, endpoint, butlers, &samples, end);
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
    Ok(Run {
        samples,
        started,
        load_secs,
        load_ended,
        cpu,
        cpu_seconds,
        cpu_sampler,
    })
}

/// Records the machine's CPU over each second from `started` on, until aborted.
fn spawn_cpu_sampler(started: Instant, cpu_seconds: Arc<Mutex<Vec<CpuUse>>>) -> JoinHandle<()> {
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
}

/// Open loop: sends each write call into `due` when it falls due, `--rate / --batch-size`
/// calls a second during the bursts, whether or not a writer is free to take it. Ends (and
/// closes `due`) after `--duration`.
fn spawn_scheduler(
    args: &Args,
    started: Instant,
    due_tx: mpsc::UnboundedSender<(Instant, usize)>,
) -> JoinHandle<()> {
    let call_rate = args.rate / args.batch_size as f64;
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
}

/// `--writers` connections, each taking the next due call when it is free; a call's latency
/// counts from when it was due, so time spent waiting for a free writer is latency too
/// (no coordinated omission).
fn spawn_writers(
    args: &Args,
    endpoint: &Endpoint,
    butlers: &[Butler],
    samples: &Samples,
    due_rx: &Due,
) -> Vec<JoinHandle<()>> {
    let mut writers = Vec::new();
    for _ in 0..args.writers {
        let (endpoint, samples, due_rx, butlers) = (
            endpoint.clone(),
            samples.clone(),
            due_rx.clone(),
            butlers.to_vec(),
        );
        let batch_size = args.batch_size;
        let (secrets, keyed) = (args.secrets, args.keyed);
        writers.push(tokio::spawn(async move {
            loop {
                let next = due_rx.lock().await.recv().await;
                let Some((due, n)) = next else { return };
                let butler = &butlers[n % butlers.len()];
                let episode = |i: usize| {
                    let mut content = format!("Load episode {n}.{i}: the user asked {} about the plan for day {}", butler.name, n % 31);
                    if secrets {
                        content.push_str(&format!(
                            ", paid with 4111 1111 1111 1111, key AKIA{n:016X}, mail user{n}@example.com"
                        ));
                    }
                    let mut episode = json!({"content": content, "butler": butler.name, "session_id": format!("s{}", n / 20)});
                    if keyed {
                        episode["idempotency_key"] = json!(format!("load-{n}.{i}"));
                    }
                    episode
                };
                let (tool, request) = if batch_size == 1 {
                    ("memory_store_episode", episode(0))
                } else {
                    let episodes: Vec<Value> = (0..batch_size).map(episode).collect();
                    ("memory_ingest_batch", json!({"episodes": episodes}))
                };
                let result = endpoint.call(&butler.key, tool, request).await;
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
    writers
}

/// `--readers` connections, together `--read-rate` reads a second until `end`, alternating
/// `memory_context` and `memory_search` as a random butler.
fn spawn_readers(
    args: &Args,
    endpoint: &Endpoint,
    butlers: &[Butler],
    samples: &Samples,
    end: Instant,
) -> Vec<JoinHandle<()>> {
    let mut readers = Vec::new();
    for r in 0..args.readers {
        let (endpoint, samples, butlers) = (endpoint.clone(), samples.clone(), butlers.to_vec());
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
                let result = endpoint.call(&butler.key, tool, request).await;
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
    readers
}
