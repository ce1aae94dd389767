//! A least-recently-used map bounded by the bytes its entries hold, as well as by their
//! number: the caches of answers and token counts keep whatever text the memories hold, and
//! a count of entries says nothing of how much memory a few very large ones take. Inserting
//! evicts from the least recently used end until the entries' weights fit the budget; an
//! entry larger than the whole budget is not kept at all.

use std::borrow::Borrow;
use std::hash::Hash;
use std::num::NonZeroUsize;

use lru::LruCache;

/// An LRU map whose entries weigh what `weigh` says, at most `budget` in all.
pub struct ByteLru<K: Hash + Eq, V> {
    entries: LruCache<K, (V, usize)>,
    budget: usize,
    held: usize,
}

impl<K: Hash + Eq, V> std::fmt::Debug for ByteLru<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteLru")
            .field("entries", &self.entries.len())
            .field("held", &self.held)
            .field("budget", &self.budget)
            .finish()
    }
}

impl<K: Hash + Eq, V> ByteLru<K, V> {
    /// A map holding at most `entries` entries and `budget` bytes of them.
    pub fn new(entries: NonZeroUsize, budget: usize) -> Self {
        ByteLru {
            entries: LruCache::new(entries),
            budget,
            held: 0,
        }
    }

    /// The value for `key`, now the most recently used.
    pub fn get<Q>(&mut self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.entries.get(key).map(|(value, _)| value)
    }

    /// Keeps `value` (weighing `weight` bytes, key included) as the most recently used,
    /// evicting the least recently used entries until everything fits.
    pub fn put(&mut self, key: K, value: V, weight: usize) {
        if let Some((_, old)) = self.entries.pop(&key) {
            self.held -= old;
        }
        if weight > self.budget {
            return;
        }
        while self.held + weight > self.budget {
            match self.entries.pop_lru() {
                Some((_, (_, old))) => self.held -= old,
                None => break,
            }
        }
        self.held += weight;
        if let Some((_, (_, evicted))) = self.entries.push(key, (value, weight)) {
            // At its count of entries: the least recently used made room.
            self.held -= evicted;
        }
    }

    /// Drops `key`'s entry.
    pub fn remove<Q>(&mut self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.take(key);
    }

    /// Takes `key`'s entry out, with its weight.
    pub fn take<Q>(&mut self, key: &Q) -> Option<(V, usize)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let (value, weight) = self.entries.pop(key)?;
        self.held -= weight;
        Some((value, weight))
    }

    /// Drops entries from the least recently used end while `stale` says so, so that
    /// entries nobody asks for any more give their memory back without waiting for an
    /// eviction.
    pub fn drop_stale_lru(&mut self, stale: impl Fn(&V) -> bool) {
        while let Some((_, (value, _))) = self.entries.peek_lru() {
            if !stale(value) {
                break;
            }
            if let Some((_, (_, weight))) = self.entries.pop_lru() {
                self.held -= weight;
            }
        }
    }

    /// Bytes the entries may weigh in all.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Bytes the entries weigh.
    pub fn held(&self) -> usize {
        self.held
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_go_until_the_new_one_fits() {
        let mut lru = ByteLru::new(NonZeroUsize::new(10).unwrap(), 100);
        lru.put("a", 1, 40);
        lru.put("b", 2, 40);
        assert_eq!(lru.get("a"), Some(&1));
        lru.put("c", 3, 40);
        assert_eq!(lru.get("b"), None, "the least recently used went");
        assert_eq!(lru.held(), 80);
        lru.put("a", 4, 10);
        assert_eq!(lru.held(), 50, "a replaced entry gives its weight back");
    }

    #[test]
    fn a_taken_entry_gives_its_weight_back() {
        let mut lru = ByteLru::new(NonZeroUsize::new(10).unwrap(), 100);
        lru.put("a", 1, 40);
        assert_eq!(lru.take("a"), Some((1, 40)));
        assert_eq!((lru.take("a"), lru.held(), lru.len()), (None, 0, 0));
    }

    #[test]
    fn the_count_of_entries_bounds_too() {
        let mut lru = ByteLru::new(NonZeroUsize::new(2).unwrap(), 1000);
        for i in 0..3 {
            lru.put(i, i, 10);
        }
        assert_eq!((lru.len(), lru.held()), (2, 20));
        assert_eq!(lru.get(&0), None);
    }

    #[test]
    fn an_entry_over_the_whole_budget_is_not_kept() {
        let mut lru = ByteLru::new(NonZeroUsize::new(10).unwrap(), 100);
        lru.put("small", 1, 10);
        lru.put("huge", 2, 101);
        assert_eq!(lru.get("huge"), None);
        assert_eq!(lru.get("small"), Some(&1), "and it evicts nothing");
    }

    #[test]
    fn stale_entries_at_the_old_end_give_their_memory_back() {
        let mut lru = ByteLru::new(NonZeroUsize::new(10).unwrap(), 100);
        for i in 0..5 {
            lru.put(i, i, 10);
        }
        lru.drop_stale_lru(|v| *v < 3);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.held(), 20);
        lru.remove(&4);
        assert_eq!(lru.held(), 10);
    }
}
