//! The root supervisor: starts the tree, owns the shard registry, and restarts what fails.
//!
//! Children (all linked to it): the embedder pool, the indexer, `retrieval.workers`
//! retrieval actors, the lifecycle scheduler, and one shard per `(tenant_id, butler)`
//! started on first use. A child
//! that fails is restarted at once, up to `shards.max_restarts` times within
//! `shards.restart_window_secs`; beyond that it is left down for the rest of the window
//! (requests to it fail fast as `unavailable`) so that a crash loop cannot eat the machine.
//! A failing shard never affects another: each is its own actor with its own mailbox.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};

use crate::actor_directory::{ActorInfo, ActorKind, ActorStatus};
use crate::context::EngineContext;
use crate::domain::shard_key::ShardKey;
use crate::embedder_pool::{EmbedderFactory, EmbedderMsg, EmbedderPool, EmbedderPoolArgs};
use crate::error::{MemoryError, MemoryResult};
use crate::indexer::{Indexer, IndexerArgs};
use crate::mailbox::Mailbox;
use crate::retrieval::{Retrieval, RetrievalArgs};
use crate::scheduler::{Scheduler, SchedulerArgs};
use crate::shard::{Shard, ShardArgs, ShardMsg};

pub struct Supervisor;

pub struct SupervisorArgs {
    pub ctx: Arc<EngineContext>,
    pub factory: EmbedderFactory,
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
    /// Stop the embedder pool and keep it down (`running: false`), or start it again: an
    /// operator drill (and a test) of how reads degrade without the model.
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
    Retrieval(usize),
    Scheduler,
    Shard(ShardKey),
}

impl Child {
    fn kind_and_key(&self) -> (ActorKind, String) {
        match self {
            Child::EmbedderPool => (ActorKind::EmbedderPool, "pool".into()),
            Child::Indexer => (ActorKind::Indexer, "embeddings".into()),
            Child::Retrieval(i) => (ActorKind::Retrieval, i.to_string()),
            Child::Scheduler => (ActorKind::Scheduler, "lifecycle".into()),
            Child::Shard(key) => (ActorKind::Shard, key.to_string()),
        }
    }
}

pub struct SupervisorState {
    ctx: Arc<EngineContext>,
    factory: EmbedderFactory,
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
        let mut state = SupervisorState {
            ctx: args.ctx,
            factory: args.factory,
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
        let pool = state.ctx.embedder.get()?;
        let status = pool
            .ask(
                |reply| EmbedderMsg::Status { reply },
                Duration::from_secs(30),
                "the embedder pool",
            )
            .await?;
        let model = status.model;
        state.version_id = state
            .ctx
            .store
            .embedding_version(
                &model.name,
                &model.sha256,
                model.dimensions as i32,
                model.pooling,
            )
            .await?;
        state.spawn(&myself, Child::Indexer).await?;
        for i in 0..state.ctx.config.retrieval.workers {
            state.spawn(&myself, Child::Retrieval(i)).await?;
        }
        state.spawn(&myself, Child::Scheduler).await?;
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
                let current = state.ctx.shards.get(&key).map(|m| m.actor.get_id());
                if current == Some(actor)
                    && let Some((_, mailbox)) = state.ctx.shards.remove(&key)
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
                            state.ctx.directory.remove(kind, &key);
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
            SupervisorMsg::SetEmbedder { running, reply } => {
                let result = if running {
                    state.embedder_paused = false;
                    if state.ctx.embedder.is_up() {
                        Ok(())
                    } else {
                        state
                            .spawn(&myself, Child::EmbedderPool)
                            .await
                            .map_err(|e| {
                                MemoryError::unavailable("embedder_start_failed", e.to_string())
                            })
                    }
                } else {
                    state.embedder_paused = true;
                    if let Ok(pool) = state.ctx.embedder.get() {
                        state.ctx.embedder.set(None);
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
        if let Some(mailbox) = self.ctx.shards.get(&key) {
            return Ok(mailbox.clone());
        }
        if self.shutting_down {
            return Err(MemoryError::unavailable(
                "shutting_down",
                "the service is shutting down",
            ));
        }
        if let Some(until) = self.cooling.get(&key) {
            let wait = until.saturating_duration_since(Instant::now());
            return Err(MemoryError::unavailable(
                "shard_failing",
                format!(
                    "shard {key} failed repeatedly and is paused for another {} s",
                    wait.as_secs().max(1)
                ),
            ));
        }
        self.spawn(myself, Child::Shard(key.clone()))
            .await
            .map_err(|e| MemoryError::unavailable("shard_start_failed", e.to_string()))?;
        self.ctx
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
        let info = self.ctx.directory.entry(kind, key);
        let cell = myself.get_cell();
        let ctx = self.ctx.clone();
        let id = match &child {
            Child::EmbedderPool => {
                let args = EmbedderPoolArgs {
                    factory: self.factory.clone(),
                    config: ctx.config.embedder.clone(),
                    info: info.clone(),
                };
                let (actor, _) = Actor::spawn_linked(None, EmbedderPool, args, cell).await?;
                let id = actor.get_id();
                ctx.embedder.set(Some(Mailbox::new(actor, info)));
                id
            }
            Child::Indexer => {
                let args = IndexerArgs {
                    ctx: ctx.clone(),
                    version_id: self.version_id,
                    info: info.clone(),
                    kick_pending: ctx.kick_pending.clone(),
                };
                let (actor, _) = Actor::spawn_linked(None, Indexer, args, cell).await?;
                let id = actor.get_id();
                ctx.indexer.set(Some(Mailbox::new(actor, info)));
                id
            }
            Child::Retrieval(i) => {
                let args = RetrievalArgs {
                    ctx: ctx.clone(),
                    info: info.clone(),
                };
                // On the readers' runtime: the actor's task is spawned where this runs.
                let (actor, _) = ctx
                    .reads
                    .handle()
                    .spawn(Actor::spawn_linked(None, Retrieval, args, cell))
                    .await??;
                let id = actor.get_id();
                let mut pool = ctx.retrieval.write().unwrap_or_else(|p| p.into_inner());
                let mailbox = Mailbox::new(actor, info);
                match pool.get_mut(*i) {
                    Some(slot) => *slot = mailbox,
                    None => pool.push(mailbox),
                }
                id
            }
            Child::Scheduler => {
                let args = SchedulerArgs {
                    ctx: ctx.clone(),
                    info: info.clone(),
                    supervisor: myself.clone(),
                };
                let (actor, _) = Actor::spawn_linked(None, Scheduler, args, cell).await?;
                actor.get_id()
            }
            Child::Shard(key) => {
                let args = ShardArgs {
                    key: key.clone(),
                    ctx: ctx.clone(),
                    info: info.clone(),
                    supervisor: myself.clone(),
                };
                let (actor, _) = Actor::spawn_linked(None, Shard, args, cell).await?;
                let id = actor.get_id();
                ctx.shards.insert(key.clone(), Mailbox::new(actor, info));
                metrics::gauge!("butler_memory_shards").set(ctx.shards.len() as f64);
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
        let info = self.ctx.directory.entry(kind, key);
        info.failed(error.clone());
        tracing::error!(child = ?child, %error, "actor failed");
        metrics::counter!("butler_memory_actor_failures_total", "kind" => format!("{kind:?}"))
            .increment(1);
        self.unpublish(&child, cell.get_id());
        if self.shutting_down {
            return;
        }
        let window = Duration::from_secs(self.ctx.config.shards.restart_window_secs);
        let history = self.failures.entry(child.clone()).or_default();
        let now = Instant::now();
        history.push_back(now);
        while history
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            history.pop_front();
        }
        if history.len() as u32 > self.ctx.config.shards.max_restarts {
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
            | Child::Retrieval(_)
            | Child::Scheduler => {
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
                if !self.ctx.shards.contains_key(key) {
                    let (kind, key) = child.kind_and_key();
                    self.ctx.directory.remove(kind, &key);
                }
                metrics::gauge!("butler_memory_shards").set(self.ctx.shards.len() as f64);
            }
            Child::EmbedderPool if self.embedder_paused => {
                let (kind, key) = child.kind_and_key();
                self.ctx.directory.remove(kind, &key);
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
                self.ctx
                    .shards
                    .remove_if(key, |_, m| m.actor.get_id() == id);
            }
            Child::EmbedderPool => self.ctx.embedder.set(None),
            Child::Indexer => self.ctx.indexer.set(None),
            // A dead reader's mailbox stays in the pool until replaced: sends to it fail
            // fast as `unavailable`, and routing prefers live ones.
            Child::Retrieval(_) => {}
            // Nobody sends to the scheduler; it only ticks.
            Child::Scheduler => {}
        }
    }

    /// Leaves a child down for the restart window, then allows it again.
    fn back_off(&mut self, myself: &ActorRef<SupervisorMsg>, child: Child) {
        let window = Duration::from_secs(self.ctx.config.shards.restart_window_secs);
        if let Child::Shard(key) = &child {
            self.cooling.insert(key.clone(), Instant::now() + window);
        }
        myself.send_after(window, move || SupervisorMsg::Retry(child));
    }
}
