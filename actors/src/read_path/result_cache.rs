//! Recently computed read results, for repeated requests: session-start prompts and
//! scheduled triggers repeat, and a read costs several index scans where a hit costs a
//! lookup. A result is served again only while nothing was written to its tenant since it
//! was computed (the tenant's write generation is unchanged) and for at most `ttl` of
//! engine-clock time, so scores drift with time by at most that much. Degraded results
//! are never kept.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};
use lru::LruCache;

use crate::domain::context_block::ContextOutcome;
use crate::domain::search::SearchOutcome;

/// A cached answer.
#[derive(Debug, Clone)]
pub enum Cached {
    Search(Arc<SearchOutcome>),
    Context(Arc<ContextOutcome>),
}

#[derive(Debug)]
struct Entry {
    generation: u64,
    computed_at: DateTime<Utc>,
    value: Cached,
}

/// A bounded LRU of read results keyed by everything the result depends on.
#[derive(Debug)]
pub struct ResultCache {
    // One mutex: a lookup is a hash and a pointer copy, far cheaper than the reads it saves.
    entries: Option<Mutex<LruCache<String, Entry>>>,
    ttl: Duration,
}

impl ResultCache {
    /// `capacity` entries kept for `ttl_ms` each; either 0 disables the cache.
    pub fn new(capacity: usize, ttl_ms: u64) -> Self {
        ResultCache {
            entries: NonZeroUsize::new(capacity)
                .filter(|_| ttl_ms > 0)
                .map(|c| Mutex::new(LruCache::new(c))),
            ttl: Duration::milliseconds(ttl_ms as i64),
        }
    }

    /// The cached result for `key`, if still valid at `generation` and `now`.
    pub fn get(&self, key: &str, generation: u64, now: DateTime<Utc>) -> Option<Cached> {
        let entries = self.entries.as_ref()?;
        let mut entries = entries.lock().unwrap_or_else(|p| p.into_inner());
        let hit = match entries.get(key) {
            Some(e)
                if e.generation == generation
                    && now >= e.computed_at
                    && now - e.computed_at < self.ttl =>
            {
                Some(e.value.clone())
            }
            Some(_) => {
                entries.pop(key);
                None
            }
            None => None,
        };
        metrics::counter!("butler_memory_result_cache_total", "outcome" => if hit.is_some() { "hit" } else { "miss" })
            .increment(1);
        hit
    }

    pub fn put(&self, key: String, generation: u64, computed_at: DateTime<Utc>, value: Cached) {
        if let Some(entries) = &self.entries {
            entries.lock().unwrap_or_else(|p| p.into_inner()).put(
                key,
                Entry {
                    generation,
                    computed_at,
                    value,
                },
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::search::SearchMode;

    fn outcome() -> Cached {
        Cached::Search(Arc::new(SearchOutcome {
            hits: vec![],
            mode: SearchMode::Hybrid,
            degraded: false,
        }))
    }

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-06-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn a_write_or_time_invalidates() {
        let cache = ResultCache::new(10, 5000);
        cache.put("k".into(), 3, t0(), outcome());
        assert!(cache.get("k", 3, t0() + Duration::seconds(4)).is_some());
        assert!(cache.get("k", 4, t0()).is_none(), "the tenant wrote since");
        cache.put("k".into(), 3, t0(), outcome());
        assert!(
            cache.get("k", 3, t0() + Duration::seconds(5)).is_none(),
            "too old"
        );
    }

    #[test]
    fn zero_ttl_disables() {
        let cache = ResultCache::new(10, 0);
        cache.put("k".into(), 1, t0(), outcome());
        assert!(cache.get("k", 1, t0()).is_none());
    }
}
