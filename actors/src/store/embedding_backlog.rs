//! The embedding backlog: rows committed without an embedding, and after a model change
//! rows embedded by another model. It is durable by construction (it is the rows
//! themselves), so a crash loses nothing: the indexer simply finds the same rows again.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::memory_type::MemoryType;
use crate::error::MemoryResult;

use super::Store;
use super::columns::happened;
use super::embedding_claims::EmbeddingClaim;
use super::vocabulary::{NewWord, learn_words, word_columns};

/// How many batches of the oldest waiting rows an instance looks through for rows no other
/// instance has claimed.
pub(super) const CANDIDATE_BATCHES: i64 = 4;

/// A row waiting for its embedding.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Unembedded {
    pub tenant_id: String,
    pub id: Uuid,
    pub text: String,
    /// For an episode in a session: the episode before it, whose meaning it continues.
    pub context: Option<String>,
}

/// What the indexer made of a batch of rows, in their order: each row's vector and token
/// sketch (none while the second stage is off), and the words the rows bring to their
/// tenants' vocabularies with those words' vectors (none while widening is off).
pub struct Embedded {
    pub vectors: Vec<pgvector::Vector>,
    pub sketches: Vec<Option<Vec<u8>>>,
    pub words: Vec<NewWord>,
    pub word_vectors: Vec<pgvector::Vector>,
}

/// A row's key: its tenant and id.
pub type RowKey = (String, Uuid);

/// One step of a re-embedding walk: the stale rows no other instance is re-embedding, the
/// last row looked at (`None` at the end of the table), and the claim on the rows.
pub struct StaleWindow {
    pub rows: Vec<Unembedded>,
    pub last: Option<RowKey>,
    pub claim: Option<EmbeddingClaim>,
}

/// The text each type is embedded from, as `tenant_id, id, text, context` over its table: a fact is
/// embedded with its subject and predicate, so that a question about "diet" finds
/// `user / dietary_restriction: lactose intolerant`; an episode in a conversation carries
/// the episode before it as context: the one before it in its session, or for an episode
/// without one, the butler's previous episode without one stored at most `$gap` seconds
/// before it and which happened within `$gap` of it (`episodes.conversation_gap_secs`; two
/// lookups, each on its own index-friendly condition).
macro_rules! embedding_text {
    (episode, $gap:literal) => {
        concat!(
            "SELECT e.tenant_id, e.id, e.content AS text,
                CASE WHEN e.session_id IS NOT NULL THEN
                    (SELECT p.content FROM episodes p
                     WHERE p.tenant_id = e.tenant_id AND p.butler = e.butler
                       AND p.session_id = e.session_id AND p.forgotten_at IS NULL
                       AND (p.created_at, p.id) < (e.created_at, e.id)
                     ORDER BY p.created_at DESC, p.id DESC LIMIT 1)
                ELSE
                    (SELECT p.content FROM episodes p
                     WHERE p.tenant_id = e.tenant_id AND p.butler = e.butler
                       AND p.session_id IS NULL AND p.forgotten_at IS NULL
                       AND (p.created_at, p.id) < (e.created_at, e.id)
                       AND p.created_at >= e.created_at - make_interval(secs => ", $gap, "::float8)
                       AND ", happened!("p."), " BETWEEN ", happened!("e."), " - make_interval(secs => ", $gap, "::float8)
                           AND ", happened!("e."), " + make_interval(secs => ", $gap, "::float8)
                     ORDER BY p.created_at DESC, p.id DESC LIMIT 1)
                END AS context
         FROM episodes e"
        )
    };
    // An episode's own words, without the turn before it: what its token sketch is made of.
    (episode_own) => {
        "SELECT e.tenant_id, e.id, e.content AS text, NULL::text AS context FROM episodes e"
    };
    (fact) => {
        "SELECT e.tenant_id, e.id, e.subject || ' ' || replace(e.predicate, '_', ' ') || ': ' || e.content AS text,
                NULL::text AS context
         FROM facts e"
    };
    (rule) => {
        "SELECT e.tenant_id, e.id, e.content AS text, NULL::text AS context FROM rules e"
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
        conversation_gap_secs: f64,
    ) -> MemoryResult<(Vec<Unembedded>, EmbeddingClaim)> {
        // A sealed fact is never embedded: a vector leaks the text (`vault.rs`).
        let waiting = match memory_type {
            MemoryType::Fact => "embedding IS NULL AND sealed IS NULL",
            MemoryType::Episode | MemoryType::Rule => "embedding IS NULL",
        };
        // Past the rows other instances hold, up to a few batches in.
        let candidates: Vec<RowKey> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT tenant_id, id FROM {} WHERE {waiting} ORDER BY created_at, id LIMIT $1",
            memory_type.table()
        )))
        .bind(limit.saturating_mul(CANDIDATE_BATCHES))
        .fetch_all(self.pool())
        .await?;
        // An empty backlog, the common case at rest, costs its one probe.
        if candidates.is_empty() {
            return Ok((Vec::new(), EmbeddingClaim::nothing()));
        }
        let ids: Vec<Uuid> = candidates.iter().map(|(_, id)| *id).collect();
        let (claimed, claim) = self.claim_for_embedding(&ids, limit).await?;
        let claimed = keys_of(&candidates, &claimed);
        let sql = match memory_type {
            MemoryType::Episode => concat!(
                embedding_text!(episode, "$3"),
                " WHERE (e.tenant_id, e.id) IN (SELECT * FROM unnest($1::text[], $2::uuid[]))
                    AND e.embedding IS NULL AND $3::float8 IS NOT NULL ORDER BY e.created_at, e.id"
            ),
            MemoryType::Fact => concat!(
                embedding_text!(fact),
                " WHERE (e.tenant_id, e.id) IN (SELECT * FROM unnest($1::text[], $2::uuid[]))
                    AND e.embedding IS NULL AND e.sealed IS NULL ORDER BY e.created_at, e.id"
            ),
            MemoryType::Rule => concat!(
                embedding_text!(rule),
                " WHERE (e.tenant_id, e.id) IN (SELECT * FROM unnest($1::text[], $2::uuid[]))
                    AND e.embedding IS NULL ORDER BY e.created_at, e.id"
            ),
        };
        let rows = if claimed.0.is_empty() {
            Vec::new()
        } else {
            let query = sqlx::query_as(sql).bind(&claimed.0).bind(&claimed.1);
            let query = match memory_type {
                MemoryType::Episode => query.bind(conversation_gap_secs),
                MemoryType::Fact | MemoryType::Rule => query,
            };
            query.fetch_all(self.pool()).await?
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
    /// that re-embeds a table, in key order.
    #[tracing::instrument(target = "otel", name = "db.stale_window", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn stale_window(
        &self,
        memory_type: MemoryType,
        version: i16,
        after: Option<&RowKey>,
        window: i64,
        conversation_gap_secs: f64,
    ) -> MemoryResult<StaleWindow> {
        let (stale, last) = self
            .walk_window(
                memory_type,
                "t.embedding_version_id <> $1".to_owned(),
                version,
                after,
                window,
            )
            .await?;
        if stale.is_empty() {
            return Ok(StaleWindow {
                rows: Vec::new(),
                last,
                claim: None,
            });
        }
        let ids: Vec<Uuid> = stale.iter().map(|(_, id)| *id).collect();
        let (claimed, claim) = self.claim_for_embedding(&ids, ids.len() as i64).await?;
        let claimed = keys_of(&stale, &claimed);
        let sql = match memory_type {
            MemoryType::Episode => concat!(
                embedding_text!(episode, "$4"),
                " WHERE (e.tenant_id, e.id) IN (SELECT * FROM unnest($1::text[], $2::uuid[]))
                    AND e.embedding_version_id <> $3 AND $4::float8 IS NOT NULL
                  ORDER BY e.tenant_id, e.id"
            ),
            MemoryType::Fact => concat!(
                embedding_text!(fact),
                " WHERE (e.tenant_id, e.id) IN (SELECT * FROM unnest($1::text[], $2::uuid[]))
                    AND e.embedding_version_id <> $3 ORDER BY e.tenant_id, e.id"
            ),
            MemoryType::Rule => concat!(
                embedding_text!(rule),
                " WHERE (e.tenant_id, e.id) IN (SELECT * FROM unnest($1::text[], $2::uuid[]))
                    AND e.embedding_version_id <> $3 ORDER BY e.tenant_id, e.id"
            ),
        };
        let query = sqlx::query_as(sql)
            .bind(&claimed.0)
            .bind(&claimed.1)
            .bind(version);
        let query = match memory_type {
            MemoryType::Episode => query.bind(conversation_gap_secs),
            MemoryType::Fact | MemoryType::Rule => query,
        };
        let rows = query.fetch_all(self.pool()).await?;
        Ok(StaleWindow {
            rows,
            last,
            claim: Some(claim),
        })
    }

    /// One window of a walk through `memory_type`'s table (as `t`) in key order: the next
    /// `window` rows after `after`, those of them `picked` (a condition on `t`; `$1` is the
    /// model's `version`), and the last row looked at (`None` at the end of the table).
    async fn walk_window(
        &self,
        memory_type: MemoryType,
        picked: String,
        version: i16,
        after: Option<&RowKey>,
        window: i64,
    ) -> MemoryResult<(Vec<RowKey>, Option<RowKey>)> {
        let scan = format!(
            "SELECT t.tenant_id, t.id, {picked} FROM {} t
             WHERE $2::text IS NULL OR (t.tenant_id, t.id) > ($2, $4)
             ORDER BY t.tenant_id, t.id LIMIT $3",
            memory_type.table()
        );
        let seen: Vec<(String, Uuid, Option<bool>)> = sqlx::query_as(sqlx::AssertSqlSafe(scan))
            .bind(version)
            .bind(after.map(|(t, _)| t))
            .bind(window)
            .bind(after.map(|(_, id)| *id))
            .fetch_all(self.pool())
            .await?;
        let last = seen.last().map(|(t, id, _)| (t.clone(), *id));
        let picked = seen
            .into_iter()
            .filter(|(_, _, picked)| *picked == Some(true))
            .map(|(t, id, _)| (t, id))
            .collect();
        Ok((picked, last))
    }

    /// Whether any row of `memory_type` holds an embedding of the model `version` but no
    /// token sketch: one anti-join over the table, so that a walk for them (at every start
    /// while the second stage is on) costs one statement where there is nothing to do.
    pub async fn sketches_missing(
        &self,
        memory_type: MemoryType,
        version: i16,
    ) -> MemoryResult<bool> {
        let sql = format!(
            "SELECT EXISTS (
                 SELECT 1 FROM {table} t
                 WHERE t.embedding_version_id = $1 AND NOT EXISTS (
                     SELECT 1 FROM {sketches} s WHERE s.tenant_id = t.tenant_id AND s.id = t.id))",
            table = memory_type.table(),
            sketches = memory_type.sketch_table(),
        );
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(version)
            .fetch_one(self.pool())
            .await?)
    }

    /// The next `window` rows of `memory_type` in id order after `after`, and those of them
    /// that hold an embedding of the model `version` but no token sketch (embedded while the
    /// second stage was off), with their own text: one bounded step of the walk that stores
    /// their sketches once the second stage is on. Not claimed: two instances walking at once
    /// would each make a sketch and the second would keep the first's.
    #[tracing::instrument(target = "otel", name = "db.sketchless_window", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn sketchless_window(
        &self,
        memory_type: MemoryType,
        version: i16,
        after: Option<&RowKey>,
        window: i64,
    ) -> MemoryResult<(Vec<Unembedded>, Option<RowKey>)> {
        let unsketched = format!(
            "t.embedding_version_id = $1 AND NOT EXISTS (
                 SELECT 1 FROM {} s WHERE s.tenant_id = t.tenant_id AND s.id = t.id)",
            memory_type.sketch_table(),
        );
        self.own_texts_window(memory_type, unsketched, version, after, window)
            .await
    }

    /// The next `window` rows of `memory_type` in id order after `after`, and those of them
    /// that hold an embedding of the model `version`, with their own text: one bounded step
    /// of the walk that learns their words (`store/vocabulary.rs`). Not claimed: a word two
    /// instances learn at once is stored once.
    #[tracing::instrument(target = "otel", name = "db.embedded_window", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn embedded_window(
        &self,
        memory_type: MemoryType,
        version: i16,
        after: Option<&RowKey>,
        window: i64,
    ) -> MemoryResult<(Vec<Unembedded>, Option<RowKey>)> {
        let embedded = "t.embedding_version_id = $1".to_owned();
        self.own_texts_window(memory_type, embedded, version, after, window)
            .await
    }

    /// One window of a walk (`walk_window`), with the own texts of the rows `picked` that
    /// hold an embedding of the model `version`.
    async fn own_texts_window(
        &self,
        memory_type: MemoryType,
        picked: String,
        version: i16,
        after: Option<&RowKey>,
        window: i64,
    ) -> MemoryResult<(Vec<Unembedded>, Option<RowKey>)> {
        let (missing, last) = self
            .walk_window(memory_type, picked, version, after, window)
            .await?;
        let (tenants, ids): (Vec<String>, Vec<Uuid>) = missing.into_iter().unzip();
        if ids.is_empty() {
            return Ok((Vec::new(), last));
        }
        let own = match memory_type {
            MemoryType::Episode => embedding_text!(episode_own),
            MemoryType::Fact => embedding_text!(fact),
            MemoryType::Rule => embedding_text!(rule),
        };
        let sql = format!(
            "{own} WHERE (e.tenant_id, e.id) IN (SELECT * FROM unnest($1::text[], $2::uuid[]))
               AND e.embedding_version_id = $3 ORDER BY e.tenant_id, e.id"
        );
        let rows = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(&tenants)
            .bind(&ids)
            .bind(version)
            .fetch_all(self.pool())
            .await?;
        Ok((rows, last))
    }

    /// Stores token sketches made by the model `version` for rows that still hold its
    /// embedding and have no sketch: one made meanwhile (the row re-embedded with a new
    /// text) is kept. Returns how many were stored.
    #[tracing::instrument(target = "otel", name = "db.set_sketches", skip_all, fields(db.system.name = "postgresql", db.operation.name = "INSERT"))]
    pub async fn set_sketches(
        &self,
        memory_type: MemoryType,
        version: i16,
        rows: &[RowKey],
        sketches: Vec<Vec<u8>>,
    ) -> MemoryResult<u64> {
        let sql = format!(
            "INSERT INTO {sketches} (tenant_id, id, embedding_version_id, sketch)
             SELECT v.tenant_id, v.id, $1, v.sketch
             FROM unnest($2::text[], $3::uuid[], $4::bytea[]) AS v(tenant_id, id, sketch)
             JOIN {table} t ON t.tenant_id = v.tenant_id AND t.id = v.id
             WHERE t.embedding_version_id = $1
             ON CONFLICT (tenant_id, id) DO NOTHING",
            sketches = memory_type.sketch_table(),
            table = memory_type.table(),
        );
        let (tenants, ids): (Vec<&str>, Vec<Uuid>) =
            rows.iter().map(|(t, id)| (t.as_str(), *id)).unzip();
        Ok(sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(version)
            .bind(tenants)
            .bind(ids)
            .bind(sketches)
            .execute(self.writer())
            .await?
            .rows_affected())
    }

    /// Stores embeddings, each with its text's token sketch (`store/token_sketches.rs`), for
    /// rows that still have none (`Replacing::Nothing`) or still have another model's
    /// (`Replacing::OtherModel`), with the rows' new words (`store/vocabulary.rs`), in one
    /// statement. Returns the tenant of
    /// each row updated. Both are asked of `embedding_version_id` (set and cleared with the
    /// embedding, a CHECK says so), which no index covers: asked of `embedding`, it let the
    /// planner scan the whole backlog through its partial index. A row embedded without a
    /// sketch (the second stage off) loses one it had: it was another text's or model's.
    #[tracing::instrument(target = "otel", name = "db.set_embeddings", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
    pub async fn set_embeddings(
        &self,
        memory_type: MemoryType,
        version_id: i16,
        replacing: Replacing,
        rows: &[RowKey],
        embedded: Embedded,
    ) -> MemoryResult<Vec<String>> {
        let Embedded {
            vectors,
            sketches,
            words,
            word_vectors,
        } = embedded;
        let still = match replacing {
            Replacing::Nothing => "t.embedding_version_id IS NULL",
            Replacing::OtherModel => "t.embedding_version_id <> $1",
        };
        let sql = format!(
            "WITH v AS (
                 SELECT * FROM unnest($2::text[], $3::uuid[], $4::vector[], $5::bytea[])
                     AS v(tenant_id, id, embedding, sketch)),
             embedded AS (
                 UPDATE {table} AS t SET embedding = v.embedding::halfvec, embedding_version_id = $1
                 FROM v WHERE t.tenant_id = v.tenant_id AND t.id = v.id AND {still}
                 RETURNING t.tenant_id, t.id),
             sketched AS (
                 INSERT INTO {sketches} (tenant_id, id, embedding_version_id, sketch)
                 SELECT v.tenant_id, v.id, $1, v.sketch
                 FROM v JOIN embedded e ON e.tenant_id = v.tenant_id AND e.id = v.id
                 WHERE v.sketch IS NOT NULL
                 ON CONFLICT (tenant_id, id) DO UPDATE
                     SET embedding_version_id = excluded.embedding_version_id,
                         sketch = excluded.sketch),
             unsketched AS (
                 DELETE FROM {sketches} s USING v, embedded e
                 WHERE s.tenant_id = v.tenant_id AND s.id = v.id
                   AND e.tenant_id = v.tenant_id AND e.id = v.id AND v.sketch IS NULL),
             {learnt}
             SELECT tenant_id FROM embedded",
            table = memory_type.table(),
            sketches = memory_type.sketch_table(),
            learnt = learn_words(6),
        );
        let (word_tenants, word_rows, lexemes, surfaces, word_vectors) =
            word_columns(words, word_vectors);
        let (tenants, ids): (Vec<&str>, Vec<Uuid>) =
            rows.iter().map(|(t, id)| (t.as_str(), *id)).unzip();
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(version_id)
            .bind(tenants)
            .bind(ids)
            .bind(vectors)
            .bind(sketches)
            .bind(word_tenants)
            .bind(word_rows)
            .bind(lexemes)
            .bind(surfaces)
            .bind(word_vectors)
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

/// The (tenant, id) keys of the `claimed` ids among `candidates`, as two columns.
fn keys_of(candidates: &[RowKey], claimed: &[Uuid]) -> (Vec<String>, Vec<Uuid>) {
    let claimed: std::collections::HashSet<&Uuid> = claimed.iter().collect();
    candidates
        .iter()
        .filter(|(_, id)| claimed.contains(id))
        .map(|(t, id)| (t.clone(), *id))
        .unzip()
}
