//! The shard actor: the only writer for one `(tenant_id, butler)`.
//!
//! Supervised by the root supervisor, which starts it on first use, restarts it with a
//! bounded policy when it fails, and stops it (draining its mailbox) after it has been idle
//! for `shards.idle_stop_secs`. It performs its shard's writes one at a time, in arrival
//! order, and answers each only after the transaction committed. Reads do not pass through
//! it, except as reference-count bumps (`Touch`), which it batches into one UPDATE per
//! flush. `Flush` is a barrier: it answers after everything sent before it is written.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use uuid::Uuid;

use crate::actor_directory::ActorInfo;
use crate::context::EngineContext;
use crate::domain::episode::{Episode, NewEpisode};
use crate::domain::fact::{NewFact, StoredFact};
use crate::domain::memory_type::MemoryType;
use crate::domain::request_context::Lineage;
use crate::domain::rule::{NewRule, Rule};
use crate::domain::shard_key::ShardKey;
use crate::error::MemoryResult;
use crate::store::{episodes, facts, references, rules};
use crate::supervisor::SupervisorMsg;

pub struct Shard;

pub struct ShardArgs {
    pub key: ShardKey,
    pub ctx: Arc<EngineContext>,
    pub info: Arc<ActorInfo>,
    pub supervisor: ActorRef<SupervisorMsg>,
}

/// Who asked for a write, for the audit stream.
#[derive(Debug, Clone)]
pub struct Author {
    pub actor: String,
    pub lineage: Lineage,
}

pub enum ShardMsg {
    StoreEpisode {
        episode: Box<NewEpisode>,
        author: Author,
        reply: RpcReplyPort<MemoryResult<Episode>>,
    },
    StoreFact {
        fact: Box<NewFact>,
        author: Author,
        reply: RpcReplyPort<MemoryResult<StoredFact>>,
    },
    StoreRule {
        rule: Box<NewRule>,
        author: Author,
        reply: RpcReplyPort<MemoryResult<Rule>>,
    },
    /// These memories were read: bump their reference counts (batched).
    Touch {
        memory_type: MemoryType,
        ids: Vec<Uuid>,
    },
    /// Answer once every message sent before this one is done and written.
    Flush {
        reply: RpcReplyPort<MemoryResult<()>>,
    },
    /// Periodic: write pending touches; stop if idle.
    Tick,
    /// Fail on purpose, as a crash would (an error, or a panic): exercises supervision
    /// (tests and drills only).
    InjectFailure { panic: bool },
}

pub struct ShardState {
    key: ShardKey,
    ctx: Arc<EngineContext>,
    info: Arc<ActorInfo>,
    supervisor: ActorRef<SupervisorMsg>,
    last_work: Instant,
    touches: HashMap<MemoryType, HashMap<Uuid, i32>>,
    last_touch_flush: Instant,
}

impl Actor for Shard {
    type Msg = ShardMsg;
    type State = ShardState;
    type Arguments = ShardArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ShardArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let shards = &args.ctx.config.shards;
        let tick = Duration::from_millis(shards.touch_flush_ms)
            .min(Duration::from_secs(shards.idle_stop_secs) / 4)
            .max(Duration::from_millis(10));
        myself.send_interval(tick, || ShardMsg::Tick);
        args.info.started();
        Ok(ShardState {
            key: args.key,
            ctx: args.ctx,
            info: args.info,
            supervisor: args.supervisor,
            last_work: Instant::now(),
            touches: HashMap::new(),
            last_touch_flush: Instant::now(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if !matches!(message, ShardMsg::Tick) {
            state.info.begin();
            state.last_work = Instant::now();
        }
        match message {
            ShardMsg::StoreEpisode {
                episode,
                author,
                reply,
            } => {
                let result = state.store_episode(&episode, &author).await;
                let _ = reply.send(result);
            }
            ShardMsg::StoreFact {
                fact,
                author,
                reply,
            } => {
                let result = state.store_fact(&fact, &author).await;
                let _ = reply.send(result);
            }
            ShardMsg::StoreRule {
                rule,
                author,
                reply,
            } => {
                let result = state.store_rule(&rule, &author).await;
                let _ = reply.send(result);
            }
            ShardMsg::Touch { memory_type, ids } => {
                let counts = state.touches.entry(memory_type).or_default();
                for id in ids {
                    *counts.entry(id).or_default() += 1;
                }
            }
            ShardMsg::Flush { reply } => {
                let _ = reply.send(state.flush_touches().await);
            }
            ShardMsg::Tick => {
                let flush_every = Duration::from_millis(state.ctx.config.shards.touch_flush_ms);
                if state.last_touch_flush.elapsed() >= flush_every
                    && let Err(e) = state.flush_touches().await
                {
                    tracing::warn!(shard = %state.key, error = %e, "reference counts not written; will retry");
                }
                let idle_for = Duration::from_secs(state.ctx.config.shards.idle_stop_secs);
                if state.last_work.elapsed() >= idle_for && state.touches.is_empty() {
                    // The supervisor unregisters us before draining, so no new work arrives.
                    let _ = state.supervisor.cast(SupervisorMsg::ShardIdle {
                        key: state.key.clone(),
                        actor: myself.get_id(),
                    });
                    // Not asking again on every tick while the supervisor acts.
                    state.last_work = Instant::now();
                }
            }
            ShardMsg::InjectFailure { panic } => {
                let message = format!("injected failure in shard {}", state.key);
                if panic {
                    panic!("{message}");
                }
                return Err(message.into());
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Err(e) = state.flush_touches().await {
            tracing::warn!(shard = %state.key, error = %e, "reference counts lost at stop");
        }
        Ok(())
    }
}

impl ShardState {
    async fn store_episode(
        &mut self,
        episode: &NewEpisode,
        author: &Author,
    ) -> MemoryResult<Episode> {
        let mut tx = self.ctx.store.begin().await?;
        let stored =
            episodes::insert(&mut tx, episode, None, &author.actor, &author.lineage).await?;
        tx.commit().await?;
        self.ctx.generations.bump(&self.key.tenant_id);
        self.ctx.kick_indexer();
        Ok(stored)
    }

    async fn store_fact(&mut self, fact: &NewFact, author: &Author) -> MemoryResult<StoredFact> {
        let mut tx = self.ctx.store.begin().await?;
        let stored =
            facts::insert_superseding(&mut tx, fact, None, &author.actor, &author.lineage).await?;
        tx.commit().await?;
        self.ctx.generations.bump(&self.key.tenant_id);
        self.ctx.kick_indexer();
        Ok(stored)
    }

    async fn store_rule(&mut self, rule: &NewRule, author: &Author) -> MemoryResult<Rule> {
        let mut tx = self.ctx.store.begin().await?;
        let stored = rules::insert(&mut tx, rule, None, &author.actor, &author.lineage).await?;
        tx.commit().await?;
        self.ctx.generations.bump(&self.key.tenant_id);
        self.ctx.kick_indexer();
        Ok(stored)
    }

    /// Writes the batched reference-count bumps, one UPDATE per memory type.
    async fn flush_touches(&mut self) -> MemoryResult<()> {
        self.last_touch_flush = Instant::now();
        if self.touches.is_empty() {
            return Ok(());
        }
        let now = self.ctx.clock.now();
        let mut conn = self.ctx.store.pool().acquire().await?;
        for (memory_type, counts) in std::mem::take(&mut self.touches) {
            references::bump(&mut conn, memory_type, &self.key.tenant_id, counts, now).await?;
        }
        Ok(())
    }
}
