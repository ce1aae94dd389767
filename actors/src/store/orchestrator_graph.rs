//! Writing and reading an orchestrator's memory graph (migration 29): nodes with their
//! provenance, and the edges between them. A write is one transaction that appends an
//! event per change; writing what is already there (the same typed content, the same edge)
//! finds it and changes nothing, so a retried call or a file dropped twice adds nothing.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::author::Author;
use crate::domain::orchestrator::edge::{DEFAULT_WEIGHT, Edge, EdgeType, End, NewEdge};
use crate::domain::orchestrator::graph_write::{GraphWrite, Remembered, Written};
use crate::domain::orchestrator::node::{Node, NodeStatus, NodeType};
use crate::domain::orchestrator::source::{CapturedBy, Source, SourceType};
use crate::error::{ErrorCode, MemoryError, MemoryResult};

use super::Store;
use super::events::{EventRow, append_row};

/// The columns of a node with its source, for `NodeRow`.
pub(super) const NODE_COLUMNS: &str =
    "m.id, m.tenant_id, m.node_type, m.importance, m.content, m.summary,
     m.confidence, m.status, m.created_at, m.updated_at, s.source_type, s.source_path,
     s.conversation_id, s.workflow_run_id, s.step_id, s.captured_by";

/// The tables a node is read from.
pub(super) const NODE_FROM: &str = "orchestrator_memories m JOIN orchestrator_sources s
     ON s.tenant_id = m.tenant_id AND s.id = m.source_id";

pub(super) const EDGE_COLUMNS: &str = "id, from_id, to_id, edge_type, weight, reason, created_at";

#[derive(sqlx::FromRow)]
pub(super) struct NodeRow {
    id: Uuid,
    tenant_id: String,
    #[sqlx(try_from = "String")]
    node_type: NodeType,
    importance: i16,
    content: String,
    summary: String,
    confidence: f64,
    #[sqlx(try_from = "String")]
    status: NodeStatus,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    #[sqlx(try_from = "String")]
    source_type: SourceType,
    source_path: Option<String>,
    conversation_id: Option<String>,
    workflow_run_id: Option<String>,
    step_id: Option<String>,
    #[sqlx(try_from = "String")]
    captured_by: CapturedBy,
}

impl From<NodeRow> for Node {
    fn from(r: NodeRow) -> Node {
        Node {
            memory_id: r.id,
            orchestrator_id: r.tenant_id,
            node_type: r.node_type,
            importance: r.importance,
            content: r.content,
            summary: r.summary,
            confidence: r.confidence,
            source: Source {
                source_type: r.source_type,
                source_path: r.source_path,
                conversation_id: r.conversation_id,
                workflow_run_id: r.workflow_run_id,
                step_id: r.step_id,
                captured_by: r.captured_by,
            },
            status: r.status,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct EdgeRow {
    id: Uuid,
    from_id: Uuid,
    to_id: Uuid,
    #[sqlx(try_from = "String")]
    edge_type: EdgeType,
    weight: f64,
    reason: Option<String>,
    created_at: DateTime<Utc>,
}

impl From<EdgeRow> for Edge {
    fn from(r: EdgeRow) -> Edge {
        Edge {
            edge_id: r.id,
            from_memory_id: r.from_id,
            to_memory_id: r.to_id,
            edge_type: r.edge_type,
            weight: r.weight,
            reason: r.reason,
            created_at: r.created_at,
        }
    }
}

/// A node with every edge into or out of it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct NodeWithEdges {
    pub node: Node,
    pub edges: Vec<Edge>,
}

impl Store {
    /// Writes `write` to the orchestrator `tenant_id`'s graph in one transaction: its source
    /// (found if stored before), its nodes (each found by its fingerprint if stored before),
    /// the nodes they supersede (marked `superseded`, with an `Updates` edge to each), then
    /// its edges. An edge naming a node by id that the orchestrator does not hold is
    /// `not_found`, and nothing is written.
    #[tracing::instrument(target = "otel", name = "db.orchestrator_remember", skip_all, fields(db.system.name = "postgresql", db.operation.name = "INSERT"))]
    pub async fn orchestrator_remember(
        &self,
        tenant_id: &str,
        write: &GraphWrite,
        author: &Author,
        now: DateTime<Utc>,
    ) -> MemoryResult<Remembered> {
        let mut tx = self.begin().await?;
        let conn = &mut *tx;
        let event = Events {
            tenant_id,
            author,
            now,
        };
        // The source is stored once the write creates a node that cites it: a write that
        // finds every node stored (a retry, a file dropped again) leaves nothing behind.
        let mut source_id = None;

        let mut nodes = Vec::with_capacity(write.nodes.len());
        for node in &write.nodes {
            let fingerprint = node.node.fingerprint();
            let inserted: Option<Uuid> = match find_node(conn, tenant_id, &fingerprint).await? {
                Some(_) => None,
                None => {
                    let source = match source_id {
                        Some(id) => id,
                        None => *source_id
                            .insert(upsert_source(conn, tenant_id, &write.source, now).await?),
                    };
                    sqlx::query_scalar(
                        "INSERT INTO orchestrator_memories
                             (tenant_id, id, node_type, importance, content, summary, confidence,
                              source_id, status, fingerprint, created_at, updated_at)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 'active', $9, $10, $10)
                         ON CONFLICT (tenant_id, fingerprint) DO NOTHING
                         RETURNING id",
                    )
                    .bind(tenant_id)
                    .bind(Uuid::now_v7())
                    .bind(node.node.node_type.as_str())
                    .bind(node.node.importance)
                    .bind(&node.node.content)
                    .bind(&node.node.summary)
                    .bind(node.node.confidence)
                    .bind(source)
                    .bind(&fingerprint)
                    .bind(now)
                    .fetch_optional(&mut *conn)
                    .await?
                }
            };
            let created = inserted.is_some();
            let stored = match inserted {
                Some(id) => node_by_id(conn, tenant_id, id).await?,
                None => node_by_fingerprint(conn, tenant_id, &fingerprint).await?,
            };
            if created {
                event
                    .append(
                        conn,
                        "orchestrator_memory_created",
                        "orchestrator_memory",
                        stored.memory_id,
                        json!({"before": null, "after": stored}),
                    )
                    .await?;
            }
            nodes.push(Written {
                record: stored,
                created,
            });
        }

        let ids: Vec<Uuid> = nodes.iter().map(|n| n.record.memory_id).collect();
        let resolve = |end: &End| match end {
            End::Id(id) => *id,
            End::Node(i) => ids[*i],
        };
        // Every node named by id, by an edge or a supersession, must be the orchestrator's.
        let named: Vec<Uuid> = write
            .edges
            .iter()
            .flat_map(|e| [&e.from, &e.to])
            .filter_map(|end| match end {
                End::Id(id) => Some(*id),
                End::Node(_) => None,
            })
            .chain(
                write
                    .nodes
                    .iter()
                    .flat_map(|n| n.supersedes.iter().copied()),
            )
            .collect();
        require_nodes(conn, tenant_id, &named).await?;

        let mut superseded = Vec::new();
        let mut edges = Vec::new();
        for (node, written) in write.nodes.iter().zip(&ids) {
            for old in &node.supersedes {
                let update = NewEdge::new(*written, *old, EdgeType::Updates, DEFAULT_WEIGHT, None)?;
                let changed = change_status(
                    conn,
                    tenant_id,
                    *old,
                    NodeStatus::Active,
                    NodeStatus::Superseded,
                    now,
                )
                .await?;
                if changed {
                    event
                        .append(
                            conn,
                            "orchestrator_memory_superseded",
                            "orchestrator_memory",
                            *old,
                            json!({"before": {"status": NodeStatus::Active},
                                   "after": {"status": NodeStatus::Superseded, "updated_at": now},
                                   "superseded_by": written}),
                        )
                        .await?;
                    superseded.push(*old);
                }
                edges.push(insert_edge(conn, &event, &update).await?);
            }
        }
        for edge in &write.edges {
            let edge = edge.between(resolve(&edge.from), resolve(&edge.to))?;
            edges.push(insert_edge(conn, &event, &edge).await?);
        }
        tx.commit().await?;
        Ok(Remembered {
            memories: nodes,
            edges,
            superseded,
        })
    }

    /// Moves a node of the orchestrator to `status` (`superseded` or `retracted`), with an
    /// event saying why. Retracted is final; only an active node is superseded. Asking for
    /// the status it has changes nothing.
    #[tracing::instrument(target = "otel", name = "db.orchestrator_set_status", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
    pub async fn orchestrator_set_status(
        &self,
        tenant_id: &str,
        id: Uuid,
        status: NodeStatus,
        reason: &str,
        author: &Author,
        now: DateTime<Utc>,
    ) -> MemoryResult<Node> {
        let mut tx = self.begin().await?;
        let conn = &mut *tx;
        let current: Option<String> = sqlx::query_scalar(
            "SELECT status FROM orchestrator_memories WHERE tenant_id = $1 AND id = $2 FOR UPDATE",
        )
        .bind(tenant_id)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
        let current: NodeStatus = current.ok_or_else(|| not_found(id))?.parse()?;
        if current != status {
            let allowed = matches!(
                (current, status),
                (
                    NodeStatus::Active,
                    NodeStatus::Superseded | NodeStatus::Retracted
                ) | (NodeStatus::Superseded, NodeStatus::Retracted)
            );
            if !allowed {
                return Err(MemoryError::new(
                    ErrorCode::InvalidTransition,
                    format!("memory {id} is {current}; it cannot become {status}"),
                ));
            }
            change_status(conn, tenant_id, id, current, status, now).await?;
            let event_type = match status {
                NodeStatus::Retracted => "orchestrator_memory_retracted",
                _ => "orchestrator_memory_superseded",
            };
            Events {
                tenant_id,
                author,
                now,
            }
            .append(
                conn,
                event_type,
                "orchestrator_memory",
                id,
                json!({"before": {"status": current},
                       "after": {"status": status, "updated_at": now},
                       "reason": reason}),
            )
            .await?;
        }
        let node = node_by_id(conn, tenant_id, id).await?;
        tx.commit().await?;
        Ok(node)
    }

    /// A node of the orchestrator with its edges both ways, oldest edge first.
    #[tracing::instrument(target = "otel", name = "db.orchestrator_get", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn orchestrator_get(&self, tenant_id: &str, id: Uuid) -> MemoryResult<NodeWithEdges> {
        let mut conn = self.pool().acquire().await?;
        let node = node_by_id(&mut conn, tenant_id, id).await?;
        let edges: Vec<EdgeRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {EDGE_COLUMNS} FROM orchestrator_edges
             WHERE tenant_id = $1 AND (from_id = $2 OR to_id = $2)
             ORDER BY created_at, id"
        )))
        .bind(tenant_id)
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
        Ok(NodeWithEdges {
            node,
            edges: edges.into_iter().map(Edge::from).collect(),
        })
    }
}

/// What every event of one write shares.
pub(super) struct Events<'a> {
    pub tenant_id: &'a str,
    pub author: &'a Author,
    pub now: DateTime<Utc>,
}

impl Events<'_> {
    pub(super) async fn append(
        &self,
        conn: &mut PgConnection,
        event_type: &str,
        entity_type: &str,
        entity_id: Uuid,
        payload: Value,
    ) -> MemoryResult<()> {
        let row = EventRow {
            tenant_id: self.tenant_id,
            event_type,
            entity_type,
            entity_id,
            author: self.author,
            scope: None,
            butler: None,
            payload: &payload,
        };
        append_row(conn, &row, self.now).await
    }
}

fn not_found(id: Uuid) -> MemoryError {
    MemoryError::new(ErrorCode::NotFound, format!("no memory {id}"))
}

/// The source's id: stored before with the same fields, or stored now.
async fn upsert_source(
    conn: &mut PgConnection,
    tenant_id: &str,
    source: &Source,
    now: DateTime<Utc>,
) -> MemoryResult<Uuid> {
    let fingerprint = source.fingerprint();
    let inserted: Option<Uuid> = sqlx::query_scalar(
        "INSERT INTO orchestrator_sources
             (tenant_id, id, source_type, source_path, conversation_id, workflow_run_id, step_id,
              captured_by, fingerprint, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (tenant_id, fingerprint) DO NOTHING
         RETURNING id",
    )
    .bind(tenant_id)
    .bind(Uuid::now_v7())
    .bind(source.source_type.as_str())
    .bind(&source.source_path)
    .bind(&source.conversation_id)
    .bind(&source.workflow_run_id)
    .bind(&source.step_id)
    .bind(source.captured_by.as_str())
    .bind(&fingerprint)
    .bind(now)
    .fetch_optional(&mut *conn)
    .await?;
    match inserted {
        Some(id) => Ok(id),
        None => Ok(sqlx::query_scalar(
            "SELECT id FROM orchestrator_sources WHERE tenant_id = $1 AND fingerprint = $2",
        )
        .bind(tenant_id)
        .bind(&fingerprint)
        .fetch_one(&mut *conn)
        .await?),
    }
}

pub(super) async fn node_by_id(
    conn: &mut PgConnection,
    tenant_id: &str,
    id: Uuid,
) -> MemoryResult<Node> {
    let row: Option<NodeRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {NODE_COLUMNS} FROM {NODE_FROM} WHERE m.tenant_id = $1 AND m.id = $2"
    )))
    .bind(tenant_id)
    .bind(id)
    .fetch_optional(conn)
    .await?;
    row.map(Node::from).ok_or_else(|| not_found(id))
}

/// The id of the node with `fingerprint`, if the orchestrator holds one.
async fn find_node(
    conn: &mut PgConnection,
    tenant_id: &str,
    fingerprint: &[u8],
) -> MemoryResult<Option<Uuid>> {
    Ok(sqlx::query_scalar(
        "SELECT id FROM orchestrator_memories WHERE tenant_id = $1 AND fingerprint = $2",
    )
    .bind(tenant_id)
    .bind(fingerprint)
    .fetch_optional(conn)
    .await?)
}

async fn node_by_fingerprint(
    conn: &mut PgConnection,
    tenant_id: &str,
    fingerprint: &[u8],
) -> MemoryResult<Node> {
    let row: NodeRow = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {NODE_COLUMNS} FROM {NODE_FROM} WHERE m.tenant_id = $1 AND m.fingerprint = $2"
    )))
    .bind(tenant_id)
    .bind(fingerprint)
    .fetch_one(conn)
    .await?;
    Ok(row.into())
}

/// Refuses ids the orchestrator holds no node for (another orchestrator's look the same as
/// none: no oracle across orchestrators).
async fn require_nodes(conn: &mut PgConnection, tenant_id: &str, ids: &[Uuid]) -> MemoryResult<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let found: Vec<Uuid> = sqlx::query_scalar(
        "SELECT id FROM orchestrator_memories WHERE tenant_id = $1 AND id = ANY($2)",
    )
    .bind(tenant_id)
    .bind(ids)
    .fetch_all(conn)
    .await?;
    match ids.iter().find(|id| !found.contains(id)) {
        Some(missing) => Err(not_found(*missing)),
        None => Ok(()),
    }
}

/// Moves the node from status `from` to `to`; false if it did not have `from` (left as it
/// is: a retracted node stays retracted).
async fn change_status(
    conn: &mut PgConnection,
    tenant_id: &str,
    id: Uuid,
    from: NodeStatus,
    to: NodeStatus,
    now: DateTime<Utc>,
) -> MemoryResult<bool> {
    let changed = sqlx::query(
        "UPDATE orchestrator_memories
         SET status = $4, updated_at = greatest(updated_at, $5)
         WHERE tenant_id = $1 AND id = $2 AND status = $3",
    )
    .bind(tenant_id)
    .bind(id)
    .bind(from.as_str())
    .bind(to.as_str())
    .bind(now)
    .execute(conn)
    .await?;
    Ok(changed.rows_affected() == 1)
}

/// Inserts an edge, or finds the one of its type already between its nodes.
async fn insert_edge(
    conn: &mut PgConnection,
    event: &Events<'_>,
    edge: &NewEdge,
) -> MemoryResult<Written<Edge>> {
    let inserted: Option<EdgeRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO orchestrator_edges
             (tenant_id, id, from_id, to_id, edge_type, weight, reason, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (tenant_id, from_id, to_id, edge_type) DO NOTHING
         RETURNING {EDGE_COLUMNS}"
    )))
    .bind(event.tenant_id)
    .bind(Uuid::now_v7())
    .bind(edge.from)
    .bind(edge.to)
    .bind(edge.edge_type.as_str())
    .bind(edge.weight)
    .bind(&edge.reason)
    .bind(event.now)
    .fetch_optional(&mut *conn)
    .await?;
    let created = inserted.is_some();
    let record: Edge = match inserted {
        Some(row) => row.into(),
        None => sqlx::query_as::<_, EdgeRow>(sqlx::AssertSqlSafe(format!(
            "SELECT {EDGE_COLUMNS} FROM orchestrator_edges
             WHERE tenant_id = $1 AND from_id = $2 AND to_id = $3 AND edge_type = $4"
        )))
        .bind(event.tenant_id)
        .bind(edge.from)
        .bind(edge.to)
        .bind(edge.edge_type.as_str())
        .fetch_one(&mut *conn)
        .await?
        .into(),
    };
    if created {
        event
            .append(
                conn,
                "orchestrator_edge_created",
                "orchestrator_edge",
                record.edge_id,
                json!({"before": null, "after": record}),
            )
            .await?;
    }
    Ok(Written { record, created })
}
