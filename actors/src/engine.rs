//! [`Engine`]: the handle the edge uses. It starts the actor tree, validates inputs against
//! the caller's rights, routes writes to the owning shard (`engine/writes.rs`) and reads to
//! the least busy retrieval actor (`engine/reads.rs`), and stops everything in order.

mod lifecycle;
mod reads;
mod writes;

pub use lifecycle::{MAX_ACTIVITY_PAGE, Since};

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use serde::Serialize;
use uuid::Uuid;

use crate::actor_directory::{ActorKind, ActorSnapshot};
use crate::clock::SharedClock;
use crate::config::EngineConfig;
use crate::context::EngineContext;
use crate::domain::memory_type::MemoryType;
use crate::domain::shard_key::ShardKey;
use crate::embedder::minilm::MiniLm;
use crate::embedder::token_counter::TokenizerCounter;
use crate::embedder::{EmbedError, Embedder, EmbedderConfig};
use crate::embedder_pool::{EmbedderFactory, EmbedderMsg};
use crate::error::{MemoryError, MemoryResult};
use crate::indexer::IndexerMsg;
use crate::mailbox::Mailbox;
use crate::read_side::ReadSide;
use crate::retrieval::RetrievalMsg;
use crate::shard::ShardMsg;
use crate::store::Store;
use crate::supervisor::{Supervisor, SupervisorArgs, SupervisorMsg};

/// How long a lookup of a shard (starting it if needed) may take.
const SHARD_LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

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

/// The running engine.
pub struct Engine {
    ctx: Arc<EngineContext>,
    supervisor: ActorRef<SupervisorMsg>,
    // Taken by the first `shutdown`.
    supervisor_task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
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
    ) -> Result<Engine, MemoryError> {
        let counter = TokenizerCounter::load(&config.retrieval.context.tokenizer_path)
            .map_err(|e| MemoryError::unavailable("engine_start_failed", e.to_string()))?;
        let reads = ReadSide::start(config.retrieval.threads, &store)
            .map_err(|e| MemoryError::unavailable("engine_start_failed", e.to_string()))?;
        open_connections(&store, &reads).await;
        let ctx = Arc::new(EngineContext::new(
            store,
            reads,
            clock,
            config,
            Arc::new(counter),
        ));
        let info = ctx.directory.entry(ActorKind::Supervisor, "root");
        let (supervisor, handle) = Actor::spawn(
            None,
            Supervisor,
            SupervisorArgs {
                ctx: ctx.clone(),
                factory,
                info,
            },
        )
        .await
        .map_err(|e| MemoryError::unavailable("engine_start_failed", e.to_string()))?;
        Ok(Engine {
            ctx,
            supervisor,
            supervisor_task: std::sync::Mutex::new(Some(handle)),
        })
    }

    pub fn store(&self) -> &Store {
        &self.ctx.store
    }

    pub fn clock(&self) -> &SharedClock {
        &self.ctx.clock
    }

    pub fn config(&self) -> &EngineConfig {
        &self.ctx.config
    }

    /// Embeds texts with the pool (batched with whatever else is waiting).
    pub async fn embed(&self, texts: Vec<String>) -> MemoryResult<Vec<Vec<f32>>> {
        let timeout = Duration::from_millis(self.ctx.config.retrieval.call_timeout_ms);
        self.ctx
            .embedder
            .get()?
            .ask(
                |reply| EmbedderMsg::Embed { texts, reply },
                timeout,
                "the embedder pool",
            )
            .await?
    }

    /// Every live actor, for `/actors`.
    pub fn actors(&self) -> Vec<ActorSnapshot> {
        self.ctx.directory.snapshot()
    }

    /// Number of running shards.
    pub fn shard_count(&self) -> usize {
        self.ctx.shards.len()
    }

    /// Whether the database answers, the schema is current and the embedder is loaded.
    pub async fn readiness(&self) -> Readiness {
        let store = &self.ctx.store;
        let database = tokio::time::timeout(Duration::from_secs(2), store.ping())
            .await
            .map_err(|_| "no answer within 2 s".to_owned())
            .and_then(|r| r.map_err(|e| e.message));
        let migrations = match &database {
            Ok(()) => match store.migrations_applied().await {
                Ok(true) => Ok(()),
                Ok(false) => Err("migrations pending".to_owned()),
                Err(e) => Err(e.message),
            },
            Err(_) => Err("database unreachable".to_owned()),
        };
        let embedder = match self.ctx.embedder.get() {
            Ok(pool) => pool
                .ask(
                    |reply| EmbedderMsg::Status { reply },
                    Duration::from_secs(2),
                    "the embedder pool",
                )
                .await
                .map_err(|e| e.message)
                .and_then(|s| {
                    if s.workers > 0 {
                        Ok(())
                    } else {
                        Err("no inference worker is loaded".to_owned())
                    }
                }),
            Err(e) => Err(e.message),
        };
        Readiness {
            database,
            migrations,
            embedder,
        }
    }

    /// Barrier: answers once every write sent before it is committed, pending reference
    /// bumps are written, and every committed row is embedded.
    pub async fn flush(&self) -> MemoryResult<()> {
        let shards: Vec<Mailbox<ShardMsg>> =
            self.ctx.shards.iter().map(|e| e.value().clone()).collect();
        for shard in shards {
            shard
                .ask(
                    |reply| ShardMsg::Flush { reply },
                    self.write_timeout(),
                    "the shard",
                )
                .await??;
        }
        self.ctx
            .indexer
            .get()?
            .ask(
                |reply| IndexerMsg::Flush { reply },
                Duration::from_secs(300),
                "the indexer",
            )
            .await?
    }

    /// Makes a shard fail as a crash would (returning an error, or panicking), to exercise
    /// supervision. For tests and drills.
    pub async fn inject_shard_failure(&self, key: &ShardKey, panic: bool) -> MemoryResult<()> {
        let shard = self.shard(key).await?;
        if shard.tell(ShardMsg::InjectFailure { panic }) {
            Ok(())
        } else {
            Err(MemoryError::unavailable(
                "actor_stopped",
                "the shard is not running",
            ))
        }
    }

    /// Makes retrieval actor `index` fail as a crash would (an error, or a panic), to
    /// exercise supervision. For tests and drills.
    pub fn inject_retrieval_failure(&self, index: usize, panic: bool) -> MemoryResult<()> {
        let pool = self.ctx.retrieval.read().unwrap_or_else(|p| p.into_inner());
        match pool.get(index) {
            Some(reader) if reader.tell(RetrievalMsg::InjectFailure { panic }) => Ok(()),
            _ => Err(MemoryError::unavailable(
                "actor_stopped",
                "no such retrieval actor is running",
            )),
        }
    }

    /// Takes `episodes` of room from the write budget and holds it until the returned value
    /// is dropped: a drill (and a test) of how writes are refused when the budget is spent.
    pub fn reserve_write_room(&self, episodes: u32) -> MemoryResult<crate::admission::Admitted> {
        self.ctx.admission.admit(episodes, 0)
    }

    /// Stops the embedder pool and keeps it down (`false`), or starts it again (`true`).
    /// While it is down, reads answer from the keyword path (`degraded`) and `/readyz`
    /// names the embedder. An operator drill; tests use it too.
    pub async fn set_embedder_running(&self, running: bool) -> MemoryResult<()> {
        match self
            .supervisor
            .call(
                |reply| SupervisorMsg::SetEmbedder { running, reply },
                Some(SHARD_LOOKUP_TIMEOUT),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(result)) => result,
            _ => Err(MemoryError::unavailable(
                "supervisor_unavailable",
                "the actor tree is not answering",
            )),
        }
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
        let shards: Vec<Mailbox<ShardMsg>> =
            self.ctx.shards.iter().map(|e| e.value().clone()).collect();
        for shard in shards {
            let _ = shard
                .actor
                .drain_and_wait(Some(Duration::from_secs(30)))
                .await;
        }
        if let Ok(indexer) = self.ctx.indexer.get() {
            let _ = indexer
                .actor
                .stop_and_wait(None, Some(Duration::from_secs(5)))
                .await;
        }
        self.supervisor.stop(None);
        let _ = task.await;
    }

    async fn shard(&self, key: &ShardKey) -> MemoryResult<Mailbox<ShardMsg>> {
        if let Some(mailbox) = self.ctx.shards.get(key) {
            return Ok(mailbox.clone());
        }
        let key = key.clone();
        match self
            .supervisor
            .call(
                |reply| SupervisorMsg::Shard { key, reply },
                Some(SHARD_LOOKUP_TIMEOUT),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(result)) => result,
            _ => Err(MemoryError::unavailable(
                "supervisor_unavailable",
                "the actor tree is not answering",
            )),
        }
    }

    /// Sends a read to the least busy retrieval actor.
    async fn read<R, F>(&self, build: F) -> MemoryResult<R>
    where
        F: FnOnce(ractor::RpcReplyPort<MemoryResult<R>>) -> RetrievalMsg,
        R: Send + 'static,
    {
        let reader = {
            let pool = self.ctx.retrieval.read().unwrap_or_else(|p| p.into_inner());
            pool.iter()
                .filter(|m| m.actor.get_status() == ractor::ActorStatus::Running)
                .min_by_key(|m| m.info.queue_depth())
                .cloned()
        }
        .ok_or_else(|| MemoryError::unavailable("no_reader", "no retrieval actor is running"))?;
        let timeout = Duration::from_millis(self.ctx.config.retrieval.call_timeout_ms);
        reader.ask(build, timeout, "the retrieval actor").await?
    }

    /// Tells the owning shard that memories were read (fire and forget, batched there).
    async fn touch(&self, owner: ShardKey, memory_type: MemoryType, ids: Vec<Uuid>) {
        match self.shard(&owner).await {
            Ok(shard) => {
                shard.tell(ShardMsg::Touch { memory_type, ids });
            }
            Err(e) => tracing::debug!(shard = %owner, error = %e, "reference count not bumped"),
        }
    }

    fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.ctx.config.shards.call_timeout_ms)
    }
}

/// Opens the standing connections (every write connection, the read pools'
/// `min_connections`) before the first request rather than under the first burst. Best
/// effort: a pool that cannot open them now opens them when asked, and readiness reports a
/// database that does not answer.
async fn open_connections(store: &Store, reads: &ReadSide) {
    let retrieval = reads.store().clone();
    let on_readers = reads
        .handle()
        .spawn(async move { retrieval.open_read_connections().await });
    let (main, readers) = tokio::join!(store.open_connections(), on_readers);
    let readers = readers.unwrap_or_else(|e| Err(MemoryError::internal(e.to_string())));
    if let Err(error) = main.and(readers) {
        tracing::warn!(%error, "could not open the standing database connections at start");
    }
}
