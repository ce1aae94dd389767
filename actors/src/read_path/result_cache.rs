//! Recently computed read results, for repeated requests: session-start prompts and
//! scheduled triggers repeat, and a read costs several index scans where a hit costs a
//! lookup. A result is served again only while nothing was written to its tenant since it
//! was computed (the tenant's write generation is unchanged) and for at most `ttl` of
//! engine-clock time, so scores drift with time by at most that much. Degraded results
//! are never kept.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

use crate::byte_lru::ByteLru;
use crate::domain::context_block::ContextOutcome;
use crate::domain::search::SearchOutcome;

/// A cached answer.
#[derive(Debug, Clone)]
pub enum Cached {
    Search(Arc<SearchOutcome>),
    Context(Arc<ContextOutcome>),
}

impl Cached {
    /// About the bytes the answer holds: its texts, and a fixed share per hit or id for the
    /// rest. An estimate, but one that grows with what the memories say.
    fn weight(&self) -> usize {
        const PER_HIT: usize = 512;
        match self {
            Cached::Search(outcome) => outcome
                .hits
                .iter()
                .map(|hit| {
                    let c = &hit.candidate;
                    PER_HIT
                        + c.content.len()
                        + c.subject.as_ref().map_or(0, String::len)
                        + c.predicate.as_ref().map_or(0, String::len)
                        + metadata_len(&c.metadata)
                })
                .sum(),
            Cached::Context(outcome) => {
                let ids = &outcome.block.sections;
                PER_HIT
                    + outcome.block.text.len()
                    + 16 * (ids.facts.len() + ids.rules.len() + ids.episodes.len())
            }
        }
    }
}

/// The metadata's size, roughly: its strings and a little for everything else.
fn metadata_len(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::String(s) => s.len(),
        serde_json::Value::Array(items) => items.iter().map(metadata_len).sum::<usize>() + 8,
        serde_json::Value::Object(map) => {
            map.iter()
                .map(|(k, v)| k.len() + metadata_len(v))
                .sum::<usize>()
                + 8
        }
        _ => 8,
    }
}

#[derive(Debug)]
struct Entry {
    generation: u64,
    computed_at: DateTime<Utc>,
    value: Cached,
}

/// A bounded LRU of read results keyed by everything the result depends on, bounded by the
/// bytes the answers hold.
#[derive(Debug)]
pub struct ResultCache {
    // One mutex: a lookup is a hash and a pointer copy, far cheaper than the reads it saves.
    entries: Option<Mutex<ByteLru<String, Entry>>>,
    ttl: Duration,
}

impl ResultCache {
    /// At most `capacity` answers weighing at most `budget_bytes` in all, kept for `ttl_ms`
    /// each; any of them 0 disables the cache.
    pub fn new(capacity: usize, budget_bytes: usize, ttl_ms: u64) -> Self {
        ResultCache {
            entries: NonZeroUsize::new(capacity)
                .filter(|_| budget_bytes > 0 && ttl_ms > 0)
                .map(|c| Mutex::new(ByteLru::new(c, budget_bytes))),
            ttl: Duration::milliseconds(ttl_ms as i64),
        }
    }

    /// The cached result for `key`, if still valid at `generation` and `now`.
    pub fn get(&self, key: &str, generation: u64, now: DateTime<Utc>) -> Option<Cached> {
        let entries = self.entries.as_ref()?;
        let mut entries = entries.lock().unwrap_or_else(|p| p.into_inner());
        let hit = match entries.get(key) {
            Some(e) if e.generation == generation && self.fresh(e, now) => Some(e.value.clone()),
            Some(_) => {
                entries.remove(key);
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
            let weight = key.len() + value.weight();
            let mut entries = entries.lock().unwrap_or_else(|p| p.into_inner());
            // Answers past their TTL at the old end go now, not when the budget is full.
            entries.drop_stale_lru(|e| !self.fresh(e, computed_at));
            entries.put(
                key,
                Entry {
                    generation,
                    computed_at,
                    value,
                },
                weight,
            );
            metrics::gauge!("butler_memory_result_cache_bytes").set(entries.held() as f64);
            metrics::gauge!("butler_memory_result_cache_entries").set(entries.len() as f64);
        }
    }

    fn fresh(&self, entry: &Entry, now: DateTime<Utc>) -> bool {
        now >= entry.computed_at && now - entry.computed_at < self.ttl
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
            intent: None,
            rerank_skipped: false,
        }))
    }

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-06-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn a_write_or_time_invalidates() {
        let cache = ResultCache::new(10, 1 << 20, 5000);
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
        let cache = ResultCache::new(10, 1 << 20, 0);
        cache.put("k".into(), 1, t0(), outcome());
        assert!(cache.get("k", 1, t0()).is_none());
    }

    fn answer(text_bytes: usize) -> Cached {
        Cached::Context(Arc::new(ContextOutcome {
            block: crate::domain::context_block::ContextBlock {
                text: "x".repeat(text_bytes),
                sections: Default::default(),
                tokens_used: 1,
                token_budget: 1,
                candidates: 1,
                dropped: 0,
            },
            degraded: false,
            rerank_skipped: false,
        }))
    }

    /// Large answers are bounded by the bytes they hold, not by their count, and answers
    /// past their TTL give their memory back at the next put.
    #[test]
    fn answers_are_bounded_by_their_bytes_and_expire_at_the_next_put() {
        let cache = ResultCache::new(1000, 10_000, 5000);
        for i in 0..10 {
            cache.put(format!("k{i}"), 1, t0(), answer(3000));
        }
        let held = |c: &ResultCache| c.entries.as_ref().unwrap().lock().unwrap().held();
        assert!(held(&cache) <= 10_000, "{}", held(&cache));
        assert!(cache.get("k0", 1, t0()).is_none(), "the oldest went");
        assert!(cache.get("k9", 1, t0()).is_some());
        cache.put("late".into(), 1, t0() + Duration::seconds(6), answer(10));
        assert_eq!(
            cache.entries.as_ref().unwrap().lock().unwrap().len(),
            1,
            "the expired ones went"
        );
    }
}
