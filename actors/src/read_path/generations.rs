//! Per-tenant write generations: counters each tenant's writes move forward, one per memory
//! type. Caches of derived read data (BM25 statistics, results) remember the generation they
//! were computed at and know they are stale when it has moved. Keeping one per type lets a
//! burst of episode writes leave what was derived from facts and rules valid.
//!
//! Other instances on the database write too (issue 21): before a read uses a cache, the
//! engine gives `observe_heads` the sum of the tenant's shard heads as the database has it
//! (every write of any instance moves it, migration 21). When it moved since last seen,
//! every type's generation moves, so a read that starts after another instance's commit
//! never gets a cached answer that misses it.
//!
//! A fifth kind of change is not a write: statistics a read ranked with while they were
//! being recounted (`CorpusCache`) were replaced. It moves the tenant's whole generation,
//! so a result ranked with the old statistics is not served again, and no type's, so the
//! statistics themselves stay valid.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use dashmap::DashMap;

use crate::domain::memory_type::MemoryType;

/// The write generations of every tenant seen since start.
#[derive(Debug, Default)]
pub struct Generations {
    /// One counter per memory type, and one for restated statistics (`RESTATED`).
    tenants: DashMap<String, [AtomicU64; 4]>,
    /// The sum of each tenant's shard heads when last observed.
    heads: DashMap<String, AtomicI64>,
}

/// The slot of restated statistics: counted in `current`, never in `current_of`.
const RESTATED: usize = 3;

fn slot(memory_type: MemoryType) -> usize {
    match memory_type {
        MemoryType::Episode => 0,
        MemoryType::Fact => 1,
        MemoryType::Rule => 2,
    }
}

impl Generations {
    /// Called after a write to `tenant` is committed that may have changed memories of any
    /// type.
    pub fn bump(&self, tenant: &str) {
        self.bump_types(tenant, MemoryType::ALL);
    }

    /// Called after a write to `tenant` is committed (or rows were embedded) that changed
    /// memories of `memory_type` only.
    pub fn bump_type(&self, tenant: &str, memory_type: MemoryType) {
        self.bump_types(tenant, &[memory_type]);
    }

    /// Called when statistics that reads of `tenant` ranked with were replaced by a recount:
    /// results computed before are not served again.
    pub fn restate(&self, tenant: &str) {
        self.bump_slots(tenant, std::iter::once(RESTATED));
    }

    /// Called before a read with the sum of the tenant's shard heads in the database: if it
    /// moved since last observed (or was never observed), some instance wrote since, and
    /// every type's generation moves.
    pub fn observe_heads(&self, tenant: &str, heads: i64) {
        let moved = match self.heads.get(tenant) {
            Some(seen) => seen.swap(heads, Ordering::AcqRel) != heads,
            None => {
                self.heads.insert(tenant.to_owned(), AtomicI64::new(heads));
                true
            }
        };
        if moved {
            self.bump(tenant);
        }
    }

    fn bump_types(&self, tenant: &str, types: &[MemoryType]) {
        self.bump_slots(tenant, types.iter().map(|t| slot(*t)));
    }

    fn bump_slots(&self, tenant: &str, slots: impl Iterator<Item = usize>) {
        let bump = |counters: &[AtomicU64; 4]| {
            for s in slots {
                counters[s].fetch_add(1, Ordering::Release);
            }
        };
        match self.tenants.get(tenant) {
            Some(counters) => bump(&counters),
            None => bump(&self.tenants.entry(tenant.to_owned()).or_default()),
        }
    }

    /// The tenant's generation over all types: it moves whenever any type's does, and when
    /// statistics are restated.
    pub fn current(&self, tenant: &str) -> u64 {
        self.tenants
            .get(tenant)
            .map(|c| c.iter().map(|g| g.load(Ordering::Acquire)).sum())
            .unwrap_or(0)
    }

    /// The tenant's generation for one memory type.
    pub fn current_of(&self, tenant: &str, memory_type: MemoryType) -> u64 {
        self.tenants
            .get(tenant)
            .map(|c| c[slot(memory_type)].load(Ordering::Acquire))
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_tenant_moves_on_its_own() {
        let g = Generations::default();
        assert_eq!(g.current("a"), 0);
        g.bump("a");
        g.bump("a");
        g.bump("b");
        assert!(g.current("a") > g.current("b"));
        assert_eq!(g.current_of("a", MemoryType::Fact), 2);
        assert_eq!(g.current_of("b", MemoryType::Rule), 1);
    }

    #[test]
    fn a_write_of_one_type_moves_that_type_and_the_whole() {
        let g = Generations::default();
        g.bump("a");
        let (whole, facts) = (g.current("a"), g.current_of("a", MemoryType::Fact));
        g.bump_type("a", MemoryType::Episode);
        assert!(g.current("a") > whole);
        assert_eq!(g.current_of("a", MemoryType::Fact), facts);
        assert_eq!(g.current_of("a", MemoryType::Episode), 2);
    }

    #[test]
    fn heads_that_moved_elsewhere_move_every_type() {
        let g = Generations::default();
        // Never observed: whatever was cached may predate it.
        g.observe_heads("a", 7);
        let first = g.current_of("a", MemoryType::Fact);
        assert_eq!(first, 1);
        // Unchanged: nothing moves.
        g.observe_heads("a", 7);
        assert_eq!(g.current_of("a", MemoryType::Fact), first);
        // Moved (another instance committed): every type moves, other tenants do not.
        g.observe_heads("a", 9);
        for t in MemoryType::ALL {
            assert_eq!(g.current_of("a", *t), 2);
        }
        assert_eq!(g.current("b"), 0);
    }

    #[test]
    fn restated_statistics_move_the_whole_and_no_type() {
        let g = Generations::default();
        g.bump("a");
        let whole = g.current("a");
        g.restate("a");
        assert!(g.current("a") > whole);
        for t in MemoryType::ALL {
            assert_eq!(g.current_of("a", *t), 1);
        }
    }
}
