//! Per-tenant write generations: a counter each tenant's writes move forward. Caches of
//! derived read data (BM25 statistics, results) remember the generation they were computed
//! at and know they are stale when it has moved.

use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;

/// The write generation of every tenant seen since start.
#[derive(Debug, Default)]
pub struct Generations {
    tenants: DashMap<String, AtomicU64>,
}

impl Generations {
    /// Called after a write to `tenant` is committed (or its rows were embedded).
    pub fn bump(&self, tenant: &str) {
        match self.tenants.get(tenant) {
            Some(counter) => {
                counter.fetch_add(1, Ordering::Release);
            }
            None => {
                self.tenants
                    .entry(tenant.to_owned())
                    .or_default()
                    .fetch_add(1, Ordering::Release);
            }
        }
    }

    pub fn current(&self, tenant: &str) -> u64 {
        self.tenants
            .get(tenant)
            .map(|c| c.load(Ordering::Acquire))
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
        assert_eq!(g.current("a"), 2);
        assert_eq!(g.current("b"), 1);
    }
}
