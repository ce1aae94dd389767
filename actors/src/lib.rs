//! The butler-memory engine: the memory domain, its storage, and the actor tree that runs it.
//!
//! This file is the one door: every module is private, and what the edge (and tests) may
//! use is re-exported below. [`Engine`] is the handle: it validates inputs against the
//! caller's rights, routes writes to the owning shard and reads to the least busy reader.
//!
//! ```text
//! engine/        the API the edge calls: writes, reads, lifecycle
//! actors/        the actor tree: supervisor, shards, readers, embedder pool, indexer, scheduler
//! write_path/    admission, the cross-shard commit queue, the orchestrator graph's write
//! ingest/        the orchestrator memory's drop-zone: one dropped file's way in
//! read_path/     write generations and the read caches, query embeddings
//! consolidation/ the extractors (heuristic, OpenAI-compatible LLM client)
//! domain/        validated types, states, answers and pure rules (no IO)
//! store/         every SQL statement, the pools, the embedded PostgreSQL
//! vault/         encrypted high-risk facts: the policy, master and data keys
//! embedder/      every line of ONNX Runtime, behind a trait
//! ```

mod actors;
mod byte_lru;
mod clock;
mod config;
mod consolidation;
mod domain;
mod embedder;
mod engine;
mod error;
mod ingest;
mod read_path;
mod services;
mod store;
mod vault;
mod write_path;

/// The `tracing` target of the spans meant for trace export (the edge exports them with
/// OpenTelemetry when configured; otherwise they are disabled and cost a branch). The
/// `#[instrument]` attributes of `store/` (one span per SQL statement family, `db.*`) spell
/// it out, as the attribute takes only a literal.
pub const TRACE_SPANS: &str = "otel";

// The engine and how it starts.
pub use actors::EmbedderFactory;
pub use clock::{Clock, ManualClock, SharedClock, SystemClock};
pub use consolidation::install_tls_provider;
pub use engine::{Engine, EngineStartError, MAX_ACTIVITY_PAGE, PoolUsage, Readiness};
pub use services::DatabaseHealth;

// Configuration: the engine's sections, reused by the edge's configuration.
pub use config::{
    ConsolidationConfig, ContextConfig, EncryptionConfig, EngineConfig, EpisodesConfig,
    ExtractorKind, FactsConfig, IndexerConfig, LifecycleConfig, LlmConfig, LocalModelConfig,
    LocalModelStart, ReplicaRouting, RetrievalConfig, ShardsConfig, WritesConfig,
};
pub use domain::cron::CronSchedule;
pub use domain::rule_evidence::{AntiPatternTrigger, Promotion, RuleThresholds};
pub use domain::scoring::{MaturityWeights, ScoreWeights};
pub use domain::text::Limits;
pub use embedder::{DIMENSIONS, EmbedError, EmbedderConfig};
pub use read_path::{ReadTarget, ReplicaHealth, ReplicaSet};
pub use store::embedded_postgres::{
    EmbeddedPostgres, EmbeddedPostgresConfig, EmbeddedPostgresError,
};
pub use store::key_rotation::RotationReport;
pub use store::lifecycle_claims::SweepFire;
pub use store::read_replicas::ReplicaStatus;
pub use store::stats::StatsFilter;
pub use store::{
    AppliedMigration, DatabaseConfig, DatabaseSharing, MIGRATOR, ReadUrls, Store, StoreStartError,
};
pub use vault::{MIN_SECRET_CHARS, Vault};

// Errors.
pub use error::{ErrorClass, ErrorCode, MemoryError, MemoryResult, with_causes};

// Who calls, and with what.
pub use domain::author::Author;
pub use domain::bundle::{BundleHeader, EmbeddingModel, ImportReport, parse_bundle};
pub use domain::caller::{Caller, GLOBAL_SCOPE, Role};
pub use domain::episode::EpisodeInput;
pub use domain::extractor_status::{ExtractorStatus, LocalModelState, LocalModelStatus};
pub use domain::fact::FactInput;
pub use domain::feedback::StoredApplication;
pub use domain::governance::{Governance, GovernanceRequest};
pub use domain::listing::{EpisodeQuery, FactEdit, FactQuery, Page, RuleEdit, RuleQuery};
pub use domain::memory_type::MemoryType;
pub use domain::orchestrator::edge::EdgeType;
pub use domain::orchestrator::graph_query::GraphQuery;
pub use domain::orchestrator::graph_write::{EdgeInput, NodeInput, RememberInput};
pub use domain::orchestrator::node::{NodeStatus, NodeType};
pub use domain::orchestrator::source::{CapturedBy, Source, SourceType};
pub use domain::permanence::Permanence;
pub use domain::provenance::Provenance;
pub use domain::purge::{Purge, PurgeTarget, content_hash as purge_content_hash, purge_reason};
pub use domain::relation::{LinkTarget, Relation};
pub use domain::request_context::{Lineage, RequestContext};
pub use domain::rule::RuleInput;
pub use domain::search::{ContextInput, SearchInput, SearchMode};
pub use domain::shard_key::ShardKey;
pub use domain::sweep::{SweepKind, SweepReport};
pub use domain::text::check_name;
pub use domain::validity::Validity;
pub use store::audit_reads::AuditRead;
pub use store::bundle::Exporter;

// What the engine answers.
pub use actors::directory::{ActorKind, ActorSnapshot, ActorStatus};
pub use domain::context_block::{ContextBlock, ContextOutcome, TokenCounter};
pub use domain::episode::{DeadLetter, Episode, Inserted, MAX_TTL_DAYS, MIN_TTL_DAYS};
pub use domain::event::{Since, StoredEvent};
pub use domain::fact::{Fact, FactOutcome, StoredFact};
pub use domain::feedback::{Mark, Rated};
pub use domain::intent::Intent;
pub use domain::maturity::Maturity;
pub use domain::orchestrator::bulletin::{Bulletin, BulletinAnswer};
pub use domain::orchestrator::edge::Edge;
pub use domain::orchestrator::graph_write::{Remembered, Written};
pub use domain::orchestrator::node::Node;
pub use domain::orchestrator::recall::{RecallBundle, RecallScores, Recalled};
pub use domain::orchestrator::status::{GraphCounts, IngestCounts, MemoryState, MemoryStatus};
pub use domain::record::{Forgetting, MemoryRecord, RecordWithLinks};
pub use domain::rule::Rule;
pub use domain::search::{ComponentScores, Hit, SearchOutcome};
pub use domain::stated_time::StatedTime;
pub use domain::stats::{MAX_TIMELINE_DAYS, MemoryStats, Timeline, TimelineDay};
pub use embedder::token_counter::TokenizerCounter;
pub use store::orchestrator_graph::NodeWithEdges;
