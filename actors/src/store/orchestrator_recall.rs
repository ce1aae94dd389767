//! Recall's reads of an orchestrator's graph: the active nodes nearest the query's vector
//! and those matching its words, each with its rank in both lists and whether an active node
//! contradicts it; then the edges among the nodes recall selected. The merge and the
//! modifiers are `domain/orchestrator/recall.rs`.

use pgvector::Vector;
use uuid::Uuid;

use super::Store;
use super::orchestrator_graph::{EDGE_COLUMNS, EdgeRow, NODE_COLUMNS, NODE_FROM, NodeRow};
use crate::domain::orchestrator::edge::Edge;
use crate::domain::orchestrator::node::Node;
use crate::domain::orchestrator::recall::Ranks;
use crate::error::MemoryResult;

/// How many candidates each ranking gives (the spec's `topKVector` and `topKText`).
#[derive(Debug, Clone, Copy)]
pub struct CandidateLimits {
    pub vector: i64,
    pub text: i64,
}

#[derive(sqlx::FromRow)]
struct CandidateRow {
    #[sqlx(flatten)]
    node: NodeRow,
    vector_rank: Option<i64>,
    text_rank: Option<i64>,
    contradicted: bool,
}

impl Store {
    /// The candidates of a recall: the active nodes of the orchestrator nearest `vector`
    /// (among those embedded by the running model, `embedding_version`), and those whose text
    /// matches any word of `text` (ranked by `ts_rank_cd`), each with its ranks. No vector
    /// (the embedder did not answer): full text alone.
    #[tracing::instrument(target = "otel", name = "db.orchestrator_candidates", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn orchestrator_candidates(
        &self,
        tenant_id: &str,
        vector: Option<Vector>,
        text: &str,
        embedding_version: i16,
        limits: CandidateLimits,
    ) -> MemoryResult<Vec<(Node, Ranks, bool)>> {
        let rows: Vec<CandidateRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "WITH vec AS (
                 SELECT id, row_number() OVER (ORDER BY distance, id) AS rank
                 FROM (SELECT id, embedding <=> $2::halfvec AS distance FROM orchestrator_memories
                       WHERE tenant_id = $1 AND status = 'active' AND $2::vector IS NOT NULL
                         AND embedding_version_id = $3
                       ORDER BY embedding <=> $2::halfvec LIMIT $4) v),
             words AS (
                 -- Any of the query's words: the full-text query with its ANDs made ORs.
                 SELECT replace(plainto_tsquery('english', $5)::text, '&', '|') AS q),
             txt AS (
                 SELECT id, row_number() OVER (ORDER BY score DESC, id) AS rank
                 FROM (SELECT m.id, ts_rank_cd(m.search_vector, words.q::tsquery) AS score
                       FROM orchestrator_memories m, words
                       WHERE m.tenant_id = $1 AND m.status = 'active' AND words.q <> ''
                         AND m.search_vector @@ words.q::tsquery
                       ORDER BY score DESC, m.id LIMIT $6) t),
             ranked AS (
                 SELECT coalesce(vec.id, txt.id) AS id, vec.rank AS vector_rank,
                        txt.rank AS text_rank
                 FROM vec FULL JOIN txt ON txt.id = vec.id)
             SELECT {NODE_COLUMNS}, r.vector_rank, r.text_rank,
                    EXISTS (SELECT 1 FROM orchestrator_edges e
                                 JOIN orchestrator_memories o
                                   ON o.tenant_id = e.tenant_id
                                  AND o.id = CASE WHEN e.from_id = m.id THEN e.to_id ELSE e.from_id END
                            WHERE e.tenant_id = $1 AND e.edge_type = 'Contradicts'
                              AND (e.from_id = m.id OR e.to_id = m.id)
                              AND o.status = 'active') AS contradicted
             FROM ranked r JOIN {NODE_FROM} ON m.tenant_id = $1 AND m.id = r.id"
        )))
        .bind(tenant_id)
        .bind(vector)
        .bind(embedding_version)
        .bind(limits.vector)
        .bind(text)
        .bind(limits.text)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let node = Node::from(r.node);
                let ranks = Ranks {
                    id: node.memory_id,
                    vector: r.vector_rank.map(|x| x as u32),
                    text: r.text_rank.map(|x| x as u32),
                };
                (node, ranks, r.contradicted)
            })
            .collect())
    }

    /// The edges of the orchestrator between any two of `ids`, oldest first.
    #[tracing::instrument(target = "otel", name = "db.orchestrator_edges_among", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn orchestrator_edges_among(
        &self,
        tenant_id: &str,
        ids: &[Uuid],
    ) -> MemoryResult<Vec<Edge>> {
        let rows: Vec<EdgeRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {EDGE_COLUMNS} FROM orchestrator_edges
             WHERE tenant_id = $1 AND from_id = ANY($2) AND to_id = ANY($2)
             ORDER BY created_at, id"
        )))
        .bind(tenant_id)
        .bind(ids)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.into_iter().map(Edge::from).collect())
    }
}
