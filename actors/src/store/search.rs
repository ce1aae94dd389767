//! Candidate retrieval for search and context: per memory type, a semantic list (pgvector
//! HNSW, cosine) and a keyword list (full text, GIN), each already restricted to what the
//! caller may see and to live, unexpired memories.
//!
//! Every query returns the same columns (see `domain::search::Candidate`), so ranking
//! never needs a second round trip.

use chrono::{DateTime, Utc};

use crate::domain::memory_type::MemoryType;
use crate::domain::search::{Candidate, SearchScope, SessionNeighbours};
use crate::error::MemoryResult;

use super::Store;
use super::columns::effective_confidence;

/// The candidate columns of each table, in `Candidate`'s order (without `signal`).
macro_rules! episode_candidate {
    () => {
        "e.id, e.content, e.importance, e.created_at, e.last_referenced_at, 1.0::float8 AS confidence,
         0.0::float8 AS decay_rate, e.created_at AS last_confirmed_at, NULL::text AS subject,
         NULL::text AS predicate, NULL::text AS scope, NULL::text AS permanence, NULL::text AS validity,
         NULL::text AS maturity, e.butler, e.session_id, e.metadata"
    };
}
macro_rules! fact_candidate {
    () => {
        "f.id, f.content, f.importance, f.created_at, f.last_referenced_at, f.confidence, f.decay_rate,
         f.last_confirmed_at, f.subject, f.predicate, f.scope, f.permanence, f.validity,
         NULL::text AS maturity, f.source_butler AS butler, NULL::text AS session_id, f.metadata"
    };
}
macro_rules! rule_candidate {
    () => {
        "r.id, r.content, r.importance, r.created_at, r.last_referenced_at, r.confidence, r.decay_rate,
         r.last_confirmed_at, NULL::text AS subject, NULL::text AS predicate, r.scope, r.permanence,
         r.validity, r.maturity, r.source_butler AS butler, NULL::text AS session_id, r.metadata"
    };
}

/// Live, visible, confident enough: the filters of each table. `$1` tenant, `$2` scopes or
/// butlers, `$3` now, `$4` minimum effective confidence.
macro_rules! episode_filter {
    () => {
        "e.tenant_id = $1 AND ($2::text[] IS NULL OR e.butler = ANY($2))
         AND e.forgotten_at IS NULL AND e.expires_at > $3 AND $4::float8 IS NOT NULL"
    };
}
macro_rules! fact_filter {
    () => {
        concat!(
            "f.tenant_id = $1 AND ($2::text[] IS NULL OR f.scope = ANY($2))
             AND f.validity IN ('active', 'fading') AND ",
            effective_confidence!("f.", "$3"),
            " >= $4"
        )
    };
}
macro_rules! rule_filter {
    () => {
        concat!(
            "r.tenant_id = $1 AND ($2::text[] IS NULL OR r.scope = ANY($2))
             AND r.validity IN ('active', 'fading')
             AND (r.maturity = 'anti_pattern' OR ",
            effective_confidence!("r.", "$3"),
            " >= $4)"
        )
    };
}

/// Okapi BM25 over the full-text index (k1 = 1.2, b = 0.5): PostgreSQL's own `ts_rank` has
/// no inverse document frequency, so a word in every memory (a speaker's name, "user")
/// would weigh as much as the rare word that identifies the answer. Query words are the
/// stemmed lexemes of `$5`; document frequencies come from the GIN index over the tenant's
/// memories of this type, whose count `$7` and mean length `$8` the caller supplies (they
/// change slowly and cost a scan, so they are cached); any visible memory containing any
/// query word is a candidate. Memories are short, so length normalisation is halved
/// (b = 0.5 rather than the usual 0.75, which over-rewards the shortest texts; measured on
/// LoCoMo, docs/benchmarks.md).
///
/// Arguments: the table, its alias, its candidate columns and its filter (all literals).
macro_rules! bm25_query {
    ($table:literal, $a:literal, $columns:expr, $filter:expr) => {
        concat!(
            "WITH terms AS MATERIALIZED (
                 SELECT DISTINCT lexeme FROM unnest(tsvector_to_array(to_tsvector('english', $5))) AS lexeme
                 WHERE lexeme !~ '[''\\\\]'),
             idf AS MATERIALIZED (
                 SELECT t.lexeme, ln(1 + (GREATEST($7::float8, d.df) - d.df + 0.5) / (d.df + 0.5)) AS idf
                 FROM terms t
                 CROSS JOIN LATERAL (
                     SELECT count(*)::float8 AS df FROM ", $table, " ", $a, "
                     WHERE ", $a, ".tenant_id = $1 AND ", $a, ".search_vector @@ quote_literal(t.lexeme)::tsquery) d),
             q AS MATERIALIZED (SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS q FROM terms)
             SELECT ", $columns, ", s.bm25 AS signal
             FROM ", $table, " ", $a, " CROSS JOIN q
             CROSS JOIN LATERAL (
                 SELECT COALESCE(sum(i.idf * (cardinality(u.positions) * 2.2)
                        / (cardinality(u.positions) + 1.2 * (0.5 + 0.5 * length(", $a, ".search_vector) / $8::float8))), 0)::float8 AS bm25
                 FROM unnest(", $a, ".search_vector) u JOIN idf i ON i.lexeme = u.lexeme) s
             WHERE ", $filter, " AND ", $a, ".search_vector @@ q.q
             ORDER BY signal DESC, ", $a, ".id LIMIT $6"
        )
    };
}

/// Collection statistics BM25 needs: how many memories of a type a tenant has, and their
/// mean length in lexemes.
#[derive(Debug, Clone, Copy, PartialEq, sqlx::FromRow)]
pub struct CorpusStats {
    pub documents: f64,
    pub mean_length: f64,
}

/// Where to look: the filters of one search.
#[derive(Debug, Clone)]
pub struct Filter<'a> {
    pub scope: &'a SearchScope,
    pub now: DateTime<Utc>,
    pub min_confidence: f64,
}

impl Filter<'_> {
    /// Scopes for facts and rules, butlers for episodes.
    fn visibility(&self, memory_type: MemoryType) -> &Option<Vec<String>> {
        match memory_type {
            MemoryType::Episode => &self.scope.butlers,
            MemoryType::Fact | MemoryType::Rule => &self.scope.scopes,
        }
    }
}

impl Store {
    /// The `depth` nearest memories of one type to `embedding`, nearest first; `signal` is
    /// the cosine similarity. Ordered by distance alone so that the HNSW index can produce
    /// the order (a tie-breaker would force a sort of every row); ties are broken when the
    /// lists are merged.
    pub async fn semantic_candidates(
        &self,
        memory_type: MemoryType,
        filter: &Filter<'_>,
        embedding: &pgvector::Vector,
        depth: i64,
    ) -> MemoryResult<Vec<Candidate>> {
        let sql = match memory_type {
            MemoryType::Episode => concat!(
                "SELECT ",
                episode_candidate!(),
                ", 1 - (e.embedding <=> $5) AS signal
                 FROM episodes e WHERE ",
                episode_filter!(),
                " AND e.embedding IS NOT NULL
                 ORDER BY e.embedding <=> $5 LIMIT $6"
            ),
            MemoryType::Fact => concat!(
                "SELECT ",
                fact_candidate!(),
                ", 1 - (f.embedding <=> $5) AS signal
                 FROM facts f WHERE ",
                fact_filter!(),
                " AND f.embedding IS NOT NULL
                 ORDER BY f.embedding <=> $5 LIMIT $6"
            ),
            MemoryType::Rule => concat!(
                "SELECT ",
                rule_candidate!(),
                ", 1 - (r.embedding <=> $5) AS signal
                 FROM rules r WHERE ",
                rule_filter!(),
                " AND r.embedding IS NOT NULL
                 ORDER BY r.embedding <=> $5 LIMIT $6"
            ),
        };
        let rows: Vec<Candidate> = sqlx::query_as(sql)
            .bind(&filter.scope.tenant_id)
            .bind(filter.visibility(memory_type))
            .bind(filter.now)
            .bind(filter.min_confidence)
            .bind(embedding)
            .bind(depth)
            .fetch_all(self.pool())
            .await?;
        Ok(typed(rows, memory_type))
    }

    /// The `depth` best full-text matches of one type, best first; `signal` is the BM25 score.
    pub async fn keyword_candidates(
        &self,
        memory_type: MemoryType,
        filter: &Filter<'_>,
        query: &str,
        depth: i64,
        corpus: CorpusStats,
    ) -> MemoryResult<Vec<Candidate>> {
        let sql = match memory_type {
            MemoryType::Episode => {
                bm25_query!("episodes", "e", episode_candidate!(), episode_filter!())
            }
            MemoryType::Fact => bm25_query!("facts", "f", fact_candidate!(), fact_filter!()),
            MemoryType::Rule => bm25_query!("rules", "r", rule_candidate!(), rule_filter!()),
        };
        let rows: Vec<Candidate> = sqlx::query_as(sql)
            .bind(&filter.scope.tenant_id)
            .bind(filter.visibility(memory_type))
            .bind(filter.now)
            .bind(filter.min_confidence)
            .bind(query)
            .bind(depth)
            .bind(corpus.documents)
            .bind(corpus.mean_length.max(1.0))
            .fetch_all(self.pool())
            .await?;
        Ok(typed(rows, memory_type))
    }

    /// A tenant's BM25 collection statistics for one memory type (a scan of its rows).
    pub async fn corpus_stats(
        &self,
        memory_type: MemoryType,
        tenant_id: &str,
    ) -> MemoryResult<CorpusStats> {
        let sql = format!(
            "SELECT count(*)::float8 AS documents, COALESCE(avg(length(search_vector)), 1)::float8 AS mean_length
             FROM {} WHERE tenant_id = $1",
            memory_type.table()
        );
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(tenant_id)
            .fetch_one(self.pool())
            .await?)
    }

    /// Facts worth knowing whatever the prompt: the most important, most confident ones.
    pub async fn standing_facts(
        &self,
        filter: &Filter<'_>,
        depth: i64,
    ) -> MemoryResult<Vec<Candidate>> {
        let rows: Vec<Candidate> = sqlx::query_as(concat!(
            "SELECT ",
            fact_candidate!(),
            ", 0.0::float8 AS signal
             FROM facts f WHERE ",
            fact_filter!(),
            " AND $5::text IS NULL
             ORDER BY f.importance DESC, f.last_confirmed_at DESC, f.id LIMIT $6"
        ))
        .bind(&filter.scope.tenant_id)
        .bind(filter.visibility(MemoryType::Fact))
        .bind(filter.now)
        .bind(filter.min_confidence)
        .bind(None::<String>)
        .bind(depth)
        .fetch_all(self.pool())
        .await?;
        Ok(typed(rows, MemoryType::Fact))
    }

    /// Rules worth following whatever the prompt: the most mature and effective ones.
    pub async fn standing_rules(
        &self,
        filter: &Filter<'_>,
        depth: i64,
    ) -> MemoryResult<Vec<Candidate>> {
        let rows: Vec<Candidate> = sqlx::query_as(concat!(
            "SELECT ",
            rule_candidate!(),
            ", 0.0::float8 AS signal
             FROM rules r WHERE ",
            rule_filter!(),
            " AND $5::text IS NULL
             ORDER BY CASE r.maturity WHEN 'proven' THEN 0 WHEN 'established' THEN 1
                                      WHEN 'anti_pattern' THEN 2 ELSE 3 END,
                      r.effectiveness_score DESC, r.importance DESC, r.id LIMIT $6"
        ))
        .bind(&filter.scope.tenant_id)
        .bind(filter.visibility(MemoryType::Rule))
        .bind(filter.now)
        .bind(filter.min_confidence)
        .bind(None::<String>)
        .bind(depth)
        .fetch_all(self.pool())
        .await?;
        Ok(typed(rows, MemoryType::Rule))
    }

    /// The most recent episodes: the "recent context" of a session.
    pub async fn recent_episodes(
        &self,
        filter: &Filter<'_>,
        depth: i64,
    ) -> MemoryResult<Vec<Candidate>> {
        let rows: Vec<Candidate> = sqlx::query_as(concat!(
            "SELECT ",
            episode_candidate!(),
            ", 0.0::float8 AS signal
             FROM episodes e WHERE ",
            episode_filter!(),
            " AND $5::text IS NULL
             ORDER BY e.created_at DESC, e.id LIMIT $6"
        ))
        .bind(&filter.scope.tenant_id)
        .bind(filter.visibility(MemoryType::Episode))
        .bind(filter.now)
        .bind(filter.min_confidence)
        .bind(None::<String>)
        .bind(depth)
        .fetch_all(self.pool())
        .await?;
        Ok(typed(rows, MemoryType::Episode))
    }
}

fn typed(mut rows: Vec<Candidate>, memory_type: MemoryType) -> Vec<Candidate> {
    for row in &mut rows {
        row.memory_type = Some(memory_type);
    }
    rows
}

impl Store {
    /// For each episode in `ids` that belongs to a session, its neighbours in that session
    /// among the episodes `filter` lets the caller see.
    pub async fn session_neighbours(
        &self,
        filter: &Filter<'_>,
        ids: &[uuid::Uuid],
    ) -> MemoryResult<Vec<SessionNeighbours>> {
        Ok(sqlx::query_as(concat!(
            "SELECT c.id,
                    (SELECT e.id FROM episodes e
                     WHERE e.tenant_id = c.tenant_id AND e.butler = c.butler AND e.session_id = c.session_id
                       AND (e.created_at, e.id) < (c.created_at, c.id) AND ", episode_filter!(), "
                     ORDER BY e.created_at DESC, e.id DESC LIMIT 1) AS previous,
                    (SELECT e.id FROM episodes e
                     WHERE e.tenant_id = c.tenant_id AND e.butler = c.butler AND e.session_id = c.session_id
                       AND (e.created_at, e.id) > (c.created_at, c.id) AND ", episode_filter!(), "
                     ORDER BY e.created_at, e.id LIMIT 1) AS next
             FROM episodes c
             WHERE c.tenant_id = $1 AND c.id = ANY($5) AND c.session_id IS NOT NULL"
        ))
        .bind(&filter.scope.tenant_id)
        .bind(filter.visibility(MemoryType::Episode))
        .bind(filter.now)
        .bind(filter.min_confidence)
        .bind(ids)
        .fetch_all(self.pool())
        .await?)
    }

    /// Episodes by id, as candidates (`signal` 0), among those the caller may see.
    pub async fn episode_candidates(
        &self,
        filter: &Filter<'_>,
        ids: &[uuid::Uuid],
    ) -> MemoryResult<Vec<Candidate>> {
        let rows: Vec<Candidate> = sqlx::query_as(concat!(
            "SELECT ",
            episode_candidate!(),
            ", 0.0::float8 AS signal
             FROM episodes e WHERE ",
            episode_filter!(),
            " AND e.id = ANY($5)"
        ))
        .bind(&filter.scope.tenant_id)
        .bind(filter.visibility(MemoryType::Episode))
        .bind(filter.now)
        .bind(filter.min_confidence)
        .bind(ids)
        .fetch_all(self.pool())
        .await?;
        Ok(typed(rows, MemoryType::Episode))
    }
}
