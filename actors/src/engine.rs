//! [`Engine`]: the handle the edge uses. It starts the actor tree, validates inputs against
//! the caller's rights, routes writes to the owning shard (`engine/writes.rs`), reads to the
//! least busy reader (`engine/reads.rs`) and lifecycle changes to the shard that owns the
//! record (`engine/lifecycle.rs`), and stops everything in order.

mod audit;
mod bundle;
mod butler_view;
mod dashboard;
mod lifecycle;
mod orchestrator;
mod orchestrator_bulletin;
mod orchestrator_capture;
mod orchestrator_recall;
mod orchestrator_status;
pub use lifecycle::MAX_ACTIVITY_PAGE;
mod purge;
mod reads;
#[cfg(feature = "testkit")]
mod testkit;
mod visibility;
mod writes;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use serde::Serialize;
use uuid::Uuid;

use crate::actors::directory::{ActorDirectory, ActorKind, ActorSnapshot};
use crate::actors::{
    EmbedderFactory, IndexerMsg, IngesterMsg, ReaderKit, ReaderMsg, ReaderRuntime, ShardKit,
    ShardMsg, Shards, Supervisor, SupervisorArgs, SupervisorMsg, TreeHandles,
};
use crate::clock::SharedClock;
use crate::config::EngineConfig;
use crate::consolidation::{ExtractError, Extractor};
use crate::domain::context_block::TokenCounter;
use crate::domain::memory_type::MemoryType;
use crate::domain::shard_key::ShardKey;
use crate::embedder::minilm::MiniLm;
use crate::embedder::token_counter::TokenizerCounter;
use crate::embedder::{EmbedError, Embedder, EmbedderConfig};
use crate::error::{MemoryError, MemoryResult};
use crate::ingest::MemoryExtractor;
use crate::read_path::{
    CorpusCache, HeadsWatch, QueryCache, QueryEmbedder, ReplicaSet, ResultCache, ResultCacheLimits,
};
use crate::services::{DatabaseHealth, Services};
use crate::store::Store;
use crate::store::lifecycle_claims::SweepFire;
use crate::write_path::CommitQueue;

/// Why the engine did not start.
#[derive(Debug, thiserror::Error)]
pub enum EngineStartError {
    #[error("loading the context tokenizer {path}: {source}")]
    Tokenizer {
        path: PathBuf,
        #[source]
        source: EmbedError,
    },
    #[error("starting the readers' runtime: {0}")]
    ReaderRuntime(#[source] std::io::Error),
    #[error("building the orchestrator memory's extractor (memory.ingest.extractor): {0}")]
    MemoryExtractor(ExtractError),
    #[error("building consolidation's extractor: {0}")]
    Extractor(#[source] ExtractError),
    #[error("starting the actor tree: {0}")]
    Tree(#[source] ractor::SpawnErr),
    #[error("{0}")]
    Redaction(String),
    #[error("{0}")]
    Encryption(String),
    #[error("privacy.audit_key: at least 16 characters are needed")]
    AuditKey,
}

/// Readiness of the engine's parts, for `/readyz`.
#[derive(Debug, Clone, Serialize)]
pub struct Readiness {
    pub database: Result<(), String>,
    pub migrations: Result<(), String>,
    pub embedder: Result<(), String>,
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        self.database.is_ok() && self.migrations.is_ok() && self.embedder.is_ok()
    }
}

/// One database pool's connections at a moment, by the name its connections carry in
/// `pg_stat_activity` (`butler-memory <name>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolUsage {
    pub name: &'static str,
    pub open: u32,
    pub in_use: u32,
    pub max: u32,
}

/// The running engine.
pub struct Engine {
    services: Arc<Services>,
    directory: Arc<ActorDirectory>,
    handles: TreeHandles,
    shards: Shards,
    queries: Arc<QueryEmbedder>,
    results: ResultCache,
    /// The tokenizer that sizes memory blocks and bulletins (the readers hold it too).
    tokens: Arc<dyn TokenCounter>,
    /// Other instances' writes, looked for before a read consults a cache.
    heads: HeadsWatch,
    supervisor: ActorRef<SupervisorMsg>,
    // Taken by the first `shutdown`.
    supervisor_task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// The readers run on it; kept for the life of the engine.
    reader_runtime: ReaderRuntime,
    /// Test kit only: every n-th stored episode is answered with an id that was never
    /// stored (0: off), so that a load test's verifier can be shown to catch a lost write.
    #[cfg(feature = "testkit")]
    lose_every: std::sync::atomic::AtomicU64,
}

impl Engine {
    /// Builds the production embedder: one tokenizer shared by `workers` MiniLM sessions.
    pub fn minilm_factory(config: &EmbedderConfig) -> Result<EmbedderFactory, EmbedError> {
        let tokenizer = MiniLm::load_tokenizer(config)?;
        let config = config.clone();
        Ok(Arc::new(move || {
            MiniLm::load(&config, tokenizer.clone()).map(|m| Box::new(m) as Box<dyn Embedder>)
        }))
    }

    /// Starts the actor tree on a prepared (migrated) store.
    pub async fn start(
        store: Store,
        config: EngineConfig,
        clock: SharedClock,
        factory: EmbedderFactory,
    ) -> Result<Engine, EngineStartError> {
        let tokenizer_path = &config.retrieval.context.tokenizer_path;
        let counter = TokenizerCounter::load(tokenizer_path).map_err(|source| {
            EngineStartError::Tokenizer {
                path: tokenizer_path.clone(),
                source,
            }
        })?;
        let extractor =
            Extractor::from_config(&config.consolidation).map_err(EngineStartError::Extractor)?;
        let vault = config
            .encryption
            .vault()
            .map_err(EngineStartError::Encryption)?;
        let store = store.with_vault(Arc::new(vault));
        // Alone on the database, the locks that keep instances apart need no connections.
        let store = if config.shared_database {
            store
        } else {
            store.with_process_locks()
        };
        let reader_runtime = ReaderRuntime::start(&config.retrieval, &store)
            .map_err(EngineStartError::ReaderRuntime)?;
        open_connections(&store, &reader_runtime).await;
        let retrieval = &config.retrieval;
        let writes = &config.writes;
        let commits = CommitQueue::on_store(
            writes.commit_concurrency.get() as usize,
            writes.parallel_commit_min_episodes as usize,
            writes.group_commit_max.get() as usize,
            store.clone(),
        );
        let handles = TreeHandles::new();
        let queries = Arc::new(QueryEmbedder::new(
            QueryCache::new(retrieval.query_cache_size),
            handles.embedder.clone(),
            Duration::from_millis(retrieval.embed_timeout_ms),
            retrieval.rerank.enabled,
        ));
        let results = ResultCache::new(ResultCacheLimits {
            capacity: retrieval.result_cache_size,
            main_bytes: retrieval.result_cache_bytes,
            window_bytes: retrieval.result_cache_window_bytes,
            ttl_ms: retrieval.result_cache_ttl_ms,
        });
        let tokens: Arc<dyn TokenCounter> = Arc::new(counter);
        let reader_kit = ReaderKit {
            store: reader_runtime.store().clone(),
            corpus_cache: Arc::new(CorpusCache::new(
                i64::from(retrieval.keyword_common_df.get()),
                config.shared_database,
            )),
            token_counter: tokens.clone(),
            embedder: handles.embedder.clone(),
        };
        let shard_kit = ShardKit {
            commits: Arc::new(commits),
            notices: Arc::default(),
        };
        let redactor = config
            .redaction
            .redactor()
            .map_err(EngineStartError::Redaction)?;
        if config.privacy.audit_key.chars().count() < 16 {
            return Err(EngineStartError::AuditKey);
        }
        let memory_extractor =
            MemoryExtractor::new(config.memory.ingest.extractor, &config.consolidation.llm)
                .map_err(EngineStartError::MemoryExtractor)?;
        let mut services = Services::new(store, clock, config, redactor);
        services.memory_extractor = Arc::new(memory_extractor);
        services.extractor = Arc::new(extractor);
        let services = Arc::new(services);
        let directory = Arc::new(ActorDirectory::default());
        let args = SupervisorArgs {
            services: services.clone(),
            directory: directory.clone(),
            factory,
            handles: handles.clone(),
            shard_kit,
            reader_kit,
            reader_runtime: reader_runtime.handle().clone(),
            info: directory.entry(ActorKind::Supervisor, "root"),
        };
        let (supervisor, task) = Actor::spawn(None, Supervisor, args)
            .await
            .map_err(EngineStartError::Tree)?;
        Ok(Engine {
            shards: Shards::new(&handles, supervisor.clone()),
            heads: HeadsWatch::new(services.store.clone(), services.generations.clone()),
            services,
            directory,
            handles,
            queries,
            results,
            tokens,
            supervisor,
            supervisor_task: std::sync::Mutex::new(Some(task)),
            reader_runtime,
            #[cfg(feature = "testkit")]
            lose_every: Default::default(),
        })
    }

    pub fn store(&self) -> &Store {
        &self.services.store
    }

    /// Consolidation's extractor, as configured and as it runs now.
    pub fn extractor_status(&self) -> crate::domain::extractor_status::ExtractorStatus {
        self.services.extractor.status()
    }

    /// Every database pool of the engine by name (the store's and the retrieval actors'),
    /// with its connections now: for `/metrics` and the operators' page.
    pub fn pool_usage(&self) -> Vec<PoolUsage> {
        let retrieval = ("retrieval", self.reader_runtime.store().pool());
        let pools = self.services.store.pools().into_iter().chain([retrieval]);
        pools
            .map(|(name, pool)| {
                let open = pool.size();
                let idle = u32::try_from(pool.num_idle()).unwrap_or(open).min(open);
                PoolUsage {
                    name,
                    open,
                    in_use: open - idle,
                    max: pool.options().get_max_connections(),
                }
            })
            .collect()
    }

    pub fn clock(&self) -> &SharedClock {
        &self.services.clock
    }

    pub fn config(&self) -> &EngineConfig {
        &self.services.config
    }

    /// The read replicas and whether each serves reads (kept by the edge's replica watch).
    pub fn replicas(&self) -> Arc<ReplicaSet> {
        self.services.replicas.clone()
    }

    /// Where whoever watches the database says it is down, and up again.
    pub fn database_health(&self) -> Arc<DatabaseHealth> {
        self.services.database.clone()
    }

    /// Embeds texts with the pool (batched with whatever else is waiting).
    pub async fn embed(&self, texts: Vec<String>) -> MemoryResult<Vec<Vec<f32>>> {
        self.handles
            .embedder
            .embed(texts, self.read_timeout())
            .await
    }

    /// Every live actor, for `/actors`.
    pub fn actors(&self) -> Vec<ActorSnapshot> {
        self.directory.snapshot()
    }

    /// This instance's name among the instances sharing the database
    /// (`lifecycle.instance_id`, else host and process id).
    pub fn instance_id(&self) -> String {
        self.services.config.lifecycle.instance()
    }

    /// The scheduled sweeps this instance has claimed and not finished (running now, or
    /// abandoned by a previous run of this instance), oldest first.
    pub async fn held_claims(&self) -> MemoryResult<Vec<SweepFire>> {
        self.services.store.held_claims(&self.instance_id()).await
    }

    /// Number of running shards.
    pub fn shard_count(&self) -> usize {
        self.shards.count()
    }

    /// Whether the database answers, the schema is current and the embedder is loaded.
    pub async fn readiness(&self) -> Readiness {
        let store = &self.services.store;
        let database = match self.services.database.down() {
            Some(why) => Err(why),
            None => tokio::time::timeout(Duration::from_secs(2), store.ping())
                .await
                .map_err(|_| "no answer within 2 s".to_owned())
                .and_then(|r| r.map_err(|e| e.message)),
        };
        let migrations = match &database {
            Ok(()) => match store.migrations_applied().await {
                Ok(true) => Ok(()),
                Ok(false) => Err("migrations pending".to_owned()),
                Err(e) => Err(e.message),
            },
            Err(_) => Err("database unreachable".to_owned()),
        };
        let embedder = self
            .handles
            .embedder
            .status(Duration::from_secs(2))
            .await
            .map_err(|e| e.message)
            .and_then(|s| {
                if s.workers > 0 {
                    Ok(())
                } else {
                    Err("no inference worker is loaded".to_owned())
                }
            });
        Readiness {
            database,
            migrations,
            embedder,
        }
    }

    /// Sets the gauges that are read from the database when `/metrics` is scraped: the
    /// embedding backlog (rows waiting for an embedding) and the age of its oldest row (read
    /// then, they are current during a long drain too, when the indexer is too busy to say),
    /// and the size of every table and index with each table's live and dead rows.
    pub async fn refresh_scraped_gauges(&self) {
        self.refresh_relation_gauges().await;
        let backlog = tokio::time::timeout(
            Duration::from_secs(1),
            self.services.store.embedding_backlog(),
        )
        .await;
        match backlog {
            Ok(Ok((rows, oldest))) => {
                metrics::gauge!("butler_memory_embedding_backlog").set(rows as f64);
                let now = self.services.clock.now();
                let age = oldest.map_or(0.0, |t| (now - t).num_milliseconds() as f64 / 1000.0);
                metrics::gauge!("butler_memory_embedding_backlog_age_seconds").set(age.max(0.0));
            }
            Ok(Err(error)) => tracing::debug!(%error, "embedding backlog unknown at scrape"),
            Err(_) => tracing::debug!("embedding backlog not counted within 1 s at scrape"),
        }
    }

    async fn refresh_relation_gauges(&self) {
        let store = &self.services.store;
        let read = tokio::time::timeout(Duration::from_secs(1), async {
            futures::try_join!(store.relation_sizes(), store.table_rows())
        })
        .await;
        let (sizes, rows) = match read {
            Ok(Ok(both)) => both,
            Ok(Err(error)) => return tracing::debug!(%error, "relation sizes unknown at scrape"),
            Err(_) => return tracing::debug!("relation sizes not read within 1 s at scrape"),
        };
        for size in sizes {
            metrics::gauge!("butler_memory_db_relation_bytes", "relation" => size.relation, "kind" => size.kind)
                .set(size.bytes as f64);
        }
        for table in rows {
            metrics::gauge!("butler_memory_db_rows", "table" => table.table.clone(), "state" => "live")
                .set(table.live as f64);
            metrics::gauge!("butler_memory_db_rows", "table" => table.table, "state" => "dead")
                .set(table.dead as f64);
        }
    }

    /// Barrier: answers once every write sent before it is committed, pending reference
    /// bumps are written, and every committed row is embedded.
    pub async fn flush(&self) -> MemoryResult<()> {
        for shard in self.shards.running() {
            shard
                .ask(
                    |reply| ShardMsg::Flush { reply },
                    self.write_timeout(),
                    "the shard",
                )
                .await??;
        }
        self.handles
            .indexer
            .get()?
            .ask(
                |reply| IndexerMsg::Flush { reply },
                Duration::from_secs(300),
                "the indexer",
            )
            .await?
    }

    /// Reads every file waiting in the orchestrators' ingest folders now, settled or not,
    /// and answers how many were processed or rejected (tests and tools use it instead of
    /// waiting for the watch).
    pub async fn flush_ingest(&self) -> MemoryResult<usize> {
        self.handles
            .ingester
            .get()?
            .ask(
                |reply| IngesterMsg::Flush { reply },
                Duration::from_secs(300),
                "the ingester",
            )
            .await?
    }

    /// Stops the tree: no more restarts, shards drain their mailboxes, then everything stops.
    pub async fn shutdown(&self) {
        let Some(task) = self
            .supervisor_task
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        let _ = self
            .supervisor
            .call(
                |reply| SupervisorMsg::ShuttingDown { reply },
                Some(Duration::from_secs(5)),
            )
            .await;
        // Every shard drains at once: a stop takes as long as the slowest shard, not the sum.
        // With the database known down there is nothing a drain could write: a short bound.
        let bound = match self.services.database.down() {
            Some(_) => Duration::from_secs(3),
            None => Duration::from_secs(30),
        };
        let drains = self.shards.running().into_iter().map(|shard| async move {
            let _ = shard.actor.drain_and_wait(Some(bound)).await;
        });
        futures::future::join_all(drains).await;
        if let Ok(indexer) = self.handles.indexer.get() {
            let _ = indexer
                .actor
                .stop_and_wait(None, Some(Duration::from_secs(5)))
                .await;
        }
        self.supervisor.stop(None);
        let _ = task.await;
        // After the shards: an extraction in flight is abandoned, its batch pending again.
        self.services.extractor.shutdown().await;
    }

    /// Sends a read to the least busy reader.
    async fn read<R, F>(&self, build: F) -> MemoryResult<R>
    where
        F: FnOnce(ractor::RpcReplyPort<MemoryResult<R>>) -> ReaderMsg,
        R: Send + 'static,
    {
        self.handles.readers.read(build, self.read_timeout()).await
    }

    /// Tells the owning shard that memories were read (fire and forget, batched there).
    async fn touch(&self, owner: ShardKey, memory_type: MemoryType, ids: Vec<Uuid>) {
        match self.shards.get(&owner).await {
            Ok(shard) => {
                shard.tell(ShardMsg::Touch { memory_type, ids });
            }
            Err(e) => tracing::debug!(shard = %owner, error = %e, "reference count not bumped"),
        }
    }

    fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.services.config.shards.call_timeout_ms.get())
    }

    fn read_timeout(&self) -> Duration {
        Duration::from_millis(self.services.config.retrieval.call_timeout_ms.get())
    }
}

/// Opens the standing connections (every write connection, the read pools'
/// `min_connections`) before the first request rather than under the first burst. Best
/// effort: a pool that cannot open them now opens them when asked, and readiness reports a
/// database that does not answer.
async fn open_connections(store: &Store, readers: &ReaderRuntime) {
    let retrieval = readers.store().clone();
    let on_readers = readers
        .handle()
        .spawn(async move { retrieval.open_read_connections().await });
    let (main, readers) = tokio::join!(store.open_connections(), on_readers);
    let readers = readers.unwrap_or_else(|e| Err(MemoryError::internal(e.to_string())));
    if let Err(error) = main.and(readers) {
        tracing::warn!(%error, "could not open the standing database connections at start");
    }
}
