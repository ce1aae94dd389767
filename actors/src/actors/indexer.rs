//! The indexer actor: embeds rows that were committed without an embedding.
//!
//! Writes are acknowledged once committed, before they are embedded (the embedder manages a
//! few hundred texts per second; the write path must not wait for it). Until the indexer
//! gets to a row, keyword search finds it. Supervised by the root supervisor; one indexer
//! per engine, and with several engines on one database each claims the rows it embeds
//! (`store/embedding_claims.rs`), so no row is embedded twice. It hears about new rows from
//! the commit notices that shards publish (a `Kick`, at most one waiting in its mailbox
//! however many commits a burst makes), and also polls, so rows left by a crash or an
//! embedder outage are picked up again.
//! `Flush` answers once the backlog is empty: tests and shutdown use it instead of sleeping.
//!
//! After a model change (`embedder.model_name`/`model_sha256`), rows embedded by the old
//! model are re-embedded the same way, when no row waits for a first embedding: a walk
//! through each table in id order, in bounded windows, yielding to bursts like the rest.
//! Until a row is re-embedded, semantic search leaves it out (it compares vectors of the
//! running model only) and keyword search finds it. Orchestrator memory nodes another model
//! embedded simply lose that vector at the first look and are embedded again as new ones.
//! With the second stage on, rows embedded while it was off get their token sketches by a
//! walk of the same kind, begun at start (`indexer/walks.rs`); with query widening on, rows
//! embedded before it was get their words learnt by a third. The walks keep to
//! `indexer.walk_rows_per_sec` when it is set.
//!
//! Background work yields to foreground work: while episodes are being admitted faster than
//! `indexer.yield_above_writes_per_sec`, the indexer leaves the CPU to the writes and
//! catches up when the burst is over — unless its oldest row has waited longer than
//! `indexer.max_defer_secs`, so that semantic search is never stale without bound.

mod walks;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::Instrument;

use super::directory::ActorInfo;
use super::embedder_pool::EmbedderHandle;
use crate::domain::memory_type::MemoryType;
use crate::embedder::Sketched;
use crate::error::MemoryResult;
use crate::services::{CommitNotices, Services};
use crate::store::embedding_backlog::{Embedded, Replacing, RowKey, Unembedded};
use walks::{TableWalk, VocabularyWalk, Walk, WalkStep};

/// How long one embedding batch may take before the indexer gives up on it for now.
const EMBED_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a flush looks again at rows another instance is embedding.
const CLAIMED_ELSEWHERE_POLL: Duration = Duration::from_millis(20);

/// How long the write rate is watched when the last look at it is stale.
const FRESH_WINDOW: Duration = Duration::from_millis(100);

pub struct Indexer;

pub struct IndexerArgs {
    pub services: Arc<Services>,
    /// What it embeds with.
    pub embedder: EmbedderHandle,
    /// Where commits of rows without an embedding are announced.
    pub notices: CommitNotices,
    /// The `embedding_versions` row of the model, recorded with every embedding.
    pub version_id: i16,
    pub info: Arc<ActorInfo>,
}

pub enum IndexerMsg {
    /// New rows without an embedding were committed.
    Kick,
    /// Periodic look for work.
    Tick,
    /// Answer once every row has an embedding (and the walks begun at start are done).
    Flush {
        reply: RpcReplyPort<MemoryResult<()>>,
    },
}

pub struct IndexerState {
    services: Arc<Services>,
    embedder: EmbedderHandle,
    version_id: i16,
    info: Arc<ActorInfo>,
    /// Whether a `Kick` waits in the mailbox: set by the subscription when it sends one,
    /// cleared when the kick is taken, so that a burst of commits queues one kick, not
    /// thousands.
    kick_pending: Arc<AtomicBool>,
    /// Writes so far (`writes_so_far`) and when that was read, for the write rate; none
    /// before the first measure.
    writes_seen: Option<(Instant, u64)>,
    /// Whether writes were hot when last measured.
    hot: bool,
    /// Re-embedding rows another model embedded.
    walk: Walk,
    /// Storing the sketches of rows embedded while the second stage was off: begun at start
    /// while it is on, `None` once done or when it is off.
    sketch_walk: Option<TableWalk>,
    /// Learning the words of rows embedded without them.
    vocabulary_walk: VocabularyWalk,
    /// When the walks may take their next step (`indexer.walk_rows_per_sec`).
    walk_not_before: Option<Instant>,
    /// The instant a tick is set for, to step a walk kept to its pace.
    walk_wake: Option<Instant>,
}

impl Actor for Indexer {
    type Msg = IndexerMsg;
    type State = IndexerState;
    type Arguments = IndexerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: IndexerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let period = Duration::from_millis(args.services.config.indexer.poll_interval_ms.get());
        myself.send_interval(period, || IndexerMsg::Tick);
        let kick_pending = Arc::new(AtomicBool::new(false));
        let pending = kick_pending.clone();
        args.notices.subscribe(myself.clone(), move |_| {
            (!pending.swap(true, Ordering::AcqRel)).then_some(IndexerMsg::Kick)
        });
        // Rows left by an earlier run are work to do now.
        myself.cast(IndexerMsg::Tick)?;
        args.info.started();
        let sketch_walk =
            (args.services.config.retrieval.rerank.enabled).then(TableWalk::every_table);
        Ok(IndexerState {
            services: args.services,
            embedder: args.embedder,
            version_id: args.version_id,
            info: args.info,
            kick_pending,
            writes_seen: None,
            hot: false,
            walk: Walk::Unknown,
            sketch_walk,
            vocabulary_walk: VocabularyWalk::Unknown,
            walk_not_before: None,
            walk_wake: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match &message {
            IndexerMsg::Tick => state.info.handled(),
            IndexerMsg::Kick | IndexerMsg::Flush { .. } => state.info.begin(),
        }
        match message {
            IndexerMsg::Kick => {
                state.kick_pending.store(false, Ordering::Release);
                if let Err(e) = state.drain(true).await {
                    tracing::warn!(error = %e, "indexing deferred; will retry");
                }
                state.wake_for_walk(&myself);
            }
            IndexerMsg::Tick => {
                if let Err(e) = state.drain(true).await {
                    tracing::warn!(error = %e, "indexing deferred; will retry");
                }
                state.wake_for_walk(&myself);
            }
            IndexerMsg::Flush { reply } => {
                let _ = reply.send(state.drain(false).await.map(|_| ()));
            }
        }
        Ok(())
    }
}

impl IndexerState {
    /// Embeds batches until no row is left without an embedding of the running model, or
    /// (when `yielding`) until a write burst asks for the CPU or a walk waits for its pace.
    /// Returns how many it embedded.
    async fn drain(&mut self, yielding: bool) -> MemoryResult<u64> {
        // While the database is known down, a look for rows would only wait out a
        // connection timeout (and hold a stop behind it).
        self.services.database.check()?;
        let mut total = 0;
        loop {
            if yielding && self.writes_are_hot().await? {
                metrics::counter!("butler_memory_indexer_yields_total").increment(1);
                return Ok(total);
            }
            let mut round = 0;
            for memory_type in [MemoryType::Fact, MemoryType::Rule, MemoryType::Episode] {
                round += self.embed_batch(memory_type).await?;
            }
            round += self.embed_orchestrator_batch().await?;
            total += round;
            // New rows first: re-embedding old ones, then sketching them, waits until none
            // is unembedded.
            if round > 0 {
                continue;
            }
            match self.walk_step().await? {
                WalkStep::Stepped => {}
                // Kept to its pace: a flush waits it out (new rows are embedded meanwhile,
                // when it looks again); otherwise `handle` sets a tick for then.
                WalkStep::Paced(at) if !yielding => {
                    tokio::time::sleep_until(at.into()).await;
                }
                WalkStep::Paced(_) => return Ok(total),
                WalkStep::Done => {
                    // Rows another instance has claimed are still waiting: a flush waits
                    // for them too (that instance is embedding them, or will let them go).
                    if !yielding && self.services.store.oldest_unembedded().await?.is_some() {
                        tokio::time::sleep(CLAIMED_ELSEWHERE_POLL).await;
                        continue;
                    }
                    return Ok(total);
                }
            }
        }
    }

    /// A tick for when a walk kept to its pace may step again, unless one is set for then
    /// already: the periodic tick may be much later.
    fn wake_for_walk(&mut self, myself: &ActorRef<IndexerMsg>) {
        let Some(at) = self.walk_not_before else {
            return;
        };
        let now = Instant::now();
        if at <= now || self.walk_wake == Some(at) {
            return;
        }
        self.walk_wake = Some(at);
        myself.send_after(at - now, || IndexerMsg::Tick);
    }

    /// Whether episodes are being admitted faster than the yield threshold and the backlog
    /// may still wait.
    async fn writes_are_hot(&mut self) -> MemoryResult<bool> {
        let config = &self.services.config.indexer;
        if config.yield_above_writes_per_sec <= 0.0 {
            return Ok(false);
        }
        // Re-measured at most four times a second; in between, the last answer stands.
        let (since, mut seen) = self.writes_seen.unwrap_or((Instant::now(), 0));
        let mut elapsed = match self.writes_seen {
            Some(_) => since.elapsed().as_secs_f64(),
            // Nothing measured yet: a fresh window (below).
            None => f64::INFINITY,
        };
        if elapsed < 0.25 {
            return Ok(self.hot);
        }
        if elapsed > 1.0 {
            // A window that spans a quiet spell says nothing of now: the first write of a
            // burst kicks the indexer, and averaged over the quiet seconds before it, the
            // burst looked cold. The indexer then took the embedder for whole batches just
            // as the burst's first reads needed it for their queries (they waited out the
            // query-embedding timeout, 250 ms). Measure a short fresh window instead.
            seen = self.writes_so_far().await?;
            let started = Instant::now();
            tokio::time::sleep(FRESH_WINDOW).await;
            elapsed = started.elapsed().as_secs_f64();
        }
        let now = self.writes_so_far().await?;
        self.writes_seen = Some((Instant::now(), now));
        let rate = now.saturating_sub(seen) as f64 / elapsed;
        self.hot = if rate <= config.yield_above_writes_per_sec {
            false
        } else {
            let oldest = self.services.store.oldest_unembedded().await?;
            let waited = oldest
                .map(|t| (self.services.clock.now() - t).num_milliseconds() as f64 / 1000.0)
                .unwrap_or(0.0);
            waited < config.max_defer_secs
        };
        Ok(self.hot)
    }

    /// Writes so far, the count the yield measures its rate on: the episodes this
    /// instance admitted, or, when other instances share the database, the events every
    /// instance appended. An instance must yield to the fleet's burst, not to its own share
    /// of it: with each indexer judging its share, two instances embedded during a burst
    /// what one instance defers (docs/benchmarks.md).
    async fn writes_so_far(&self) -> MemoryResult<u64> {
        if self.services.config.shared_database {
            self.services.store.events_appended().await
        } else {
            Ok(self.services.admission.admitted_total())
        }
    }

    async fn embed_batch(&mut self, memory_type: MemoryType) -> MemoryResult<u64> {
        let store = &self.services.store;
        let (rows, claim) = store
            .unembedded(
                memory_type,
                i64::from(self.services.config.indexer.batch_size.get()),
                self.services.config.episodes.conversation_gap_secs,
            )
            .await?;
        if rows.is_empty() {
            claim.release().await;
            return Ok(0);
        }
        let count = rows.len() as u64;
        let span = tracing::info_span!(
            target: crate::TRACE_SPANS,
            "indexer.embed",
            memory.type = memory_type.as_str(),
            rows = count,
        );
        let indexed = self
            .embed_rows(memory_type, rows, Replacing::Nothing)
            .instrument(span)
            .await;
        claim.release().await;
        let indexed = indexed?;
        self.info.embedded(count);
        metrics::counter!("butler_memory_indexed_total", "type" => memory_type.as_str())
            .increment(indexed);
        // A row whose embedding was set by someone else still counts as done.
        Ok(count)
    }

    /// Embeds a batch of orchestrator memory nodes stored without a vector (issue 23): their
    /// content alone, no session context. Returns how many it embedded.
    async fn embed_orchestrator_batch(&mut self) -> MemoryResult<u64> {
        let store = &self.services.store;
        let limit = i64::from(self.services.config.indexer.batch_size.get());
        let (rows, claim) = store.orchestrator_unembedded(limit).await?;
        if rows.is_empty() {
            claim.release().await;
            return Ok(0);
        }
        let count = rows.len() as u64;
        let (keys, texts): (Vec<RowKey>, Vec<String>) = rows.into_iter().unzip();
        // On failure the nodes stay without a vector, found by full text, and are tried again.
        let stored = match self.embed_texts(&texts).await {
            Ok(vectors) => {
                let vectors = vectors.into_iter().map(pgvector::Vector::from).collect();
                store
                    .set_orchestrator_embeddings(self.version_id, &keys, vectors)
                    .await
            }
            Err(e) => Err(e),
        };
        claim.release().await;
        stored?;
        self.info.embedded(count);
        metrics::counter!("butler_memory_indexed_total", "type" => "orchestrator_memory")
            .increment(count);
        Ok(count)
    }

    /// The embeddings of `texts`, in order.
    async fn embed_texts(&self, texts: &[String]) -> MemoryResult<Vec<Vec<f32>>> {
        self.in_batches(texts, |part| {
            self.embedder.embed_background(part, EMBED_TIMEOUT)
        })
        .await
    }

    /// The embeddings of `texts` with their token sketches, in order.
    async fn embed_sketched(&self, texts: &[String]) -> MemoryResult<Vec<Sketched>> {
        self.in_batches(texts, |part| {
            self.embedder.embed_background_sketched(part, EMBED_TIMEOUT)
        })
        .await
    }

    /// `ask` of `texts`, in requests of at most one background batch each
    /// (`embedder.background_batch`), so that a query waiting for the model waits for one
    /// such batch at most, never for this whole round; the answers in order.
    async fn in_batches<T, F>(
        &self,
        texts: &[String],
        ask: impl Fn(Vec<String>) -> F,
    ) -> MemoryResult<Vec<T>>
    where
        F: std::future::Future<Output = MemoryResult<Vec<T>>>,
    {
        let chunk = self.services.config.embedder.background_batch.get();
        let requests = texts.chunks(chunk).map(|part| ask(part.to_vec()));
        let mut answers = Vec::with_capacity(texts.len());
        for answer in futures::future::join_all(requests).await {
            answers.extend(answer?);
        }
        Ok(answers)
    }

    /// Each text's embedding, and its token sketch while the second stage is on. Sketches
    /// only serve the second stage: without it, neither their arithmetic nor their bytes are
    /// spent (a row embedded meanwhile is read by the model once it is turned on).
    async fn embed_own(&self, texts: &[String]) -> MemoryResult<OwnEmbedded> {
        if self.services.config.retrieval.rerank.enabled {
            let sketched = self.embed_sketched(texts).await?;
            Ok(sketched.into_iter().map(|(v, s)| (v, Some(s))).unzip())
        } else {
            let vectors = self.embed_texts(texts).await?;
            let none = vec![None; vectors.len()];
            Ok((vectors, none))
        }
    }

    /// Embeds `rows` and stores their vectors, and their own texts' token sketches while the
    /// second stage is on, where `replacing` still holds, with the words they bring to their
    /// tenants' vocabularies while widening is on; returns how many rows were updated.
    async fn embed_rows(
        &mut self,
        memory_type: MemoryType,
        rows: Vec<Unembedded>,
        replacing: Replacing,
    ) -> MemoryResult<u64> {
        let store = &self.services.store;
        let weight = self.services.config.indexer.session_context_weight;
        let keys: Vec<RowKey> = rows.iter().map(|r| (r.tenant_id.clone(), r.id)).collect();
        // Own texts (with their sketches: the second stage reads a row's own words), and the
        // in-context texts of the rows that have a context.
        let own: Vec<String> = rows.iter().map(|r| r.text.clone()).collect();
        let mut texts = Vec::new();
        let contextual: Vec<usize> = if weight > 0.0 {
            rows.iter()
                .enumerate()
                .filter_map(|(i, r)| r.context.as_ref().map(|c| (i, c)))
                .map(|(i, context)| {
                    texts.push(format!("{context} {}", rows[i].text));
                    i
                })
                .collect()
        } else {
            Vec::new()
        };
        // The words the rows bring to their tenants' vocabularies, each embedded alone.
        let words = if self.services.config.retrieval.widening.enabled {
            store.new_words(self.version_id, &keys, &own).await?
        } else {
            Vec::new()
        };
        let spelled: Vec<String> = words.iter().map(|w| w.word.clone()).collect();
        let ((mut vectors, sketches), in_context, word_vectors) = futures::try_join!(
            self.embed_own(&own),
            self.embed_texts(&texts),
            self.embed_texts(&spelled)
        )?;
        for (i, context_vector) in contextual.into_iter().zip(in_context) {
            vectors[i] = blend(&vectors[i], &context_vector, weight);
        }
        let embedded = Embedded {
            vectors: vectors.into_iter().map(pgvector::Vector::from).collect(),
            sketches,
            words,
            word_vectors: word_vectors
                .into_iter()
                .map(pgvector::Vector::from)
                .collect(),
        };
        let mut tenants = store
            .set_embeddings(memory_type, self.version_id, replacing, &keys, embedded)
            .await?;
        let updated = tenants.len() as u64;
        // Newly embedded rows change what semantic search finds.
        tenants.sort();
        tenants.dedup();
        for tenant in &tenants {
            self.services.generations.bump_type(tenant, memory_type);
        }
        Ok(updated)
    }
}

/// Own texts' embeddings and, while the second stage is on, their token sketches.
type OwnEmbedded = (Vec<Vec<f32>>, Vec<Option<Vec<u8>>>);

/// `(1 - weight) * own + weight * in_context`, scaled back to unit length.
fn blend(own: &[f32], in_context: &[f32], weight: f64) -> Vec<f32> {
    let w = weight as f32;
    let mut v: Vec<f32> = own
        .iter()
        .zip(in_context)
        .map(|(a, b)| (1.0 - w) * a + w * b)
        .collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 1e-12 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blending_keeps_unit_length_and_leans_by_weight() {
        let v = blend(&[1.0, 0.0], &[0.0, 1.0], 0.25);
        assert!((v.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-6);
        assert!(v[0] > v[1]);
        assert_eq!(blend(&[1.0, 0.0], &[0.0, 1.0], 0.0), vec![1.0, 0.0]);
    }
}
