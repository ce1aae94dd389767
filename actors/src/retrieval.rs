//! The retrieval actors: a pool of stateless readers. Each serves one read at a time; the
//! engine sends each read to the least busy one, so the pool size bounds concurrent reads
//! and keeps them from being starved by writes (which go through shards instead).
//!
//! Supervised by the root supervisor, which restarts any that fail. Reads never write;
//! the reference-count bumps they cause are sent to the owning shard by the engine. Query
//! embeddings are started by the engine before a read arrives here (batched, cached); a
//! reader waits for one only where a semantic list needs it.

pub mod context;
pub mod search;

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde::Serialize;
use uuid::Uuid;

use crate::actor_directory::ActorInfo;
use crate::context::EngineContext;
use crate::domain::caller::Caller;
use crate::domain::memory_type::MemoryType;
use crate::domain::record::{MemoryRecord, RecordWithLinks};
use crate::domain::search::SearchQuery;
use crate::error::{MemoryError, MemoryResult};
use crate::query_embedding::QueryEmbedding;
use crate::store::activity::ActivityFilter;
use crate::store::events::StoredEvent;
use crate::store::stats::{Backlog, EpisodeStats, KnowledgeStats, StatsFilter};
use context::{ContextOutcome, ContextRequest};
use search::SearchOutcome;

pub struct Retrieval;

pub struct RetrievalArgs {
    pub ctx: Arc<EngineContext>,
    pub info: Arc<ActorInfo>,
}

pub enum RetrievalMsg {
    Get {
        caller: Caller,
        butler: Option<String>,
        memory_type: MemoryType,
        id: Uuid,
        reply: RpcReplyPort<MemoryResult<RecordWithLinks>>,
    },
    Stats {
        filter: StatsFilter,
        reply: RpcReplyPort<MemoryResult<MemoryStats>>,
    },
    Search {
        query: Box<SearchQuery>,
        embedding: QueryEmbedding,
        reply: RpcReplyPort<MemoryResult<SearchOutcome>>,
    },
    Context {
        request: Box<ContextRequest>,
        embedding: QueryEmbedding,
        reply: RpcReplyPort<MemoryResult<ContextOutcome>>,
    },
    /// One page of the audit stream.
    Activity {
        filter: ActivityFilter,
        reply: RpcReplyPort<MemoryResult<Vec<StoredEvent>>>,
    },
    /// Fail on purpose, as a crash would (an error, or a panic): exercises supervision
    /// (tests and drills only).
    InjectFailure { panic: bool },
}

/// The answer of `memory_stats`.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryStats {
    pub tenant_id: String,
    /// The fact and rule scopes counted (`null`: all of the tenant's).
    pub scopes: Option<Vec<String>>,
    /// The butlers whose episodes were counted (`null`: all).
    pub butlers: Option<Vec<String>>,
    pub episodes: EpisodeStats,
    pub facts: KnowledgeStats,
    pub rules: KnowledgeStats,
    pub consolidation_backlog: Backlog,
    pub last_runs: std::collections::BTreeMap<String, Option<chrono::DateTime<chrono::Utc>>>,
    pub computed_at: chrono::DateTime<chrono::Utc>,
}

pub struct RetrievalState {
    ctx: Arc<EngineContext>,
    info: Arc<ActorInfo>,
}

impl Actor for Retrieval {
    type Msg = RetrievalMsg;
    type State = RetrievalState;
    type Arguments = RetrievalArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: RetrievalArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        args.info.started();
        Ok(RetrievalState {
            ctx: args.ctx,
            info: args.info,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.info.begin();
        match message {
            RetrievalMsg::Get {
                caller,
                butler,
                memory_type,
                id,
                reply,
            } => {
                let _ = reply.send(state.get(&caller, butler.as_deref(), memory_type, id).await);
            }
            RetrievalMsg::Activity { filter, reply } => {
                let _ = reply.send(state.ctx.reads.store().activity(&filter).await);
            }
            RetrievalMsg::Stats { filter, reply } => {
                let _ = reply.send(state.stats(filter).await);
            }
            RetrievalMsg::Search {
                query,
                embedding,
                reply,
            } => {
                let _ = reply.send(search::run(&state.ctx, &query, &embedding).await);
            }
            RetrievalMsg::Context {
                request,
                embedding,
                reply,
            } => {
                let _ = reply.send(context::run(&state.ctx, &request, &embedding).await);
            }
            RetrievalMsg::InjectFailure { panic } => {
                let message = "injected failure in a retrieval actor";
                if panic {
                    panic!("{message}");
                }
                return Err(message.into());
            }
        }
        Ok(())
    }
}

impl RetrievalState {
    async fn get(
        &self,
        caller: &Caller,
        butler: Option<&str>,
        memory_type: MemoryType,
        id: Uuid,
    ) -> MemoryResult<RecordWithLinks> {
        let store = self.ctx.reads.store();
        let now = self.ctx.clock.now();
        let record = store
            .record(&caller.tenant_id, memory_type, id, now)
            .await?;
        let visible = record.filter(|record| {
            let (scope, owner) = match record {
                MemoryRecord::Episode(e) => (None, Some(e.butler.as_str())),
                MemoryRecord::Fact(f) => (Some(f.scope.as_str()), None),
                MemoryRecord::Rule(r) => (Some(r.scope.as_str()), None),
            };
            caller.may_read(butler, scope, owner)
        });
        let Some(record) = visible else {
            // Out of reach looks exactly like absent; a probe across tenants is logged.
            if store
                .exists_elsewhere(&caller.tenant_id, memory_type, id)
                .await?
            {
                tracing::warn!(
                    tenant = %caller.tenant_id, key = %caller.key_name, %memory_type, %id,
                    "request for another tenant's record answered not_found"
                );
            }
            return Err(MemoryError::not_found(memory_type, id));
        };
        let links = store.links(&caller.tenant_id, memory_type, id).await?;
        Ok(RecordWithLinks { record, links })
    }

    async fn stats(&self, filter: StatsFilter) -> MemoryResult<MemoryStats> {
        let store = self.ctx.reads.store();
        let now = self.ctx.clock.now();
        let (episodes, facts, rules, last_runs) = futures::try_join!(
            store.episode_stats(&filter, now),
            store.fact_stats(&filter, now),
            store.rule_stats(&filter, now),
            store.last_runs(&filter),
        )?;
        Ok(MemoryStats {
            tenant_id: filter.tenant_id,
            scopes: filter.scopes,
            butlers: filter.butlers,
            consolidation_backlog: episodes.backlog.clone(),
            episodes,
            facts,
            rules,
            last_runs,
            computed_at: now,
        })
    }
}
