//! Embeddings of orchestrator memory nodes: written without one (a write never waits for the
//! model), found by full text until the indexer embeds them. Claimed like the butlers' rows
//! (`embedding_claims.rs`), so with several instances each node is embedded once; a node the
//! embedder failed on stays without one and is tried again at the indexer's next round.

use uuid::Uuid;

use super::Store;
use super::embedding_backlog::{CANDIDATE_BATCHES, RowKey};
use super::embedding_claims::EmbeddingClaim;
use crate::error::MemoryResult;

impl Store {
    /// Up to `limit` nodes without an embedding, oldest first, claimed: their keys and the
    /// text to embed (the content).
    #[tracing::instrument(target = "otel", name = "db.orchestrator_unembedded", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn orchestrator_unembedded(
        &self,
        limit: i64,
    ) -> MemoryResult<(Vec<(RowKey, String)>, EmbeddingClaim)> {
        let candidates: Vec<RowKey> = sqlx::query_as(
            "SELECT tenant_id, id FROM orchestrator_memories WHERE embedding IS NULL
             ORDER BY created_at, id LIMIT $1",
        )
        .bind(limit.saturating_mul(CANDIDATE_BATCHES))
        .fetch_all(self.pool())
        .await?;
        if candidates.is_empty() {
            return Ok((Vec::new(), EmbeddingClaim::nothing()));
        }
        let ids: Vec<Uuid> = candidates.iter().map(|(_, id)| *id).collect();
        let (claimed, claim) = self.claim_for_embedding(&ids, limit).await?;
        let (tenants, ids): (Vec<&str>, Vec<Uuid>) = candidates
            .iter()
            .filter(|(_, id)| claimed.contains(id))
            .map(|(t, id)| (t.as_str(), *id))
            .unzip();
        // Read again once claimed: another instance may have embedded them meanwhile.
        let rows: Vec<(String, Uuid, String)> = sqlx::query_as(
            "SELECT tenant_id, id, content FROM orchestrator_memories
             WHERE (tenant_id, id) IN (SELECT * FROM unnest($1::text[], $2::uuid[]))
               AND embedding IS NULL
             ORDER BY created_at, id",
        )
        .bind(tenants)
        .bind(ids)
        .fetch_all(self.pool())
        .await?;
        Ok((
            rows.into_iter()
                .map(|(tenant, id, text)| ((tenant, id), text))
                .collect(),
            claim,
        ))
    }

    /// Drops the vectors another model than `version_id` made (recall never compares them),
    /// so that the indexer embeds those nodes again like new ones; answers how many.
    #[tracing::instrument(target = "otel", name = "db.release_orchestrator_embeddings", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
    pub async fn release_orchestrator_embeddings(&self, version_id: i16) -> MemoryResult<u64> {
        // Every tenant's nodes: a model change is the whole service's.
        let done = sqlx::query(
            "UPDATE orchestrator_memories SET embedding = NULL, embedding_version_id = NULL
             WHERE embedding IS NOT NULL AND embedding_version_id IS DISTINCT FROM $1",
        )
        .bind(version_id)
        .execute(self.writer())
        .await?;
        Ok(done.rows_affected())
    }

    /// Stores the nodes' vectors (model `version_id`) where they still have none; answers
    /// the tenants of the nodes updated.
    #[tracing::instrument(target = "otel", name = "db.set_orchestrator_embeddings", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
    pub async fn set_orchestrator_embeddings(
        &self,
        version_id: i16,
        rows: &[RowKey],
        vectors: Vec<pgvector::Vector>,
    ) -> MemoryResult<Vec<String>> {
        let (tenants, ids): (Vec<&str>, Vec<Uuid>) =
            rows.iter().map(|(t, id)| (t.as_str(), *id)).unzip();
        Ok(sqlx::query_scalar(
            "UPDATE orchestrator_memories AS t
             SET embedding = v.embedding::halfvec, embedding_version_id = $1
             FROM unnest($2::text[], $3::uuid[], $4::vector[]) AS v(tenant_id, id, embedding)
             WHERE t.tenant_id = v.tenant_id AND t.id = v.id AND t.embedding IS NULL
             RETURNING t.tenant_id",
        )
        .bind(version_id)
        .bind(tenants)
        .bind(ids)
        .bind(vectors)
        .fetch_all(self.writer())
        .await?)
    }
}
