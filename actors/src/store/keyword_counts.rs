//! Keyword statistics kept once for the fleet (migration 27): the counts BM25 needs, as one
//! instance made them, for another to take instead of counting again
//! (`read_path/corpus_cache.rs` decides when a count is recent enough). Only on a shared
//! database, and always on the primary (the tables are unlogged: replicas have none).

use chrono::{DateTime, Utc};

use super::Store;
use super::search::CorpusStats;
use crate::domain::memory_type::MemoryType;
use crate::error::MemoryResult;

/// A word's document frequency as some instance counted it.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct SharedWord {
    pub word: String,
    pub df: f64,
    pub documents: f64,
    pub counted_at: DateTime<Utc>,
}

impl Store {
    /// The type's collection statistics as last counted by any instance, and when.
    pub async fn shared_corpus_stats(
        &self,
        memory_type: MemoryType,
        tenant_id: &str,
    ) -> MemoryResult<Option<(CorpusStats, DateTime<Utc>)>> {
        let row: Option<(f64, f64, DateTime<Utc>)> = sqlx::query_as(
            "SELECT documents, mean_length, counted_at FROM corpus_counts
             WHERE tenant_id = $1 AND memory_type = $2",
        )
        .bind(tenant_id)
        .bind(memory_type.as_str())
        .fetch_optional(&self.writer)
        .await?;
        Ok(row.map(|(documents, mean_length, at)| {
            (
                CorpusStats {
                    documents,
                    mean_length,
                },
                at,
            )
        }))
    }

    /// Keeps a count of the type's collection statistics for the fleet (an older one never
    /// replaces a newer).
    pub async fn share_corpus_stats(
        &self,
        memory_type: MemoryType,
        tenant_id: &str,
        stats: CorpusStats,
        at: DateTime<Utc>,
    ) -> MemoryResult<()> {
        sqlx::query(
            "INSERT INTO corpus_counts AS c (tenant_id, memory_type, documents, mean_length, counted_at)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (tenant_id, memory_type) DO UPDATE
                 SET documents = excluded.documents, mean_length = excluded.mean_length,
                     counted_at = excluded.counted_at
                 WHERE c.counted_at < excluded.counted_at",
        )
        .bind(tenant_id)
        .bind(memory_type.as_str())
        .bind(stats.documents)
        .bind(stats.mean_length)
        .bind(at)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// The words' document frequencies as last counted by any instance (the words never
    /// counted are absent).
    pub async fn shared_word_counts(
        &self,
        memory_type: MemoryType,
        tenant_id: &str,
        words: &[String],
    ) -> MemoryResult<Vec<SharedWord>> {
        Ok(sqlx::query_as(
            "SELECT word, df, documents, counted_at FROM word_counts
             WHERE tenant_id = $1 AND memory_type = $2 AND word = ANY ($3)",
        )
        .bind(tenant_id)
        .bind(memory_type.as_str())
        .bind(words)
        .fetch_all(&self.writer)
        .await?)
    }

    /// Keeps the words' document frequencies (counted out of `documents` memories at `at`)
    /// for the fleet (an older count never replaces a newer).
    pub async fn share_word_counts(
        &self,
        memory_type: MemoryType,
        tenant_id: &str,
        counted: &[(String, f64)],
        documents: f64,
        at: DateTime<Utc>,
    ) -> MemoryResult<()> {
        sqlx::query(
            "INSERT INTO word_counts AS w (tenant_id, memory_type, word, df, documents, counted_at)
             SELECT $1, $2, word, df, $5, $6 FROM unnest($3::text[], $4::float8[]) AS u(word, df)
             ON CONFLICT (tenant_id, memory_type, word) DO UPDATE
                 SET df = excluded.df, documents = excluded.documents,
                     counted_at = excluded.counted_at
                 WHERE w.counted_at < excluded.counted_at",
        )
        .bind(tenant_id)
        .bind(memory_type.as_str())
        .bind(counted.iter().map(|(w, _)| w.as_str()).collect::<Vec<_>>())
        .bind(counted.iter().map(|(_, df)| *df).collect::<Vec<_>>())
        .bind(documents)
        .bind(at)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    /// Forgets the counts older than `before` (nothing takes them any more), every
    /// tenant's; answers how many.
    pub async fn prune_shared_counts(&self, before: DateTime<Utc>) -> MemoryResult<u64> {
        let words = sqlx::query("DELETE FROM word_counts WHERE counted_at < $1")
            .bind(before)
            .execute(&self.writer)
            .await?;
        let corpora = sqlx::query("DELETE FROM corpus_counts WHERE counted_at < $1")
            .bind(before)
            .execute(&self.writer)
            .await?;
        Ok(words.rows_affected() + corpora.rows_affected())
    }
}
