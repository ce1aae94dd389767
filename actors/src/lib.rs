//! The butler-memory engine: the memory domain, its storage, and the actor tree that runs it.
//!
//! The tree, in start order (see `supervisor`):
//! ```text
//! supervisor
//! ├── embedder pool      micro-batched MiniLM inference
//! ├── indexer            embeds rows committed without an embedding
//! ├── retrieval × N      stateless readers
//! └── shard × (tenant, butler), on demand: ordered writes and lifecycle work
//! ```
//! [`Engine`] is the handle the edge uses: it validates inputs against the caller's rights,
//! routes writes to the owning shard and reads to the least busy reader.

pub mod actor_directory;
pub mod clock;
pub mod config;
pub mod context;
pub mod domain;
pub mod embedder;
pub mod embedder_pool;
pub mod error;
pub mod indexer;
pub mod mailbox;
pub mod retrieval;
pub mod shard;
pub mod store;
pub mod supervisor;

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use serde::Serialize;
use uuid::Uuid;

use crate::actor_directory::{ActorKind, ActorSnapshot};
use crate::clock::SharedClock;
use crate::config::EngineConfig;
use crate::context::EngineContext;
use crate::domain::caller::{Caller, GLOBAL_SCOPE, Role};
use crate::domain::episode::{Episode, EpisodeInput};
use crate::domain::fact::{FactInput, StoredFact};
use crate::domain::memory_type::MemoryType;
use crate::domain::record::{MemoryRecord, RecordWithLinks};
use crate::domain::request_context::Lineage;
use crate::domain::rule::{Rule, RuleInput};
use crate::domain::shard_key::ShardKey;
use crate::domain::text::check_name;
use crate::embedder::{EmbedError, Embedder, EmbedderConfig};
use crate::embedder_pool::{EmbedderFactory, EmbedderMsg};
use crate::error::{MemoryError, MemoryResult};
use crate::indexer::IndexerMsg;
use crate::mailbox::Mailbox;
use crate::retrieval::{MemoryStats, RetrievalMsg};
use crate::shard::{Author, ShardMsg};
use crate::store::Store;
use crate::store::stats::StatsFilter;
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
        let tokenizer = embedder::minilm::MiniLm::load_tokenizer(config)?;
        let config = config.clone();
        Ok(Arc::new(move || {
            embedder::minilm::MiniLm::load(&config, tokenizer.clone())
                .map(|m| Box::new(m) as Box<dyn Embedder>)
        }))
    }

    /// Starts the actor tree on a prepared (migrated) store.
    pub async fn start(
        store: Store,
        config: EngineConfig,
        clock: SharedClock,
        factory: EmbedderFactory,
    ) -> Result<Engine, MemoryError> {
        let ctx = Arc::new(EngineContext::new(store, clock, config));
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

    /// Stores an episode in its butler's shard. Answers after it is committed.
    pub async fn store_episode(
        &self,
        caller: &Caller,
        input: EpisodeInput,
        lineage: Lineage,
    ) -> MemoryResult<Episode> {
        let episode = input.validate(
            caller,
            &self.ctx.config.limits,
            self.ctx.config.episodes.default_ttl_days,
            self.ctx.clock.now(),
        )?;
        let shard = self
            .shard(&ShardKey::new(&caller.tenant_id, &episode.butler))
            .await?;
        let author = author(caller, lineage);
        shard
            .ask(
                |reply| ShardMsg::StoreEpisode {
                    episode: Box::new(episode),
                    author,
                    reply,
                },
                self.write_timeout(),
                "the shard",
            )
            .await?
    }

    /// Stores a fact, superseding the live fact with the same subject and predicate.
    pub async fn store_fact(
        &self,
        caller: &Caller,
        input: FactInput,
        lineage: Lineage,
    ) -> MemoryResult<StoredFact> {
        let fact = input.validate(caller, &self.ctx.config.limits, self.ctx.clock.now())?;
        let shard = self
            .shard(&caller.shard(fact.source_butler.as_deref()))
            .await?;
        let author = author(caller, lineage);
        let now = self.ctx.clock.now();
        let mut stored = shard
            .ask(
                |reply| ShardMsg::StoreFact {
                    fact: Box::new(fact),
                    author,
                    reply,
                },
                self.write_timeout(),
                "the shard",
            )
            .await??;
        stored.fact = stored.fact.at(now);
        stored.superseded = stored.superseded.map(|f| f.at(now));
        Ok(stored)
    }

    /// Stores a new candidate rule.
    pub async fn store_rule(
        &self,
        caller: &Caller,
        input: RuleInput,
        lineage: Lineage,
    ) -> MemoryResult<Rule> {
        let rule = input.validate(caller, &self.ctx.config.limits, self.ctx.clock.now())?;
        let shard = self
            .shard(&caller.shard(rule.source_butler.as_deref()))
            .await?;
        let author = author(caller, lineage);
        let now = self.ctx.clock.now();
        Ok(shard
            .ask(
                |reply| ShardMsg::StoreRule {
                    rule: Box::new(rule),
                    author,
                    reply,
                },
                self.write_timeout(),
                "the shard",
            )
            .await??
            .at(now))
    }

    /// One record by type and id, with its links; bumps its reference count.
    pub async fn get(
        &self,
        caller: &Caller,
        memory_type: MemoryType,
        id: Uuid,
        butler: Option<String>,
    ) -> MemoryResult<RecordWithLinks> {
        if let Some(b) = &butler {
            check_name("butler", b)?;
        }
        let butler = caller.acting_butler(butler.as_deref())?;
        let caller_copy = caller.clone();
        let found = self
            .read(|reply| RetrievalMsg::Get {
                caller: caller_copy,
                butler,
                memory_type,
                id,
                reply,
            })
            .await?;
        let owner = match &found.record {
            MemoryRecord::Episode(e) => ShardKey::new(&e.tenant_id, &e.butler),
            MemoryRecord::Fact(f) => ShardKey::for_butler(&f.tenant_id, f.source_butler.as_deref()),
            MemoryRecord::Rule(r) => ShardKey::for_butler(&r.tenant_id, r.source_butler.as_deref()),
        };
        self.touch(owner, memory_type, vec![id]).await;
        Ok(found)
    }

    /// Counts and health indicators of what the caller may see.
    pub async fn stats(
        &self,
        caller: &Caller,
        scope: Option<String>,
        butler: Option<String>,
    ) -> MemoryResult<MemoryStats> {
        if let Some(s) = &scope {
            check_name("scope", s)?;
        }
        if let Some(b) = &butler {
            check_name("butler", b)?;
        }
        let acting = caller.acting_butler(butler.as_deref())?;
        let filter = match caller.role {
            Role::Admin => StatsFilter {
                tenant_id: caller.tenant_id.clone(),
                scopes: scope.map(|s| vec![s]),
                butlers: acting.map(|b| vec![b]),
            },
            Role::Butler | Role::Operator => {
                let visible: Vec<String> = std::iter::once(GLOBAL_SCOPE.to_owned())
                    .chain(acting.clone())
                    .collect();
                let scopes = match scope {
                    Some(s) => {
                        caller.check_scope(&s, acting.as_deref())?;
                        vec![s]
                    }
                    None => visible,
                };
                StatsFilter {
                    tenant_id: caller.tenant_id.clone(),
                    scopes: Some(scopes),
                    butlers: Some(acting.into_iter().collect()),
                }
            }
        };
        self.read(|reply| RetrievalMsg::Stats { filter, reply })
            .await
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

fn author(caller: &Caller, lineage: Lineage) -> Author {
    Author {
        actor: caller.actor(),
        lineage,
    }
}
