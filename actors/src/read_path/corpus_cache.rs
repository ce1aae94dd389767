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
//! - Past its window (or its drift), a count is still served until it is twice the window
//!   old, and recounted in the background, one recount per tenant and type at a time: a
//!   recount during a burst costs tens of milliseconds, which a read should not wait for
//!   (docs/decisions.md). Only counts older than twice the window, as after a quiet spell,
//!   are recounted while the read waits. When a recount lands, the tenant's results are
//!   restated (`Generations::restate`): an answer ranked with the old counts is not served
//!   again from the result cache. `butler_memory_keyword_counts_total` counts the words
//!   counted, by whether a read waited for them.
//! - On a database several instances share, every count is also kept in the database
//!   (`store/keyword_counts.rs`), and before counting an instance takes the fleet's count
//!   when it is fresh by the same rule (age within the trust window, drift within `DRIFT`):
//!   the fleet counts once per window, not once per instance. A count taken so is judged by
//!   its age alone (no generation of this instance's saw it made).

use chrono::{DateTime, Duration, Utc};
use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use lru::LruCache;

use crate::byte_lru::ByteLru;

use super::generations::Generations;
use crate::domain::bm25::{KeywordPlan, QueryTerm};
use crate::domain::memory_type::MemoryType;
use crate::error::MemoryResult;
use crate::store::Store;
use crate::store::search::CorpusStats;

/// The longest statistics are trusted after a write.
const MAX_AGE: Duration = Duration::seconds(30);
/// Relative change of the memory count after which a word is counted again.
const DRIFT: f64 = 0.1;
/// Query texts whose words are remembered ...
const TEXTS: usize = 4096;
/// ... holding at most this many bytes (texts and words): queries may be 32 KiB each.
const TEXT_BYTES: usize = 8 << 20;
/// Words (per tenant and memory type) whose document frequency is remembered.
const WORDS: usize = 16384;

type WordKey = (String, MemoryType, String);

/// The generation of a count taken from the fleet's (`store/keyword_counts.rs`): none of
/// this instance's, so it is never current and holds by its age alone.
const TAKEN: u64 = u64::MAX;
/// Words in fewer of a tenant's memories of one type than this are not kept for the fleet
/// nor looked up there: counting one from the full-text index costs less than the upsert
/// that would keep its count and the lookup that would take it (a tenth of a millisecond
/// against two; docs/benchmarks.md, "What the fleet's reads cost PostgreSQL").
const SHARED_MIN_DF: f64 = 50.0;

/// A word's document frequency when it was counted.
#[derive(Debug, Clone, Copy)]
struct Counted {
    df: f64,
    /// The type's memory count and generation at the time, and when that was (engine clock).
    documents: f64,
    generation: u64,
    at: DateTime<Utc>,
}

type TypeKey = (String, MemoryType);

/// Whether a count can be served: as it is, while it is recounted behind the read, or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Freshness {
    Fresh,
    Stale,
    Expired,
}

/// `age` against the trust window, and `drift` (relative change of the memory count since;
/// 0 for the count itself) against `DRIFT`. Drift alone never expires a count: the memory
/// count moves in steps, when it is recounted, and a step of 100% (a tenant that doubled
/// since) would otherwise send every word of the next read to a recount while it waits.
fn freshness(age: Duration, trusted: Duration, drift: f64) -> Freshness {
    if age < trusted && drift <= DRIFT {
        Freshness::Fresh
    } else if age < trusted * 2 {
        Freshness::Stale
    } else {
        Freshness::Expired
    }
}

#[derive(Debug)]
pub struct CorpusCache {
    counts: Arc<Counts>,
    /// Query text -> its lexemes as the full-text index holds them.
    lexemes: Mutex<ByteLru<String, Arc<Vec<String>>>>,
    /// Words in more memories than this are common (`retrieval.keyword_common_df`).
    common_df: i64,
}

/// The counts, shared with the recounts running in the background.
#[derive(Debug)]
struct Counts {
    entries: DashMap<TypeKey, (CorpusStats, u64, DateTime<Utc>)>,
    words: Mutex<LruCache<WordKey, Counted>>,
    /// Tenants and types being recounted in the background.
    recounting: Mutex<HashSet<TypeKey>>,
    /// Whether the database is shared: counts are then kept for the fleet and taken from it.
    shared: bool,
}

impl CorpusCache {
    /// `shared`: whether other instances use the database (their counts are then taken).
    pub fn new(common_df: i64, shared: bool) -> Self {
        let size = |n| NonZeroUsize::new(n).expect("a non-zero constant");
        CorpusCache {
            common_df,
            counts: Arc::new(Counts {
                entries: DashMap::new(),
                words: Mutex::new(LruCache::new(size(WORDS))),
                recounting: Mutex::new(HashSet::new()),
                shared,
            }),
            lexemes: Mutex::new(ByteLru::new(size(TEXTS), TEXT_BYTES)),
        }
    }

    /// The type's count and mean length (see the module comment for how long they hold),
    /// and whether they are stale (to be recounted behind the read).
    async fn stats(
        &self,
        store: &Store,
        key: &TypeKey,
        generation: u64,
        now: DateTime<Utc>,
    ) -> MemoryResult<(CorpusStats, bool)> {
        let cached = self.counts.entries.get(key).map(|entry| *entry);
        if let Some((stats, seen, at)) = cached {
            if seen == generation {
                return Ok((stats, false));
            }
            match freshness(now - at, trusted_for(stats.documents), 0.0) {
                Freshness::Fresh => return Ok((stats, false)),
                Freshness::Stale => return Ok((stats, true)),
                Freshness::Expired => {}
            }
        }
        let stats = self.counts.count(store, key, generation, now).await?;
        Ok((stats, false))
    }

    /// Recounts the type's statistics (with `stats`) and `words` in the background, unless a
    /// recount of the tenant's type is already running. Failures are left for the next read:
    /// the counts stay as they were and expire in their turn.
    fn recount_behind(&self, store: &Store, generations: &Arc<Generations>, recount: Recount) {
        let Recount {
            key,
            generation,
            now,
            stats,
            words,
        } = recount;
        if !lock(&self.counts.recounting).insert(key.clone()) {
            return;
        }
        let counts = self.counts.clone();
        let store = store.clone();
        let generations = generations.clone();
        let common_df = self.common_df;
        tokio::spawn(async move {
            let _running = Recounting {
                counts: counts.clone(),
                key: key.clone(),
            };
            let (tenant_id, memory_type) = (&key.0, key.1);
            let recount = async {
                let corpus = if stats {
                    counts.count(&store, &key, generation, now).await?
                } else {
                    match counts.entries.get(&key) {
                        Some(entry) => entry.0,
                        None => return Ok(()),
                    }
                };
                if !words.is_empty() {
                    metrics::counter!("butler_memory_keyword_counts_total", "waiting" => "none")
                        .increment(words.len() as u64);
                    let words = Words {
                        words: &words,
                        common_df,
                        documents: corpus.documents,
                        generation,
                        now,
                    };
                    counts.count_words(&store, &key, words).await?;
                }
                MemoryResult::Ok(())
            };
            let landed = recount.await;
            // Counts that landed in part (the stats, not the words) moved rankings too.
            generations.restate(tenant_id);
            if let Err(e) = landed {
                tracing::debug!(tenant = %tenant_id, ?memory_type, error = %e, "background recount of keyword statistics failed");
            }
        });
    }

    /// The collection statistics and the plan of a keyword search for the query words
    /// `own` (`CorpusCache::lexemes`) and the words `widened` it was widened with, each with
    /// its weight (`domain::widening`).
    #[allow(
        clippy::too_many_arguments,
        reason = "one plan as asked: all of it is needed"
    )]
    pub async fn keyword_plan(
        &self,
        store: &Store,
        generations: &Arc<Generations>,
        memory_type: MemoryType,
        tenant_id: &str,
        own: &[String],
        widened: &[(String, f64)],
        now: DateTime<Utc>,
    ) -> MemoryResult<(CorpusStats, KeywordPlan)> {
        let (lexemes, weights): (Vec<String>, Vec<f64>) = own
            .iter()
            .map(|l| (l.clone(), 1.0))
            .chain(widened.iter().cloned())
            .unzip();
        let lexemes = &lexemes[..];
        let common_df = self.common_df;
        let generation = generations.current_of(tenant_id, memory_type);
        let key = (tenant_id.to_owned(), memory_type);
        let (corpus, stale_stats) = self.stats(store, &key, generation, now).await?;
        let mut stale = Vec::new();
        let mut frequencies: Vec<Option<f64>> = {
            let mut words = lock(&self.counts.words);
            lexemes
                .iter()
                .map(|l| {
                    let key = (tenant_id.to_owned(), memory_type, l.clone());
                    let counted = words.get(&key)?;
                    if counted.generation == generation {
                        return Some(counted.df);
                    }
                    let drift =
                        (corpus.documents - counted.documents).abs() / counted.documents.max(1.0);
                    match freshness(now - counted.at, trusted_for(counted.documents), drift) {
                        Freshness::Fresh => Some(counted.df),
                        Freshness::Stale => {
                            stale.push(l.clone());
                            Some(counted.df)
                        }
                        Freshness::Expired => None,
                    }
                })
                .collect()
        };
        if stale_stats || !stale.is_empty() {
            let recount = Recount {
                key: key.clone(),
                generation,
                now,
                stats: stale_stats,
                words: stale,
            };
            self.recount_behind(store, generations, recount);
        }
        let unknown: Vec<String> = lexemes
            .iter()
            .zip(&frequencies)
            .filter(|(_, df)| df.is_none())
            .map(|(l, _)| l.clone())
            .collect();
        if !unknown.is_empty() {
            metrics::counter!("butler_memory_keyword_counts_total", "waiting" => "read")
                .increment(unknown.len() as u64);
            let words = Words {
                words: &unknown,
                common_df,
                documents: corpus.documents,
                generation,
                now,
            };
            let counted = self.counts.count_words(store, &key, words).await?;
            let counted: HashMap<&str, f64> =
                counted.iter().map(|(l, df)| (l.as_str(), *df)).collect();
            for (lexeme, df) in lexemes.iter().zip(frequencies.iter_mut()) {
                if df.is_none() {
                    *df = counted.get(lexeme.as_str()).copied();
                }
            }
        }
        let terms: Vec<QueryTerm> = lexemes
            .iter()
            .zip(frequencies)
            .zip(weights)
            .map(|((lexeme, df), weight)| QueryTerm {
                lexeme: lexeme.clone(),
                document_frequency: df.unwrap_or(0.0),
                weight,
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
        self.counts
            .entries
            .get(&(tenant_id.to_owned(), memory_type))
            .is_some_and(|entry| {
                let (stats, seen, _) = *entry;
                seen == generation && stats.documents == 0.0
            })
    }

    /// `text`'s words as the full-text index holds them (stemmed, deduplicated), if a read
    /// of the same text found them (`keep_lexemes`).
    pub fn lexemes(&self, text: &str) -> Option<Arc<Vec<String>>> {
        lock(&self.lexemes).get(text).cloned()
    }

    /// Keeps `lexemes` as `text`'s words for the reads after this one, and answers them.
    pub fn keep_lexemes(&self, text: &str, lexemes: Vec<String>) -> Arc<Vec<String>> {
        let lexemes = Arc::new(lexemes);
        let weight = text.len() + lexemes.iter().map(|l| l.len() + 24).sum::<usize>();
        lock(&self.lexemes).put(text.to_owned(), lexemes.clone(), weight);
        lexemes
    }
}

/// What a background recount counts again: the type's statistics (`stats`) and `words`, as
/// of the read that found them stale (its generation and engine-clock time).
struct Recount {
    key: TypeKey,
    generation: u64,
    now: DateTime<Utc>,
    stats: bool,
    words: Vec<String>,
}

/// Marks a background recount as running until it ends, however it ends (a panic
/// included), so the next stale read can start another.
struct Recounting {
    counts: Arc<Counts>,
    key: TypeKey,
}

impl Drop for Recounting {
    fn drop(&mut self) {
        lock(&self.counts.recounting).remove(&self.key);
    }
}

/// Words to count, as of a read: its type's memory count, generation and engine-clock time.
struct Words<'a> {
    words: &'a [String],
    common_df: i64,
    documents: f64,
    generation: u64,
    now: DateTime<Utc>,
}

impl Counts {
    /// Counts the type's memories and their mean length (or takes the fleet's count, fresh),
    /// and keeps the answer.
    async fn count(
        &self,
        store: &Store,
        key: &TypeKey,
        generation: u64,
        now: DateTime<Utc>,
    ) -> MemoryResult<CorpusStats> {
        if self.shared
            && let Some((stats, at)) = store.shared_corpus_stats(key.1, &key.0).await?
            && freshness(now - at, trusted_for(stats.documents), 0.0) == Freshness::Fresh
        {
            self.entries.insert(key.clone(), (stats, TAKEN, at));
            return Ok(stats);
        }
        let stats = store.corpus_stats(key.1, &key.0).await?;
        self.entries.insert(key.clone(), (stats, generation, now));
        if self.shared
            && let Err(e) = store.share_corpus_stats(key.1, &key.0, stats, now).await
        {
            tracing::debug!(tenant = %key.0, error = %e, "keeping the collection statistics for the fleet failed");
        }
        Ok(stats)
    }

    /// The words' document frequencies: the fleet's where fresh, counted otherwise (and then
    /// kept for the fleet); all of them remembered.
    async fn count_words(
        &self,
        store: &Store,
        key: &TypeKey,
        asked: Words<'_>,
    ) -> MemoryResult<Vec<(String, f64)>> {
        let mut taken = Vec::new();
        // A word this instance last found rare is counted again here: the fleet's table
        // does not keep it (below).
        let worth_looking_up: Vec<String> = if self.shared {
            let words = lock(&self.words);
            asked
                .words
                .iter()
                .filter(|w| {
                    words
                        .peek(&(key.0.clone(), key.1, (*w).clone()))
                        .is_none_or(|c| c.df >= SHARED_MIN_DF)
                })
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        if !worth_looking_up.is_empty() {
            for shared in store
                .shared_word_counts(key.1, &key.0, &worth_looking_up)
                .await?
            {
                let drift = (asked.documents - shared.documents).abs() / shared.documents.max(1.0);
                let age = asked.now - shared.counted_at;
                if freshness(age, trusted_for(shared.documents), drift) == Freshness::Fresh {
                    taken.push(shared);
                }
            }
        }
        let missing: Vec<String> = asked
            .words
            .iter()
            .filter(|w| !taken.iter().any(|t| t.word == **w))
            .cloned()
            .collect();
        let counted = if missing.is_empty() {
            Vec::new()
        } else {
            count_words(store, key.1, &key.0, &missing, asked.common_df).await?
        };
        self.put_words(key, &counted, asked.documents, asked.generation, asked.now);
        {
            let mut words = lock(&self.words);
            for t in &taken {
                let counted = Counted {
                    df: t.df,
                    documents: t.documents,
                    generation: TAKEN,
                    at: t.counted_at,
                };
                words.put((key.0.clone(), key.1, t.word.clone()), counted);
            }
        }
        // Only counts that cost something are kept for the fleet: a rare word is counted
        // from the full-text index in less than it costs to keep and look up its count.
        let worth_sharing: Vec<(String, f64)> = counted
            .iter()
            .filter(|(_, df)| *df >= SHARED_MIN_DF)
            .cloned()
            .collect();
        if self.shared
            && !worth_sharing.is_empty()
            && let Err(e) = store
                .share_word_counts(key.1, &key.0, &worth_sharing, asked.documents, asked.now)
                .await
        {
            tracing::debug!(tenant = %key.0, error = %e, "keeping word counts for the fleet failed");
        }
        Ok(counted
            .into_iter()
            .chain(taken.into_iter().map(|t| (t.word, t.df)))
            .collect())
    }

    fn put_words(
        &self,
        key: &TypeKey,
        counted: &[(String, f64)],
        documents: f64,
        generation: u64,
        at: DateTime<Utc>,
    ) {
        let mut words = lock(&self.words);
        for (lexeme, df) in counted {
            words.put(
                (key.0.clone(), key.1, lexeme.clone()),
                Counted {
                    df: *df,
                    documents,
                    generation,
                    at,
                },
            );
        }
    }
}

/// How many of the tenant's memories of the type hold each word: counted up to
/// `common_df` + 1, and in full only for the words over that.
async fn count_words(
    store: &Store,
    memory_type: MemoryType,
    tenant_id: &str,
    words: &[String],
    common_df: i64,
) -> MemoryResult<Vec<(String, f64)>> {
    let bounded = store
        .document_frequencies(memory_type, tenant_id, words, Some(common_df + 1))
        .await?;
    let over: Vec<String> = words
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
    let mut counted: Vec<(String, f64)> = words
        .iter()
        .cloned()
        .zip(bounded.iter().map(|df| *df as f64))
        .collect();
    for (lexeme, df) in over.iter().zip(&exact) {
        if let Some(entry) = counted.iter_mut().find(|(l, _)| l == lexeme) {
            entry.1 = *df as f64;
        }
    }
    Ok(counted)
}

/// How long statistics over `documents` memories are trusted after a write.
fn trusted_for(documents: f64) -> Duration {
    Duration::milliseconds(documents.max(1000.0) as i64).min(MAX_AGE)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
