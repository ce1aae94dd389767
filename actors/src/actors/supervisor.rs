//! The root supervisor: starts the tree, owns the shard registry, hands each child the
//! handles of the neighbours it talks to, and restarts what fails.
//!
//! Children (all linked to it): the embedder pool, the indexer, `retrieval.workers`
//! readers, the lifecycle scheduler, the drop-zone's ingester, and one shard per `(tenant_id, butler)` started on
//! first use. Where the engine finds them ([`TreeHandles`]) the supervisor keeps current
//! across restarts. A child
//! that fails is restarted at once, up to `shards.max_restarts` times within
//! `shards.restart_window_secs`; beyond that it is left down for the rest of the window
//! (requests to it fail fast as `unavailable`) so that a crash loop cannot eat the machine.
//! A failing shard never affects another: each is its own actor with its own mailbox.

mod lifecycle_work;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};

use super::directory::{ActorDirectory, ActorInfo, ActorKind, ActorStatus};
use super::embedder_pool::{EmbedderFactory, EmbedderHandle, EmbedderPool, EmbedderPoolArgs};
use super::indexer::{Indexer, IndexerArgs, IndexerMsg};
use super::ingester::{Ingester, IngesterArgs, IngesterMsg};
use super::mailbox::{Mailbox, Slot};
use super::reader::{Reader, ReaderArgs, ReaderKit, ReaderPool};
use super::scheduler::{Scheduler, SchedulerArgs};
use super::shard::{Shard, ShardArgs, ShardKit, ShardMsg};
use crate::domain::shard_key::ShardKey;
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::services::Services;
use lifecycle_work::TreeLifecycle;

/// How long a lookup of a shard (starting it if needed) may take.
const SHARD_LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Supervisor;

/// Where the rest of the engine finds the supervised actors: each handle is filled and kept
/// current by the supervisor as it starts and restarts them.
#[derive(Debug, Clone)]
pub struct TreeHandles {
    pub embedder: EmbedderHandle,
    pub indexer: Arc<Slot<IndexerMsg>>,
    pub ingester: Arc<Slot<IngesterMsg>>,
    pub readers: Arc<ReaderPool>,
    /// Live shards. Written only by the supervisor.
    pub shards: Arc<DashMap<ShardKey, Mailbox<ShardMsg>>>,
}

impl TreeHandles {
    pub fn new() -> Self {
        TreeHandles {
            embedder: EmbedderHandle::new(),
            indexer: Arc::new(Slot::new("indexer")),
            ingester: Arc::new(Slot::new("ingester")),
            readers: Arc::default(),
            shards: Arc::default(),
        }
    }
}

/// The live shards, and how to start one that is not running.
#[derive(Debug, Clone)]
pub struct Shards {
    registry: Arc<DashMap<ShardKey, Mailbox<ShardMsg>>>,
    supervisor: ActorRef<SupervisorMsg>,
}

impl Shards {
    pub fn new(handles: &TreeHandles, supervisor: ActorRef<SupervisorMsg>) -> Self {
        Shards {
            registry: handles.shards.clone(),
            supervisor,
        }
    }

    /// The mailbox of `key`'s shard, started if it is not running.
    pub async fn get(&self, key: &ShardKey) -> MemoryResult<Mailbox<ShardMsg>> {
        if let Some(mailbox) = self.registry.get(key) {
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
            _ => Err(MemoryError::new(
                ErrorCode::SupervisorUnavailable,
                "the actor tree is not answering",
            )),
        }
    }

    /// Every running shard.
    pub fn running(&self) -> Vec<Mailbox<ShardMsg>> {
        self.registry.iter().map(|e| e.value().clone()).collect()
    }

    pub fn count(&self) -> usize {
        self.registry.len()
    }
}

pub struct SupervisorArgs {
    pub services: Arc<Services>,
    pub directory: Arc<ActorDirectory>,
    pub factory: EmbedderFactory,
    pub handles: TreeHandles,
    pub shard_kit: ShardKit,
    pub reader_kit: ReaderKit,
    /// The runtime the readers run on.
    pub reader_runtime: tokio::runtime::Handle,
    pub info: Arc<ActorInfo>,
}

pub enum SupervisorMsg {
    /// The mailbox of a shard, started if it is not running.
    Shard {
        key: ShardKey,
        reply: RpcReplyPort<MemoryResult<Mailbox<ShardMsg>>>,
    },
    /// A shard has been idle: unregister and drain it.
    ShardIdle { key: ShardKey, actor: ActorId },
    /// A child left down by the restart policy may be tried again.
    Retry(Child),
    /// Stop restarting anything: the engine is shutting down.
    ShuttingDown { reply: RpcReplyPort<()> },
    /// Stop the embedder pool and keep it down (`running: false`), or start it again: a
    /// drill of how reads degrade without the model.
    #[cfg(feature = "testkit")]
    SetEmbedder {
        running: bool,
        reply: RpcReplyPort<MemoryResult<()>>,
    },
}

/// What a child of the supervisor is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Child {
    EmbedderPool,
    Indexer,
    Reader(usize),
    Scheduler,
    Ingester,
    Shard(ShardKey),
}

impl Child {
    fn kind_and_key(&self) -> (ActorKind, String) {
        match self {
            Child::EmbedderPool => (ActorKind::EmbedderPool, "pool".into()),
            Child::Indexer => (ActorKind::Indexer, "embeddings".into()),
            Child::Reader(i) => (ActorKind::Reader, i.to_string()),
            Child::Scheduler => (ActorKind::Scheduler, "lifecycle".into()),
            Child::Ingester => (ActorKind::Ingester, "drop-zone".into()),
            Child::Shard(key) => (ActorKind::Shard, key.to_string()),
        }
    }
}

pub struct SupervisorState {
    services: Arc<Services>,
    directory: Arc<ActorDirectory>,
    factory: EmbedderFactory,
    handles: TreeHandles,
    shard_kit: ShardKit,
    reader_kit: ReaderKit,
    reader_runtime: tokio::runtime::Handle,
    /// What the scheduler has the tree do.
    lifecycle: Arc<TreeLifecycle>,
    info: Arc<ActorInfo>,
    version_id: i16,
    children: HashMap<ActorId, Child>,
    failures: HashMap<Child, VecDeque<Instant>>,
    /// Shards left down by the restart policy, until this instant.
    cooling: HashMap<ShardKey, Instant>,
    shutting_down: bool,
    /// The embedder pool was stopped on purpose: do not restart it.
    embedder_paused: bool,
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let lifecycle = Arc::new(TreeLifecycle::new(
            args.services.clone(),
            Shards::new(&args.handles, myself.clone()),
        ));
        let mut state = SupervisorState {
            services: args.services,
            directory: args.directory,
            factory: args.factory,
            handles: args.handles,
            shard_kit: args.shard_kit,
            reader_kit: args.reader_kit,
            reader_runtime: args.reader_runtime,
            lifecycle,
            info: args.info,
            version_id: 0,
            children: HashMap::new(),
            failures: HashMap::new(),
            cooling: HashMap::new(),
            shutting_down: false,
            embedder_paused: false,
        };
        // Start order: the embedder (the model must load before anything is indexed), the
        // indexer, then readers. Shards start on demand.
        state.spawn(&myself, Child::EmbedderPool).await?;
        let status = state
            .handles
            .embedder
            .status(Duration::from_secs(30))
            .await?;
        let model = status.model;
        state.version_id = state
            .services
            .store
            .embedding_version(
                &model.name,
                &model.sha256,
                model.dimensions as i32,
                model.pooling,
            )
            .await?;
        state
            .services
            .embedding_version
            .store(state.version_id, std::sync::atomic::Ordering::Release);
        state.spawn(&myself, Child::Indexer).await?;
        for i in 0..state.services.config.retrieval.workers.get() {
            state.spawn(&myself, Child::Reader(i)).await?;
        }
        state.spawn(&myself, Child::Scheduler).await?;
        state.spawn(&myself, Child::Ingester).await?;
        state.info.started();
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.info.handled();
        match message {
            SupervisorMsg::Shard { key, reply } => {
                let _ = reply.send(state.shard(&myself, key).await);
            }
            SupervisorMsg::ShardIdle { key, actor } => {
                let shards = &state.handles.shards;
                let current = shards.get(&key).map(|m| m.actor.get_id());
                if current == Some(actor)
                    && let Some((_, mailbox)) = shards.remove(&key)
                {
                    tracing::debug!(shard = %key, "stopping idle shard");
                    mailbox.info.set_status(ActorStatus::Stopping);
                    // Draining: whatever reached the mailbox before unregistering is still done.
                    let _ = mailbox.actor.drain();
                }
            }
            SupervisorMsg::Retry(child) => {
                if !state.shutting_down {
                    match &child {
                        Child::Shard(key) => {
                            state.cooling.remove(key);
                            let (kind, key) = child.kind_and_key();
                            state.directory.remove(kind, &key);
                        }
                        other => {
                            if let Err(e) = state.spawn(&myself, other.clone()).await {
                                tracing::error!(child = ?other, error = %e, "restart failed");
                                state.back_off(&myself, other.clone());
                            }
                        }
                    }
                }
            }
            SupervisorMsg::ShuttingDown { reply } => {
                state.shutting_down = true;
                let _ = reply.send(());
            }
            #[cfg(feature = "testkit")]
            SupervisorMsg::SetEmbedder { running, reply } => {
                let result = if running {
                    state.embedder_paused = false;
                    if state.handles.embedder.slot().is_up() {
                        Ok(())
                    } else {
                        state
                            .spawn(&myself, Child::EmbedderPool)
                            .await
                            .map_err(|e| {
                                MemoryError::new(ErrorCode::EmbedderStartFailed, e.to_string())
                            })
                    }
                } else {
                    state.embedder_paused = true;
                    let slot = state.handles.embedder.slot();
                    if let Ok(pool) = slot.get() {
                        slot.set(None);
                        pool.actor.stop(Some("stopped by an operator".into()));
                    }
                    Ok(())
                };
                let _ = reply.send(result);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match event {
            SupervisionEvent::ActorFailed(cell, error) => {
                state.child_failed(&myself, &cell, error.to_string()).await;
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                state.child_stopped(&myself, &cell, reason).await;
            }
            _ => {}
        }
        Ok(())
    }
}

impl SupervisorState {
    async fn shard(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        key: ShardKey,
    ) -> MemoryResult<Mailbox<ShardMsg>> {
        if let Some(mailbox) = self.handles.shards.get(&key) {
            return Ok(mailbox.clone());
        }
        if self.shutting_down {
            return Err(MemoryError::new(
                ErrorCode::ShuttingDown,
                "the service is shutting down",
            ));
        }
        if let Some(until) = self.cooling.get(&key) {
            let wait = until.saturating_duration_since(Instant::now());
            return Err(MemoryError::new(
                ErrorCode::ShardFailing,
                format!(
                    "shard {key} failed repeatedly and is paused for another {} s",
                    wait.as_secs().max(1)
                ),
            ));
        }
        self.spawn(myself, Child::Shard(key.clone()))
            .await
            .map_err(|e| MemoryError::new(ErrorCode::ShardStartFailed, e.to_string()))?;
        self.handles
            .shards
            .get(&key)
            .map(|m| m.clone())
            .ok_or_else(|| MemoryError::internal("a started shard was not registered"))
    }

    /// Starts a child and publishes its mailbox.
    async fn spawn(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        child: Child,
    ) -> Result<(), ActorProcessingErr> {
        let (kind, key) = child.kind_and_key();
        let info = self.directory.entry(kind, key);
        let cell = myself.get_cell();
        let services = self.services.clone();
        let id = match &child {
            Child::EmbedderPool => {
                let args = EmbedderPoolArgs {
                    factory: self.factory.clone(),
                    config: services.config.embedder.clone(),
                    info: info.clone(),
                };
                let (actor, _) = Actor::spawn_linked(None, EmbedderPool, args, cell).await?;
                let id = actor.get_id();
                self.handles
                    .embedder
                    .slot()
                    .set(Some(Mailbox::new(actor, info)));
                id
            }
            Child::Indexer => {
                let args = IndexerArgs {
                    services,
                    embedder: self.handles.embedder.clone(),
                    notices: self.shard_kit.notices.clone(),
                    version_id: self.version_id,
                    info: info.clone(),
                };
                let (actor, _) = Actor::spawn_linked(None, Indexer, args, cell).await?;
                let id = actor.get_id();
                self.handles.indexer.set(Some(Mailbox::new(actor, info)));
                id
            }
            Child::Reader(i) => {
                let args = ReaderArgs {
                    services,
                    kit: self.reader_kit.clone(),
                    embedding_version: self.version_id,
                    info: info.clone(),
                };
                // On the readers' runtime: the actor's task is spawned where this runs.
                let (actor, _) = self
                    .reader_runtime
                    .spawn(Actor::spawn_linked(None, Reader, args, cell))
                    .await??;
                let id = actor.get_id();
                self.handles.readers.set(*i, Mailbox::new(actor, info));
                id
            }
            Child::Scheduler => {
                let args = SchedulerArgs {
                    services,
                    work: self.lifecycle.clone(),
                    info: info.clone(),
                };
                let (actor, _) = Actor::spawn_linked(None, Scheduler, args, cell).await?;
                actor.get_id()
            }
            Child::Ingester => {
                let args = IngesterArgs {
                    services,
                    info: info.clone(),
                };
                let (actor, _) = Actor::spawn_linked(None, Ingester, args, cell).await?;
                let id = actor.get_id();
                self.handles.ingester.set(Some(Mailbox::new(actor, info)));
                id
            }
            Child::Shard(key) => {
                let args = ShardArgs {
                    key: key.clone(),
                    services,
                    kit: self.shard_kit.clone(),
                    info: info.clone(),
                    supervisor: myself.clone(),
                };
                let (actor, _) = Actor::spawn_linked(None, Shard, args, cell).await?;
                let id = actor.get_id();
                let shards = &self.handles.shards;
                shards.insert(key.clone(), Mailbox::new(actor, info));
                metrics::gauge!("butler_memory_shards").set(shards.len() as f64);
                id
            }
        };
        self.children.insert(id, child);
        Ok(())
    }

    async fn child_failed(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        cell: &ActorCell,
        error: String,
    ) {
        let Some(child) = self.children.remove(&cell.get_id()) else {
            return;
        };
        let (kind, key) = child.kind_and_key();
        let info = self.directory.entry(kind, key);
        info.failed(error.clone());
        tracing::error!(child = ?child, %error, "actor failed");
        metrics::counter!("butler_memory_actor_failures_total", "kind" => kind.label())
            .increment(1);
        self.unpublish(&child, cell.get_id());
        if self.shutting_down {
            return;
        }
        let window = Duration::from_secs(self.services.config.shards.restart_window_secs.get());
        let history = self.failures.entry(child.clone()).or_default();
        let now = Instant::now();
        history.push_back(now);
        while history
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            history.pop_front();
        }
        if history.len() as u32 > self.services.config.shards.max_restarts {
            tracing::error!(child = ?child, "restart limit reached; leaving it down for {} s", window.as_secs());
            info.set_status(ActorStatus::Failed);
            self.back_off(myself, child);
            return;
        }
        info.restarted();
        match &child {
            // A shard restarts lazily on its next request unless work is waiting: restart
            // now so the registry is never empty for a key that was just in use.
            Child::Shard(_)
            | Child::EmbedderPool
            | Child::Indexer
            | Child::Reader(_)
            | Child::Scheduler
            | Child::Ingester => {
                if let Err(e) = self.spawn(myself, child.clone()).await {
                    tracing::error!(child = ?child, error = %e, "restart failed");
                    info.set_status(ActorStatus::Failed);
                    self.back_off(myself, child);
                }
            }
        }
    }

    async fn child_stopped(
        &mut self,
        myself: &ActorRef<SupervisorMsg>,
        cell: &ActorCell,
        reason: Option<String>,
    ) {
        let Some(child) = self.children.remove(&cell.get_id()) else {
            return;
        };
        self.unpublish(&child, cell.get_id());
        match &child {
            Child::Shard(key) => {
                // Keep the directory entry if a newer actor already serves this key.
                if !self.handles.shards.contains_key(key) {
                    let (kind, key) = child.kind_and_key();
                    self.directory.remove(kind, &key);
                }
                metrics::gauge!("butler_memory_shards").set(self.handles.shards.len() as f64);
            }
            Child::EmbedderPool if self.embedder_paused => {
                let (kind, key) = child.kind_and_key();
                self.directory.remove(kind, &key);
            }
            other if !self.shutting_down => {
                tracing::warn!(child = ?other, ?reason, "actor stopped unexpectedly; restarting");
                if let Err(e) = self.spawn(myself, other.clone()).await {
                    tracing::error!(child = ?other, error = %e, "restart failed");
                    self.back_off(myself, other.clone());
                }
            }
            _ => {}
        }
    }

    /// Removes a dead child's mailbox from where requests find it.
    fn unpublish(&self, child: &Child, id: ActorId) {
        match child {
            Child::Shard(key) => {
                self.handles
                    .shards
                    .remove_if(key, |_, m| m.actor.get_id() == id);
            }
            Child::EmbedderPool => self.handles.embedder.slot().set(None),
            Child::Indexer => self.handles.indexer.set(None),
            Child::Ingester => self.handles.ingester.set(None),
            // A dead reader's mailbox stays in the pool until replaced: sends to it fail
            // fast as `unavailable`, and routing prefers live ones.
            Child::Reader(_) => {}
            // Nobody sends to the scheduler; it only ticks.
            Child::Scheduler => {}
        }
    }

    /// Leaves a child down for the restart window, then allows it again.
    fn back_off(&mut self, myself: &ActorRef<SupervisorMsg>, child: Child) {
        let window = Duration::from_secs(self.services.config.shards.restart_window_secs.get());
        if let Child::Shard(key) = &child {
            self.cooling.insert(key.clone(), Instant::now() + window);
        }
        myself.send_after(window, move || SupervisorMsg::Retry(child));
    }
}
