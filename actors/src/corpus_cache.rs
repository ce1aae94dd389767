//! BM25 collection statistics per tenant and memory type, cached: computing them scans the
//! tenant's rows, and they barely move between queries. An entry is recomputed when the
//! tenant has written since, but at most once per `MIN_AGE`, so a write burst cannot turn
//! every search into a scan.

use std::time::{Duration, Instant};

use dashmap::DashMap;

use crate::domain::memory_type::MemoryType;
use crate::error::MemoryResult;
use crate::generations::Generations;
use crate::store::Store;
use crate::store::search::CorpusStats;

/// How long statistics are trusted after a write.
const MIN_AGE: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub struct CorpusCache {
    entries: DashMap<(String, MemoryType), (CorpusStats, u64, Instant)>,
}

impl CorpusCache {
    pub async fn get(
        &self,
        store: &Store,
        generations: &Generations,
        memory_type: MemoryType,
        tenant_id: &str,
    ) -> MemoryResult<CorpusStats> {
        let generation = generations.current(tenant_id);
        let key = (tenant_id.to_owned(), memory_type);
        if let Some(entry) = self.entries.get(&key) {
            let (stats, seen, at) = *entry;
            if seen == generation || at.elapsed() < MIN_AGE {
                return Ok(stats);
            }
        }
        let stats = store.corpus_stats(memory_type, tenant_id).await?;
        self.entries
            .insert(key, (stats, generation, Instant::now()));
        Ok(stats)
    }
}
