//! Turn-level retrieval recall on LoCoMo (Maharana et al., ACL 2024), as the paper measures
//! it for retrieval-augmented agents: every dialogue turn is stored as an episode, every
//! question (categories 1-4; 5 is adversarial and has no answer to find) is asked to
//! `memory_search`, and recall@k is the share of the question's evidence turns found among
//! the top k results.
//!
//! Runs a private service in-process (embedded PostgreSQL in a temporary directory, the
//! real MiniLM embedder from `.deps/`), one tenant per conversation:
//!
//!     cargo bench --bench locomo -- ../shared/data/locomo_dev.json
//!     cargo bench --bench locomo -- PATH --modes hybrid,semantic,keyword \
//!         --json locomo.json --limit-conversations 2
//!     cargo bench --bench locomo -- PATH --no-sessions   # as a caller without sessions
//!     cargo bench --bench locomo -- PATH --rankings ranks.jsonl  # every answer, for analysis
//!
//! Prints recall@5/10/25/50 per mode, overall and per category, the question counts behind
//! every number, the store time, the embedding drain time and search latency p50/p95.
//! The data file is CC BY-NC (evaluation only): it is read from where it lies, never copied.

#[path = "locomo/dataset.rs"]
mod dataset;
#[path = "support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use futures::StreamExt as _;
use serde_json::{Value, json};

use dataset::{Conversation, Episode, EvidenceCounts};
use support::{Key, Latency, McpClient, Service, round3};

/// The cut-offs recall is reported at; the largest is the search limit.
const KS: [usize; 4] = [5, 10, 25, 50];
const SEARCH_LIMIT: usize = 50;
const BUTLER: &str = "locomo";
/// Category ids per the official evaluation code (see shared/data/README.md).
const CATEGORIES: [(u8, &str); 4] = [
    (1, "multi-hop"),
    (2, "temporal"),
    (3, "open-domain"),
    (4, "single-hop"),
];

#[derive(Parser)]
struct Args {
    /// A LoCoMo-format JSON file (e.g. ../shared/data/locomo_dev.json).
    path: PathBuf,
    /// Search modes to evaluate, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "hybrid,semantic,keyword")]
    modes: Vec<String>,
    /// Also write the numbers as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Only the first N conversations of the file.
    #[arg(long)]
    limit_conversations: Option<usize>,
    /// Sessions stored at once per conversation (each session's turns in order).
    #[arg(long, default_value_t = 8)]
    store_concurrency: usize,
    /// Store as a caller that knows nothing of sessions would: every turn on its own, one
    /// at a time in file order, its text alone (no `session_id`, no metadata).
    #[arg(long)]
    no_sessions: bool,
    /// With sessions, also tell the service when each turn happened (`occurred_at`: its
    /// session's date), as a butler importing a dated conversation would; a question that
    /// names a time ("in May 2023") then finds that time's turns.
    #[arg(long, conflicts_with = "no_sessions")]
    session_times: bool,
    /// Search calls in flight.
    #[arg(long, default_value_t = 4)]
    search_concurrency: usize,
    /// Extra service configuration (TOML layered over the defaults), e.g. retrieval weights.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Also write every question's ranked answer (dia_ids with their component scores) to
    /// this file, one JSON line per question and mode, for analysis beside the recall.
    #[arg(long)]
    rankings: Option<PathBuf>,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    for mode in &args.modes {
        anyhow::ensure!(
            ["hybrid", "semantic", "keyword"].contains(&mode.as_str()),
            "unknown mode `{mode}` (hybrid, semantic, keyword)"
        );
    }
    let (conversations, counts) = dataset::load(&args.path, args.limit_conversations)?;
    let keys: Vec<Key> = conversations
        .iter()
        .map(|c| Key::admin(tenant_key(&c.id), c.id.clone()))
        .collect();
    let extra = support::extra_toml(args.config.as_ref())?;
    let service = Service::start(&keys, &extra).await?;
    let outcome = run(&args, &service, &conversations).await;
    service.stop().await?;
    let (timings, modes) = outcome?;
    report(&args, &conversations, &counts, &timings, &modes)
}

// ---- scoring ----------------------------------------------------------------------------

/// Share of `evidence` (distinct ids) found among the first `k` entries of `ranked`.
fn recall_at(evidence: &[String], ranked: &[String], k: usize) -> f64 {
    let top = &ranked[..ranked.len().min(k)];
    let hits = evidence.iter().filter(|e| top.contains(e)).count();
    hits as f64 / evidence.len() as f64
}

/// Sums of recall@k over a group of questions; the mean is `sum / questions`.
#[derive(Default, Clone)]
struct RecallSum {
    questions: usize,
    sums: [f64; KS.len()],
}

impl RecallSum {
    fn add(&mut self, evidence: &[String], ranked: &[String]) {
        self.questions += 1;
        for (sum, k) in self.sums.iter_mut().zip(KS) {
            *sum += recall_at(evidence, ranked, k);
        }
    }

    fn means(&self) -> [f64; KS.len()] {
        self.sums.map(|s| s / self.questions.max(1) as f64)
    }

    fn json(&self) -> Value {
        let mut obj = serde_json::Map::new();
        obj.insert("questions".into(), json!(self.questions));
        for (k, mean) in KS.iter().zip(self.means()) {
            obj.insert(format!("recall@{k}"), json!(round3(mean)));
        }
        Value::Object(obj)
    }
}

/// Everything measured for one search mode.
#[derive(Default)]
struct ModeResult {
    overall: RecallSum,
    by_category: BTreeMap<u8, RecallSum>,
    latencies: Vec<Duration>,
    errors: usize,
    first_error: Option<String>,
    degraded: usize,
    results_returned: usize,
    /// Result ids that were not among the episodes stored (should stay 0).
    unmapped: usize,
    /// Each question's ranked answer (`--rankings`).
    rankings: Vec<Value>,
}

// ---- the run ----------------------------------------------------------------------------

fn tenant_key(conversation: &str) -> String {
    format!("locomo-bench-admin-{conversation}")
}

/// Stores the turns of one conversation one at a time, in file order, each with its text
/// alone (`--no-sessions`); returns episode id → dia_id.
async fn store_turns_alone(
    client: &McpClient,
    conversation: &Conversation,
) -> anyhow::Result<HashMap<String, String>> {
    let mut ids = HashMap::with_capacity(conversation.episodes.len());
    for episode in &conversation.episodes {
        let args = json!({"content": episode.content, "butler": BUTLER, "ttl_days": 3650});
        let id = store_turn(client, conversation, episode, args).await?;
        ids.insert(id, episode.dia_id.clone());
    }
    Ok(ids)
}

/// Stores one turn with `args`; answers its episode id.
async fn store_turn(
    client: &McpClient,
    conversation: &Conversation,
    episode: &Episode,
    args: Value,
) -> anyhow::Result<String> {
    let body = client
        .try_call("memory_store_episode", args)
        .await
        .with_context(|| format!("{} {}", conversation.id, episode.dia_id))?;
    Ok(body["id"]
        .as_str()
        .context("memory_store_episode answered without an id")?
        .to_owned())
}

/// Stores the turns of one conversation; returns episode id → dia_id. A session's turns
/// are stored one after another, in dialogue order, as a butler writes them as they
/// happen: the service orders a session by arrival (session neighbours, the turn before
/// for contextual embeddings), so sending a session's turns concurrently would scramble
/// it. Up to `concurrency` sessions are stored at once.
async fn store_conversation(
    client: &McpClient,
    conversation: &Conversation,
    concurrency: usize,
    dated: bool,
) -> anyhow::Result<HashMap<String, String>> {
    if dated {
        let undated = conversation
            .episodes
            .iter()
            .filter(|e| e.occurred_at.is_none());
        anyhow::ensure!(
            undated.count() == 0,
            "{}: a session's date does not read as a time",
            conversation.id
        );
    }
    let mut sessions: Vec<Vec<&Episode>> = Vec::new();
    for episode in &conversation.episodes {
        match sessions.last_mut() {
            Some(s) if s[0].metadata["session"] == episode.metadata["session"] => s.push(episode),
            _ => sessions.push(vec![episode]),
        }
    }
    let calls = sessions.into_iter().map(|session| async move {
        let mut stored = Vec::with_capacity(session.len());
        for episode in session {
            let mut args = json!({
                "content": episode.content,
                "butler": BUTLER,
                "session_id": format!("{}-session-{}", conversation.id, episode.metadata["session"]),
                "ttl_days": 3650,
                "metadata": episode.metadata,
            });
            if dated {
                args["occurred_at"] = json!(episode.occurred_at);
            }
            let id = store_turn(client, conversation, episode, args).await?;
            stored.push((id, episode.dia_id.clone()));
        }
        anyhow::Ok(stored)
    });
    let mut stream = futures::stream::iter(calls).buffer_unordered(concurrency.max(1));
    let mut ids = HashMap::with_capacity(conversation.episodes.len());
    while let Some(stored) = stream.next().await {
        ids.extend(stored?);
    }
    Ok(ids)
}

/// Asks every question of one conversation in `mode` and scores the answers into `out`.
async fn search_conversation(
    client: &McpClient,
    conversation: &Conversation,
    ids: &HashMap<String, String>,
    mode: &str,
    concurrency: usize,
    keep_rankings: bool,
    out: &mut ModeResult,
) {
    let calls = conversation.questions.iter().map(|q| async move {
        let started = Instant::now();
        let answer = client
            .try_call(
                "memory_search",
                json!({
                    "query": q.text,
                    "types": ["episode"],
                    "mode": mode,
                    "limit": SEARCH_LIMIT,
                }),
            )
            .await;
        (q, answer, started.elapsed())
    });
    let mut stream = futures::stream::iter(calls).buffer_unordered(concurrency.max(1));
    while let Some((q, answer, elapsed)) = stream.next().await {
        out.latencies.push(elapsed);
        // A failed search scores zero (it found nothing), and is counted and shown.
        let mut ranked = Vec::new();
        let mut scores = Vec::new();
        match answer {
            Ok(body) => {
                if body["degraded"].as_bool() == Some(true) {
                    out.degraded += 1;
                }
                for result in body["results"].as_array().into_iter().flatten() {
                    out.results_returned += 1;
                    // Unknown ids keep their rank position, matching no evidence.
                    let dia_id = result["id"].as_str().and_then(|id| ids.get(id));
                    if dia_id.is_none() {
                        out.unmapped += 1;
                    }
                    ranked.push(dia_id.cloned().unwrap_or_default());
                    scores.push(result["scores"].clone());
                }
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
        if keep_rankings {
            out.rankings.push(json!({
                "mode": mode,
                "conversation": conversation.id,
                "category": q.category,
                "question": q.text,
                "evidence": q.evidence,
                "ranked": ranked,
                "scores": scores,
            }));
        }
        out.overall.add(&q.evidence, &ranked);
        out.by_category
            .entry(q.category)
            .or_default()
            .add(&q.evidence, &ranked);
    }
}

/// Store and drain times, summed over conversations.
#[derive(Default)]
struct Timings {
    store: Duration,
    drain: Duration,
}

async fn run(
    args: &Args,
    service: &Service,
    conversations: &[Conversation],
) -> anyhow::Result<(Timings, Vec<(String, ModeResult)>)> {
    let mut timings = Timings::default();
    let mut modes: Vec<(String, ModeResult)> = args
        .modes
        .iter()
        .map(|m| (m.clone(), ModeResult::default()))
        .collect();
    // Fail in a second, not after storing everything, if a mode cannot be searched at all.
    if let Some(first) = conversations.first() {
        let client = service.client(&tenant_key(&first.id)).await?;
        for mode in &args.modes {
            client
                .try_call(
                    "memory_search",
                    json!({"query": "probe", "types": ["episode"], "mode": mode, "limit": 1}),
                )
                .await
                .with_context(|| format!("probing memory_search in {mode} mode"))?;
        }
        client.close().await;
    }
    // One conversation at a time, so that each one's searches run on a quiet service.
    for conversation in conversations {
        let client = service.client(&tenant_key(&conversation.id)).await?;
        let started = Instant::now();
        let ids = if args.no_sessions {
            store_turns_alone(&client, conversation).await?
        } else {
            store_conversation(
                &client,
                conversation,
                args.store_concurrency,
                args.session_times,
            )
            .await?
        };
        let stored = started.elapsed();
        // The indexer embeds rows after their write is acknowledged; this is what is left
        // of that work when the last write answers.
        let started = Instant::now();
        service.flush().await?;
        let drained = started.elapsed();
        service.analyze().await?;
        timings.store += stored;
        timings.drain += drained;
        eprintln!(
            "{}: {} turns stored in {:.1} s, embedded {:.1} s later; {} questions",
            conversation.id,
            ids.len(),
            stored.as_secs_f64(),
            drained.as_secs_f64(),
            conversation.questions.len()
        );
        for (mode, result) in &mut modes {
            let started = Instant::now();
            search_conversation(
                &client,
                conversation,
                &ids,
                mode,
                args.search_concurrency,
                args.rankings.is_some(),
                result,
            )
            .await;
            eprintln!(
                "{}: {mode} searches done in {:.1} s",
                conversation.id,
                started.elapsed().as_secs_f64()
            );
        }
        client.close().await;
    }
    for (mode, result) in &modes {
        // Every search failing means the tool is missing or broken: no table to print.
        if result.errors > 0 && result.errors == result.latencies.len() {
            anyhow::bail!(
                "every {mode} search failed; the first: {}",
                result.first_error.as_deref().unwrap_or("?")
            );
        }
    }
    Ok((timings, modes))
}

fn category_name(category: u8) -> &'static str {
    CATEGORIES
        .iter()
        .find(|(c, _)| *c == category)
        .map_or("?", |(_, name)| name)
}

fn report(
    args: &Args,
    conversations: &[Conversation],
    counts: &EvidenceCounts,
    timings: &Timings,
    modes: &[(String, ModeResult)],
) -> anyhow::Result<()> {
    let turns: usize = conversations.iter().map(|c| c.episodes.len()).sum();
    let questions: usize = conversations.iter().map(|c| c.questions.len()).sum();
    let names: Vec<&str> = conversations.iter().map(|c| c.id.as_str()).collect();
    let store_s = timings.store.as_secs_f64();

    println!("## LoCoMo turn-level retrieval recall");
    println!();
    println!(
        "`memory_search {{types: [episode], limit: {SEARCH_LIMIT}}}`, {} searches in flight; data `{}`",
        args.search_concurrency,
        args.path.display()
    );
    println!();
    println!(
        "- conversations: {} ({}); turns stored: {turns}",
        conversations.len(),
        names.join(", ")
    );
    println!(
        "- QA items: {}; category 5 skipped: {}; no resolvable evidence skipped: {}; scored: {questions}",
        counts.qa_total, counts.adversarial_skipped, counts.no_evidence_skipped
    );
    println!(
        "- evidence (categories 1-4): {} strings as written, {} ids kept after the lenient fix, dropped: [{}]",
        counts.written,
        counts.resolved,
        counts.dropped.join(", ")
    );
    let how = if args.no_sessions {
        "one turn at a time in file order, no session_id, no metadata".to_owned()
    } else {
        format!(
            "{} sessions at once, each in order, with session_id{}",
            args.store_concurrency,
            if args.session_times {
                " and the session's time as occurred_at"
            } else {
                ""
            }
        )
    };
    println!(
        "- store: {store_s:.1} s ({:.0} turns/s, {how}); embedding drain after the last write: {:.1} s",
        turns as f64 / store_s.max(1e-9),
        timings.drain.as_secs_f64()
    );
    println!();
    print!("| mode | category | questions |");
    for k in KS {
        print!(" R@{k} |");
    }
    println!();
    println!("|---|---|---:|{}", "---:|".repeat(KS.len()));
    for (mode, result) in modes {
        let mut rows = vec![("all".to_owned(), &result.overall)];
        for (category, sum) in &result.by_category {
            rows.push((format!("{category} {}", category_name(*category)), sum));
        }
        for (label, sum) in rows {
            print!("| {mode} | {label} | {} |", sum.questions);
            for mean in sum.means() {
                print!(" {mean:.3} |");
            }
            println!();
        }
    }
    println!();
    println!("| mode | searches | errors | degraded | results/search | p50 ms | p95 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (mode, result) in modes {
        let latency = Latency::of(&result.latencies);
        println!(
            "| {mode} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
            latency.count,
            result.errors,
            result.degraded,
            result.results_returned as f64 / latency.count.max(1) as f64,
            latency.p50,
            latency.p95,
            latency.max
        );
    }
    for (mode, result) in modes {
        if let Some(e) = &result.first_error {
            println!("\n{mode}: first error: {e}");
        }
        if result.unmapped > 0 {
            println!(
                "\n{mode}: {} results were not episodes this bench stored",
                result.unmapped
            );
        }
    }

    if let Some(path) = &args.rankings {
        let mut lines = String::new();
        for (_, result) in modes {
            for ranking in &result.rankings {
                lines.push_str(&ranking.to_string());
                lines.push('\n');
            }
        }
        std::fs::write(path, lines).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.json {
        let mut by_mode = serde_json::Map::new();
        for (mode, result) in modes {
            let mut categories = serde_json::Map::new();
            categories.insert("all".into(), result.overall.json());
            for (category, sum) in &result.by_category {
                let mut entry = sum.json();
                entry["category"] = json!(category);
                categories.insert(category_name(*category).into(), entry);
            }
            by_mode.insert(
                mode.clone(),
                json!({
                    "recall": categories,
                    "latency": Latency::of(&result.latencies).json(),
                    "errors": result.errors,
                    "degraded": result.degraded,
                    "results_returned": result.results_returned,
                    "unmapped_results": result.unmapped,
                }),
            );
        }
        let value = json!({
            "bench": "locomo",
            "data": args.path.display().to_string(),
            "conversations": names,
            "turns": turns,
            "qa_total": counts.qa_total,
            "adversarial_skipped": counts.adversarial_skipped,
            "no_evidence_skipped": counts.no_evidence_skipped,
            "questions_scored": questions,
            "evidence": {
                "written": counts.written,
                "kept": counts.resolved,
                "dropped": counts.dropped,
            },
            "search_limit": SEARCH_LIMIT,
            "store_concurrency": args.store_concurrency,
            "sessions": !args.no_sessions,
            "session_times": args.session_times,
            "search_concurrency": args.search_concurrency,
            "store_seconds": round3(store_s),
            "store_turns_per_second": round3(turns as f64 / store_s.max(1e-9)),
            "drain_seconds": round3(timings.drain.as_secs_f64()),
            "modes": by_mode,
        });
        support::write_json(path, &value)?;
    }
    Ok(())
}
