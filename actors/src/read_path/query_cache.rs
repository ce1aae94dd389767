//! Query embeddings remembered by text. Session-start prompts repeat ("good morning",
//! scheduled triggers), and embedding is the costliest part of a read; the model is
//! deterministic, so a cached vector is exactly the one the model would give. With the
//! second stage on, the question's projected tokens are remembered beside it.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use crate::byte_lru::ByteLru;
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

/// The most bytes the remembered texts and vectors hold: a query may be 32 KiB, and a count
/// of entries alone would let a few thousand long ones take a hundred megabytes.
const BUDGET_BYTES: usize = 16 << 20;

/// A bounded least-recently-used map from query text to its embedding.
#[derive(Debug)]
pub struct QueryCache {
    // A mutex, not a sharded map: lookups are tiny next to the queries they save.
    entries: Option<Mutex<ByteLru<String, QueryVectors>>>,
}

impl QueryCache {
    /// A cache of `capacity` entries (and at most 16 MiB); 0 disables it.
    pub fn new(capacity: usize) -> Self {
        Self::with_budget(capacity, BUDGET_BYTES)
    }

    fn with_budget(capacity: usize, budget_bytes: usize) -> Self {
        QueryCache {
            entries: NonZeroUsize::new(capacity).map(|c| Mutex::new(ByteLru::new(c, budget_bytes))),
        }
    }

    pub fn get(&self, text: &str) -> Option<QueryVectors> {
        let entries = self.entries.as_ref()?;
        let hit = entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(text)
            .cloned();
        metrics::counter!("butler_memory_query_cache_total", "outcome" => if hit.is_some() { "hit" } else { "miss" })
            .increment(1);
        hit
    }

    pub fn put(&self, text: String, embedding: QueryVectors) {
        if let Some(entries) = &self.entries {
            let weight = text.len() + embedding.bytes();
            entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .put(text, embedding, weight);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_most_recent_entries() {
        let cache = QueryCache::new(2);
        cache.put("a".into(), QueryVectors::vector(vec![1.0]));
        cache.put("b".into(), QueryVectors::vector(vec![2.0]));
        assert!(cache.get("a").is_some());
        cache.put("c".into(), QueryVectors::vector(vec![3.0]));
        assert!(cache.get("b").is_none(), "least recently used goes first");
        assert_eq!(cache.get("a").unwrap().vector[0], 1.0);
    }

    #[test]
    fn long_queries_are_bounded_by_their_bytes() {
        let cache = QueryCache::with_budget(100, 10_000);
        for i in 0..5 {
            cache.put(
                format!("{i}{}", "q".repeat(3000)),
                QueryVectors::vector(vec![0.0; 384]),
            );
        }
        let held = cache.entries.as_ref().unwrap().lock().unwrap().held();
        assert!(held <= 10_000, "{held}");
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
        let cache = QueryCache::with_budget(100, 3 * entry);
        for i in 10..20 {
            cache.put(i.to_string(), with_question.clone());
        }
        let held = cache.entries.as_ref().unwrap().lock().unwrap().held();
        assert_eq!(held, 3 * entry, "three queries with their questions fit");
        assert_eq!(cache.get("19"), Some(with_question));
        assert!(cache.get("16").is_none());
    }

    #[test]
    fn zero_capacity_disables_it() {
        let cache = QueryCache::new(0);
        cache.put("a".into(), QueryVectors::vector(vec![1.0]));
        assert!(cache.get("a").is_none());
    }
}
