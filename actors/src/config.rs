//! The engine's configuration sections. The edge layers them from `config/default.toml`, a
//! file and the environment and hands the engine an [`EngineConfig`]; the edge's own sections
//! sit beside these in the same file.
//!
//! Values are types that parse when the file is loaded: `NonZero*` for the keys that must be
//! at least 1, enums for the closed sets, a cron type for the schedules. Unknown keys inside
//! a section are refused (`deny_unknown_fields`). What a type cannot say (ranges, one key
//! against another) [`EngineConfig::problems`] checks, naming the key (`config/problems.rs`).

use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::path::PathBuf;

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::domain::cron::CronSchedule;
use crate::domain::intent_routing::IntentRouting;
use crate::domain::orchestrator::settings::MemorySettings;
use crate::domain::redaction::{CustomDetector, PolicySettings, RedactionAction, Redactor};
use crate::domain::rerank::RerankConfig;
use crate::domain::rule_evidence::RuleThresholds;
use crate::domain::scoring::{MaturityWeights, ScoreWeights};
use crate::domain::search::{Fusion, SearchMode};
use crate::domain::text::Limits;
use crate::domain::widening::Widening;
use crate::embedder::EmbedderConfig;
use crate::vault::{SealedNames, Vault};

mod problems;

/// Everything the engine needs: the engine's sections of the configuration file. Keys of
/// the file that are not the engine's (`listen`, `[mcp]`, ...) are the edge's, and ignored
/// here; the edge refuses keys that are nobody's.
#[derive(Debug, Clone, Deserialize)]
pub struct EngineConfig {
    pub limits: Limits,
    pub episodes: EpisodesConfig,
    pub facts: FactsConfig,
    pub rules: RuleThresholds,
    pub retrieval: RetrievalConfig,
    pub shards: ShardsConfig,
    pub embedder: EmbedderConfig,
    pub indexer: IndexerConfig,
    pub lifecycle: LifecycleConfig,
    pub writes: WritesConfig,
    pub consolidation: ConsolidationConfig,
    pub redaction: RedactionConfig,
    pub privacy: PrivacyConfig,
    pub encryption: EncryptionConfig,
    /// `[memory]`: the orchestrator memory (orchestrator_memory_subsystem.md).
    pub memory: MemorySettings,
    /// Whether other instances may share the database: set by the edge from
    /// `database.shared` (by default, when `database_url` names one: the embedded
    /// PostgreSQL is this process's alone), so that reads look for other instances' writes
    /// only then. Not a key of the engine's sections.
    #[serde(skip)]
    pub shared_database: bool,
    /// How reads use the store's read replicas (`database.replica_wait_ms`,
    /// `database.max_replica_lag_ms`): set by the edge, which opens them.
    #[serde(skip)]
    pub replica_routing: ReplicaRouting,
}

/// How reads use read replicas.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplicaRouting {
    /// How long a read waits for a replica to replay its tenant's last commit.
    pub wait: std::time::Duration,
    /// How far a replica may trail the primary and stay in rotation.
    pub max_lag: std::time::Duration,
}

/// `[encryption]`: high-risk facts stored encrypted (`vault.rs`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncryptionConfig {
    /// Predicates whose facts are sealed: exact names or prefixes ending in `*`.
    pub predicates: Vec<String>,
    /// Scopes whose facts are sealed.
    pub scopes: Vec<String>,
    /// The secret the master key is derived from (at least 32 characters). The edge fills
    /// it from `master_key_file`, or from a key file in `data_dir`, when it is empty.
    pub master_key: String,
    /// A file holding the master key's secret (empty: none).
    pub master_key_file: PathBuf,
    /// Earlier master keys' secrets: they unwrap data keys until `rotate-keys` re-wraps them.
    pub previous_master_keys: Vec<String>,
    /// A tenant's predicates and scopes, sealed on top of the global ones.
    pub tenants: BTreeMap<String, SealedNames>,
}

impl EncryptionConfig {
    /// The vault of this policy and these keys, or what is wrong with them.
    pub fn vault(&self) -> Result<Vault, String> {
        let secrets: Vec<String> = std::iter::once(&self.master_key)
            .chain(&self.previous_master_keys)
            .cloned()
            .collect();
        self.vault_with_secrets(&secrets)
    }

    /// The vault of this policy with the master keys of `secrets` (current first).
    fn vault_with_secrets(&self, secrets: &[String]) -> Result<Vault, String> {
        let secrets: Vec<&str> = secrets.iter().map(String::as_str).collect();
        let names = SealedNames {
            predicates: self.predicates.clone(),
            scopes: self.scopes.clone(),
        };
        Vault::from_config(names, self.tenants.clone(), &secrets)
    }

    /// Whether any fact can be sealed.
    pub fn seals_any(&self) -> bool {
        !self.predicates.is_empty()
            || !self.scopes.is_empty()
            || self
                .tenants
                .values()
                .any(|t| !t.predicates.is_empty() || !t.scopes.is_empty())
    }
}

/// `[privacy]`: erasure (`domain/purge.rs`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivacyConfig {
    /// Keys the hash a purge records of what it erased (at least 16 characters). The edge
    /// fills it from a key file in `data_dir` when the configuration leaves it empty.
    pub audit_key: String,
}

/// `[redaction]`: what is redacted before it is stored (`domain/redaction.rs`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactionConfig {
    /// Off: every text is stored as given.
    pub enabled: bool,
    /// Keys the `hash` action (at least 16 characters when one is configured).
    pub hash_key: String,
    /// Actions per built-in detector, for every tenant (those not named keep their default).
    pub detectors: BTreeMap<String, RedactionAction>,
    /// Detectors of the operator's own, for every tenant.
    pub custom: Vec<CustomDetector>,
    /// A tenant's changes to that policy.
    pub tenants: BTreeMap<String, PolicySettings>,
}

impl RedactionConfig {
    /// The compiled policies, or what is wrong with them.
    pub fn redactor(&self) -> Result<Redactor, String> {
        if !self.enabled {
            return Ok(Redactor::disabled());
        }
        let global = PolicySettings {
            detectors: self.detectors.clone(),
            custom: self.custom.clone(),
        };
        Redactor::new(&global, &self.tenants, &self.hash_key)
    }
}

/// `[episodes]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EpisodesConfig {
    /// Time to live of a new episode, in days.
    pub default_ttl_days: f64,
    /// Episodes kept per shard before capacity cleanup deletes the oldest consolidated ones.
    pub max_entries: NonZeroU64,
    /// Episodes a butler stores without a `session_id` within this many seconds of its
    /// previous one (also without) are read as one conversation: each is embedded with the
    /// one before it, and a search that finds one brings its neighbours. 0: only a
    /// `session_id` makes a conversation.
    pub conversation_gap_secs: f64,
}

/// `[facts]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FactsConfig {
    /// Below this effective confidence a fact fades: excluded from agent retrieval.
    pub retrieval_confidence_threshold: f64,
    /// Below this effective confidence a fact expires.
    pub expiry_confidence_threshold: f64,
}

/// `[retrieval]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrievalConfig {
    /// Stateless retrieval actors; each serves one read at a time.
    pub workers: NonZeroUsize,
    /// Threads of the runtime the retrieval actors run on, apart from the one serving
    /// requests and writes (`actors/reader/runtime.rs`).
    pub threads: NonZeroUsize,
    /// Read connections of the retrieval actors' own pool (opened on their runtime), apart
    /// from `database.max_connections`, the rest of the engine's.
    pub connections: NonZeroU32,
    pub default_limit: u32,
    pub max_limit: u32,
    pub default_mode: SearchMode,
    pub context_token_budget: NonZeroU32,
    /// How hybrid mode fuses its two lists.
    pub fusion: Fusion,
    pub rrf_k: f64,
    /// Weight of the semantic list in relative-score fusion; the keyword list gets the rest.
    pub semantic_weight: f64,
    /// Share of its best session neighbour's relevance an episode gains (0 turns it off).
    pub session_neighbour_weight: f64,
    /// How many turns on each side of a found episode are its neighbours.
    pub session_neighbour_reach: u32,
    /// What a neighbour `d` turns away counts for against one just beside it:
    /// `decay^(d - 1)`.
    pub session_neighbour_decay: f64,
    pub recency_half_life_days: f64,
    pub score_weights: ScoreWeights,
    pub maturity_weights: MaturityWeights,
    /// How long a read may take before it fails as `unavailable`.
    pub call_timeout_ms: NonZeroU64,
    /// Candidates fetched from each list (semantic, keyword) per memory type before fusion.
    pub candidate_depth: u32,
    /// How old the effective-confidence bands of `memory_stats` may be before a read has
    /// them recounted (in the background; the read answers the ones it has).
    pub stats_bands_max_age_secs: u64,
    /// A query word in more of a tenant's memories of one type than this is common: it
    /// scores but does not pick keyword candidates (`domain::bm25`).
    pub keyword_common_df: NonZeroU32,
    /// How long a search waits for its query embedding before answering from the keyword
    /// path alone, marked `degraded`.
    pub embed_timeout_ms: u64,
    /// Query embeddings remembered for repeated prompts (0 turns the cache off).
    pub query_cache_size: usize,
    /// Read results remembered for repeated requests (0 turns the cache off) ...
    pub result_cache_size: usize,
    /// ... holding at most this many bytes of answers to requests asked again (0 turns it
    /// off) ...
    pub result_cache_bytes: usize,
    /// ... and this many of answers to requests asked once so far.
    pub result_cache_window_bytes: usize,
    /// How long a remembered result may be served while its tenant writes nothing.
    pub result_cache_ttl_ms: u64,
    /// No diversity cluster (a fact's subject, an episode's session) may hold more than this
    /// share of the top-k; beyond it, its hits move below other clusters'.
    pub max_cluster_share: f64,
    /// What a memory outside the time a query states ("last week", "in March") keeps of its
    /// score (`domain::stated_time`); 1 reads no time from queries.
    pub stated_time_share: f64,
    /// Ranking by the query's intent (`domain::intent`).
    pub intent_routing: IntentRouting,
    /// The second stage (`domain::rerank`).
    pub rerank: RerankConfig,
    /// Keyword queries widened by the model's word vectors (`domain::widening`).
    pub widening: Widening,
    pub context: ContextConfig,
}

/// `[retrieval.context]`: how `memory_context` fills its token budget.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextConfig {
    /// The `tokenizer.json` that counts the budget (any Hugging Face tokenizer file).
    pub tokenizer_path: PathBuf,
    /// Share of the budget each section fills first; leftovers go to sections in order.
    pub facts_share: f64,
    pub rules_share: f64,
    pub episodes_share: f64,
    /// Largest `token_budget` a caller may ask for.
    pub max_token_budget: u32,
    /// Candidates per section from the prompt's relevance lists.
    pub relevant_depth: u32,
    /// Facts (by importance) and rules (by maturity) considered whatever the prompt.
    pub standing_depth: u32,
    /// The butler's most recent episodes considered whatever the prompt.
    pub recent_episodes: u32,
    /// Longest a memory's text may be in its line of the block, in bytes; longer is cut.
    pub max_line_bytes: usize,
}

/// `[shards]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardsConfig {
    /// A shard with no work for this long stops; the next request starts it again.
    pub idle_stop_secs: NonZeroU64,
    /// Restarts allowed within `restart_window_secs` before a failing shard is left down.
    pub max_restarts: u32,
    pub restart_window_secs: NonZeroU64,
    /// How long a write may take before it fails as `unavailable`.
    pub call_timeout_ms: NonZeroU64,
    /// How often a shard writes the reference-count bumps of reads, batched.
    pub touch_flush_ms: NonZeroU64,
    /// A read writes its record's `last_referenced_at` (and count) only when that date is
    /// older than this; reads in between are tallied beside the record (0: every read
    /// writes the record).
    pub reference_date_resolution_secs: u64,
}

/// `[indexer]`: the worker that embeds rows stored without an embedding.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexerConfig {
    /// Rows embedded per round trip.
    pub batch_size: NonZeroU32,
    /// How often it looks for rows to embed when not told about new ones.
    pub poll_interval_ms: NonZeroU64,
    /// An episode in a session is embedded as a blend of its own text and its text read
    /// after the episode before it, with this weight on the latter (0: its own text only).
    pub session_context_weight: f64,
    /// While episodes are admitted faster than this (per second), the indexer leaves the
    /// CPU to the writes (0: never yields).
    pub yield_above_writes_per_sec: f64,
    /// ... unless its oldest row has waited this long.
    pub max_defer_secs: f64,
    /// The walks over older rows (re-embedding after a model change, the second stage's
    /// sketches of rows embedded while it was off) read at most this many rows a second
    /// with the model, on average (0: as fast as the model goes).
    pub walk_rows_per_sec: f64,
}

/// `[writes]`: group commit and admission of episode writes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WritesConfig {
    /// Most episodes in one statement (a shard's group, or several shards' groups).
    pub group_commit_max: NonZeroU32,
    /// How long a shard waits for more episodes before committing the first of a group
    /// (0: commit as soon as the episodes already queued have been gathered).
    pub group_commit_linger_ms: u64,
    /// Episode statements running at once across all shards; groups that arrive meanwhile
    /// share the next statement (`write_path/commit_queue.rs`).
    pub commit_concurrency: NonZeroU32,
    /// Fewest queued episodes for a statement to run beside another; smaller statements take
    /// turns (`write_path/commit_queue.rs`).
    pub parallel_commit_min_episodes: u32,
    /// Episodes accepted but not yet committed, across all shards; beyond, writes are
    /// refused as `overloaded`.
    pub max_in_flight: u32,
    /// Messages waiting in one shard's mailbox; beyond, its writes are refused as
    /// `overloaded`.
    pub max_queued_per_shard: NonZeroU32,
    /// The retry hint of an `overloaded` refusal.
    pub overload_retry_after_ms: u64,
    /// Most episodes in one `memory_ingest_batch`.
    pub max_ingest_batch: NonZeroU32,
}

/// Which extractor consolidation uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExtractorKind {
    /// The deterministic heuristic extractor: no model.
    Heuristic,
    /// An OpenAI-compatible chat-completions endpoint, `[consolidation.llm]`.
    Llm,
    /// The local model the service runs itself, `[consolidation.local]`; the heuristic
    /// extractor while it cannot run.
    Local,
}

impl ExtractorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ExtractorKind::Heuristic => "heuristic",
            ExtractorKind::Llm => "llm",
            ExtractorKind::Local => "local",
        }
    }
}

/// `[consolidation]`: turning episodes into facts and rules.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsolidationConfig {
    /// Episodes per job (one transaction), in `created_at, id` order.
    pub batch_size: NonZeroU32,
    pub extractor: ExtractorKind,
    /// Failed attempts after which an episode is dead-lettered.
    pub max_attempts: NonZeroU32,
    /// Backoff before the first retry; it doubles per attempt (with jitter) up to the max.
    pub retry_base_secs: f64,
    pub retry_max_secs: f64,
    /// Between cron runs, a shard is consolidated as soon as its pending backlog reaches
    /// this many episodes ...
    pub trigger_backlog_size: u32,
    /// ... or its oldest pending episode this age (the freshness SLO is 6 h at p95).
    pub trigger_backlog_age_secs: f64,
    pub llm: LlmConfig,
    pub local: LocalModelConfig,
}

/// When the local model's server is started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LocalModelStart {
    /// When consolidation first needs it (and again after it was stopped idle).
    OnDemand,
    /// With the service.
    AtStart,
}

/// `[consolidation.local]`: the language model the service runs as a child process for the
/// `local` extractor (`consolidation/local_model.rs`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalModelConfig {
    /// llama.cpp's `llama-server` (scripts/setup installs it).
    pub server_path: PathBuf,
    /// The GGUF model it serves.
    pub model_path: PathBuf,
    /// The portable runtime, run when the server cannot (a CPU it was not built for): a
    /// Python with xllamacpp, and the launcher that serves the same API through it. Empty:
    /// none.
    pub portable_python: PathBuf,
    pub portable_script: PathBuf,
    /// CPU threads the model computes with.
    pub threads: NonZeroU32,
    /// Scheduling priority of the model's process (`nice`, 0 to 19): reads and writes first.
    pub nice: u8,
    /// The model's context, in tokens: a prompt and its answer together.
    pub context_tokens: NonZeroU32,
    pub start: LocalModelStart,
    /// Stopped after this long without an extraction (0: never), giving its memory back.
    pub idle_stop_secs: u64,
    /// How long the model may take to load before the runtime counts as failed.
    pub startup_timeout_secs: NonZeroU64,
    /// How long one extraction call may take.
    pub timeout_ms: u64,
    /// The longest a restart after a crash waits (the wait doubles from one second).
    pub restart_max_backoff_secs: NonZeroU64,
}

/// `[consolidation.llm]`: the chat-completions endpoint of the `llm` extractor.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// e.g. `http://127.0.0.1:8080/v1` (llama.cpp), `http://127.0.0.1:11434/v1` (Ollama).
    pub base_url: String,
    pub model: String,
    /// Sent as a bearer token when set (env `BUTLER_MEMORY_CONSOLIDATION__LLM__API_KEY`).
    #[serde(default)]
    pub api_key: Option<String>,
    /// How long one extraction call may take before it is a (retryable) failure.
    pub timeout_ms: u64,
    /// The largest answer read from the endpoint; a longer one is an invalid answer, cut off
    /// as it arrives rather than held in memory.
    pub max_response_bytes: NonZeroUsize,
    /// PEM certificates trusted for an `https` endpoint besides the system's roots (a private
    /// CA, a self-signed gateway).
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout_ms", &self.timeout_ms)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// `[lifecycle]`: the per-shard sweeps and when they run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleConfig {
    /// Cron expression (UTC, 5 fields, or 6 with seconds) of the daily decay sweep.
    pub decay_sweep_cron: CronSchedule,
    /// Cron expression of the daily episode cleanup.
    pub episode_cleanup_cron: CronSchedule,
    /// Cron expression of consolidation (every six hours by default).
    pub consolidation_cron: CronSchedule,
    /// Rows per statement of a sweep: bounded transactions, no row loops.
    pub sweep_page_size: NonZeroU32,
    /// Dead-lettered episodes are kept this many days past their expiry for inspection.
    pub dead_letter_retention_days: f64,
    /// How often the scheduler compares the clock with the cron schedules.
    pub scheduler_tick_ms: NonZeroU64,
    /// Run a sweep at start when its last scheduled time passed while the service was down.
    pub catch_up_missed_runs: bool,
    /// This instance's name in the claims on scheduled sweeps (empty: host and process id).
    pub instance_id: String,
    /// How long a claimed sweep may go without its instance's heartbeat before another
    /// instance takes it over.
    pub lease_secs: NonZeroU64,
    /// Months of the audit stream's partitions kept ready beyond the current one.
    pub event_partitions_ahead: u32,
    /// Whole months of the audit stream kept before the current one; older months are
    /// dropped (0: keep everything, the default).
    pub event_retention_months: u32,
    /// Months of episodes' partitions kept ready beyond the current one.
    pub episode_partitions_ahead: u32,
}

impl LifecycleConfig {
    /// `instance_id`, or the host name and process id when it is empty (read once).
    pub fn instance(&self) -> String {
        static DEFAULT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        if !self.instance_id.is_empty() {
            return self.instance_id.clone();
        }
        DEFAULT
            .get_or_init(|| {
                let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .map(|h| h.trim().to_owned())
                    .ok()
                    .filter(|h| !h.is_empty())
                    .unwrap_or_else(|| "host".to_owned());
                format!("{host}:{}", std::process::id())
            })
            .clone()
    }
}

/// The documented defaults (`config/default.toml`), for unit tests of the engine's parts.
#[cfg(test)]
pub fn defaults() -> EngineConfig {
    toml::from_str(include_str!("../../config/default.toml")).expect("the defaults parse")
}
