//! Which requests were asked before: TinyLFU's "doorkeeper" (as in Caffeine and moka), for
//! the caches that keep a value for a request asked once apart from one asked again
//! (`admitted_lru.rs`). A request whose value left the window before it was asked again is
//! known here by a few bytes, and its next value goes to the main part.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

/// Counts how often each request was asked, by a hash of its key, since it last forgot.
#[derive(Debug)]
pub struct Doorkeeper {
    asked: HashMap<u64, u8>,
    capacity: usize,
    hasher: RandomState,
}

impl Doorkeeper {
    /// Remembers at most `capacity` requests; then it forgets them all at once (TinyLFU's
    /// reset), so that a request asked once long ago does not count as asked again.
    pub fn new(capacity: usize) -> Self {
        Doorkeeper {
            asked: HashMap::new(),
            capacity: capacity.max(1),
            hasher: RandomState::new(),
        }
    }

    /// Notes that `key` was asked and not answered from the cache.
    pub fn asked(&mut self, key: &str) {
        let hash = self.hasher.hash_one(key);
        if !self.asked.contains_key(&hash) && self.asked.len() >= self.capacity {
            self.asked.clear();
        }
        let count = self.asked.entry(hash).or_insert(0);
        *count = count.saturating_add(1);
    }

    /// Whether `key` was asked more than once.
    pub fn asked_again(&self, key: &str) -> bool {
        self.asked
            .get(&self.hasher.hash_one(key))
            .is_some_and(|&count| count > 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_counts_as_asked_again_from_its_second_asking() {
        let mut door = Doorkeeper::new(8);
        assert!(!door.asked_again("a"), "never asked");
        door.asked("a");
        assert!(!door.asked_again("a"), "asked once");
        door.asked("a");
        assert!(door.asked_again("a"), "asked twice");
        door.asked("b");
        assert!(
            !door.asked_again("b") && door.asked_again("a"),
            "each request its own count"
        );
    }

    #[test]
    fn it_forgets_everything_when_full() {
        let mut door = Doorkeeper::new(3);
        door.asked("a");
        door.asked("a");
        door.asked("b");
        door.asked("c");
        assert!(door.asked_again("a"));
        door.asked("c");
        assert!(
            door.asked_again("a"),
            "a request it holds does not make it forget"
        );
        door.asked("d");
        assert!(!door.asked_again("a"), "a fourth request made it forget");
        door.asked("d");
        assert!(door.asked_again("d"), "and it counts afresh");
    }
}
