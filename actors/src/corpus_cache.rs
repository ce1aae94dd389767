//! BM25 collection statistics per tenant and memory type, cached: the memory count and mean
//! length, each query text's words, and the words' document frequencies. All of them cost
//! scans and barely move between queries. Validity follows the tenant's generation for the
//! type (`Generations::current_of`), so an episode burst leaves the facts' and rules'
//! statistics valid.
//!
//! - Count and mean length are recomputed when the type has been written since, but not
//!   before they are `trusted_for` old: a second per thousand memories (at least one, at
//!   most `MAX_AGE`). A count costs a scan of the tenant's memories, so a write burst cannot
//!   turn every search into one, and the amortised cost stays flat as the tenant grows; a
//!   small tenant, where one write moves the statistics most, is recounted soonest.
//! - A word's document frequency is counted with a bound (`common_df` + 1 rows), so a rare
//!   word costs what it matches; only a word over the bound is counted in full. A count is
//!   reused while the type has not been written since; a common word's count also after
//!   writes, until the memory count moves by more than `COMMON_DRIFT` (its weight hardly
//!   changes in between, and counting it is the expensive part). So a rare word in a new
//!   memory is found at once.
//! - A type with no memories at the current generation is known empty: reads skip it.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use lru::LruCache;

use crate::domain::bm25::{KeywordPlan, QueryTerm};
use crate::domain::memory_type::MemoryType;
use crate::error::MemoryResult;
use crate::generations::Generations;
use crate::store::Store;
use crate::store::search::CorpusStats;

/// The longest statistics are trusted after a write.
const MAX_AGE: Duration = Duration::from_secs(30);
/// Relative change of the memory count after which a common word is counted again.
const COMMON_DRIFT: f64 = 0.1;
/// Query texts whose words are remembered.
const TEXTS: usize = 4096;
/// Words (per tenant and memory type) whose document frequency is remembered.
const WORDS: usize = 16384;

type WordKey = (String, MemoryType, String);

/// A word's document frequency when it was counted.
#[derive(Debug, Clone, Copy)]
struct Counted {
    df: f64,
    /// The type's memory count and generation at the time.
    documents: f64,
    generation: u64,
}

#[derive(Debug)]
pub struct CorpusCache {
    entries: DashMap<(String, MemoryType), (CorpusStats, u64, Instant)>,
    /// Query text -> its lexemes as the full-text index holds them.
    lexemes: Mutex<LruCache<String, Arc<Vec<String>>>>,
    words: Mutex<LruCache<WordKey, Counted>>,
}

impl Default for CorpusCache {
    fn default() -> Self {
        let size = |n| NonZeroUsize::new(n).expect("a non-zero constant");
        CorpusCache {
            entries: DashMap::new(),
            lexemes: Mutex::new(LruCache::new(size(TEXTS))),
            words: Mutex::new(LruCache::new(size(WORDS))),
        }
    }
}

impl CorpusCache {
    /// The type's count and mean length (see the module comment for how long they hold).
    async fn stats(
        &self,
        store: &Store,
        generations: &Generations,
        memory_type: MemoryType,
        tenant_id: &str,
    ) -> MemoryResult<CorpusStats> {
        let generation = generations.current_of(tenant_id, memory_type);
        let key = (tenant_id.to_owned(), memory_type);
        if let Some(entry) = self.entries.get(&key) {
            let (stats, seen, at) = *entry;
            if seen == generation || at.elapsed() < trusted_for(stats.documents) {
                return Ok(stats);
            }
        }
        let stats = store.corpus_stats(memory_type, tenant_id).await?;
        self.entries
            .insert(key, (stats, generation, Instant::now()));
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
        common_df: i64,
    ) -> MemoryResult<(CorpusStats, KeywordPlan)> {
        let generation = generations.current_of(tenant_id, memory_type);
        let corpus = self
            .stats(store, generations, memory_type, tenant_id)
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
                    let common_and_steady = counted.df > common_df as f64
                        && (corpus.documents - counted.documents).abs()
                            <= COMMON_DRIFT * counted.documents;
                    (unchanged || common_and_steady).then_some(counted.df)
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
    Duration::from_secs_f64((documents / 1000.0).max(1.0)).min(MAX_AGE)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
