//! Claims and leases held in this process instead of PostgreSQL's lock table, when no other
//! instance shares the database (`database.shared`; the embedded PostgreSQL is this
//! process's alone). The advisory locks of `embedding_claims.rs` and `lifecycle_lease.rs`
//! keep instances apart; with one instance they only keep this process's own holders apart
//! (the indexer from the orchestrator memory's embedding, a scheduled sweep from an admin's),
//! which a set does without a connection held by each holder: two backends fewer, about
//! 5 MB of the cluster's memory, and no statement per claim (docs/benchmarks.md).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use crate::domain::shard_key::ShardKey;

/// What is held: a row claimed for embedding, or a shard's lifecycle lease.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LockKey {
    Row(Uuid),
    Shard(ShardKey),
}

/// The keys this process holds.
#[derive(Debug, Default)]
pub struct ProcessLocks {
    held: Mutex<HashSet<LockKey>>,
}

/// Keys taken together; dropping the hold lets them go (a panic too).
#[derive(Debug)]
pub struct ProcessHold {
    locks: Arc<ProcessLocks>,
    keys: Vec<LockKey>,
}

impl ProcessLocks {
    /// Takes the keys not already held, in order, up to `limit`, as `pg_try_advisory_lock`
    /// would: a held key is skipped, never waited for.
    pub fn try_take(
        self: &Arc<Self>,
        keys: impl IntoIterator<Item = LockKey>,
        limit: usize,
    ) -> ProcessHold {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let mut taken = Vec::new();
        for key in keys {
            if taken.len() >= limit {
                break;
            }
            if held.insert(key.clone()) {
                taken.push(key);
            }
        }
        ProcessHold {
            locks: self.clone(),
            keys: taken,
        }
    }
}

impl ProcessHold {
    /// The keys taken, in the order they were asked for.
    pub fn keys(&self) -> &[LockKey] {
        &self.keys
    }
}

impl Drop for ProcessHold {
    fn drop(&mut self) {
        // A poisoned set is still the set: a holder that panicked must not keep its keys.
        let mut held = self.locks.held.lock().unwrap_or_else(|e| e.into_inner());
        for key in &self.keys {
            held.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(ids: &[Uuid]) -> Vec<LockKey> {
        ids.iter().map(|id| LockKey::Row(*id)).collect()
    }

    #[test]
    fn a_held_key_is_skipped_until_its_hold_is_dropped() {
        let locks = Arc::new(ProcessLocks::default());
        let ids: Vec<Uuid> = (0..4).map(|_| Uuid::now_v7()).collect();
        let first = locks.try_take(rows(&ids[..2]), 10);
        assert_eq!(first.keys(), rows(&ids[..2]));
        // The limit counts keys taken, not keys looked at: the two held are skipped.
        let second = locks.try_take(rows(&ids), 1);
        assert_eq!(second.keys(), rows(&ids[2..3]));
        drop(first);
        let third = locks.try_take(rows(&ids), 10);
        assert_eq!(third.keys(), rows(&[ids[0], ids[1], ids[3]]));
    }

    #[test]
    fn a_shards_lease_is_one_holders_at_a_time() {
        let locks = Arc::new(ProcessLocks::default());
        let shard = ShardKey::new("tenant-a", "butler");
        let other = ShardKey::new("tenant-b", "butler");
        let lease = locks.try_take([LockKey::Shard(shard.clone())], 1);
        assert_eq!(lease.keys().len(), 1);
        assert!(
            locks
                .try_take([LockKey::Shard(shard.clone())], 1)
                .keys()
                .is_empty()
        );
        assert_eq!(locks.try_take([LockKey::Shard(other)], 1).keys().len(), 1);
        drop(lease);
        assert_eq!(locks.try_take([LockKey::Shard(shard)], 1).keys().len(), 1);
    }
}
