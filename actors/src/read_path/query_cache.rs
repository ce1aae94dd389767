//! Query embeddings remembered by text. Session-start prompts repeat ("good morning",
//! scheduled triggers), and embedding is the costliest part of a read; the model is
//! deterministic, so a cached vector is exactly the one the model would give.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use lru::LruCache;

/// A bounded least-recently-used map from query text to its embedding.
#[derive(Debug)]
pub struct QueryCache {
    // A mutex, not a sharded map: lookups are tiny next to the queries they save.
    entries: Option<Mutex<LruCache<String, Arc<Vec<f32>>>>>,
}

impl QueryCache {
    /// A cache of `capacity` entries; 0 disables it.
    pub fn new(capacity: usize) -> Self {
        QueryCache {
            entries: NonZeroUsize::new(capacity).map(|c| Mutex::new(LruCache::new(c))),
        }
    }

    pub fn get(&self, text: &str) -> Option<Arc<Vec<f32>>> {
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

    pub fn put(&self, text: String, embedding: Arc<Vec<f32>>) {
        if let Some(entries) = &self.entries {
            entries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .put(text, embedding);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_most_recent_entries() {
        let cache = QueryCache::new(2);
        cache.put("a".into(), Arc::new(vec![1.0]));
        cache.put("b".into(), Arc::new(vec![2.0]));
        assert!(cache.get("a").is_some());
        cache.put("c".into(), Arc::new(vec![3.0]));
        assert!(cache.get("b").is_none(), "least recently used goes first");
        assert_eq!(cache.get("a").unwrap()[0], 1.0);
    }

    #[test]
    fn zero_capacity_disables_it() {
        let cache = QueryCache::new(0);
        cache.put("a".into(), Arc::new(vec![1.0]));
        assert!(cache.get("a").is_none());
    }
}
