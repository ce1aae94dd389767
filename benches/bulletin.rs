//! The memory bulletin's latency (issue 23): `orchestrator_bulletin` for 1,000 messages, one
//! after another, on an orchestrator holding 2,000 memories (goals, todos, decisions,
//! preferences, facts, observations; todos part of goals, some contradictions), all
//! embedded first. Reports nearest-rank percentiles, the machine's CPU and steal over the
//! series and CPU per bulletin; prints the bulletin of a small scenario first, as an example.
//!
//! Runs a private service in-process (embedded PostgreSQL in a temporary directory).
//!
//!     cargo bench --bench bulletin
//!     cargo bench --bench bulletin -- --memories 500 --messages 200 --json out.json

#[path = "support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use serde_json::{Value, json};

use support::{Key, Latency, MachineCpu, Rng, Service, round3, write_json};

const ORCHESTRATOR: &str = "orch-bench";
const KEY: &str = "bulletin-bench-admin-key-0";
const EXAMPLE: &str = "orch-example";
const EXAMPLE_KEY: &str = "bulletin-bench-example-key";

#[derive(Parser)]
struct Args {
    /// Memories in the orchestrator's graph.
    #[arg(long, default_value_t = 2000)]
    memories: usize,
    /// Bulletins asked for, one after another.
    #[arg(long, default_value_t = 1000)]
    messages: usize,
    /// Also write the numbers as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

const SUBJECTS: [&str; 12] = [
    "billing export",
    "payroll run",
    "mobile app",
    "TLS certificate",
    "finance report",
    "staging database",
    "customer onboarding",
    "release train",
    "audit trail",
    "support queue",
    "data retention",
    "price change",
];
const VERBS: [&str; 8] = [
    "needs review by",
    "is blocked until",
    "moves to",
    "must ship before",
    "depends on",
    "was approved for",
    "is owned by",
    "slipped past",
];
const OBJECTS: [&str; 10] = [
    "Friday",
    "the Oslo team",
    "the next sprint",
    "the quarterly close",
    "the security audit",
    "the CFO",
    "March",
    "the Dublin region",
    "the new vendor",
    "the holiday freeze",
];
const TYPES: [&str; 6] = [
    "Goal",
    "Todo",
    "Decision",
    "Preference",
    "Fact",
    "Observation",
];

fn sentence(rng: &mut Rng, i: usize) -> String {
    format!(
        "The {} {} {} (item {i})",
        rng.pick(&SUBJECTS),
        rng.pick(&VERBS),
        rng.pick(&OBJECTS)
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    butler_memory_actors::install_tls_provider();
    let extra = "[lifecycle]\ncatch_up_missed_runs = false\n\
                 [log]\nlevel = \"warn,rmcp=error,sqlx=error\"\n";
    let keys = [
        Key::admin(KEY, ORCHESTRATOR),
        Key::admin(EXAMPLE_KEY, EXAMPLE),
    ];
    let service = Service::start(&keys, extra).await?;

    // The example: a small scenario's bulletin.
    let example = service.client(EXAMPLE_KEY).await?;
    example
        .ok(
            "orchestrator_remember",
            butler_memory::testkit::orchestrator_scenario::billing_export(),
        )
        .await;
    service.flush().await?;
    let shown = example
        .ok(
            "orchestrator_bulletin",
            json!({"message": "Where is the billing database, and what is left for the export?"}),
        )
        .await;
    eprintln!(
        "example bulletin ({} tokens):\n{}",
        shown["tokens"],
        shown["text"].as_str().unwrap_or_default()
    );

    // The graph: in calls of 200 memories, goals first so todos can be part of them.
    let client = service.client(KEY).await?;
    let mut rng = Rng::new(23);
    let mut goals: Vec<String> = Vec::new();
    let loaded = Instant::now();
    let mut written = 0;
    while written < args.memories {
        let n = (args.memories - written).min(200);
        let memories: Vec<Value> = (0..n)
            .map(|i| {
                let t = TYPES[(written + i) % TYPES.len()];
                json!({"type": t, "content": sentence(&mut rng, written + i),
                       "importance": rng.below(101), "confidence": 0.3 + 0.7 * (rng.below(100) as f64 / 100.0)})
            })
            .collect();
        let answer = client
            .ok("orchestrator_remember", json!({"source": {"sourceType": "manual", "capturedBy": "system"}, "memories": memories}))
            .await;
        let ids: Vec<(String, String)> = answer["memories"]
            .as_array()
            .map(|m| {
                m.iter()
                    .map(|m| {
                        (
                            m["type"].as_str().unwrap_or_default().to_owned(),
                            m["memoryId"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut edges = Vec::new();
        for (i, (t, id)) in ids.iter().enumerate() {
            match t.as_str() {
                "Goal" => goals.push(id.clone()),
                "Todo" if !goals.is_empty() => {
                    edges.push(json!({"from": id, "to": rng.pick(&goals), "edgeType": "PartOf"}))
                }
                "Preference" if i % 12 == 3 && i > 6 => {
                    edges.push(json!({"from": id, "to": ids[i - 6].1, "edgeType": "Contradicts"}))
                }
                _ => {}
            }
        }
        if !edges.is_empty() {
            client
                .ok("orchestrator_remember", json!({"source": {"sourceType": "manual", "capturedBy": "system"}, "edges": edges}))
                .await;
        }
        written += n;
    }
    service.flush().await?;
    service.analyze().await?;
    eprintln!(
        "{} memories written and embedded in {:.1} s",
        args.memories,
        loaded.elapsed().as_secs_f64()
    );

    // The series.
    let messages: Vec<String> = (0..args.messages)
        .map(|i| {
            format!(
                "What about the {} {}? (message {i})",
                rng.pick(&SUBJECTS),
                rng.pick(&OBJECTS)
            )
        })
        .collect();
    let cpu = MachineCpu::now();
    let started = Instant::now();
    let mut samples = Vec::with_capacity(args.messages);
    let mut tokens = Vec::with_capacity(args.messages);
    for message in &messages {
        let t = Instant::now();
        let answer = client
            .ok("orchestrator_bulletin", json!({"message": message}))
            .await;
        samples.push(t.elapsed());
        anyhow::ensure!(
            answer.get("warning").is_none(),
            "a bulletin fell back: {answer}"
        );
        tokens.push(answer["tokens"].as_u64().unwrap_or_default());
    }
    let wall = started.elapsed().as_secs_f64();
    let used = cpu.until(&MachineCpu::now());
    let latency = Latency::of(&samples);
    let mean_tokens = tokens.iter().sum::<u64>() as f64 / tokens.len().max(1) as f64;
    eprintln!(
        "orchestrator_bulletin x {}: p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, {:.1} ms CPU per bulletin, steal {:.2}%, {:.0} tokens on average",
        args.messages,
        latency.p50,
        latency.p95,
        latency.p99,
        used.busy_seconds * 1e3 / args.messages as f64,
        used.steal * 100.0,
        mean_tokens
    );
    let report = json!({
        "memories": args.memories,
        "messages": args.messages,
        "latency": latency.json(),
        "bulletins_per_s": round3(args.messages as f64 / wall),
        "cpu_ms_per_bulletin": round3(used.busy_seconds * 1e3 / args.messages as f64),
        "cpu": used.json(),
        "mean_tokens": round3(mean_tokens),
    });
    if let Some(path) = &args.json {
        write_json(path, &report)?;
    }
    println!("{report}");
    service.stop().await
}
