//! Per-tenant write generations: counters each tenant's writes move forward, one per memory
//! type. Caches of derived read data (BM25 statistics, results) remember the generation they
//! were computed at and know they are stale when it has moved. Keeping one per type lets a
//! burst of episode writes leave what was derived from facts and rules valid.
//!
//! Other instances on the database write too (issue 21): before a read uses a cache, the
//! engine gives `observe_heads` the tenant's shard heads as the database has them: every
//! write of any instance moves them, with a count per memory type it changed (migrations 21
//! and 28). The generation of each type whose count moved since last seen moves, so a read
//! that starts after another instance's commit never gets a cached answer that misses it,
//! and an episode written elsewhere leaves the facts' and rules' statistics valid, as one
//! written here does. A move the type counts do not explain (a writer that does not keep
//! them, heads never seen) moves every type. The instance's own writes are seen again
//! there: their types move twice, which costs at most a recount of what a read computed
//! between the commit and the next look.
//!
//! A fifth kind of change is not a write: statistics a read ranked with while they were
//! being recounted (`CorpusCache`) were replaced. It moves the tenant's whole generation,
//! so a result ranked with the old statistics is not served again, and no type's, so the
//! statistics themselves stay valid.

use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;

use crate::domain::memory_type::MemoryType;
use crate::store::shard_heads::TenantHeads;

/// The write generations of every tenant seen since start.
#[derive(Debug, Default)]
pub struct Generations {
    /// One counter per memory type, and one for restated statistics (`RESTATED`).
    tenants: DashMap<String, [AtomicU64; 4]>,
    /// Each tenant's shard heads when last observed.
    heads: DashMap<String, TenantHeads>,
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

    /// Called before a read with the tenant's shard heads in the database: the types whose
    /// counts moved since last observed were written by some instance since, and their
    /// generations move; every type's does when the counts do not explain the move.
    pub fn observe_heads(&self, tenant: &str, heads: TenantHeads) {
        let seen = match self.heads.get_mut(tenant) {
            Some(mut seen) => std::mem::replace(&mut *seen, heads),
            None => {
                self.heads.insert(tenant.to_owned(), heads);
                return self.bump(tenant);
            }
        };
        if seen == heads {
            return;
        }
        let moved: Vec<MemoryType> = MemoryType::ALL
            .iter()
            .copied()
            .filter(|t| heads.of(*t) != seen.of(*t))
            .collect();
        // Every write transaction moves at least one type's count for each head number it
        // takes; fewer, or counts that went back, are writes this cannot attribute.
        let explained: i64 = moved.iter().map(|t| heads.of(*t) - seen.of(*t)).sum();
        let backwards = moved.iter().any(|t| heads.of(*t) < seen.of(*t));
        if backwards || heads.writes < seen.writes || explained < heads.writes - seen.writes {
            self.bump(tenant);
        } else {
            self.bump_types(tenant, &moved);
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

    fn heads(writes: i64, by_type: [i64; 3]) -> TenantHeads {
        TenantHeads { writes, by_type }
    }

    fn types(g: &Generations, tenant: &str) -> Vec<u64> {
        MemoryType::ALL
            .iter()
            .map(|t| g.current_of(tenant, *t))
            .collect()
    }

    #[test]
    fn heads_move_the_types_whose_counts_moved() {
        let g = Generations::default();
        // Never observed: whatever was cached may predate it.
        g.observe_heads("a", heads(7, [5, 2, 1]));
        assert_eq!(types(&g, "a"), [1, 1, 1]);
        // Unchanged: nothing moves.
        g.observe_heads("a", heads(7, [5, 2, 1]));
        assert_eq!(types(&g, "a"), [1, 1, 1]);
        // Two episode writes elsewhere: the episodes' generation moves, the others' stay.
        g.observe_heads("a", heads(9, [7, 2, 1]));
        assert_eq!(types(&g, "a"), [2, 1, 1]);
        // One write that changed facts and rules: both move.
        g.observe_heads("a", heads(10, [7, 3, 2]));
        assert_eq!(types(&g, "a"), [2, 2, 2]);
        assert_eq!(g.current("b"), 0);
    }

    #[test]
    fn a_move_the_type_counts_do_not_explain_moves_every_type() {
        let g = Generations::default();
        g.observe_heads("a", heads(7, [5, 2, 1]));
        // Two writes, one counted (a writer that keeps no type counts made the other).
        g.observe_heads("a", heads(9, [6, 2, 1]));
        assert_eq!(types(&g, "a"), [2, 2, 2]);
        // Heads that went back (a restored database): every type.
        g.observe_heads("a", heads(8, [6, 2, 1]));
        assert_eq!(types(&g, "a"), [3, 3, 3]);
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
