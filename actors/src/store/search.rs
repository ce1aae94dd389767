//! Candidate retrieval for search and context: per memory type, a semantic list (pgvector
//! HNSW, cosine) and a keyword list (full text, GIN), each already restricted to what the
//! caller may see and to live, unexpired memories.
//!
//! Every query returns the same columns (see `domain::search::Candidate`), so ranking
//! never needs a second round trip.

use std::borrow::Cow;

use chrono::{DateTime, Utc};

use crate::domain::bm25::{KeywordPlan, Selection, any_of};
use crate::domain::memory_type::MemoryType;
use crate::domain::search::{Candidate, SearchScope};
use crate::domain::time_window::TimeWindow;
use crate::error::MemoryResult;

use super::Store;
use super::columns::effective_confidence;
use window::Windowed;

/// The candidate columns of each table, in `Candidate`'s order (without `signal`). Every
/// table names every column, NULL where it has none, so that a list which forgets one
/// fails rather than decoding it as absent (and no row pays for looking a column up, missing
/// it and defaulting it).
macro_rules! episode_candidate {
    () => {
        concat!(
            "e.id, e.content, e.importance, e.created_at, e.last_referenced_at, 1.0::float8 AS confidence,
             0.0::float8 AS decay_rate, e.created_at AS last_confirmed_at, NULL::text AS subject,
             NULL::text AS predicate, NULL::text AS scope, NULL::text AS permanence, NULL::text AS validity,
             NULL::text AS maturity, e.butler, e.session_id, e.metadata, e.occurred_at,
             e.embedding_version_id IS NULL AS unembedded, ",
            unsealed_unbounded!()
        )
    };
}
macro_rules! fact_candidate {
    () => {
        "f.id, f.content, f.importance, f.created_at, f.last_referenced_at, f.confidence, f.decay_rate,
         f.last_confirmed_at, f.subject, f.predicate, f.scope, f.permanence, f.validity,
         NULL::text AS maturity, f.source_butler AS butler, NULL::text AS session_id, f.metadata,
         NULL::timestamptz AS occurred_at, f.tenant_id, f.key_version, f.sealed, f.valid_from,
         f.valid_until, f.embedding_version_id IS NULL AS unembedded"
    };
}
macro_rules! rule_candidate {
    () => {
        concat!(
            "r.id, r.content, r.importance, r.created_at, r.last_referenced_at, r.confidence, r.decay_rate,
             r.last_confirmed_at, NULL::text AS subject, NULL::text AS predicate, r.scope, r.permanence,
             r.validity, r.maturity, r.source_butler AS butler, NULL::text AS session_id, r.metadata,
             NULL::timestamptz AS occurred_at, r.embedding_version_id IS NULL AS unembedded, ",
            unsealed_unbounded!()
        )
    };
}
/// The fact-only columns (sealing, validity time) of an episode or rule candidate.
macro_rules! unsealed_unbounded {
    () => {
        "NULL::text AS tenant_id, NULL::int AS key_version, NULL::bytea AS sealed,
         NULL::timestamptz AS valid_from, NULL::timestamptz AS valid_until"
    };
}

/// Live, visible, confident enough: the filters of each table. `$1` tenant, `$2` scopes or
/// butlers, `$3` now, `$4` minimum effective confidence.
macro_rules! episode_filter {
    () => {
        concat!(
            "e.tenant_id = $1 AND ",
            episode_butlers!(),
            " AND e.forgotten_at IS NULL AND e.expires_at > $3 AND $4::float8 IS NOT NULL"
        )
    };
}
/// Which butlers' episodes: all (`$2` NULL) or those in `$2`. `Filter::sql` swaps it for
/// `ONE_BUTLER` when there is exactly one.
macro_rules! episode_butlers {
    () => {
        "($2::text[] IS NULL OR e.butler = ANY($2))"
    };
}
/// One butler's episodes, as an equality the `(tenant_id, butler, created_at)` indexes can
/// use in order: with `= ANY` a prepared statement's generic plan must sort the whole
/// shard to find its most recent episodes (measured: 0.2 ms against 10-30 ms at 15,000
/// episodes a shard).
const ONE_BUTLER: &str = "e.butler = ($2::text[])[1]";
/// The match of the most recent common-word candidates (`bm25_query!(.., recent)`), and
/// what it becomes for one butler's episodes: an expression the GIN index cannot serve,
/// so that the `(tenant_id, butler, created_at)` index drives the scan and it stops after
/// `$10` rows (the words are common: most rows match). Elsewhere there is no such index,
/// and the GIN index keeps the cost at the words' matches.
const RECENT_MATCH: &str = "e.search_vector @@ ($9::tsquery)";
const RECENT_MATCH_WALKING: &str = "(e.search_vector || ''::tsvector) @@ $9::tsquery";
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
             AND r.validity IN ('active', 'fading') AND r.disabled_at IS NULL
             AND (r.maturity = 'anti_pattern' OR ",
            effective_confidence!("r.", "$3"),
            " >= $4)"
        )
    };
}

/// Okapi BM25 over the full-text index (k1 = 1.2, b = 0.5): PostgreSQL's own `ts_rank` has
/// no inverse document frequency, so a word in every memory (a speaker's name, "user")
/// would weigh as much as the rare word that identifies the answer. The query words `$5`
/// come with their idf `$7` (see `domain::bm25`: computed from the tenant's document
/// frequencies, which are cached, as is the mean length `$8`); the candidates are the
/// visible memories matching the tsquery `$9` (the plan's selective words), or, with
/// `recent`, the `$10` most recent ones matching it (only common words; for one butler's
/// episodes `Filter::sql` lets the recency index drive that scan, see `RECENT_MATCH`).
/// Memories are short, so length normalisation is halved (b = 0.5 rather than the usual
/// 0.75, which over-rewards the shortest texts; measured on LoCoMo, docs/benchmarks.md).
///
/// Arguments: the table, its alias, its candidate columns and its filter (all literals).
macro_rules! bm25_query {
    ($table:literal, $a:literal, $columns:expr, $filter:expr) => {
        concat!(
            bm25_words!(),
            " SELECT ",
            $columns,
            ", ",
            bm25_score!($a),
            " AS signal
             FROM (SELECT * FROM ",
            $table,
            " ",
            $a,
            "
                   WHERE ",
            $filter,
            " AND ",
            $a,
            ".search_vector @@ $9::tsquery
                   ORDER BY ",
            bm25_presence!($a),
            " DESC, ",
            $a,
            ".id LIMIT 2 * $6) ",
            $a,
            "
             ORDER BY signal DESC, ",
            $a,
            ".id LIMIT $6"
        )
    };
    ($table:literal, $a:literal, $columns:expr, $filter:expr, recent) => {
        concat!(
            bm25_words!(),
            " SELECT ",
            $columns,
            ", ",
            bm25_score!($a),
            " AS signal
             FROM (SELECT * FROM ",
            $table,
            " ",
            $a,
            "
                   WHERE ",
            $filter,
            " AND ",
            $a,
            ".search_vector @@ ($9::tsquery)
                   ORDER BY ",
            $a,
            ".created_at DESC LIMIT $10) ",
            $a,
            "
             ORDER BY signal DESC, ",
            $a,
            ".id LIMIT $6"
        )
    };
}

/// The query words with their idf, each also as a one-word tsquery (parsed once per
/// statement, not per row).
macro_rules! bm25_words {
    () => {
        "WITH idf AS MATERIALIZED (
             SELECT w.lexeme, w.idf, quote_literal(w.lexeme)::tsquery AS word
             FROM unnest($5::text[], $7::float8[]) AS w(lexeme, idf))"
    };
}

/// One memory's BM25 score: the sum over the query words it contains, each saturated by
/// how often it occurs there. Only the query's words are unnested: `setweight` marks their
/// positions `D` and `ts_filter` keeps what is marked (the stored documents weigh their parts
/// `A` to `C`; a `D` lexeme that is not a query word would be dropped by the `ANY` test all
/// the same), so a memory's other words are never expanded into rows, and a word's idf is
/// read from the bound array (`$5`, `$7`: distinct lexemes) instead of joining a table per
/// memory: the keyword list took 2.06 ms instead of 2.34 over the same twenty searches
/// (docs/benchmarks.md, "The keyword list's exact score, and neighbours without a lookup").
macro_rules! bm25_score {
    ($a:literal) => {
        concat!(
            "(SELECT COALESCE(sum($7[array_position($5, u.lexeme)] * (cardinality(u.positions) * 2.2)
                     / (cardinality(u.positions) + 1.2 * (0.5 + 0.5 * length(",
            $a,
            ".search_vector) / $8::float8))), 0)::float8
              FROM unnest(ts_filter(setweight(",
            $a,
            ".search_vector, 'D', $5::text[]), '{D}')) u WHERE u.lexeme = ANY($5::text[]))"
        )
    };
}

/// BM25 as if each word occurred once, which orders the selective matches before the
/// exact score is computed for the best twice-`limit` of them. Counting occurrences means
/// unnesting a memory's whole tsvector and joining it with the query words; testing
/// containment costs a quarter of that (5-6 ms against 18-23 ms for 1,150 matches;
/// docs/benchmarks.md, "Where a cold search's CPU goes"). Memories are a sentence or two,
/// where a word rarely repeats, so the two orders differ little, and only the exact one is
/// returned (scoring by containment alone lost half a point of LoCoMo R@10).
macro_rules! bm25_presence {
    ($a:literal) => {
        concat!(
            "((SELECT COALESCE(sum(i.idf), 0) FROM idf i WHERE ",
            $a,
            ".search_vector @@ i.word)
              / (1 + 1.2 * (0.5 + 0.5 * length(",
            $a,
            ".search_vector) / $8::float8)))"
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
    /// The model whose vectors a semantic search compares with (its `embedding_versions`
    /// id) while another model's vectors may still be stored: after a model change, rows
    /// not yet re-embedded are found by keywords only. `None` once every vector is the
    /// running model's: the predicate is left out, as it costs the planner its estimates.
    pub embedding_version: Option<i16>,
    /// When to look (`as_of`, `since`, `until`); `None`: what is live now (`window.rs`).
    pub window: Option<TimeWindow>,
}

impl Filter<'_> {
    /// `sql` as it should run for this filter, with the times its window binds after the
    /// query's own `bound` parameters: the window's conditions (`window.rs`); and an
    /// episode query for a single butler gets the equality form of the butler condition
    /// (see `ONE_BUTLER`) and walks the recency index for common-word candidates (see
    /// `RECENT_MATCH`).
    fn sql(
        &self,
        memory_type: MemoryType,
        sql: &'static str,
        bound: usize,
    ) -> MemoryResult<Windowed> {
        let mut statement = self.windowed(memory_type, Cow::Borrowed(sql), bound)?;
        let one_butler = matches!(&self.scope.butlers, Some(b) if b.len() == 1);
        if memory_type == MemoryType::Episode && one_butler {
            statement.sql = Cow::Owned(
                statement
                    .sql
                    .replace(episode_butlers!(), ONE_BUTLER)
                    .replace(RECENT_MATCH, RECENT_MATCH_WALKING),
            );
        }
        Ok(statement)
    }

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
    #[tracing::instrument(target = "otel", name = "db.semantic_candidates", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
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
                ", 1 - (e.embedding <=> $5::halfvec) AS signal
                 FROM episodes e WHERE ",
                episode_filter!(),
                " AND e.embedding IS NOT NULL /*version*/
                 ORDER BY e.embedding <=> $5::halfvec LIMIT $6"
            ),
            MemoryType::Fact => concat!(
                "SELECT ",
                fact_candidate!(),
                ", 1 - (f.embedding <=> $5::halfvec) AS signal
                 FROM facts f WHERE ",
                fact_filter!(),
                " AND f.embedding IS NOT NULL /*version*/
                 ORDER BY f.embedding <=> $5::halfvec LIMIT $6"
            ),
            MemoryType::Rule => concat!(
                "SELECT ",
                rule_candidate!(),
                ", 1 - (r.embedding <=> $5::halfvec) AS signal
                 FROM rules r WHERE ",
                rule_filter!(),
                " AND r.embedding IS NOT NULL /*version*/
                 ORDER BY r.embedding <=> $5::halfvec LIMIT $6"
            ),
        };
        let bound = 6 + usize::from(filter.embedding_version.is_some());
        let Windowed { sql, times } = filter.sql(memory_type, sql, bound)?;
        // The marker is an SQL comment: without a version to name it stays, saying nothing.
        let sql = match filter.embedding_version {
            None => sql,
            Some(_) => {
                let alias = match memory_type {
                    MemoryType::Episode => "e",
                    MemoryType::Fact => "f",
                    MemoryType::Rule => "r",
                };
                let predicate = format!(" AND {alias}.embedding_version_id = $7");
                Cow::Owned(sql.replace(" /*version*/", &predicate))
            }
        };
        // The episodes' list is planned with its values, every time (an unnamed statement):
        // a cached generic plan knows neither the expiry time nor the depth, prices an exact
        // sort of the shard within a few units of the HNSW scan, and PostgreSQL keeps it
        // once its estimate dips under the custom plans' (measured: 5-6 ms a list instead of
        // 1.2-1.4 when the table's pages were packed tighter; docs/benchmarks.md, "Reads
        // tallied apart"). The custom plan was already made on every call; now it always is.
        // A list in a time window is planned every time too: the generic plan of the facts'
        // (superseded ones admitted, confidence decayed to the window's end) sorted every
        // fact by distance, 5.9 ms a list against 1.4 planned with its values
        // (docs/benchmarks.md, "A time the query states").
        let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .persistent(memory_type != MemoryType::Episode && filter.window.is_none())
            .bind(&filter.scope.tenant_id)
            .bind(filter.visibility(memory_type))
            .bind(filter.now)
            .bind(filter.min_confidence)
            .bind(embedding)
            .bind(depth);
        if let Some(version) = filter.embedding_version {
            query = query.bind(version);
        }
        for time in times {
            query = query.bind(time);
        }
        let mut rows: Vec<Candidate> = query.fetch_all(self.pool()).await?;
        self.open_candidates(&mut rows).await?;
        Ok(typed(rows, memory_type))
    }

    /// The `depth` best full-text matches of one type, best first; `signal` is the BM25 score.
    #[tracing::instrument(target = "otel", name = "db.keyword_candidates", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn keyword_candidates(
        &self,
        memory_type: MemoryType,
        filter: &Filter<'_>,
        plan: &KeywordPlan,
        depth: i64,
        corpus: CorpusStats,
        common_df: i64,
    ) -> MemoryResult<Vec<Candidate>> {
        let (recent, words) = match &plan.selection {
            Selection::Nothing => return Ok(Vec::new()),
            Selection::Selective(words) => (false, words),
            Selection::RecentCommon(words) => (true, words),
        };
        let sql = match (memory_type, recent) {
            (MemoryType::Episode, false) => {
                bm25_query!("episodes", "e", episode_candidate!(), episode_filter!())
            }
            (MemoryType::Episode, true) => {
                bm25_query!(
                    "episodes",
                    "e",
                    episode_candidate!(),
                    episode_filter!(),
                    recent
                )
            }
            (MemoryType::Fact, false) => {
                bm25_query!("facts", "f", fact_candidate!(), fact_filter!())
            }
            (MemoryType::Fact, true) => {
                bm25_query!("facts", "f", fact_candidate!(), fact_filter!(), recent)
            }
            (MemoryType::Rule, false) => {
                bm25_query!("rules", "r", rule_candidate!(), rule_filter!())
            }
            (MemoryType::Rule, true) => {
                bm25_query!("rules", "r", rule_candidate!(), rule_filter!(), recent)
            }
        };
        let Windowed { sql, times } = filter.sql(memory_type, sql, 9 + usize::from(recent))?;
        // A facts' list in a time window is planned with its values: a cached plan cannot know
        // a window ends before the facts began, and scored every match to keep none (the
        // episodes' list reads its bounds by index; docs/benchmarks.md, "A narrow window…").
        let planned_each_time = memory_type == MemoryType::Fact && filter.window.is_some();
        let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .persistent(!planned_each_time)
            .bind(&filter.scope.tenant_id)
            .bind(filter.visibility(memory_type))
            .bind(filter.now)
            .bind(filter.min_confidence)
            .bind(&plan.lexemes)
            .bind(depth)
            .bind(&plan.idf)
            .bind(corpus.mean_length.max(1.0))
            .bind(any_of(words));
        if recent {
            query = query.bind(recent_common_matches(depth, common_df));
        }
        for time in times {
            query = query.bind(time);
        }
        let mut rows: Vec<Candidate> = query.fetch_all(self.pool()).await?;
        self.open_candidates(&mut rows).await?;
        Ok(typed(rows, memory_type))
    }

    /// How many of a tenant's memories of one type contain each of `lexemes`, in order;
    /// with `cap`, counting stops at `cap` rows per word (so a common word costs no more
    /// than a rare one).
    #[tracing::instrument(target = "otel", name = "db.document_frequencies", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn document_frequencies(
        &self,
        memory_type: MemoryType,
        tenant_id: &str,
        lexemes: &[String],
        cap: Option<i64>,
    ) -> MemoryResult<Vec<i64>> {
        let sql = format!(
            "SELECT (SELECT count(*) FROM (
                         SELECT 1 FROM {} x
                         WHERE x.tenant_id = $1 AND x.search_vector @@ quote_literal(w.lexeme)::tsquery
                         LIMIT $3) s)
             FROM unnest($2::text[]) WITH ORDINALITY AS w(lexeme, n) ORDER BY w.n",
            memory_type.table()
        );
        Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(tenant_id)
            .bind(lexemes)
            .bind(cap)
            .fetch_all(self.pool())
            .await?)
    }

    /// A tenant's BM25 collection statistics for one memory type (a scan of its rows).
    #[tracing::instrument(target = "otel", name = "db.corpus_stats", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
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
    #[tracing::instrument(target = "otel", name = "db.standing_facts", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn standing_facts(
        &self,
        filter: &Filter<'_>,
        depth: i64,
    ) -> MemoryResult<Vec<Candidate>> {
        let sql = concat!(
            "SELECT ",
            fact_candidate!(),
            ", 0.0::float8 AS signal
             FROM facts f WHERE ",
            fact_filter!(),
            " AND $5::text IS NULL
             ORDER BY f.importance DESC, f.last_confirmed_at DESC, f.id LIMIT $6"
        );
        let mut rows = self.standing(MemoryType::Fact, filter, sql, depth).await?;
        self.open_candidates(&mut rows).await?;
        Ok(rows)
    }

    /// Rules worth following whatever the prompt: the most mature and effective ones.
    #[tracing::instrument(target = "otel", name = "db.standing_rules", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn standing_rules(
        &self,
        filter: &Filter<'_>,
        depth: i64,
    ) -> MemoryResult<Vec<Candidate>> {
        let sql = concat!(
            "SELECT ",
            rule_candidate!(),
            ", 0.0::float8 AS signal
             FROM rules r WHERE ",
            rule_filter!(),
            " AND $5::text IS NULL
             ORDER BY CASE r.maturity WHEN 'proven' THEN 0 WHEN 'established' THEN 1
                                      WHEN 'anti_pattern' THEN 2 ELSE 3 END,
                      r.effectiveness_score DESC, r.importance DESC, r.id LIMIT $6"
        );
        self.standing(MemoryType::Rule, filter, sql, depth).await
    }

    /// The most recent episodes: the "recent context" of a session.
    #[tracing::instrument(target = "otel", name = "db.recent_episodes", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn recent_episodes(
        &self,
        filter: &Filter<'_>,
        depth: i64,
    ) -> MemoryResult<Vec<Candidate>> {
        let sql = concat!(
            "SELECT ",
            episode_candidate!(),
            ", 0.0::float8 AS signal
             FROM episodes e WHERE ",
            episode_filter!(),
            " AND $5::text IS NULL
             ORDER BY e.created_at DESC, e.id LIMIT $6"
        );
        self.standing(MemoryType::Episode, filter, sql, depth).await
    }

    /// Runs one of the queries of memories worth having whatever the prompt (`$5` unused,
    /// `$6` the depth).
    async fn standing(
        &self,
        memory_type: MemoryType,
        filter: &Filter<'_>,
        sql: &'static str,
        depth: i64,
    ) -> MemoryResult<Vec<Candidate>> {
        let Windowed { sql, times } = filter.sql(memory_type, sql, 6)?;
        let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(&filter.scope.tenant_id)
            .bind(filter.visibility(memory_type))
            .bind(filter.now)
            .bind(filter.min_confidence)
            .bind(None::<String>)
            .bind(depth);
        for time in times {
            query = query.bind(time);
        }
        Ok(typed(query.fetch_all(self.pool()).await?, memory_type))
    }
}

/// How many of the most recent matches a query of common words alone scores: twice the
/// candidates it may return (scoring is what costs: ~8 ms per 1,000 rows under load), and
/// never more than the common-word threshold.
fn recent_common_matches(depth: i64, common_df: i64) -> i64 {
    (2 * depth).min(common_df)
}

fn typed(mut rows: Vec<Candidate>, memory_type: MemoryType) -> Vec<Candidate> {
    for row in &mut rows {
        row.memory_type = Some(memory_type);
    }
    rows
}

mod neighbours;
mod window;
