//! The provenance graph: writing links and reading them in both directions.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::memory_type::MemoryType;
use crate::domain::record::Links;
use crate::domain::relation::{Link, LinkTarget, Relation};
use crate::error::{ErrorCode, MemoryError, MemoryResult};

#[derive(sqlx::FromRow)]
struct LinkRow {
    #[sqlx(try_from = "String")]
    source_type: MemoryType,
    source_id: Uuid,
    #[sqlx(try_from = "String")]
    target_type: MemoryType,
    target_id: Uuid,
    #[sqlx(try_from = "String")]
    relation: Relation,
    created_at: DateTime<Utc>,
}

impl From<LinkRow> for Link {
    fn from(row: LinkRow) -> Link {
        Link {
            source_type: row.source_type,
            source_id: row.source_id,
            target_type: row.target_type,
            target_id: row.target_id,
            relation: row.relation,
            created_at: row.created_at,
        }
    }
}

/// Writes one link (idempotent).
#[tracing::instrument(target = "otel", name = "db.insert_links", skip_all, fields(db.system.name = "postgresql", db.operation.name = "INSERT"))]
pub async fn insert(
    conn: &mut PgConnection,
    tenant_id: &str,
    source: (MemoryType, Uuid),
    target: (MemoryType, Uuid),
    relation: Relation,
    at: DateTime<Utc>,
) -> MemoryResult<Link> {
    sqlx::query(
        "INSERT INTO memory_links (tenant_id, source_type, source_id, target_type, target_id, relation, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT DO NOTHING",
    )
    .bind(tenant_id)
    .bind(source.0.as_str())
    .bind(source.1)
    .bind(target.0.as_str())
    .bind(target.1)
    .bind(relation.as_str())
    .bind(at)
    .execute(conn)
    .await?;
    Ok(Link {
        source_type: source.0,
        source_id: source.1,
        target_type: target.0,
        target_id: target.1,
        relation,
        created_at: at,
    })
}

/// Writes the links a caller asked for from a new memory, after checking that every
/// target exists in the caller's tenant.
#[tracing::instrument(target = "otel", name = "db.insert_requested_links", skip_all, fields(db.system.name = "postgresql", db.operation.name = "INSERT"))]
pub async fn insert_requested(
    conn: &mut PgConnection,
    tenant_id: &str,
    source: (MemoryType, Uuid),
    targets: &[LinkTarget],
    at: DateTime<Utc>,
) -> MemoryResult<Vec<Link>> {
    let mut links = Vec::with_capacity(targets.len());
    for target in targets {
        if target.target_id == source.1 {
            return Err(MemoryError::new(
                ErrorCode::SelfLink,
                "a memory cannot link to itself",
            ));
        }
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE tenant_id = $1 AND id = $2)",
            target.target_type.table()
        );
        let exists: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(tenant_id)
            .bind(target.target_id)
            .fetch_one(&mut *conn)
            .await?;
        if !exists {
            return Err(MemoryError::not_found(
                format!("link target {}", target.target_type),
                target.target_id,
            ));
        }
        links.push(
            insert(
                conn,
                tenant_id,
                source,
                (target.target_type, target.target_id),
                target.relation,
                at,
            )
            .await?,
        );
    }
    Ok(links)
}

/// Every link out of and into one memory, oldest first.
#[tracing::instrument(target = "otel", name = "db.links_of", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
pub async fn of(
    conn: &mut PgConnection,
    tenant_id: &str,
    memory: (MemoryType, Uuid),
) -> MemoryResult<Links> {
    let rows: Vec<LinkRow> = sqlx::query_as(
        "SELECT source_type, source_id, target_type, target_id, relation, created_at
         FROM memory_links
         WHERE tenant_id = $1
           AND ((source_type = $2 AND source_id = $3) OR (target_type = $2 AND target_id = $3))
         ORDER BY created_at, relation, source_id, target_id",
    )
    .bind(tenant_id)
    .bind(memory.0.as_str())
    .bind(memory.1)
    .fetch_all(conn)
    .await?;
    let mut links = Links::default();
    for row in rows {
        let link = Link::from(row);
        if link.source_type == memory.0 && link.source_id == memory.1 {
            links.outbound.push(link);
        } else {
            links.inbound.push(link);
        }
    }
    Ok(links)
}
