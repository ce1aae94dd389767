//! The indexer's walks through whole tables, in key order and bounded windows, when no row
//! waits for a first embedding: re-embedding the rows another model embedded (after a model
//! change), and storing the token sketches of rows embedded while the second stage was off
//! (once it is on), so that turning it on over an existing store reranks all of it; and
//! learning the words of rows embedded without them (before the vocabulary existed, or
//! while widening was off), so that widening reaches every memory. All keep to
//! `indexer.walk_rows_per_sec` when it is set: a large store's walk spread over hours
//! instead of taking a core for them.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tracing::Instrument;

use super::IndexerState;
use crate::domain::memory_type::MemoryType;
use crate::error::MemoryResult;
use crate::store::embedding_backlog::{Replacing, RowKey, StaleWindow};

/// Rows looked at per step of a walk, in indexer batches: bounded, so that a table of mostly
/// current rows is walked in short statements.
const WALK_WINDOW_BATCHES: i64 = 8;

/// Where a walk through the memory tables is: the tables left, and the last (tenant, id)
/// looked at in the first of them.
#[derive(Debug)]
pub(super) struct TableWalk {
    tables: VecDeque<MemoryType>,
    after: Option<RowKey>,
}

impl TableWalk {
    /// A walk through facts, rules and episodes, from their first rows.
    pub(super) fn every_table() -> Self {
        TableWalk {
            tables: VecDeque::from([MemoryType::Fact, MemoryType::Rule, MemoryType::Episode]),
            after: None,
        }
    }

    /// The table being walked; `None` once all are.
    fn table(&self) -> Option<MemoryType> {
        self.tables.front().copied()
    }

    /// Past a window whose last row was `last`; a window with none ended its table.
    fn advance(&mut self, last: Option<RowKey>) {
        if last.is_none() {
            self.tables.pop_front();
        }
        self.after = last;
    }
}

/// What [`IndexerState::walk_step`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WalkStep {
    /// Nothing: the walks keep to their pace, and may step again at this instant.
    Paced(Instant),
    /// One step (the pace counts the rows it read).
    Stepped,
    /// Neither walk has anything (left) to do.
    Done,
}

/// Where learning the words of rows embedded without them stands.
#[derive(Debug)]
pub(super) enum VocabularyWalk {
    /// Not looked at yet (the first walk step does).
    Unknown,
    /// Learning the words of every embedded row: where the walk is.
    Walking(TableWalk),
    /// Nothing to do: every embedded row's words are learnt, or widening is off.
    Done,
}

/// Where re-embedding stands.
#[derive(Debug)]
pub(super) enum Walk {
    /// Not looked at yet (the first drain does).
    Unknown,
    /// Re-embedding: where the walk is, and the rows left in all.
    Walking { tables: TableWalk, stale: i64 },
    /// Every row has the running model's embedding or none.
    Done,
}

impl IndexerState {
    /// Rows a walk looks at per step. Kept to a pace, a step is one batch: the model's work
    /// comes evenly, a batch and a short wait, rather than a window's worth at full speed
    /// and then a long wait.
    fn walk_window(&self) -> i64 {
        let indexer = &self.services.config.indexer;
        let batch = i64::from(indexer.batch_size.get());
        if indexer.walk_rows_per_sec > 0.0 {
            batch
        } else {
            WALK_WINDOW_BATCHES * batch
        }
    }

    /// One step of the walks, re-embedding first, unless their pace
    /// (`indexer.walk_rows_per_sec`) says to wait: `Paced` until when, `Stepped`, or `Done`
    /// when neither walk has anything (left) to do.
    pub(super) async fn walk_step(&mut self) -> MemoryResult<WalkStep> {
        if let Some(at) = self.walk_not_before
            && at > Instant::now()
        {
            return Ok(WalkStep::Paced(at));
        }
        let began = Instant::now();
        let read = match self.reembed_step().await? {
            Some(read) => read,
            None => match self.sketch_step().await? {
                Some(read) => read,
                None => match self.vocabulary_step().await? {
                    Some(read) => read,
                    None => return Ok(WalkStep::Done),
                },
            },
        };
        // The next step waits until the rows read so far fit the pace, counted from where
        // this one began: a step slower than the pace waits for nothing.
        let pace = self.services.config.indexer.walk_rows_per_sec;
        self.walk_not_before =
            (pace > 0.0 && read > 0).then(|| began + Duration::from_secs_f64(read as f64 / pace));
        Ok(WalkStep::Stepped)
    }

    /// One bounded step of re-embedding: the rows it embedded again, or `None` when there is
    /// nothing (left) to do.
    pub(super) async fn reembed_step(&mut self) -> MemoryResult<Option<u64>> {
        let store = &self.services.store;
        if matches!(self.walk, Walk::Unknown) {
            // A database that only ever had this model has nothing to re-embed: no scan.
            let other_models = store.other_embedding_versions(self.version_id).await?;
            let stale = if other_models {
                store.stale_embeddings(self.version_id).await?
            } else {
                0
            };
            if other_models {
                // Orchestrator nodes another model embedded lose that vector (recall never
                // compares it) and are embedded again like new ones, in the next rounds.
                let released = store
                    .release_orchestrator_embeddings(self.version_id)
                    .await?;
                if released > 0 {
                    tracing::info!(
                        nodes = released,
                        "orchestrator memories embedded by another model; embedding them again"
                    );
                }
            }
            metrics::gauge!("butler_memory_embeddings_stale").set(stale as f64);
            self.services
                .other_model_vectors
                .store(stale > 0, Ordering::Release);
            self.walk = if stale == 0 {
                Walk::Done
            } else {
                tracing::info!(
                    rows = stale,
                    "rows embedded by another model; re-embedding them in the background"
                );
                Walk::Walking {
                    tables: TableWalk::every_table(),
                    stale,
                }
            };
        }
        let window = self.walk_window();
        let Walk::Walking { tables, .. } = &mut self.walk else {
            return Ok(None);
        };
        let Some(memory_type) = tables.table() else {
            self.walk = Walk::Done;
            return Ok(None);
        };
        let StaleWindow { rows, last, claim } = store
            .stale_window(
                memory_type,
                self.version_id,
                tables.after.as_ref(),
                window,
                self.services.config.episodes.conversation_gap_secs,
            )
            .await?;
        tables.advance(last);
        let read = rows.len() as u64;
        if !rows.is_empty() {
            let span = tracing::info_span!(
                target: crate::TRACE_SPANS,
                "indexer.reembed",
                memory.type = memory_type.as_str(),
                rows = rows.len(),
            );
            let embedded = rows.len() as u64;
            let done = self
                .embed_rows(memory_type, rows, Replacing::OtherModel)
                .instrument(span)
                .await;
            if let Some(claim) = claim {
                claim.release().await;
            }
            let done = done?;
            self.info.embedded(embedded);
            metrics::counter!("butler_memory_reembedded_total", "type" => memory_type.as_str())
                .increment(done);
            if let Walk::Walking { stale, .. } = &mut self.walk {
                *stale = (*stale - done as i64).max(0);
                metrics::gauge!("butler_memory_embeddings_stale").set(*stale as f64);
            }
        }
        if let Walk::Walking { tables, .. } = &self.walk
            && tables.table().is_none()
        {
            tracing::info!("re-embedding done: every row has the running model's embedding");
            metrics::gauge!("butler_memory_embeddings_stale").set(0.0);
            self.services
                .other_model_vectors
                .store(false, Ordering::Release);
            self.walk = Walk::Done;
        }
        Ok(Some(read))
    }

    /// One bounded step of storing sketches for rows the running model embedded without one
    /// (while the second stage was off): their own texts are read by the model again, their
    /// embeddings left as they are. The rows it read, or `None` when there is nothing (left)
    /// to do: the second stage off, or the walk begun at start done (rows embedded since got
    /// their sketch with their embedding).
    pub(super) async fn sketch_step(&mut self) -> MemoryResult<Option<u64>> {
        let window = self.walk_window();
        let Some(walk) = &mut self.sketch_walk else {
            return Ok(None);
        };
        let Some(memory_type) = walk.table() else {
            self.sketch_walk = None;
            return Ok(None);
        };
        let store = &self.services.store;
        // A table where every embedded row has its sketch (each start but the first after
        // the second stage was turned on) is passed in one statement.
        if walk.after.is_none() && !store.sketches_missing(memory_type, self.version_id).await? {
            walk.advance(None);
            return Ok(Some(0));
        }
        let (rows, last) = store
            .sketchless_window(memory_type, self.version_id, walk.after.as_ref(), window)
            .await?;
        walk.advance(last);
        let read = rows.len() as u64;
        if !rows.is_empty() {
            let span = tracing::info_span!(
                target: crate::TRACE_SPANS,
                "indexer.sketch",
                memory.type = memory_type.as_str(),
                rows = rows.len(),
            );
            let texts: Vec<String> = rows.iter().map(|r| r.text.clone()).collect();
            let keys: Vec<RowKey> = rows.into_iter().map(|r| (r.tenant_id, r.id)).collect();
            let stored = async {
                let sketched = self.embed_sketched(&texts).await?;
                let sketches = sketched.into_iter().map(|(_, sketch)| sketch).collect();
                store
                    .set_sketches(memory_type, self.version_id, &keys, sketches)
                    .await
            }
            .instrument(span)
            .await?;
            self.info.embedded(keys.len() as u64);
            metrics::counter!("butler_memory_sketches_backfilled_total", "type" => memory_type.as_str())
                .increment(stored);
        }
        if self
            .sketch_walk
            .as_ref()
            .is_some_and(|w| w.table().is_none())
        {
            tracing::info!("every embedded row has its token sketch");
            self.sketch_walk = None;
        }
        Ok(Some(read))
    }

    /// One bounded step of learning the words of rows embedded before the vocabulary
    /// existed or while widening was off (`store/vocabulary.rs`): the rows it read, or `None`
    /// when there is nothing (left) to do. The first step looks whether a walk is needed:
    /// with widening on, unless `vocabulary_complete` says every row's words are learnt;
    /// with it off, it says they will not be (this instance embeds rows without them), so
    /// that the next start with widening on walks again.
    pub(super) async fn vocabulary_step(&mut self) -> MemoryResult<Option<u64>> {
        let store = &self.services.store;
        if matches!(self.vocabulary_walk, VocabularyWalk::Unknown) {
            self.vocabulary_walk = if !self.services.config.retrieval.widening.enabled {
                store
                    .set_vocabulary_complete(self.version_id, false)
                    .await?;
                VocabularyWalk::Done
            } else if store.vocabulary_complete(self.version_id).await? {
                VocabularyWalk::Done
            } else {
                tracing::info!("learning the words of rows embedded before, in the background");
                VocabularyWalk::Walking(TableWalk::every_table())
            };
        }
        let window = self.walk_window();
        let VocabularyWalk::Walking(walk) = &mut self.vocabulary_walk else {
            return Ok(None);
        };
        let Some(memory_type) = walk.table() else {
            store.set_vocabulary_complete(self.version_id, true).await?;
            tracing::info!("every embedded row's words are learnt");
            self.vocabulary_walk = VocabularyWalk::Done;
            return Ok(None);
        };
        let (rows, last) = store
            .embedded_window(memory_type, self.version_id, walk.after.as_ref(), window)
            .await?;
        walk.advance(last);
        let read = rows.len() as u64;
        if !rows.is_empty() {
            let span = tracing::info_span!(
                target: crate::TRACE_SPANS,
                "indexer.vocabulary",
                memory.type = memory_type.as_str(),
                rows = rows.len(),
            );
            let texts: Vec<String> = rows.iter().map(|r| r.text.clone()).collect();
            let keys: Vec<RowKey> = rows.into_iter().map(|r| (r.tenant_id, r.id)).collect();
            async {
                let words = store.new_words(self.version_id, &keys, &texts).await?;
                let spelled: Vec<String> = words.iter().map(|w| w.word.clone()).collect();
                let vectors = self.embed_texts(&spelled).await?;
                let vectors = vectors.into_iter().map(pgvector::Vector::from).collect();
                store
                    .learn_walked_words(memory_type, self.version_id, words, vectors)
                    .await
            }
            .instrument(span)
            .await?;
        }
        Ok(Some(read))
    }
}
