//! What every actor of the tree shares: the store, the clock, the configuration, the actor
//! directory, and the current mailboxes of the singleton actors (which change when the
//! supervisor restarts one).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use dashmap::DashMap;
use ractor::Message;

use crate::actor_directory::ActorDirectory;
use crate::admission::Admission;
use crate::clock::SharedClock;
use crate::config::EngineConfig;
use crate::corpus_cache::CorpusCache;
use crate::domain::context::TokenCounter;
use crate::domain::shard_key::ShardKey;
use crate::embedder_pool::EmbedderMsg;
use crate::episode_commits::EpisodeCommits;
use crate::error::{MemoryError, MemoryResult};
use crate::extractor::Extractor;
use crate::generations::Generations;
use crate::indexer::IndexerMsg;
use crate::mailbox::Mailbox;
use crate::query_cache::QueryCache;
use crate::read_side::ReadSide;
use crate::result_cache::ResultCache;
use crate::retrieval::RetrievalMsg;
use crate::shard::ShardMsg;
use crate::store::Store;

/// The current mailbox of a supervised singleton, replaced when it restarts.
pub struct Slot<M: Message> {
    // A lock rather than a channel: reads vastly outnumber the rare restarts.
    current: RwLock<Option<Mailbox<M>>>,
    name: &'static str,
}

impl<M: Message> std::fmt::Debug for Slot<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("name", &self.name)
            .field("up", &self.is_up())
            .finish()
    }
}

impl<M: Message> Slot<M> {
    pub fn new(name: &'static str) -> Self {
        Slot {
            current: RwLock::new(None),
            name,
        }
    }

    pub fn get(&self) -> MemoryResult<Mailbox<M>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| {
                MemoryError::unavailable("actor_down", format!("the {} is not running", self.name))
            })
    }

    pub fn set(&self, mailbox: Option<Mailbox<M>>) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = mailbox;
    }

    pub fn is_up(&self) -> bool {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}

/// Shared state of the actor tree.
pub struct EngineContext {
    pub store: Store,
    pub clock: SharedClock,
    pub config: EngineConfig,
    pub directory: ActorDirectory,
    /// Live shards. Written only by the supervisor, read by everyone.
    pub shards: DashMap<ShardKey, Mailbox<ShardMsg>>,
    pub embedder: Slot<EmbedderMsg>,
    pub indexer: Slot<IndexerMsg>,
    pub retrieval: RwLock<Vec<Mailbox<RetrievalMsg>>>,
    /// Whether a `Kick` is already waiting in the indexer's mailbox.
    pub kick_pending: Arc<AtomicBool>,
    pub query_cache: QueryCache,
    /// Moves forward with every committed write of a tenant (and every embedding stored).
    pub generations: Generations,
    pub corpus_cache: CorpusCache,
    pub result_cache: ResultCache,
    /// Counts the context budget.
    pub token_counter: Arc<dyn TokenCounter>,
    /// The write budget.
    pub admission: Admission,
    /// Group commit across shards: the statements that write episodes.
    pub episode_commits: EpisodeCommits,
    /// The retrieval actors' runtime and the store they read through.
    pub reads: ReadSide,
    /// Consolidation's extractor.
    pub extractor: Extractor,
}

impl EngineContext {
    pub fn new(
        store: Store,
        reads: ReadSide,
        clock: SharedClock,
        config: EngineConfig,
        token_counter: Arc<dyn TokenCounter>,
    ) -> Self {
        EngineContext {
            reads,
            query_cache: QueryCache::new(config.retrieval.query_cache_size),
            generations: Generations::default(),
            corpus_cache: CorpusCache::new(i64::from(config.retrieval.keyword_common_df)),
            result_cache: ResultCache::new(
                config.retrieval.result_cache_size,
                config.retrieval.result_cache_ttl_ms,
            ),
            token_counter,
            admission: Admission::new(&config.writes),
            episode_commits: EpisodeCommits::on_store(
                config.writes.commit_concurrency as usize,
                config.writes.parallel_commit_min_episodes as usize,
                config.writes.group_commit_max as usize,
                store.clone(),
            ),
            // The configuration was checked at load; a bad extractor setting cannot get here.
            extractor: Extractor::from_config(&config.consolidation)
                .unwrap_or(Extractor::Heuristic),
            store,
            clock,
            config,
            directory: ActorDirectory::default(),
            shards: DashMap::new(),
            embedder: Slot::new("embedder pool"),
            indexer: Slot::new("indexer"),
            retrieval: RwLock::new(Vec::new()),
            kick_pending: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Tells the indexer that rows without an embedding were committed.
    pub fn kick_indexer(&self) {
        if self.kick_pending.swap(true, Ordering::AcqRel) {
            return;
        }
        match self.indexer.get() {
            Ok(indexer) if indexer.tell(IndexerMsg::Kick) => {}
            // No indexer to tell: its poll will find the rows once it is back.
            _ => self.kick_pending.store(false, Ordering::Release),
        }
    }
}
