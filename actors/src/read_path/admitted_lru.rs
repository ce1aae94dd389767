//! A byte-bounded LRU that keeps what was asked for once apart from what was asked for
//! again (W-TinyLFU's shape, as in Caffeine and moka): values for keys asked once so far go
//! to a small window, values for keys asked again to the main part, and a key asked again
//! while its value is in the window moves it there. Most requests that repeat do so many
//! times (a session-start prompt, a retried call, a dashboard's refresh) and one asked once
//! is usually never asked again: under distinct requests (fresh prompts, a crawl) only the
//! window fills, and the main part keeps what repeats instead of churning through megabytes
//! of values nobody asks for twice. The result cache and the query cache are both one.

use std::num::NonZeroUsize;

use super::doorkeeper::Doorkeeper;
use crate::byte_lru::ByteLru;

/// Keys the doorkeeper remembers, per value the cache may hold: a key must be asked again
/// before this many others are for its value to go to the main part without passing
/// through the window.
const ASKED_PER_VALUE: usize = 4;

#[derive(Debug)]
pub struct AdmittedLru<V> {
    /// Values for keys asked again.
    main: ByteLru<String, V>,
    /// Values for keys asked once so far; one asked again moves to `main`.
    window: ByteLru<String, V>,
    doorkeeper: Doorkeeper,
}

impl<V> AdmittedLru<V> {
    /// At most `capacity` values in each part, `main_bytes` of them in the main part and
    /// `window_bytes` in the window (0: values for keys asked once are not kept).
    pub fn new(capacity: NonZeroUsize, main_bytes: usize, window_bytes: usize) -> Self {
        AdmittedLru {
            main: ByteLru::new(capacity, main_bytes),
            window: ByteLru::new(capacity, window_bytes),
            doorkeeper: Doorkeeper::new(capacity.get().saturating_mul(ASKED_PER_VALUE)),
        }
    }

    /// The value for `key` if there is one and `valid` holds for it (one that does not is
    /// dropped). A miss counts as an asking, so that the value `put` next goes to the main
    /// part if `key` was asked before.
    pub fn get(&mut self, key: &str, valid: impl Fn(&V) -> bool) -> Option<&V> {
        let in_main = match self.main.get(key) {
            Some(v) if valid(v) => true,
            Some(_) => {
                self.main.remove(key);
                false
            }
            // Asked again while its value is in the window: the value moves to the main part.
            None => match self.window.take(key) {
                Some((v, weight)) if valid(&v) => {
                    self.main.put(key.to_owned(), v, weight);
                    true
                }
                _ => false,
            },
        };
        if !in_main {
            self.doorkeeper.asked(key);
            return None;
        }
        // Found again to be returned: a borrow returned from one arm of the match above
        // would hold `main` through the arms that change it.
        self.main.get(key)
    }

    /// Keeps the value `make` gives (with its weight) for `key`: in the main part if `key`
    /// was asked before, else in the window. `make` is called only if the part has a
    /// budget, so a value that is not kept is not built either.
    pub fn put(&mut self, key: String, make: impl FnOnce(&String) -> (V, usize)) {
        let part = if self.doorkeeper.asked_again(&key) {
            &mut self.main
        } else {
            &mut self.window
        };
        if part.budget() > 0 {
            let (value, weight) = make(&key);
            part.put(key, value, weight);
        }
    }

    /// Drops the least recently used values of both parts for which `stale` holds, up to
    /// the first that is not.
    pub fn drop_stale_lru(&mut self, stale: impl Fn(&V) -> bool) {
        self.main.drop_stale_lru(&stale);
        self.window.drop_stale_lru(&stale);
    }

    /// The bytes held in the main part and in the window.
    pub fn held(&self) -> (usize, usize) {
        (self.main.held(), self.window.held())
    }

    /// The values held in the main part and in the window.
    pub fn lens(&self) -> (usize, usize) {
        (self.main.len(), self.window.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lru(main: usize, window: usize) -> AdmittedLru<u32> {
        AdmittedLru::new(NonZeroUsize::new(100).unwrap(), main, window)
    }

    fn ask(lru: &mut AdmittedLru<u32>, key: &str, value: u32) -> Option<u32> {
        let hit = lru.get(key, |_| true).copied();
        if hit.is_none() {
            lru.put(key.to_owned(), |_| (value, 10));
        }
        hit
    }

    #[test]
    fn keys_asked_once_fill_only_the_window() {
        let mut lru = lru(1_000, 30);
        for i in 0..50 {
            assert_eq!(ask(&mut lru, &i.to_string(), i), None);
        }
        assert_eq!(
            lru.held(),
            (0, 30),
            "three values in the window, none in main"
        );
    }

    #[test]
    fn a_key_asked_again_moves_to_the_main_part_and_stays() {
        let mut lru = lru(1_000, 30);
        ask(&mut lru, "prompt", 7);
        assert_eq!(ask(&mut lru, "prompt", 7), Some(7), "from the window");
        for i in 0..50 {
            ask(&mut lru, &i.to_string(), i);
        }
        assert_eq!(lru.held(), (10, 30));
        assert_eq!(
            ask(&mut lru, "prompt", 7),
            Some(7),
            "kept through the churn"
        );
    }

    #[test]
    fn a_key_asked_again_after_the_window_forgot_it_goes_to_main() {
        let mut lru = lru(1_000, 10);
        ask(&mut lru, "prompt", 7);
        ask(&mut lru, "other", 8);
        assert_eq!(ask(&mut lru, "prompt", 7), None, "left the window");
        assert_eq!(lru.held(), (10, 10));
        for i in 0..5 {
            ask(&mut lru, &i.to_string(), i);
        }
        assert_eq!(ask(&mut lru, "prompt", 7), Some(7));
    }

    #[test]
    fn an_invalid_value_is_dropped_and_the_asking_counted() {
        let mut lru = lru(1_000, 30);
        ask(&mut lru, "k", 1);
        assert_eq!(lru.get("k", |v| *v != 1), None);
        assert_eq!(lru.held(), (0, 0));
        lru.put("k".to_owned(), |_| (2, 10));
        assert_eq!(
            lru.held(),
            (10, 0),
            "asked twice: its next value goes to main"
        );
    }

    #[test]
    fn nothing_is_built_for_a_part_without_budget() {
        let mut lru = lru(1_000, 0);
        lru.put("k".to_owned(), |_| panic!("built for nothing"));
        assert_eq!(lru.lens(), (0, 0));
    }
}
