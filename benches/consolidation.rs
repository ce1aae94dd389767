//! What consolidation learns from a conversation, and what it costs, judged against LoCoMo's
//! own `observation` annotations (facts about each speaker, with the turns they come from):
//!
//!     cargo bench --bench consolidation -- ../shared/data/locomo_dev.json
//!     cargo bench --bench consolidation -- PATH --extractor heuristic
//!     cargo bench --bench consolidation -- PATH --sessions 3 --conversations 2 --json out.json
//!     cargo bench --bench consolidation -- PATH --extractor llm --config endpoint.toml
//!
//! Each conversation is a tenant of its own; the first `--sessions` sessions of each are
//! stored as a butler imports a dated conversation (`memory_ingest_batch`, session ids, the
//! session's date as `occurred_at`), then consolidated (`memory_run_sweep`, one tenant after
//! another) with the chosen extractor. Reported:
//! - **observation recall**: an observation is captured when a fact extracted from one of its
//!   evidence turns (its `source_episode_id`, or a `derived_from` link) is at least the
//!   threshold close to it by the service's MiniLM (cosine of the observation and the fact
//!   written "subject predicate content"), at 0.7, 0.75 and 0.8; and the same with every
//!   turn stored verbatim as its own fact (the floor: the threshold must be high enough that
//!   a turn's own text does not already match);
//! - **grounded**: the share of facts whose subject occurs in their turn (or is its speaker
//!   or the user), what the service's checks dropped, facts per turn, and turns with none
//!   (questions among them);
//! - **per episode**: wall time, CPU of the service (this process) and of the model's
//!   process and PostgreSQL, and `memory_search` p50/p95 at `--search-rate` while
//!   consolidation runs beside the same load without it;
//! - **end to end**: `memory_context` evidence recall at a 1,000-token budget for the
//!   questions whose evidence lies in the stored sessions (a turn is present when its episode
//!   is in the block, or a fact or rule in the block comes from it), before and after
//!   consolidation;
//! - a seeded sample of facts with their turns (`--sample-out`), for judging by hand.
//!
//! The data file is CC BY-NC (evaluation only): it is read from where it lies, never copied.

#[path = "locomo/dataset.rs"]
mod dataset;
#[path = "support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use serde_json::{Value, json};

use dataset::Conversation;
use support::{Key, Latency, MachineCpu, McpClient, Rng, Service, round3};

const BUTLER: &str = "companion";
const THRESHOLDS: [f64; 3] = [0.7, 0.75, 0.8];
const CONTEXT_BUDGET: u32 = 1000;
/// A consolidation run of one tenant may take the model a long while.
const RUN_LIMIT: Duration = Duration::from_secs(6 * 3600);

#[derive(Parser)]
struct Args {
    /// A LoCoMo-format JSON file (e.g. ../shared/data/locomo_dev.json).
    path: PathBuf,
    /// `local`, `heuristic` or `llm` (its endpoint in `--config`).
    #[arg(long, default_value = "local")]
    extractor: String,
    /// Only the first N conversations of the file.
    #[arg(long)]
    conversations: Option<usize>,
    /// The first N sessions of each conversation.
    #[arg(long, default_value_t = 2)]
    sessions: u32,
    /// `memory_search` calls a second, during consolidation and as long again without it.
    #[arg(long, default_value_t = 2.0)]
    search_rate: f64,
    /// Facts drawn at random (seeded) for judging by hand.
    #[arg(long, default_value_t = 50)]
    sample: usize,
    /// Where the sample goes (Markdown); default: not written.
    #[arg(long)]
    sample_out: Option<PathBuf>,
    /// Also write the numbers as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Extra service configuration (TOML layered over the defaults).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

/// One conversation as stored: its turns' episode ids and the part of the file kept.
struct Stored {
    conversation: usize,
    admin: McpClient,
    /// dia_id → episode id, of the stored turns.
    episodes: HashMap<String, String>,
}

/// A fact consolidation wrote, with the turns it comes from.
struct Fact {
    text: String,
    subject: String,
    /// Episode ids: its source and what it is derived from.
    sources: HashSet<String>,
    source_text: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        ["local", "heuristic", "llm"].contains(&args.extractor.as_str()),
        "--extractor is local, heuristic or llm"
    );
    let (conversations, _) = dataset::load(&args.path, args.conversations)?;
    let keys: Vec<Key> = conversations
        .iter()
        .map(|c| Key::admin(admin_key(&c.id), c.id.clone()))
        .collect();
    let extra = format!(
        "[consolidation]\nextractor = \"{}\"\n[consolidation.local]\nidle_stop_secs = 0\n\
         [lifecycle]\ncatch_up_missed_runs = false\nscheduler_tick_ms = 3600000\n{}",
        args.extractor,
        support::extra_toml(args.config.as_ref())?
    );
    let service = Service::start(&keys, &extra).await?;
    let outcome = run(&args, &service, &conversations).await;
    service.stop().await?;
    let report = outcome?;
    if let Some(path) = &args.json {
        support::write_json(path, &report)?;
    }
    Ok(())
}

fn admin_key(conversation: &str) -> String {
    format!("consolidation-bench-admin-{conversation}")
}

async fn run(
    args: &Args,
    service: &Service,
    conversations: &[Conversation],
) -> anyhow::Result<Value> {
    // Store the kept sessions of every conversation.
    let mut stored = Vec::new();
    for (i, conversation) in conversations.iter().enumerate() {
        let admin = service.client(&admin_key(&conversation.id)).await?;
        let episodes = store(&admin, conversation, args.sessions).await?;
        stored.push(Stored {
            conversation: i,
            admin,
            episodes,
        });
    }
    service.flush().await?;
    service.analyze().await?;
    let turns: usize = stored.iter().map(|s| s.episodes.len()).sum();
    eprintln!("stored {turns} turns of {} conversations", stored.len());

    let questions = context_questions(conversations, &stored);
    let context_before = context_recall(conversations, &stored, &questions).await?;
    eprintln!("memory_context recall before consolidation: {context_before:.3}");

    // Consolidate each tenant in turn, with searches beside it; then the same searches alone.
    let queries: Vec<(usize, String)> = questions
        .iter()
        .map(|(s, q)| {
            (
                *s,
                conversations[stored[*s].conversation].questions[*q]
                    .text
                    .clone(),
            )
        })
        .collect();
    let pg_dir = service.data_dir().join("postgres");
    let pg_before = support::postgres_cpu_seconds(&pg_dir).ok();
    let self_before = support::process_cpu_seconds(std::process::id()).unwrap_or(0.0);
    let machine_before = MachineCpu::now();
    let started = Instant::now();
    let searching = Arc::new(AtomicBool::new(true));
    let load = tokio::spawn(search_load(
        clients(service, conversations, &stored).await?,
        queries.clone(),
        args.search_rate,
        searching.clone(),
    ));
    let mut changes: BTreeMap<String, u64> = BTreeMap::new();
    for s in &stored {
        let report = s
            .admin
            .try_call_within(
                "memory_run_sweep",
                json!({"kinds": ["consolidation"], "butler": BUTLER}),
                RUN_LIMIT,
            )
            .await
            .context("consolidating")?;
        for shard in report["reports"].as_array().into_iter().flatten() {
            for (change, n) in shard["changes"].as_object().into_iter().flatten() {
                *changes.entry(change.clone()).or_default() += n.as_u64().unwrap_or(0);
            }
        }
        eprintln!(
            "consolidated {} ({:.0} s so far)",
            conversations[s.conversation].id,
            started.elapsed().as_secs_f64()
        );
    }
    let wall = started.elapsed();
    searching.store(false, Ordering::SeqCst);
    let during = load.await??;
    let machine = machine_before.until(&MachineCpu::now());
    let self_cpu = support::process_cpu_seconds(std::process::id()).unwrap_or(0.0) - self_before;
    let pg_cpu =
        pg_before.and_then(|before| Some(support::postgres_cpu_seconds(&pg_dir).ok()? - before));
    let status =
        stored[0].admin.try_call("memory_stats", json!({})).await?["consolidation_extractor"]
            .clone();
    let model_cpu = status["local_model"]["pid"]
        .as_u64()
        .and_then(|pid| support::process_cpu_seconds(pid as u32));
    let idle_flag = Arc::new(AtomicBool::new(true));
    let idle_load = tokio::spawn(search_load(
        clients(service, conversations, &stored).await?,
        queries,
        args.search_rate,
        idle_flag.clone(),
    ));
    tokio::time::sleep(wall.min(Duration::from_secs(120))).await;
    idle_flag.store(false, Ordering::SeqCst);
    let idle = idle_load.await??;

    service.flush().await?;
    let context_after = context_recall(conversations, &stored, &questions).await?;
    let facts = read_facts(service, conversations, &stored).await?;
    let recall = observation_recall(service, conversations, &stored, &facts).await?;
    let (grounded, per_turn, empty_turns, question_turns) = shape(conversations, &stored, &facts);
    if let Some(path) = &args.sample_out {
        write_sample(path, &facts, args.sample)?;
    }

    let per_episode = |seconds: f64| round3(seconds / turns.max(1) as f64);
    let during_latency = Latency::of(&during);
    let idle_latency = Latency::of(&idle);
    let report = json!({
        "extractor": args.extractor,
        "extractor_status": status,
        "conversations": stored.len(),
        "sessions_per_conversation": args.sessions,
        "turns": turns,
        "observations": recall["observations"],
        "observation_recall": recall["extracted"],
        "verbatim_floor": recall["verbatim"],
        "facts": facts.len(),
        "facts_per_turn": round3(per_turn),
        "turns_without_facts": round3(empty_turns),
        "question_turns_facts_per_turn": round3(question_turns),
        "grounded": round3(grounded),
        "changes": changes,
        "wall_seconds_per_episode": per_episode(wall.as_secs_f64()),
        "episodes_per_hour": round3(turns as f64 / wall.as_secs_f64() * 3600.0),
        "cpu_seconds_per_episode": {
            "service": per_episode(self_cpu),
            "model": model_cpu.map(per_episode),
            "postgres": pg_cpu.map(per_episode),
        },
        "machine": machine.json(),
        "search_during_consolidation": during_latency.json(),
        "search_idle": idle_latency.json(),
        "context_recall": {
            "questions": questions.len(),
            "budget_tokens": CONTEXT_BUDGET,
            "before": round3(context_before),
            "after": round3(context_after),
        },
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(report)
}

/// Stores the first `sessions` sessions of a conversation, each in one
/// `memory_ingest_batch`; answers dia_id → episode id.
async fn store(
    admin: &McpClient,
    conversation: &Conversation,
    sessions: u32,
) -> anyhow::Result<HashMap<String, String>> {
    let mut by_session: BTreeMap<u32, Vec<&dataset::Episode>> = BTreeMap::new();
    for episode in &conversation.episodes {
        let session = episode.metadata["session"].as_u64().unwrap_or(0) as u32;
        if session <= sessions {
            by_session.entry(session).or_default().push(episode);
        }
    }
    let mut ids = HashMap::new();
    for (session, episodes) in by_session {
        let batch: Vec<Value> = episodes
            .iter()
            .map(|e| {
                json!({
                    "content": e.content,
                    "butler": BUTLER,
                    "session_id": format!("{}-session-{session}", conversation.id),
                    "occurred_at": e.occurred_at,
                    "ttl_days": 3650,
                    "metadata": e.metadata,
                })
            })
            .collect();
        let answer = admin
            .try_call("memory_ingest_batch", json!({"episodes": batch}))
            .await
            .with_context(|| format!("{} session {session}", conversation.id))?;
        let answered: Vec<String> = answer["ids"]
            .as_array()
            .context("memory_ingest_batch answered without ids")?
            .iter()
            .filter_map(|id| id.as_str().map(str::to_owned))
            .collect();
        anyhow::ensure!(answered.len() == episodes.len(), "{answer}");
        for (episode, id) in episodes.iter().zip(answered) {
            ids.insert(episode.dia_id.clone(), id);
        }
    }
    Ok(ids)
}

/// The questions (stored conversation, question index) whose evidence all lies in the
/// stored sessions.
fn context_questions(conversations: &[Conversation], stored: &[Stored]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (s, kept) in stored.iter().enumerate() {
        for (q, question) in conversations[kept.conversation]
            .questions
            .iter()
            .enumerate()
        {
            if question
                .evidence
                .iter()
                .all(|e| kept.episodes.contains_key(e))
            {
                out.push((s, q));
            }
        }
    }
    out
}

/// Mean share of each question's evidence turns present in `memory_context`'s block.
async fn context_recall(
    conversations: &[Conversation],
    stored: &[Stored],
    questions: &[(usize, usize)],
) -> anyhow::Result<f64> {
    let mut sum = 0.0;
    for &(s, q) in questions {
        let kept = &stored[s];
        let question = &conversations[kept.conversation].questions[q];
        let answer = kept
            .admin
            .try_call(
                "memory_context",
                json!({"trigger_prompt": question.text, "butler": BUTLER, "token_budget": CONTEXT_BUDGET}),
            )
            .await?;
        let sections = &answer["sections"];
        let episodes: HashSet<&str> = sections["episodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        // A fact or rule in the block counts for the turns it comes from.
        let mut cited: HashSet<String> = HashSet::new();
        for (kind, list) in [("fact", &sections["facts"]), ("rule", &sections["rules"])] {
            for id in list
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                let got = kept
                    .admin
                    .try_call("memory_get", json!({"type": kind, "id": id}))
                    .await?;
                if let Some(source) = got["source_episode_id"].as_str() {
                    cited.insert(source.to_owned());
                }
                for link in got["links"]["outbound"].as_array().into_iter().flatten() {
                    if link["relation"] == "derived_from"
                        && let Some(target) = link["target_id"].as_str()
                    {
                        cited.insert(target.to_owned());
                    }
                }
            }
        }
        let found = question
            .evidence
            .iter()
            .filter(|dia| {
                kept.episodes
                    .get(*dia)
                    .is_some_and(|id| episodes.contains(id.as_str()) || cited.contains(id))
            })
            .count();
        sum += found as f64 / question.evidence.len() as f64;
    }
    Ok(sum / questions.len().max(1) as f64)
}

/// One admin client per stored conversation, for the search load.
async fn clients(
    service: &Service,
    conversations: &[Conversation],
    stored: &[Stored],
) -> anyhow::Result<Vec<McpClient>> {
    let mut out = Vec::new();
    for s in stored {
        out.push(
            service
                .client(&admin_key(&conversations[s.conversation].id))
                .await?,
        );
    }
    Ok(out)
}

/// `memory_search` at `rate` calls a second, round the questions, until `go` is cleared;
/// answers each call's latency.
async fn search_load(
    clients: Vec<McpClient>,
    queries: Vec<(usize, String)>,
    rate: f64,
    go: Arc<AtomicBool>,
) -> anyhow::Result<Vec<Duration>> {
    let mut latencies = Vec::new();
    if queries.is_empty() || rate <= 0.0 {
        return Ok(latencies);
    }
    let pace = Duration::from_secs_f64(1.0 / rate);
    let mut next = Instant::now();
    for (s, query) in queries.iter().cycle() {
        if !go.load(Ordering::SeqCst) {
            break;
        }
        let started = Instant::now();
        clients[*s]
            .try_call(
                "memory_search",
                json!({"query": query, "butler": BUTLER, "limit": 10}),
            )
            .await?;
        latencies.push(started.elapsed());
        next += pace;
        tokio::time::sleep_until(next.into()).await;
    }
    for client in clients {
        client.close().await;
    }
    Ok(latencies)
}

/// Every fact consolidation wrote, with the episodes it comes from.
async fn read_facts(
    service: &Service,
    conversations: &[Conversation],
    stored: &[Stored],
) -> anyhow::Result<Vec<Fact>> {
    let tenants: Vec<String> = stored
        .iter()
        .map(|s| conversations[s.conversation].id.clone())
        .collect();
    let rows: Vec<(String, String, String, String, Vec<String>, String)> = sqlx::query_as(
        "SELECT f.subject, f.predicate, f.content, f.source_episode_id::text,
                COALESCE(array_agg(l.target_id::text) FILTER (WHERE l.target_id IS NOT NULL), '{}'),
                e.content
         FROM facts f
         JOIN episodes e ON e.tenant_id = f.tenant_id AND e.id = f.source_episode_id
         LEFT JOIN memory_links l ON l.tenant_id = f.tenant_id AND l.source_id = f.id
              AND l.relation = 'derived_from'
         WHERE f.tenant_id = ANY ($1) AND f.metadata ? 'consolidation_job_id'
         GROUP BY f.id, f.subject, f.predicate, f.content, f.source_episode_id, e.content",
    )
    .bind(&tenants)
    .fetch_all(service.state.engine.store().pool())
    .await
    .context("reading the extracted facts")?;
    Ok(rows
        .into_iter()
        .map(
            |(subject, predicate, content, source, links, source_text)| Fact {
                text: format!("{subject} {predicate} {content}"),
                subject,
                sources: std::iter::once(source).chain(links).collect(),
                source_text,
            },
        )
        .collect())
}

/// Observation recall of the extracted facts and of the verbatim floor, per threshold.
async fn observation_recall(
    service: &Service,
    conversations: &[Conversation],
    stored: &[Stored],
    facts: &[Fact],
) -> anyhow::Result<Value> {
    let engine = &service.state.engine;
    let embed = |texts: Vec<String>| async move {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(64) {
            out.extend(
                engine
                    .embed(chunk.to_vec())
                    .await
                    .map_err(|e| anyhow::anyhow!("embedding: {e}"))?,
            );
        }
        anyhow::Ok(out)
    };
    let fact_vectors = embed(facts.iter().map(|f| f.text.clone()).collect()).await?;
    let mut by_episode: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, fact) in facts.iter().enumerate() {
        for source in &fact.sources {
            by_episode.entry(source.as_str()).or_default().push(i);
        }
    }
    let mut extracted = [0usize; THRESHOLDS.len()];
    let mut verbatim = [0usize; THRESHOLDS.len()];
    let mut observations = 0;
    for kept in stored {
        let conversation = &conversations[kept.conversation];
        let turn_text: HashMap<&str, &str> = conversation
            .episodes
            .iter()
            .map(|e| (e.dia_id.as_str(), e.content.as_str()))
            .collect();
        let judged: Vec<&dataset::Observation> = conversation
            .observations
            .iter()
            .filter(|o| o.evidence.iter().all(|e| kept.episodes.contains_key(e)))
            .collect();
        let vectors = embed(judged.iter().map(|o| o.text.clone()).collect()).await?;
        for (observation, vector) in judged.iter().zip(&vectors) {
            observations += 1;
            let mut best_fact: f64 = -1.0;
            for dia in &observation.evidence {
                let id = kept.episodes[dia].as_str();
                for &i in by_episode.get(id).into_iter().flatten() {
                    best_fact = best_fact.max(cosine(vector, &fact_vectors[i]));
                }
            }
            let turns: Vec<String> = observation
                .evidence
                .iter()
                .filter_map(|d| turn_text.get(d.as_str()).map(|t| t.to_string()))
                .collect();
            let turn_vectors = embed(turns).await?;
            let best_turn = turn_vectors
                .iter()
                .map(|t| cosine(vector, t))
                .fold(-1.0, f64::max);
            for (k, threshold) in THRESHOLDS.iter().enumerate() {
                extracted[k] += usize::from(best_fact >= *threshold);
                verbatim[k] += usize::from(best_turn >= *threshold);
            }
        }
    }
    let shares = |counts: [usize; 3]| -> Value {
        THRESHOLDS
            .iter()
            .zip(counts)
            .map(|(t, n)| {
                (
                    format!("{t}"),
                    json!(round3(n as f64 / observations.max(1) as f64)),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    Ok(json!({
        "observations": observations,
        "extracted": shares(extracted),
        "verbatim": shares(verbatim),
    }))
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    f64::from(dot / (norm(a) * norm(b)).max(f32::EPSILON))
}

/// The grounded share, facts per turn, the share of turns with none, and facts per turn
/// among turns that ask a question.
fn shape(
    conversations: &[Conversation],
    stored: &[Stored],
    facts: &[Fact],
) -> (f64, f64, f64, f64) {
    let words = |text: &str| -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty() && *w != "s")
            .map(str::to_lowercase)
            .collect()
    };
    let grounded = facts
        .iter()
        .filter(|f| {
            let episode = words(&f.source_text);
            f.subject == "user" || words(&f.subject).iter().all(|w| episode.contains(w))
        })
        .count();
    let mut per_episode: HashMap<&str, usize> = HashMap::new();
    for fact in facts {
        for source in &fact.sources {
            *per_episode.entry(source.as_str()).or_default() += 1;
        }
    }
    let (mut turns, mut empty, mut questions, mut question_facts) = (0, 0, 0, 0);
    for kept in stored {
        for episode in &conversations[kept.conversation].episodes {
            let Some(id) = kept.episodes.get(&episode.dia_id) else {
                continue;
            };
            let n = per_episode.get(id.as_str()).copied().unwrap_or(0);
            turns += 1;
            empty += usize::from(n == 0);
            if episode.content.trim_end().ends_with('?') {
                questions += 1;
                question_facts += n;
            }
        }
    }
    (
        grounded as f64 / facts.len().max(1) as f64,
        facts.len() as f64 / turns.max(1) as f64,
        empty as f64 / turns.max(1) as f64,
        question_facts as f64 / questions.max(1) as f64,
    )
}

/// `n` facts drawn at random (seeded), each with its turn, as a Markdown table to judge.
fn write_sample(path: &PathBuf, facts: &[Fact], n: usize) -> anyhow::Result<()> {
    let mut rng = Rng::new(67);
    let mut order: Vec<usize> = (0..facts.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let mut out = String::from("| # | fact | turn | judgement |\n|---|---|---|---|\n");
    for (k, &i) in order.iter().take(n).enumerate() {
        let cell = |t: &str| t.replace('|', "/").replace('\n', " ");
        out.push_str(&format!(
            "| {} | {} | {} | |\n",
            k + 1,
            cell(&facts[i].text),
            cell(&facts[i].source_text)
        ));
    }
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}
