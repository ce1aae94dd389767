//! Candidate retrieval for search and context: per memory type, a semantic list (pgvector
//! HNSW, cosine) and a keyword list (full text, GIN), each already restricted to what the
//! caller may see and to live, unexpired memories.
//!
//! Every query returns the same columns (see `domain::search::Candidate`), so ranking
//! never needs a second round trip.

use chrono::{DateTime, Utc};

use crate::domain::memory_type::MemoryType;
use crate::domain::search::{Candidate, SearchScope};
use crate::error::MemoryResult;

use super::Store;

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
        "f.tenant_id = $1 AND ($2::text[] IS NULL OR f.scope = ANY($2))
         AND f.validity IN ('active', 'fading')
         AND f.confidence * exp(-f.decay_rate * GREATEST(0, extract(epoch FROM ($3 - f.last_confirmed_at)) / 86400.0)) >= $4"
    };
}
macro_rules! rule_filter {
    () => {
        "r.tenant_id = $1 AND ($2::text[] IS NULL OR r.scope = ANY($2))
         AND r.validity IN ('active', 'fading')
         AND r.confidence * exp(-r.decay_rate * GREATEST(0, extract(epoch FROM ($3 - r.last_confirmed_at)) / 86400.0)) >= $4"
    };
}

/// The query text as an OR of its stemmed words: natural-language questions rarely contain
/// every word of the memory that answers them, so an AND query would find almost nothing.
macro_rules! or_query {
    () => {
        "(SELECT CASE WHEN numnode(p) = 0 THEN p ELSE replace(p::text, ' & ', ' | ')::tsquery END
          FROM plainto_tsquery('english', $5) AS p)"
    };
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
    /// the cosine similarity.
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
                 ORDER BY e.embedding <=> $5, e.id LIMIT $6"
            ),
            MemoryType::Fact => concat!(
                "SELECT ",
                fact_candidate!(),
                ", 1 - (f.embedding <=> $5) AS signal
                 FROM facts f WHERE ",
                fact_filter!(),
                " AND f.embedding IS NOT NULL
                 ORDER BY f.embedding <=> $5, f.id LIMIT $6"
            ),
            MemoryType::Rule => concat!(
                "SELECT ",
                rule_candidate!(),
                ", 1 - (r.embedding <=> $5) AS signal
                 FROM rules r WHERE ",
                rule_filter!(),
                " AND r.embedding IS NOT NULL
                 ORDER BY r.embedding <=> $5, r.id LIMIT $6"
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

    /// The `depth` best full-text matches of one type, best first; `signal` is `ts_rank`.
    pub async fn keyword_candidates(
        &self,
        memory_type: MemoryType,
        filter: &Filter<'_>,
        query: &str,
        depth: i64,
    ) -> MemoryResult<Vec<Candidate>> {
        let sql = match memory_type {
            MemoryType::Episode => concat!(
                "SELECT ",
                episode_candidate!(),
                ", ts_rank(e.search_vector, q.q, 1)::float8 AS signal
                 FROM episodes e, ",
                or_query!(),
                " AS q(q)
                 WHERE ",
                episode_filter!(),
                " AND e.search_vector @@ q.q
                 ORDER BY signal DESC, e.id LIMIT $6"
            ),
            MemoryType::Fact => concat!(
                "SELECT ",
                fact_candidate!(),
                ", ts_rank(f.search_vector, q.q, 1)::float8 AS signal
                 FROM facts f, ",
                or_query!(),
                " AS q(q)
                 WHERE ",
                fact_filter!(),
                " AND f.search_vector @@ q.q
                 ORDER BY signal DESC, f.id LIMIT $6"
            ),
            MemoryType::Rule => concat!(
                "SELECT ",
                rule_candidate!(),
                ", ts_rank(r.search_vector, q.q, 1)::float8 AS signal
                 FROM rules r, ",
                or_query!(),
                " AS q(q)
                 WHERE ",
                rule_filter!(),
                " AND r.search_vector @@ q.q
                 ORDER BY signal DESC, r.id LIMIT $6"
            ),
        };
        let rows: Vec<Candidate> = sqlx::query_as(sql)
            .bind(&filter.scope.tenant_id)
            .bind(filter.visibility(memory_type))
            .bind(filter.now)
            .bind(filter.min_confidence)
            .bind(query)
            .bind(depth)
            .fetch_all(self.pool())
            .await?;
        Ok(typed(rows, memory_type))
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
