//! The `embedding_versions` registry: which model produced an embedding.

use crate::error::MemoryResult;

use super::Store;

impl Store {
    /// Registers a model (once) and returns its version id.
    pub async fn embedding_version(
        &self,
        model: &str,
        model_sha256: &str,
        dimensions: i32,
        pooling: &str,
    ) -> MemoryResult<i16> {
        let id: i16 = sqlx::query_scalar(
            "WITH inserted AS (
                 INSERT INTO embedding_versions (model, model_sha256, dimensions, pooling)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (model, model_sha256) DO NOTHING
                 RETURNING id)
             SELECT id FROM inserted
             UNION ALL
             SELECT id FROM embedding_versions WHERE model = $1 AND model_sha256 = $2
             LIMIT 1",
        )
        .bind(model)
        .bind(model_sha256)
        .bind(dimensions)
        .bind(pooling)
        .fetch_one(self.pool())
        .await?;
        Ok(id)
    }

    /// Whether any model other than `version` was ever registered: if not, no row can
    /// hold another model's embedding.
    pub async fn other_embedding_versions(&self, version: i16) -> MemoryResult<bool> {
        Ok(
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM embedding_versions WHERE id <> $1)")
                .bind(version)
                .fetch_one(self.pool())
                .await?,
        )
    }
}
