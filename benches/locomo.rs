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
//!
//! Prints recall@5/10/25/50 per mode, overall and per category, the question counts behind
//! every number, the store time, the embedding drain time and search latency p50/p95.
//! The data file is CC BY-NC (evaluation only): it is read from where it lies, never copied.

#[path = "support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use futures::StreamExt as _;
use serde::Deserialize;
use serde_json::{Value, json};

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
    /// Search calls in flight.
    #[arg(long, default_value_t = 4)]
    search_concurrency: usize,
    /// Extra service configuration (TOML layered over the defaults), e.g. retrieval weights.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

// ---- the data file ----------------------------------------------------------------------

#[derive(Deserialize)]
struct Sample {
    sample_id: String,
    /// `speaker_a`, `speaker_b`, `session_<N>` (turns), `session_<N>_date_time`.
    conversation: serde_json::Map<String, Value>,
    qa: Vec<Qa>,
}

#[derive(Deserialize)]
struct Turn {
    speaker: String,
    dia_id: String,
    text: String,
    #[serde(default)]
    blip_caption: Option<String>,
}

#[derive(Deserialize)]
struct Qa {
    question: String,
    #[serde(default)]
    evidence: Vec<String>,
    category: u8,
}

/// One turn, ready to store.
struct Episode {
    dia_id: String,
    content: String,
    metadata: Value,
}

/// One question to score.
struct Question {
    text: String,
    category: u8,
    /// Distinct, canonical dia_ids that exist in the conversation; never empty.
    evidence: Vec<String>,
}

/// One conversation, parsed.
struct Conversation {
    id: String,
    episodes: Vec<Episode>,
    questions: Vec<Question>,
}

/// How the evidence lists fared under normalisation (printed so a reader can check them
/// against the data README).
#[derive(Default)]
struct EvidenceCounts {
    qa_total: usize,
    adversarial_skipped: usize,
    /// Category 1-4 questions with no resolvable evidence left.
    no_evidence_skipped: usize,
    /// Raw evidence strings of scored categories, as written.
    written: usize,
    /// Evidence ids kept (distinct per question) after the lenient fix.
    resolved: usize,
    /// Pieces that were not a dia_id or named no real turn (e.g. "D", "D10:19").
    dropped: Vec<String>,
}

/// `"D11:26"`, `"D:11:26"`, `"D30:05"` → `"D11:26"`, `"D11:26"`, `"D30:5"`; anything else
/// (`"D"`, `"X1:2"`) → `None`.
fn canonical_dia_id(raw: &str) -> Option<String> {
    let rest = raw.trim().strip_prefix('D')?;
    let rest = rest.strip_prefix(':').unwrap_or(rest);
    let (session, turn) = rest.split_once(':')?;
    let session: u32 = session.parse().ok()?;
    let turn: u32 = turn.parse().ok()?;
    Some(format!("D{session}:{turn}"))
}

/// The lenient evidence fix of the data README: split `"D8:6; D9:17"` and space-separated
/// lists, canonicalise each id, drop what does not name a turn of this conversation, and
/// drop duplicates. Returns the kept ids and the dropped pieces.
fn normalise_evidence(raw: &[String], turns: &HashSet<String>) -> (Vec<String>, Vec<String>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for item in raw {
        for piece in item
            .split([';', ',', ' ', '\t', '\n'])
            .filter(|p| !p.is_empty())
        {
            match canonical_dia_id(piece) {
                Some(id) if turns.contains(&id) => {
                    if !kept.contains(&id) {
                        kept.push(id);
                    }
                }
                _ => dropped.push(piece.to_owned()),
            }
        }
    }
    (kept, dropped)
}

/// Parses the file into conversations, with the evidence counts.
fn load(args: &Args) -> anyhow::Result<(Vec<Conversation>, EvidenceCounts)> {
    let text = std::fs::read_to_string(&args.path)
        .with_context(|| format!("reading {}", args.path.display()))?;
    let samples: Vec<Sample> =
        serde_json::from_str(&text).context("parsing the LoCoMo file (a JSON list of samples)")?;
    let take = args.limit_conversations.unwrap_or(samples.len());
    let mut counts = EvidenceCounts::default();
    let mut conversations = Vec::new();
    for sample in samples.into_iter().take(take) {
        // Sessions are the `session_<N>` keys holding a list; conv-26 has date keys with
        // no session, which this ignores.
        let mut sessions: Vec<(u32, Vec<Turn>)> = Vec::new();
        for (key, value) in &sample.conversation {
            let Some(n) = key.strip_prefix("session_").and_then(|n| n.parse().ok()) else {
                continue;
            };
            if value.is_array() {
                let turns = Vec::<Turn>::deserialize(value)
                    .with_context(|| format!("{} {key}", sample.sample_id))?;
                sessions.push((n, turns));
            }
        }
        sessions.sort_by_key(|(n, _)| *n);
        let mut episodes = Vec::new();
        for (n, turns) in sessions {
            let date = sample
                .conversation
                .get(&format!("session_{n}_date_time"))
                .and_then(Value::as_str)
                .unwrap_or("");
            for turn in turns {
                let dia_id = canonical_dia_id(&turn.dia_id).unwrap_or(turn.dia_id);
                let mut content = format!("{}: {}", turn.speaker, turn.text);
                if let Some(caption) = turn.blip_caption.as_deref().filter(|c| !c.is_empty()) {
                    content.push_str(&format!(" [image: {caption}]"));
                }
                let metadata = json!({
                    "dia_id": dia_id,
                    "session": n,
                    "session_date": date,
                    "speaker": turn.speaker,
                });
                episodes.push(Episode {
                    dia_id,
                    content,
                    metadata,
                });
            }
        }
        let turn_ids: HashSet<String> = episodes.iter().map(|e| e.dia_id.clone()).collect();
        anyhow::ensure!(
            turn_ids.len() == episodes.len(),
            "{}: dia_ids are not unique",
            sample.sample_id
        );
        let mut questions = Vec::new();
        for qa in sample.qa {
            counts.qa_total += 1;
            if !(1..=4).contains(&qa.category) {
                counts.adversarial_skipped += 1;
                continue;
            }
            counts.written += qa.evidence.len();
            let (evidence, dropped) = normalise_evidence(&qa.evidence, &turn_ids);
            counts.resolved += evidence.len();
            counts.dropped.extend(
                dropped
                    .into_iter()
                    .map(|d| format!("{}:{d}", sample.sample_id)),
            );
            if evidence.is_empty() {
                counts.no_evidence_skipped += 1;
                continue;
            }
            questions.push(Question {
                text: qa.question,
                category: qa.category,
                evidence,
            });
        }
        conversations.push(Conversation {
            id: sample.sample_id,
            episodes,
            questions,
        });
    }
    Ok((conversations, counts))
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
}

// ---- the run ----------------------------------------------------------------------------

fn tenant_key(conversation: &str) -> String {
    format!("locomo-bench-admin-{conversation}")
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
) -> anyhow::Result<HashMap<String, String>> {
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
            let body = client
                .try_call(
                    "memory_store_episode",
                    json!({
                        "content": episode.content,
                        "butler": BUTLER,
                        "session_id": format!("{}-session-{}", conversation.id, episode.metadata["session"]),
                        "ttl_days": 3650,
                        "metadata": episode.metadata,
                    }),
                )
                .await
                .with_context(|| format!("{} {}", conversation.id, episode.dia_id))?;
            let id = body["id"]
                .as_str()
                .context("memory_store_episode answered without an id")?
                .to_owned();
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
                }
            }
            Err(e) => {
                out.errors += 1;
                out.first_error.get_or_insert_with(|| format!("{e:#}"));
            }
        }
        out.overall.add(&q.evidence, &ranked);
        out.by_category
            .entry(q.category)
            .or_default()
            .add(&q.evidence, &ranked);
    }
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
    let (conversations, counts) = load(&args)?;
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
        let ids = store_conversation(&client, conversation, args.store_concurrency).await?;
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
    println!(
        "- store: {store_s:.1} s ({:.0} turns/s, {} sessions at once, each in order); embedding drain after the last write: {:.1} s",
        turns as f64 / store_s.max(1e-9),
        args.store_concurrency,
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
