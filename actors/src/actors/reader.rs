//! The readers: a pool of stateless retrieval actors. Each serves one read at a time; the
//! engine sends each read to the least busy one ([`ReaderPool`]), so the pool size bounds
//! concurrent reads and keeps them from being starved by writes (which go through shards).
//!
//! Supervised by the root supervisor, which restarts any that fail. Readers run on a
//! runtime of their own with read connections opened there (`reader/runtime.rs`). Reads
//! never write; the reference-count bumps they cause are sent to the owning shard by the
//! engine. Query embeddings are started by the engine before a read arrives here (batched,
//! cached); a reader waits for one only where a semantic list needs it.

mod context_assembly;
mod runtime;
mod search;
mod second_stage;

pub use runtime::ReaderRuntime;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::Instrument;
use uuid::Uuid;

use super::directory::ActorInfo;
use super::embedder_pool::EmbedderHandle;
use super::mailbox::Mailbox;
use crate::domain::caller::Caller;
use crate::domain::context_block::{ContextOutcome, TokenCounter};
use crate::domain::event::StoredEvent;
use crate::domain::memory_type::MemoryType;
use crate::domain::record::{MemoryRecord, RecordWithLinks};
use crate::domain::search::{ContextRequest, SearchOutcome, SearchQuery};
use crate::domain::stats::MemoryStats;
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::read_path::{CorpusCache, QueryEmbedding, ReadTarget};
use crate::services::Services;
use crate::store::Store;
use crate::store::activity::ActivityFilter;
use crate::store::stats::StatsFilter;

pub struct Reader;

/// `$read` (an expression of `$s`, a `&ReaderState`) served from `$target`: on a replica,
/// and once more on the primary when the replica failed it (`ReplicaSet::retry_on_primary`).
macro_rules! served {
    ($state:expr, $target:expr, |$s:ident| $read:expr) => {
        async {
            let primary: &ReaderState = $state;
            match primary.on($target) {
                None => {
                    let $s = primary;
                    $read.await
                }
                Some((index, replica)) => {
                    let answer = {
                        let $s = &replica;
                        $read.await
                    };
                    match answer {
                        Err(e) if primary.services.replicas.retry_on_primary(index, &e) => {
                            let $s = primary;
                            $read.await
                        }
                        answer => answer,
                    }
                }
            }
        }
    };
}

/// What every reader shares besides the services: the read pool of the readers' runtime,
/// the keyword statistics and the tokenizer that counts context budgets.
#[derive(Clone)]
pub struct ReaderKit {
    /// Reads through connections opened on the readers' runtime.
    pub store: Store,
    pub corpus_cache: Arc<CorpusCache>,
    pub token_counter: Arc<dyn TokenCounter>,
    /// The embedder pool, for the second stage (`second_stage.rs`).
    pub embedder: EmbedderHandle,
}

pub struct ReaderArgs {
    pub services: Arc<Services>,
    pub kit: ReaderKit,
    /// The model's `embedding_versions` id: semantic search compares its vectors only.
    pub embedding_version: i16,
    pub info: Arc<ActorInfo>,
}

pub enum ReaderMsg {
    Get {
        caller: Caller,
        butler: Option<String>,
        memory_type: MemoryType,
        id: Uuid,
        /// The replica or the primary that serves it (`replica_set.rs`).
        target: ReadTarget,
        span: tracing::Span,
        reply: RpcReplyPort<MemoryResult<RecordWithLinks>>,
    },
    Stats {
        filter: StatsFilter,
        span: tracing::Span,
        reply: RpcReplyPort<MemoryResult<MemoryStats>>,
    },
    Search {
        query: Box<SearchQuery>,
        embedding: QueryEmbedding,
        /// The replica or the primary that serves it (`replica_set.rs`).
        target: ReadTarget,
        span: tracing::Span,
        reply: RpcReplyPort<MemoryResult<SearchOutcome>>,
    },
    Context {
        request: Box<ContextRequest>,
        embedding: QueryEmbedding,
        /// The replica or the primary that serves it (`replica_set.rs`).
        target: ReadTarget,
        span: tracing::Span,
        reply: RpcReplyPort<MemoryResult<ContextOutcome>>,
    },
    /// One page of the audit stream.
    Activity {
        filter: ActivityFilter,
        span: tracing::Span,
        reply: RpcReplyPort<MemoryResult<Vec<StoredEvent>>>,
    },
    /// Fail on purpose, as a crash would (an error, or a panic): exercises supervision.
    #[cfg(feature = "testkit")]
    InjectFailure { panic: bool },
}

pub struct ReaderState {
    services: Arc<Services>,
    kit: ReaderKit,
    embedding_version: i16,
    info: Arc<ActorInfo>,
}

impl Actor for Reader {
    type Msg = ReaderMsg;
    type State = ReaderState;
    type Arguments = ReaderArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: ReaderArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        args.info.started();
        Ok(ReaderState {
            services: args.services,
            kit: args.kit,
            embedding_version: args.embedding_version,
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
            ReaderMsg::Get {
                caller,
                butler,
                memory_type,
                id,
                target,
                span,
                reply,
            } => {
                let found = served!(state, target, |s| s.get(
                    &caller,
                    butler.as_deref(),
                    memory_type,
                    id
                ));
                let _ = reply.send(found.instrument(read_span(&span, "get")).await);
            }
            ReaderMsg::Activity {
                filter,
                span,
                reply,
            } => {
                let page = state.kit.store.activity(&filter);
                let _ = reply.send(page.instrument(read_span(&span, "activity")).await);
            }
            ReaderMsg::Stats {
                filter,
                span,
                reply,
            } => {
                let stats = state.stats(filter);
                let _ = reply.send(stats.instrument(read_span(&span, "stats")).await);
            }
            ReaderMsg::Search {
                query,
                embedding,
                target,
                span,
                reply,
            } => {
                let found = served!(state, target, |s| search::run(s, &query, &embedding));
                let _ = reply.send(found.instrument(read_span(&span, "search")).await);
            }
            ReaderMsg::Context {
                request,
                embedding,
                target,
                span,
                reply,
            } => {
                let block = served!(state, target, |s| context_assembly::run(
                    s, &request, &embedding
                ));
                let _ = reply.send(block.instrument(read_span(&span, "context")).await);
            }
            #[cfg(feature = "testkit")]
            ReaderMsg::InjectFailure { panic } => {
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

/// The readers the engine sends reads to, each slot replaced when its reader restarts.
#[derive(Debug, Default)]
pub struct ReaderPool {
    // A dead reader's mailbox stays until it is replaced: sends to it fail fast as
    // `unavailable`, and routing prefers live ones.
    readers: RwLock<Vec<Mailbox<ReaderMsg>>>,
}

impl ReaderPool {
    /// Publishes reader `index` (a new one, or the restart of one).
    pub fn set(&self, index: usize, reader: Mailbox<ReaderMsg>) {
        let mut readers = self.readers.write().unwrap_or_else(|p| p.into_inner());
        match readers.get_mut(index) {
            Some(slot) => *slot = reader,
            None => readers.push(reader),
        }
    }

    /// Reader `index`, running or not.
    #[cfg(feature = "testkit")]
    pub fn get(&self, index: usize) -> Option<Mailbox<ReaderMsg>> {
        self.readers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(index)
            .cloned()
    }

    /// Sends a read to the least busy running reader and waits at most `timeout`.
    pub async fn read<R, F>(&self, build: F, timeout: Duration) -> MemoryResult<R>
    where
        F: FnOnce(RpcReplyPort<MemoryResult<R>>) -> ReaderMsg,
        R: Send + 'static,
    {
        let reader = {
            let readers = self.readers.read().unwrap_or_else(|p| p.into_inner());
            readers
                .iter()
                .filter(|m| m.actor.get_status() == ractor::ActorStatus::Running)
                .min_by_key(|m| m.info.queue_depth())
                .cloned()
        }
        .ok_or_else(|| MemoryError::new(ErrorCode::NoReader, "no retrieval actor is running"))?;
        reader.ask(build, timeout, "the retrieval actor").await?
    }
}

impl ReaderState {
    /// This reader reading from replica `target` (none for the primary: itself).
    fn on(&self, target: ReadTarget) -> Option<(usize, ReaderState)> {
        let ReadTarget::Replica(index) = target else {
            return None;
        };
        let kit = ReaderKit {
            store: self.kit.store.on_replica(index),
            ..self.kit.clone()
        };
        Some((
            index,
            ReaderState {
                services: self.services.clone(),
                kit,
                embedding_version: self.embedding_version,
                info: self.info.clone(),
            },
        ))
    }

    async fn get(
        &self,
        caller: &Caller,
        butler: Option<&str>,
        memory_type: MemoryType,
        id: Uuid,
    ) -> MemoryResult<RecordWithLinks> {
        let store = &self.kit.store;
        let now = self.services.clock.now();
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
        let Some(mut record) = visible else {
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
        store.open_record(&mut record).await?;
        let links = store.links(&caller.tenant_id, memory_type, id).await?;
        Ok(RecordWithLinks { record, links })
    }

    /// The model version a semantic search must name: the running one while another
    /// model's vectors may be stored, none (no predicate) once they are all re-embedded.
    fn compared_version(&self) -> Option<i16> {
        self.services
            .other_model_vectors
            .load(std::sync::atomic::Ordering::Acquire)
            .then_some(self.embedding_version)
    }

    async fn stats(&self, filter: StatsFilter) -> MemoryResult<MemoryStats> {
        let store = &self.kit.store;
        let now = self.services.clock.now();
        let bands_max_age =
            Duration::from_secs(self.services.config.retrieval.stats_bands_max_age_secs);
        let (projected, last_runs) = futures::try_join!(
            store.projected_stats(&filter, now, self.embedding_version, bands_max_age),
            store.last_runs(&filter),
        )?;
        Ok(MemoryStats {
            tenant_id: filter.tenant_id,
            scopes: filter.scopes,
            butlers: filter.butlers,
            consolidation_backlog: projected.episodes.backlog.clone(),
            consolidation_extractor: self.services.extractor.status(),
            episodes: projected.episodes,
            facts: projected.facts,
            rules: projected.rules,
            last_runs,
            computed_at: now,
            confidence_bands_counted_at: projected.bands_counted_at,
        })
    }
}

/// A read's span in the retrieval actor, in the trace of the call that asked (`caller`).
fn read_span(caller: &tracing::Span, read: &'static str) -> tracing::Span {
    tracing::info_span!(
        target: crate::TRACE_SPANS,
        parent: caller,
        "retrieval",
        otel.name = %format!("retrieval.{read}"),
    )
}
