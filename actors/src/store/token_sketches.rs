//! The second stage's stored token sketches (`embedder::token_sketch`), in tables of their own
//! beside the memory rows (migration 32): the indexer writes a row's sketch with its
//! embedding (`embedding_backlog.rs`), and a search reads those of its candidate set here
//! instead of running the model over their texts again.

use uuid::Uuid;

use super::Store;
use crate::domain::memory_type::MemoryType;
use crate::error::MemoryResult;

impl Store {
    /// The sketches stored for `ids` (of one tenant and type) by the model `version`: a row
    /// embedded by another model, or while the second stage was off, has none here, nor a
    /// row whose embedding was cleared (migration 32 deletes the sketch with it).
    pub async fn token_sketches(
        &self,
        memory_type: MemoryType,
        tenant_id: &str,
        ids: &[Uuid],
        version: i16,
    ) -> MemoryResult<Vec<(Uuid, Vec<u8>)>> {
        let sql = format!(
            "SELECT id, sketch FROM {} WHERE tenant_id = $1 AND id = ANY($2)
               AND embedding_version_id = $3",
            memory_type.sketch_table(),
        );
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(tenant_id)
            .bind(ids)
            .bind(version)
            .fetch_all(self.pool())
            .await?)
    }
}
