//! Query embeddings remembered by text. Session-start prompts repeat ("good morning",
//! scheduled triggers), and embedding is the costliest part of a read; the model is
//! deterministic, so a cached vector is exactly the one the model would give. With the
//! second stage on, the question's projected tokens are remembered beside it. A query asked
//! once so far is kept in a small window, one asked again in the main part
//! (`admitted_lru.rs`): under distinct prompts the cache held its whole budget of queries
//! nobody asked twice, with the second stage's questions 16 MiB of them, and the service's
//! peak through distinct searches was 17 MiB higher with it than without a query cache
//! (docs/benchmarks.md, "Queries kept once asked twice").

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use super::admitted_lru::AdmittedLru;
use crate::embedder::token_sketch::SketchQuery;

/// A query's embedding, and the query as the second stage measures candidates against it
/// (when the second stage is on), both from one model run.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryVectors {
    pub vector: Arc<Vec<f32>>,
    pub question: Option<Arc<SketchQuery>>,
}

impl QueryVectors {
    /// A query's embedding alone.
    pub fn vector(vector: Vec<f32>) -> Self {
        QueryVectors {
            vector: Arc::new(vector),
            question: None,
        }
    }

    /// The bytes it holds.
    fn bytes(&self) -> usize {
        4 * self.vector.len() + self.question.as_ref().map_or(0, |q| q.bytes())
    }
}

/// The most bytes the remembered texts and vectors of queries asked again hold: a query may
/// be 32 KiB, and a count of entries alone would let a few thousand long ones take a hundred
/// megabytes.
const BUDGET_BYTES: usize = 16 << 20;
/// ... and of queries asked once so far: a few hundred short ones, enough for a prompt
/// repeated within a few seconds (a retried call) to be found.
const WINDOW_BYTES: usize = 1 << 20;

/// A bounded least-recently-used map from query text to its embedding.
#[derive(Debug)]
pub struct QueryCache {
    // A mutex, not a sharded map: lookups are tiny next to the queries they save.
    entries: Option<Mutex<AdmittedLru<QueryVectors>>>,
}

impl QueryCache {
    /// A cache of `capacity` entries in each part (and at most 16 MiB and 1 MiB); 0
    /// disables it.
    pub fn new(capacity: usize) -> Self {
        Self::with_budget(capacity, BUDGET_BYTES, WINDOW_BYTES)
    }

    fn with_budget(capacity: usize, budget_bytes: usize, window_bytes: usize) -> Self {
        QueryCache {
            entries: NonZeroUsize::new(capacity)
                .map(|c| Mutex::new(AdmittedLru::new(c, budget_bytes, window_bytes))),
        }
    }

    pub fn get(&self, text: &str) -> Option<QueryVectors> {
        let entries = self.entries.as_ref()?;
        let hit = entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(text, |_| true)
            .cloned();
        metrics::counter!("butler_memory_query_cache_total", "outcome" => if hit.is_some() { "hit" } else { "miss" })
            .increment(1);
        hit
    }

    /// Keeps `embedding` for `text`: in the main part if `text` was looked up before.
    pub fn put(&self, text: String, embedding: QueryVectors) {
        if let Some(entries) = &self.entries {
            entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .put(text, |text| {
                    let weight = text.len() + embedding.bytes();
                    (embedding, weight)
                });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query as a read makes it: looked up, and embedded and kept if missing.
    fn ask(cache: &QueryCache, text: &str, vectors: &QueryVectors) -> bool {
        let hit = cache.get(text).is_some();
        if !hit {
            cache.put(text.to_owned(), vectors.clone());
        }
        hit
    }

    fn held(cache: &QueryCache) -> (usize, usize) {
        cache.entries.as_ref().unwrap().lock().unwrap().held()
    }

    #[test]
    fn a_query_asked_again_stays_through_distinct_ones() {
        let vector = QueryVectors::vector(vec![1.0; 384]);
        let cache = QueryCache::with_budget(1_000, 1 << 20, 10_000);
        assert!(!ask(&cache, "good morning", &vector));
        assert!(ask(&cache, "good morning", &vector), "found in the window");
        for i in 0..500 {
            assert!(!ask(&cache, &format!("fresh prompt {i}"), &vector));
        }
        let (main, window) = held(&cache);
        assert_eq!(
            main,
            "good morning".len() + 4 * 384,
            "only the repeated query"
        );
        assert!(window <= 10_000, "{window}");
        assert!(ask(&cache, "good morning", &vector));
        assert!(
            !ask(&cache, "fresh prompt 3", &vector),
            "asked once, long gone"
        );
    }

    #[test]
    fn long_queries_are_bounded_by_their_bytes() {
        let vector = QueryVectors::vector(vec![0.0; 384]);
        let cache = QueryCache::with_budget(100, 10_000, 0);
        for i in 0..5 {
            let text = format!("{i}{}", "q".repeat(3000));
            assert!(!ask(&cache, &text, &vector), "no window");
            assert!(!ask(&cache, &text, &vector), "asked again: kept now");
        }
        let (main, window) = held(&cache);
        assert!(main <= 10_000 && window == 0, "{main} {window}");
        assert!(cache.get(&format!("0{}", "q".repeat(3000))).is_none());
        assert!(cache.get(&format!("4{}", "q".repeat(3000))).is_some());
    }

    /// A remembered question weighs its bytes too: the budget holds fewer queries with
    /// questions than without, never more bytes.
    #[test]
    fn questions_count_against_the_budget() {
        use crate::embedder::TokenVectors;
        let mut rows = vec![0.0f32; 2 * crate::embedder::DIMENSIONS];
        rows[0] = 1.0;
        rows[crate::embedder::DIMENSIONS + 1] = 1.0;
        let question = Arc::new(SketchQuery::new(&TokenVectors::new(
            rows,
            &["garden", "party"],
        )));
        let with_question = QueryVectors {
            vector: Arc::new(vec![0.0; 384]),
            question: Some(question.clone()),
        };
        let entry = 2 + with_question.bytes();
        assert_eq!(entry, 2 + 4 * 384 + question.bytes());
        let cache = QueryCache::with_budget(100, 3 * entry, 0);
        for i in 10..20 {
            ask(&cache, &i.to_string(), &with_question);
            ask(&cache, &i.to_string(), &with_question);
        }
        assert_eq!(
            held(&cache),
            (3 * entry, 0),
            "three queries with their questions fit"
        );
        assert_eq!(cache.get("19"), Some(with_question));
        assert!(cache.get("16").is_none());
    }

    #[test]
    fn zero_capacity_disables_it() {
        let cache = QueryCache::new(0);
        let vector = QueryVectors::vector(vec![1.0]);
        assert!(!ask(&cache, "a", &vector));
        assert!(!ask(&cache, "a", &vector));
    }
}
