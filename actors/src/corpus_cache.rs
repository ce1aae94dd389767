//! BM25 collection statistics per tenant and memory type, cached: the memory count and mean
//! length, each query text's words, and the words' document frequencies. All of them cost
//! scans and barely move between queries. Validity follows the tenant's generation for the
//! type (`Generations::current_of`), so an episode burst leaves the facts' and rules'
//! statistics valid.
//!
//! - Count and mean length are recomputed when the type has been written since, but not
//!   before they are `trusted_for` old on the engine clock: a second per thousand memories
//!   (at least one, at most `MAX_AGE`). A count costs a scan of the tenant's memories, so a
//!   write burst cannot turn every search into one, and the amortised cost stays flat as the
//!   tenant grows; a small tenant, where one write moves the statistics most, is recounted
//!   soonest.
//! - A word's document frequency is counted with a bound (`common_df` + 1 rows), so a rare
//!   word costs what it matches; only a word over the bound is counted in full. A count is
//!   reused while the type has not been written since, and after writes too until the
//!   memory count moves by more than `DRIFT` or the statistics' trust window passes
//!   (its weight hardly changes in between): during a write burst, a read does not wait for
//!   a recount. A new memory is still found at once by any of its words: a selective word
//!   matches it, and a word counted in no memory joins the selection (`domain::bm25`).
//! - A type with no memories at the current generation is known empty: reads skip it.

use chrono::{DateTime, Duration, Utc};
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use lru::LruCache;

use crate::domain::bm25::{KeywordPlan, QueryTerm};
use crate::domain::memory_type::MemoryType;
use crate::error::MemoryResult;
use crate::generations::Generations;
use crate::store::Store;
use crate::store::search::CorpusStats;

/// The longest statistics are trusted after a write.
const MAX_AGE: Duration = Duration::seconds(30);
/// Relative change of the memory count after which a word is counted again.
const DRIFT: f64 = 0.1;
/// Query texts whose words are remembered.
const TEXTS: usize = 4096;
/// Words (per tenant and memory type) whose document frequency is remembered.
const WORDS: usize = 16384;

type WordKey = (String, MemoryType, String);

/// A word's document frequency when it was counted.
#[derive(Debug, Clone, Copy)]
struct Counted {
    df: f64,
    /// The type's memory count and generation at the time, and when that was (engine clock).
    documents: f64,
    generation: u64,
    at: DateTime<Utc>,
}

#[derive(Debug)]
pub struct CorpusCache {
    entries: DashMap<(String, MemoryType), (CorpusStats, u64, DateTime<Utc>)>,
    /// Query text -> its lexemes as the full-text index holds them.
    lexemes: Mutex<LruCache<String, Arc<Vec<String>>>>,
    words: Mutex<LruCache<WordKey, Counted>>,
    /// Words in more memories than this are common (`retrieval.keyword_common_df`).
    common_df: i64,
}

impl CorpusCache {
    pub fn new(common_df: i64) -> Self {
        let size = |n| NonZeroUsize::new(n).expect("a non-zero constant");
        CorpusCache {
            common_df,
            entries: DashMap::new(),
            lexemes: Mutex::new(LruCache::new(size(TEXTS))),
            words: Mutex::new(LruCache::new(size(WORDS))),
        }
    }

    /// The type's count and mean length (see the module comment for how long they hold).
    async fn stats(
        &self,
        store: &Store,
        generations: &Generations,
        memory_type: MemoryType,
        tenant_id: &str,
        now: DateTime<Utc>,
    ) -> MemoryResult<CorpusStats> {
        let generation = generations.current_of(tenant_id, memory_type);
        let key = (tenant_id.to_owned(), memory_type);
        if let Some(entry) = self.entries.get(&key) {
            let (stats, seen, at) = *entry;
            if seen == generation || now - at < trusted_for(stats.documents) {
                return Ok(stats);
            }
        }
        let stats = store.corpus_stats(memory_type, tenant_id).await?;
        self.entries.insert(key, (stats, generation, now));
        Ok(stats)
    }

    /// The collection statistics and the plan of a keyword search for `text`.
    pub async fn keyword_plan(
        &self,
        store: &Store,
        generations: &Generations,
        memory_type: MemoryType,
        tenant_id: &str,
        text: &str,
        now: DateTime<Utc>,
    ) -> MemoryResult<(CorpusStats, KeywordPlan)> {
        let common_df = self.common_df;
        let generation = generations.current_of(tenant_id, memory_type);
        let corpus = self
            .stats(store, generations, memory_type, tenant_id, now)
            .await?;
        let lexemes = self.lexemes(store, text).await?;
        let mut frequencies: Vec<Option<f64>> = {
            let mut words = lock(&self.words);
            lexemes
                .iter()
                .map(|l| {
                    let key = (tenant_id.to_owned(), memory_type, l.clone());
                    let counted = words.get(&key)?;
                    let unchanged = counted.generation == generation;
                    let steady = (corpus.documents - counted.documents).abs()
                        <= DRIFT * counted.documents
                        && now - counted.at < trusted_for(counted.documents);
                    (unchanged || steady).then_some(counted.df)
                })
                .collect()
        };
        let unknown: Vec<String> = lexemes
            .iter()
            .zip(&frequencies)
            .filter(|(_, df)| df.is_none())
            .map(|(l, _)| l.clone())
            .collect();
        if !unknown.is_empty() {
            let bounded = store
                .document_frequencies(memory_type, tenant_id, &unknown, Some(common_df + 1))
                .await?;
            let over: Vec<String> = unknown
                .iter()
                .zip(&bounded)
                .filter(|(_, df)| **df > common_df)
                .map(|(l, _)| l.clone())
                .collect();
            let exact = if over.is_empty() {
                Vec::new()
            } else {
                store
                    .document_frequencies(memory_type, tenant_id, &over, None)
                    .await?
            };
            let mut counted: HashMap<&str, f64> = unknown
                .iter()
                .map(String::as_str)
                .zip(bounded.iter().map(|df| *df as f64))
                .collect();
            for (lexeme, df) in over.iter().zip(&exact) {
                counted.insert(lexeme, *df as f64);
            }
            let mut words = lock(&self.words);
            for (lexeme, df) in &counted {
                let key = (tenant_id.to_owned(), memory_type, (*lexeme).to_owned());
                words.put(
                    key,
                    Counted {
                        df: *df,
                        documents: corpus.documents,
                        generation,
                        at: now,
                    },
                );
            }
            for (lexeme, df) in lexemes.iter().zip(frequencies.iter_mut()) {
                if df.is_none() {
                    *df = counted.get(lexeme.as_str()).copied();
                }
            }
        }
        let terms: Vec<QueryTerm> = lexemes
            .iter()
            .zip(frequencies)
            .map(|(lexeme, df)| QueryTerm {
                lexeme: lexeme.clone(),
                document_frequency: df.unwrap_or(0.0),
            })
            .collect();
        let plan = KeywordPlan::new(&terms, corpus.documents, common_df as f64);
        Ok((corpus, plan))
    }

    /// Whether the tenant has no memories of `memory_type` as of its current generation
    /// (known from statistics computed at that generation; unknown counts as not empty).
    pub fn known_empty(
        &self,
        generations: &Generations,
        memory_type: MemoryType,
        tenant_id: &str,
    ) -> bool {
        let generation = generations.current_of(tenant_id, memory_type);
        self.entries
            .get(&(tenant_id.to_owned(), memory_type))
            .is_some_and(|entry| {
                let (stats, seen, _) = *entry;
                seen == generation && stats.documents == 0.0
            })
    }

    /// `text`'s words as the full-text index holds them (stemmed, deduplicated).
    async fn lexemes(&self, store: &Store, text: &str) -> MemoryResult<Arc<Vec<String>>> {
        if let Some(hit) = lock(&self.lexemes).get(text) {
            return Ok(hit.clone());
        }
        let lexemes = Arc::new(store.query_lexemes(text).await?);
        lock(&self.lexemes).put(text.to_owned(), lexemes.clone());
        Ok(lexemes)
    }
}

/// How long statistics over `documents` memories are trusted after a write.
fn trusted_for(documents: f64) -> Duration {
    Duration::milliseconds(documents.max(1000.0) as i64).min(MAX_AGE)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
