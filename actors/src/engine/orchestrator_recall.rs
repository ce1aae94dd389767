//! Recall over the caller's orchestrator graph (orchestrator_memory_subsystem.md, "Retrieval:
//! Hybrid Recall"): the query embedded by the shared query embedder (the read path's: a
//! repeated query is not embedded again), the vector and full-text candidates from the
//! store, merged and weighed by `domain/orchestrator/recall.rs`, and the edges among those
//! kept. Without a vector (the embedder did not answer in time) recall is full text alone.

use std::sync::atomic::Ordering;

use super::Engine;
use crate::domain::caller::Caller;
use crate::domain::orchestrator::recall::{RecallBundle, Recalled, rank};
use crate::domain::text::check_content;
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::store::orchestrator_recall::CandidateLimits;

/// The spec's `topKVector` and `topKText`.
const CANDIDATES: CandidateLimits = CandidateLimits {
    vector: 50,
    text: 50,
};

impl Engine {
    /// The memories of the caller's orchestrator that best answer `query`: at most `limit`
    /// (default and most: `memory.retrieval.top_n`), best first, with the edges among them.
    pub async fn orchestrator_recall(
        &self,
        caller: &Caller,
        orchestrator_id: Option<&str>,
        query: &str,
        limit: Option<u32>,
    ) -> MemoryResult<RecallBundle> {
        let orchestrator = self.orchestrator_of(caller, orchestrator_id, false)?;
        let config = &self.services.config;
        let query = check_content("query", query, &config.limits)?;
        let top_n = config.memory.retrieval.top_n.get();
        let limit = match limit {
            None => top_n,
            Some(n) if (1..=top_n).contains(&n) => n,
            Some(n) => {
                return Err(MemoryError::new(
                    ErrorCode::InvalidLimit,
                    format!("`limit` is {n}; recall's is 1 to {top_n} (`memory.retrieval.top_n`)"),
                ));
            }
        };
        let memories = self.recalled(orchestrator, &query, limit as usize).await?;
        let ids: Vec<_> = memories.iter().map(|m| m.node.memory_id).collect();
        let edges = self
            .services
            .store
            .orchestrator_edges_among(orchestrator, &ids)
            .await?;
        Ok(RecallBundle { memories, edges })
    }

    /// The `limit` memories of `orchestrator` that best answer `query`, best first (recall
    /// without the edges: bulletins use it too).
    pub(super) async fn recalled(
        &self,
        orchestrator: &str,
        query: &str,
        limit: usize,
    ) -> MemoryResult<Vec<Recalled>> {
        let embedding = self.queries.embed(&[query.to_owned()]);
        let vector = match embedding.first() {
            Some(e) => e.vector().await,
            None => None,
        }
        .map(|v| pgvector::Vector::from(v.as_ref().clone()));
        let version = self.services.embedding_version.load(Ordering::Acquire);
        let candidates = self
            .services
            .store
            .orchestrator_candidates(orchestrator, vector, query, version, CANDIDATES)
            .await?;
        Ok(rank(
            candidates,
            self.services.config.memory.retrieval.rrf_k.get(),
            limit,
            self.services.clock.now(),
        ))
    }
}
