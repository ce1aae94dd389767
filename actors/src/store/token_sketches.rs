//! The second stage's stored token sketches (`embedder::token_sketch`), in tables of their own
//! beside the memory rows (migration 32): the indexer writes a row's sketch with its
//! embedding (`embedding_backlog.rs`), and a search reads those of its candidate set here
//! instead of running the model over their texts again.

use std::collections::HashMap;

use uuid::Uuid;

use super::Store;
use crate::domain::memory_type::MemoryType;
use crate::error::MemoryResult;

impl Store {
    /// The sketches stored by the model `version` for the members of a candidate set (of one
    /// tenant, by type), in one statement: a row embedded by another model, or while the
    /// second stage was off, has none here, nor a row whose embedding was cleared
    /// (migration 32 deletes the sketch with it).
    #[tracing::instrument(target = "otel", name = "db.token_sketches", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn token_sketches(
        &self,
        tenant_id: &str,
        ids: &HashMap<MemoryType, Vec<Uuid>>,
        version: i16,
    ) -> MemoryResult<Vec<(Uuid, Vec<u8>)>> {
        let of = |memory_type| ids.get(&memory_type).map_or(&[][..], Vec::as_slice);
        Ok(sqlx::query_as(
            "SELECT id, sketch FROM episode_sketches
             WHERE tenant_id = $1 AND id = ANY($2) AND embedding_version_id = $5
             UNION ALL
             SELECT id, sketch FROM fact_sketches
             WHERE tenant_id = $1 AND id = ANY($3) AND embedding_version_id = $5
             UNION ALL
             SELECT id, sketch FROM rule_sketches
             WHERE tenant_id = $1 AND id = ANY($4) AND embedding_version_id = $5",
        )
        .bind(tenant_id)
        .bind(of(MemoryType::Episode))
        .bind(of(MemoryType::Fact))
        .bind(of(MemoryType::Rule))
        .bind(version)
        .fetch_all(self.pool())
        .await?)
    }
}
