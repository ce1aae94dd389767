//! The embedding backlog: rows committed without an embedding. It is durable by
//! construction (it is the rows themselves), so a crash loses nothing: the indexer simply
//! finds the same rows again.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::memory_type::MemoryType;
use crate::error::MemoryResult;

use super::Store;

/// A row waiting for its embedding.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Unembedded {
    pub id: Uuid,
    pub text: String,
    /// For an episode in a session: the episode before it, whose meaning it continues.
    pub context: Option<String>,
}

impl Store {
    /// The oldest rows of `memory_type` without an embedding, with the text to embed.
    pub async fn unembedded(
        &self,
        memory_type: MemoryType,
        limit: i64,
    ) -> MemoryResult<Vec<Unembedded>> {
        let sql = match memory_type {
            MemoryType::Episode => {
                "SELECT e.id, e.content AS text,
                        (SELECT p.content FROM episodes p
                         WHERE p.tenant_id = e.tenant_id AND p.butler = e.butler
                           AND p.session_id = e.session_id AND p.forgotten_at IS NULL
                           AND (p.created_at, p.id) < (e.created_at, e.id)
                         ORDER BY p.created_at DESC, p.id DESC LIMIT 1) AS context
                 FROM episodes e WHERE e.embedding IS NULL
                 ORDER BY e.created_at, e.id LIMIT $1"
            }
            // A fact is embedded with its subject and predicate, so that a question about
            // "diet" finds `user / dietary_restriction: lactose intolerant`.
            MemoryType::Fact => {
                "SELECT id, subject || ' ' || replace(predicate, '_', ' ') || ': ' || content AS text,
                        NULL::text AS context
                 FROM facts WHERE embedding IS NULL ORDER BY created_at, id LIMIT $1"
            }
            MemoryType::Rule => {
                "SELECT id, content AS text, NULL::text AS context FROM rules WHERE embedding IS NULL
                 ORDER BY created_at, id LIMIT $1"
            }
        };
        Ok(sqlx::query_as(sql)
            .bind(limit)
            .fetch_all(self.pool())
            .await?)
    }

    /// Stores embeddings for rows that still have none, in one statement. Returns the
    /// tenant of each row updated. "Still none" is asked of `embedding_version_id` (set and
    /// cleared with the embedding, a CHECK says so), which no index covers: asked of
    /// `embedding`, it let the planner scan the whole backlog through its partial index.
    pub async fn set_embeddings(
        &self,
        memory_type: MemoryType,
        version_id: i16,
        ids: &[Uuid],
        vectors: Vec<pgvector::Vector>,
    ) -> MemoryResult<Vec<String>> {
        let sql = format!(
            "UPDATE {} AS t SET embedding = v.embedding, embedding_version_id = $1
             FROM unnest($2::uuid[], $3::vector[]) AS v(id, embedding)
             WHERE t.id = v.id AND t.embedding_version_id IS NULL
             RETURNING t.tenant_id",
            memory_type.table()
        );
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(version_id)
            .bind(ids)
            .bind(vectors)
            .fetch_all(self.writer())
            .await?)
    }

    /// Since when the oldest row without an embedding has waited: one index probe per table,
    /// cheap enough to ask often (unlike counting the backlog).
    pub async fn oldest_unembedded(&self) -> MemoryResult<Option<DateTime<Utc>>> {
        Ok(sqlx::query_scalar(
            "SELECT min(oldest) FROM (
                 (SELECT created_at AS oldest FROM episodes WHERE embedding IS NULL ORDER BY created_at LIMIT 1)
                 UNION ALL (SELECT created_at FROM facts WHERE embedding IS NULL ORDER BY created_at LIMIT 1)
                 UNION ALL (SELECT created_at FROM rules WHERE embedding IS NULL ORDER BY created_at LIMIT 1)) b",
        )
        .fetch_one(self.pool())
        .await?)
    }

    /// How many rows wait for an embedding, and since when.
    pub async fn embedding_backlog(&self) -> MemoryResult<(i64, Option<DateTime<Utc>>)> {
        Ok(sqlx::query_as(
            "SELECT sum(n)::bigint, min(oldest) FROM (
                 SELECT count(*) AS n, min(created_at) AS oldest FROM episodes WHERE embedding IS NULL
                 UNION ALL SELECT count(*), min(created_at) FROM facts WHERE embedding IS NULL
                 UNION ALL SELECT count(*), min(created_at) FROM rules WHERE embedding IS NULL) b",
        )
        .fetch_one(self.pool())
        .await?)
    }
}
