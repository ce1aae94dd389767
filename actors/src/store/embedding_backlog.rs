//! The embedding backlog: rows committed without an embedding, and after a model change
//! rows embedded by another model. It is durable by construction (it is the rows
//! themselves), so a crash loses nothing: the indexer simply finds the same rows again.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::memory_type::MemoryType;
use crate::error::MemoryResult;

use super::Store;
use super::embedding_claims::EmbeddingClaim;

/// How many batches of the oldest waiting rows an instance looks through for rows no other
/// instance has claimed.
const CANDIDATE_BATCHES: i64 = 4;

/// A row waiting for its embedding.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Unembedded {
    pub id: Uuid,
    pub text: String,
    /// For an episode in a session: the episode before it, whose meaning it continues.
    pub context: Option<String>,
}

/// The text each type is embedded from, as `id, text, context` over its table: a fact is
/// embedded with its subject and predicate, so that a question about "diet" finds
/// `user / dietary_restriction: lactose intolerant`; an episode in a session carries the
/// episode before it as context.
macro_rules! embedding_text {
    (episode) => {
        "SELECT e.id, e.content AS text,
                (SELECT p.content FROM episodes p
                 WHERE p.tenant_id = e.tenant_id AND p.butler = e.butler
                   AND p.session_id = e.session_id AND p.forgotten_at IS NULL
                   AND (p.created_at, p.id) < (e.created_at, e.id)
                 ORDER BY p.created_at DESC, p.id DESC LIMIT 1) AS context
         FROM episodes e"
    };
    (fact) => {
        "SELECT e.id, e.subject || ' ' || replace(e.predicate, '_', ' ') || ': ' || e.content AS text,
                NULL::text AS context
         FROM facts e"
    };
    (rule) => {
        "SELECT e.id, e.content AS text, NULL::text AS context FROM rules e"
    };
}

/// Which rows an embedding may be stored for: "still none" for new rows, "still another
/// model's" for a re-embedding (a row whose embedding was cleared meanwhile, because its
/// content changed, waits for the indexer instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replacing {
    Nothing,
    OtherModel,
}

impl Store {
    /// The oldest rows of `memory_type` without an embedding that no other instance is
    /// embedding, at most `limit`, with the text to embed, claimed (`embedding_claims.rs`)
    /// until the claim is released.
    #[tracing::instrument(target = "otel", name = "db.unembedded", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn unembedded(
        &self,
        memory_type: MemoryType,
        limit: i64,
    ) -> MemoryResult<(Vec<Unembedded>, EmbeddingClaim)> {
        // A sealed fact is never embedded: a vector leaks the text (`vault.rs`).
        let waiting = match memory_type {
            MemoryType::Fact => "embedding IS NULL AND sealed IS NULL",
            MemoryType::Episode | MemoryType::Rule => "embedding IS NULL",
        };
        // Past the rows other instances hold, up to a few batches in.
        let candidates: Vec<Uuid> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT id FROM {} WHERE {waiting} ORDER BY created_at, id LIMIT $1",
            memory_type.table()
        )))
        .bind(limit.saturating_mul(CANDIDATE_BATCHES))
        .fetch_all(self.pool())
        .await?;
        // An empty backlog, the common case at rest, costs its one probe.
        if candidates.is_empty() {
            return Ok((Vec::new(), EmbeddingClaim::nothing()));
        }
        let (claimed, claim) = self.claim_for_embedding(&candidates, limit).await?;
        let sql = match memory_type {
            MemoryType::Episode => concat!(
                embedding_text!(episode),
                " WHERE e.id = ANY($1) AND e.embedding IS NULL ORDER BY e.created_at, e.id"
            ),
            MemoryType::Fact => concat!(
                embedding_text!(fact),
                " WHERE e.id = ANY($1) AND e.embedding IS NULL AND e.sealed IS NULL
                  ORDER BY e.created_at, e.id"
            ),
            MemoryType::Rule => concat!(
                embedding_text!(rule),
                " WHERE e.id = ANY($1) AND e.embedding IS NULL ORDER BY e.created_at, e.id"
            ),
        };
        let rows = if claimed.is_empty() {
            Vec::new()
        } else {
            sqlx::query_as(sql)
                .bind(&claimed)
                .fetch_all(self.pool())
                .await?
        };
        Ok((rows, claim))
    }

    /// Rows embedded by a model other than `version`, over all three tables: what a model
    /// change leaves to re-embed. One scan of each table, asked once at start.
    pub async fn stale_embeddings(&self, version: i16) -> MemoryResult<i64> {
        Ok(sqlx::query_scalar(
            "SELECT (SELECT count(*) FROM episodes WHERE embedding_version_id <> $1)
                  + (SELECT count(*) FROM facts WHERE embedding_version_id <> $1)
                  + (SELECT count(*) FROM rules WHERE embedding_version_id <> $1)",
        )
        .bind(version)
        .fetch_one(self.pool())
        .await?)
    }

    /// The next `window` rows of `memory_type` in id order after `after`, and which of them
    /// another model than `version` embedded, with their text: one bounded step of a walk
    /// that re-embeds a table. Returns the stale rows no other instance is re-embedding,
    /// the last id looked at (`None` at the end of the table), and the claim on the rows.
    #[tracing::instrument(target = "otel", name = "db.stale_window", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn stale_window(
        &self,
        memory_type: MemoryType,
        version: i16,
        after: Option<Uuid>,
        window: i64,
    ) -> MemoryResult<(Vec<Unembedded>, Option<Uuid>, Option<EmbeddingClaim>)> {
        let scan = format!(
            "SELECT id, embedding_version_id <> $1 AS stale FROM {}
             WHERE $2::uuid IS NULL OR id > $2 ORDER BY id LIMIT $3",
            memory_type.table()
        );
        let seen: Vec<(Uuid, Option<bool>)> = sqlx::query_as(sqlx::AssertSqlSafe(scan))
            .bind(version)
            .bind(after)
            .bind(window)
            .fetch_all(self.pool())
            .await?;
        let last = seen.last().map(|(id, _)| *id);
        let stale: Vec<Uuid> = seen
            .into_iter()
            .filter(|(_, stale)| *stale == Some(true))
            .map(|(id, _)| id)
            .collect();
        if stale.is_empty() {
            return Ok((Vec::new(), last, None));
        }
        let (stale, claim) = self.claim_for_embedding(&stale, stale.len() as i64).await?;
        let sql = match memory_type {
            MemoryType::Episode => concat!(
                embedding_text!(episode),
                " WHERE e.id = ANY($1) AND e.embedding_version_id <> $2 ORDER BY e.id"
            ),
            MemoryType::Fact => concat!(
                embedding_text!(fact),
                " WHERE e.id = ANY($1) AND e.embedding_version_id <> $2 ORDER BY e.id"
            ),
            MemoryType::Rule => concat!(
                embedding_text!(rule),
                " WHERE e.id = ANY($1) AND e.embedding_version_id <> $2 ORDER BY e.id"
            ),
        };
        let rows = sqlx::query_as(sql)
            .bind(&stale)
            .bind(version)
            .fetch_all(self.pool())
            .await?;
        Ok((rows, last, Some(claim)))
    }

    /// Stores embeddings for rows that still have none (`Replacing::Nothing`) or still have
    /// another model's (`Replacing::OtherModel`), in one statement. Returns the tenant of
    /// each row updated. Both are asked of `embedding_version_id` (set and cleared with the
    /// embedding, a CHECK says so), which no index covers: asked of `embedding`, it let the
    /// planner scan the whole backlog through its partial index.
    #[tracing::instrument(target = "otel", name = "db.set_embeddings", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
    pub async fn set_embeddings(
        &self,
        memory_type: MemoryType,
        version_id: i16,
        replacing: Replacing,
        ids: &[Uuid],
        vectors: Vec<pgvector::Vector>,
    ) -> MemoryResult<Vec<String>> {
        let still = match replacing {
            Replacing::Nothing => "t.embedding_version_id IS NULL",
            Replacing::OtherModel => "t.embedding_version_id <> $1",
        };
        let sql = format!(
            "UPDATE {} AS t SET embedding = v.embedding, embedding_version_id = $1
             FROM unnest($2::uuid[], $3::vector[]) AS v(id, embedding)
             WHERE t.id = v.id AND {still}
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
                 UNION ALL (SELECT created_at FROM facts WHERE embedding IS NULL AND sealed IS NULL ORDER BY created_at LIMIT 1)
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
                 UNION ALL SELECT count(*), min(created_at) FROM facts WHERE embedding IS NULL AND sealed IS NULL
                 UNION ALL SELECT count(*), min(created_at) FROM rules WHERE embedding IS NULL) b",
        )
        .fetch_one(self.pool())
        .await?)
    }
}
