//! What the engine's parts share: services, not actors. The store, the one clock, the
//! configuration, the write generations the read caches compare, and the write budget whose
//! count of admitted episodes tells background work that a burst is on. No mailbox lives
//! here: an actor gets the handles of the neighbours it talks to in its own `Args`.

use std::sync::atomic::{AtomicBool, AtomicI16};
use std::sync::{Arc, RwLock};

use ractor::OutputPort;

use crate::clock::SharedClock;
use crate::config::EngineConfig;
use crate::consolidation::Extractor;
use crate::domain::redaction::Redactor;
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::ingest::MemoryExtractor;
use crate::read_path::{Generations, ReplicaSet};
use crate::store::Store;
use crate::write_path::Admission;

/// Shared by every part of the engine, for the life of the engine.
#[derive(Debug)]
pub(crate) struct Services {
    pub store: Store,
    pub clock: SharedClock,
    pub config: EngineConfig,
    /// Moves forward with every committed write of a tenant (and every embedding stored).
    pub generations: Arc<Generations>,
    /// The write budget. Its count of admitted episodes is the write rate that background
    /// work (the indexer, consolidation triggers) yields to.
    pub admission: Admission,
    /// Whether the database is known to be down (said by whoever watches it).
    pub database: Arc<DatabaseHealth>,
    /// What every write's texts go through before they are stored.
    pub redactor: Redactor,
    /// Whether vectors of another model than the running one may be stored (after a model
    /// change, until the indexer has re-embedded them): semantic search then names the
    /// running model's version. True until the indexer has looked.
    pub other_model_vectors: AtomicBool,
    /// The `embedding_versions` row of the running model, once the embedder has loaded it
    /// (0 before): the vectors recall of the orchestrator memory compares with.
    pub embedding_version: AtomicI16,
    /// The store's read replicas and whether each may serve reads (`replica_set.rs`).
    pub replicas: Arc<ReplicaSet>,
    /// What reads typed memories out of dropped text files and captured texts
    /// (`memory.ingest.extractor`): deterministic until the engine sets the configured one.
    pub memory_extractor: Arc<MemoryExtractor>,
    /// Consolidation's extractor: the shards extract with it, `memory_stats` shows its state.
    pub extractor: Arc<Extractor>,
}

/// Runs a write's redaction, counting a refusal (`butler_memory_redaction_refusals_total`);
/// the caller counts the spans redacted (`count_redactions`).
pub(crate) fn redact_write(
    redactor: &Redactor,
    apply: impl FnOnce(&Redactor) -> MemoryResult<()>,
) -> MemoryResult<()> {
    let result = apply(redactor);
    if let Err(e) = &result
        && e.code == ErrorCode::RedactionRefused
    {
        metrics::counter!("butler_memory_redaction_refusals_total").increment(1);
    }
    result
}

/// What redaction did to one write, in `butler_memory_redactions_total{detector}` (spans).
pub(crate) fn count_redactions(findings: &crate::domain::redaction::Findings) {
    for (detector, spans) in findings {
        metrics::counter!("butler_memory_redactions_total", "detector" => detector.clone())
            .increment(u64::from(*spans));
    }
}

/// Whether the database is known to be down, and why. Whoever watches the database (the
/// edge, for the embedded PostgreSQL it runs) sets it; every call checks it first, so that
/// while the database is down a call fails at once as `unavailable` instead of waiting out
/// connection timeouts: callers fail open, and fast.
#[derive(Debug, Default)]
pub struct DatabaseHealth {
    // A lock, not an atomic: the reason travels with the state, and reads are one load.
    down: RwLock<Option<String>>,
}

impl DatabaseHealth {
    /// The database is down, for `why`.
    pub fn set_down(&self, why: impl Into<String>) {
        *self.down.write().unwrap_or_else(|p| p.into_inner()) = Some(why.into());
    }

    /// The database answers again.
    pub fn set_up(&self) {
        *self.down.write().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Why the database is down, if it is.
    pub fn down(&self) -> Option<String> {
        self.down.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// `unavailable` at once while the database is down.
    pub fn check(&self) -> MemoryResult<()> {
        match self.down() {
            None => Ok(()),
            Some(why) => Err(MemoryError::new(ErrorCode::DatabaseUnavailable, why)),
        }
    }
}

impl Services {
    pub fn new(store: Store, clock: SharedClock, config: EngineConfig, redactor: Redactor) -> Self {
        let routing = config.replica_routing;
        Services {
            replicas: Arc::new(ReplicaSet::new(
                store.replica_labels(),
                routing.wait,
                routing.max_lag,
            )),
            redactor,
            memory_extractor: Arc::new(MemoryExtractor::Deterministic),
            extractor: Arc::new(Extractor::Heuristic),
            other_model_vectors: AtomicBool::new(true),
            embedding_version: AtomicI16::new(0),
            admission: Admission::new(&config.writes),
            generations: Arc::default(),
            database: Arc::default(),
            store,
            clock,
            config,
        }
    }
}

#[cfg(test)]
impl Services {
    /// Services for a unit test of one actor: the documented configuration, `clock`, and a
    /// store that is never reached (its pools connect lazily, to nothing), so a test that
    /// needs the database fails loudly instead of passing by accident.
    pub fn for_tests(clock: SharedClock) -> Self {
        let config = crate::config::defaults();
        let nowhere = sqlx::postgres::PgConnectOptions::new().socket("/nonexistent/butler-memory");
        let database = crate::store::DatabaseConfig {
            max_connections: 1,
            write_connections: 1,
            min_connections: 0,
            acquire_timeout_ms: std::num::NonZeroU64::MIN,
            statement_timeout_ms: 1000,
            startup_wait_secs: 0,
            shared: crate::store::DatabaseSharing::Auto,
            read_urls: Default::default(),
            max_replica_lag_ms: 5000,
            replica_wait_ms: 50,
        };
        let redactor = config
            .redaction
            .redactor()
            .expect("the documented policy compiles");
        Services::new(Store::open(nowhere, &database), clock, config, redactor)
    }
}

/// "Rows that still need an embedding were committed": published by whoever commits such
/// rows (shards, consolidation), received by whoever embeds them (the indexer), without
/// either naming the other. Receivers must not rely on every notice arriving (a burst
/// coalesces them): only on one arriving after the last commit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowsCommitted;

/// Where [`RowsCommitted`] is published.
pub(crate) type CommitNotices = Arc<OutputPort<RowsCommitted>>;
