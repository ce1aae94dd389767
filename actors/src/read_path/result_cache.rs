//! Recently computed read results, for repeated requests: session-start prompts and
//! scheduled triggers repeat, and a read costs several index scans where a hit costs a
//! lookup. A result is served again only while nothing was written to its tenant since it
//! was computed (the tenant's write generation is unchanged) and for at most `ttl` of
//! engine-clock time, so scores drift with time by at most that much. Degraded results
//! are never kept. Answers to requests asked once so far are kept in a small window of
//! their own, those asked again in the main part (W-TinyLFU's shape, `admitted_lru.rs`): under
//! distinct requests only the window fills.

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

use super::admitted_lru::AdmittedLru;
use crate::domain::context_block::ContextOutcome;
use crate::domain::search::{Candidate, Hit, SearchOutcome};

/// A cached answer.
#[derive(Debug, Clone)]
pub enum Cached {
    Search(Arc<SearchOutcome>),
    Context(Arc<ContextOutcome>),
}

impl Cached {
    /// The bytes the answer holds: its structs, and every string, list and map they own, by
    /// capacity (the allocator's rounding aside). `result_cache_bytes` is a budget of
    /// memory, so a field left out here would let the cache outgrow it; the test
    /// `an_answers_weight_is_what_it_holds` checks the sum against an allocator's count.
    fn weight(&self) -> usize {
        match self {
            Cached::Search(outcome) => {
                size_of::<SearchOutcome>()
                    + outcome.hits.capacity() * size_of::<Hit>()
                    + outcome
                        .hits
                        .iter()
                        .map(|hit| candidate_heap(&hit.candidate))
                        .sum::<usize>()
                    + outcome
                        .stated_time
                        .as_ref()
                        .map_or(0, |s| s.phrase.capacity())
            }
            Cached::Context(outcome) => {
                let ids = &outcome.block.sections;
                size_of::<ContextOutcome>()
                    + outcome.block.text.capacity()
                    + size_of::<uuid::Uuid>()
                        * (ids.facts.capacity() + ids.rules.capacity() + ids.episodes.capacity())
            }
        }
    }
}

/// What a candidate owns on the heap.
fn candidate_heap(c: &Candidate) -> usize {
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::capacity);
    c.content.capacity()
        + [
            &c.subject,
            &c.predicate,
            &c.scope,
            &c.permanence,
            &c.validity,
            &c.maturity,
            &c.butler,
            &c.session_id,
            &c.tenant_id,
        ]
        .into_iter()
        .map(text)
        .sum::<usize>()
        + c.sealed.as_ref().map_or(0, Vec::capacity)
        + value_heap(&c.metadata)
}

/// What a JSON value owns on the heap. An object is serde_json's B-tree: leaves of up to
/// eleven keys and values, allocated whole, and above them internal nodes that also hold
/// their children's pointers. Keys inserted in order (as `jsonb` gives them back, shortest
/// first) fill the last leaf to eleven, and each split leaves six behind and sends one up: a
/// leaf more per seven entries past the first eleven.
fn value_heap(value: &serde_json::Value) -> usize {
    const LEAF: usize = 11 * size_of::<(String, serde_json::Value)>() + 16;
    const INTERNAL: usize = LEAF + 12 * size_of::<usize>();
    match value {
        serde_json::Value::String(s) => s.capacity(),
        serde_json::Value::Array(items) => {
            items.capacity() * size_of::<serde_json::Value>()
                + items.iter().map(value_heap).sum::<usize>()
        }
        serde_json::Value::Object(map) => {
            let nodes = match map.len() {
                0 => 0,
                1..=11 => LEAF,
                n => {
                    let leaves = 1 + (n - 11).div_ceil(7);
                    let internal = if leaves <= 12 {
                        1
                    } else {
                        1 + leaves.div_ceil(7)
                    };
                    leaves * LEAF + internal * INTERNAL
                }
            };
            nodes
                + map
                    .iter()
                    .map(|(k, v)| k.capacity() + value_heap(v))
                    .sum::<usize>()
        }
        _ => 0,
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
    entries: Option<Mutex<AdmittedLru<Entry>>>,
    ttl: Duration,
}

/// How the result cache is bounded.
#[derive(Debug, Clone, Copy)]
pub struct ResultCacheLimits {
    /// Answers in all, in each part.
    pub capacity: usize,
    /// Bytes of answers to requests asked again.
    pub main_bytes: usize,
    /// Bytes of answers to requests asked once so far (0: those are not kept).
    pub window_bytes: usize,
    /// How long an answer may be served.
    pub ttl_ms: u64,
}

impl ResultCache {
    /// A capacity, main part or TTL of 0 disables the cache.
    pub fn new(limits: ResultCacheLimits) -> Self {
        ResultCache {
            entries: NonZeroUsize::new(limits.capacity)
                .filter(|_| limits.main_bytes > 0 && limits.ttl_ms > 0)
                .map(|c| Mutex::new(AdmittedLru::new(c, limits.main_bytes, limits.window_bytes))),
            ttl: Duration::milliseconds(limits.ttl_ms as i64),
        }
    }

    /// The cached result for `key`, if still valid at `generation` and `now`.
    pub fn get(&self, key: &str, generation: u64, now: DateTime<Utc>) -> Option<Cached> {
        let entries = self.entries.as_ref()?;
        let mut entries = entries.lock().unwrap_or_else(|p| p.into_inner());
        let valid = |e: &Entry| e.generation == generation && self.fresh(e, now);
        let hit = entries.get(key, valid).map(|e| e.value.clone());
        metrics::counter!("butler_memory_result_cache_total", "outcome" => if hit.is_some() { "hit" } else { "miss" })
            .increment(1);
        hit
    }

    /// Keeps the answer `value` makes for `key`: in the main part if the request was asked
    /// before (`get` counts the askings), else in the window. `value` is called only if the
    /// answer is kept, so one that is not is not copied either.
    pub fn put(
        &self,
        key: String,
        generation: u64,
        computed_at: DateTime<Utc>,
        value: impl FnOnce() -> Cached,
    ) {
        let Some(entries) = &self.entries else {
            return;
        };
        let mut entries = entries.lock().unwrap_or_else(|p| p.into_inner());
        // Answers past their TTL at the old end go now, not when the budget is full.
        entries.drop_stale_lru(|e| !self.fresh(e, computed_at));
        entries.put(key, |key| {
            let value = value();
            // The key and the entry are held beside the answer.
            let weight = key.capacity() + size_of::<Entry>() + value.weight();
            let entry = Entry {
                generation,
                computed_at,
                value,
            };
            (entry, weight)
        });
        let ((main, window), (in_main, in_window)) = (entries.held(), entries.lens());
        metrics::gauge!("butler_memory_result_cache_bytes").set((main + window) as f64);
        metrics::gauge!("butler_memory_result_cache_entries").set((in_main + in_window) as f64);
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
            stated_time: None,
        }))
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

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-06-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn cache(capacity: usize, main_bytes: usize, window_bytes: usize, ttl_ms: u64) -> ResultCache {
        ResultCache::new(ResultCacheLimits {
            capacity,
            main_bytes,
            window_bytes,
            ttl_ms,
        })
    }

    /// A request that misses, and its answer put: as a read does.
    fn asked(cache: &ResultCache, key: &str, generation: u64, at: DateTime<Utc>, value: Cached) {
        assert!(cache.get(key, generation, at).is_none(), "{key} was cached");
        cache.put(key.into(), generation, at, || value);
    }

    /// The bytes held in the main part and in the window.
    fn held(cache: &ResultCache) -> (usize, usize) {
        cache.entries.as_ref().unwrap().lock().unwrap().held()
    }

    /// What `make` returns, and the bytes it allocated on this thread (`allocation-counter`
    /// is the global allocator of these tests and counts per thread).
    fn allocated_by<T>(make: impl FnOnce() -> T) -> (T, usize) {
        let mut made = None;
        let counted = allocation_counter::measure(|| made = Some(make()));
        (made.expect("made"), counted.bytes_total as usize)
    }

    /// A search's answer as the store makes them: facts, episodes and rules with their
    /// optional texts, a sealed fact, small and large metadata objects, a list in each.
    fn search_answer() -> SearchOutcome {
        use crate::domain::memory_type::MemoryType;
        use crate::domain::search::{Candidate, ComponentScores, Hit};
        let hits = (0..20u128)
            .map(|n| {
                let kind =
                    [MemoryType::Fact, MemoryType::Episode, MemoryType::Rule][n as usize % 3];
                let fact = kind == MemoryType::Fact;
                let keys = [3, 0, 15, 3, 40, 100][n as usize % 6];
                // Parsed from text, as the store decodes `jsonb` (which gives keys
                // shortest first): serde_json inserts them one at a time.
                let mut fields: Vec<String> = (0..keys)
                    .map(|k| format!("\"key{k}\": \"value {n} {k}\""))
                    .collect();
                fields.push(r#""tags": ["home", "boiler"]"#.to_owned());
                fields.sort_by_key(|f| (f.find(':'), f.clone()));
                let metadata: serde_json::Value =
                    serde_json::from_str(&format!("{{{}}}", fields.join(", "))).unwrap();
                let at = t0();
                Hit {
                    candidate: Candidate {
                        content: "The plumber fixed the boiler on Tuesday. "
                            .repeat(1 + n as usize % 7),
                        subject: fact.then(|| "user".to_owned()),
                        predicate: fact.then(|| "home_repairs".to_owned()),
                        scope: fact.then(|| "global".to_owned()),
                        permanence: fact.then(|| "standard".to_owned()),
                        validity: fact.then(|| "active".to_owned()),
                        butler: Some("health".to_owned()),
                        session_id: (kind == MemoryType::Episode).then(|| format!("session-{n}")),
                        maturity: (kind == MemoryType::Rule).then(|| "established".to_owned()),
                        // A sealed fact, before the store opens it.
                        tenant_id: (fact && n % 4 == 0).then(|| "tenant-a".to_owned()),
                        key_version: (fact && n % 4 == 0).then_some(1),
                        sealed: (fact && n % 4 == 0).then(|| vec![7; 96]),
                        metadata,
                        ..Candidate::fixture(kind, n, at)
                    },
                    score: 0.5,
                    scores: ComponentScores::blank(),
                }
            })
            .collect();
        SearchOutcome {
            hits,
            mode: SearchMode::Hybrid,
            degraded: false,
            intent: None,
            rerank_skipped: false,
            stated_time: None,
        }
    }

    /// The weight that bounds the cache is what an answer holds: counted by the allocator
    /// while a copy is made (a copy allocates every string, list and map node the answer
    /// owns), it is neither under that (the cache would outgrow its budget) nor far over.
    #[test]
    fn an_answers_weight_is_what_it_holds() {
        let search = search_answer();
        // Each record alone, so that a field left out shows even beside the B-tree's
        // estimate of a large object.
        for hit in &search.hits {
            let (copy, allocated) = allocated_by(|| hit.candidate.clone());
            assert_weighs_what_it_holds(&copy.id.to_string(), candidate_heap(&copy), allocated);
        }
        let (copy, allocated) = allocated_by(|| search.clone());
        let weight = Cached::Search(Arc::new(copy)).weight();
        assert_weighs_what_it_holds("search", weight, size_of::<SearchOutcome>() + allocated);

        let context = ContextOutcome {
            block: crate::domain::context_block::ContextBlock {
                text: "- The plumber fixed the boiler.\n".repeat(60),
                sections: crate::domain::context_block::IncludedIds {
                    facts: (0..12).map(uuid::Uuid::from_u128).collect(),
                    rules: (0..3).map(uuid::Uuid::from_u128).collect(),
                    episodes: (0..20).map(uuid::Uuid::from_u128).collect(),
                },
                tokens_used: 600,
                token_budget: 2000,
                candidates: 40,
                dropped: 5,
            },
            degraded: false,
            rerank_skipped: false,
        };
        let (copy, allocated) = allocated_by(|| context.clone());
        let weight = Cached::Context(Arc::new(copy)).weight();
        assert_weighs_what_it_holds("context", weight, size_of::<ContextOutcome>() + allocated);
    }

    /// At or above what the allocator counted (the cache must not outgrow its budget), and
    /// within a tenth of it.
    fn assert_weighs_what_it_holds(what: &str, weight: usize, held: usize) {
        assert!(
            weight >= held && weight <= held + held / 10,
            "{what}: weight {weight}, held {held}"
        );
    }

    #[test]
    fn a_write_or_time_invalidates() {
        let cache = cache(10, 1 << 20, 1 << 20, 5000);
        asked(&cache, "k", 3, t0(), outcome());
        assert!(cache.get("k", 3, t0() + Duration::seconds(4)).is_some());
        assert!(cache.get("k", 4, t0()).is_none(), "the tenant wrote since");
        cache.put("k".into(), 3, t0(), outcome);
        assert!(
            cache.get("k", 3, t0() + Duration::seconds(5)).is_none(),
            "too old"
        );
    }

    #[test]
    fn zero_ttl_disables() {
        let cache = cache(10, 1 << 20, 1 << 20, 0);
        asked(&cache, "k", 1, t0(), outcome());
        assert!(cache.get("k", 1, t0()).is_none());
    }

    /// Under distinct requests only the window fills; a request asked again keeps its
    /// answer in the main part, whether its first answer was still in the window or not.
    #[test]
    fn answers_to_requests_asked_once_stay_in_the_window() {
        let cache = cache(1000, 100_000, 1_000, 5000);
        asked(&cache, "hot", 1, t0(), answer(100));
        assert!(
            cache.get("hot", 1, t0()).is_some(),
            "served from the window"
        );
        for i in 0..100 {
            asked(&cache, &format!("once {i}"), 1, t0(), answer(100));
        }
        let (main, window) = held(&cache);
        assert!(
            main > 0 && main < 1_000,
            "only the answer asked again: {main}"
        );
        assert!(window <= 1_000, "{window}");
        assert!(
            cache.get("hot", 1, t0()).is_some(),
            "it outlived the window"
        );
        assert!(cache.get("once 0", 1, t0()).is_none(), "it left the window");
        cache.put("once 0".into(), 1, t0(), || answer(100));
        for i in 100..200 {
            asked(&cache, &format!("once {i}"), 1, t0(), answer(100));
        }
        assert!(
            cache.get("once 0", 1, t0()).is_some(),
            "asked again after it left the window: kept in the main part"
        );
    }

    #[test]
    fn without_a_window_an_answer_is_kept_from_its_second_asking() {
        let cache = cache(10, 1 << 20, 0, 5000);
        asked(&cache, "k", 1, t0(), outcome());
        assert_eq!(held(&cache), (0, 0));
        asked(&cache, "k", 1, t0(), outcome());
        assert!(cache.get("k", 1, t0()).is_some());
    }

    /// Large answers are bounded by the bytes they hold, not by their count, and answers
    /// past their TTL give their memory back at the next put.
    #[test]
    fn answers_are_bounded_by_their_bytes_and_expire_at_the_next_put() {
        let cache = cache(1000, 10_000, 5_000, 5000);
        for i in 0..10 {
            let key = format!("k{i}");
            asked(&cache, &key, 1, t0(), answer(3000));
            assert!(
                cache.get(&key, 1, t0()).is_some(),
                "{key} moves to the main part"
            );
        }
        let (main, window) = held(&cache);
        assert!(main <= 10_000 && window == 0, "{main} {window}");
        assert!(cache.get("k0", 1, t0()).is_none(), "the oldest went");
        assert!(cache.get("k9", 1, t0()).is_some());
        asked(&cache, "late", 1, t0() + Duration::seconds(6), answer(10));
        let entries = cache.entries.as_ref().unwrap().lock().unwrap();
        assert_eq!(entries.lens(), (0, 1), "the expired ones went");
    }
}
