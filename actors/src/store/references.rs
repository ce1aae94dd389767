//! Reference counting: reads bump `reference_count` and `last_referenced_at`, the signal
//! that keeps used memories recent. Bookkeeping of access, not a change of what is
//! remembered, so it writes no audit event.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::memory_type::MemoryType;
use crate::error::MemoryResult;

/// Adds each id's count of reads, in one statement per memory type.
#[tracing::instrument(target = "otel", name = "db.bump_references", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
pub async fn bump(
    conn: &mut PgConnection,
    memory_type: MemoryType,
    tenant_id: &str,
    counts: HashMap<Uuid, i32>,
    at: DateTime<Utc>,
) -> MemoryResult<u64> {
    let (ids, reads): (Vec<Uuid>, Vec<i32>) = counts.into_iter().unzip();
    let sql = format!(
        "UPDATE {} AS t SET reference_count = t.reference_count + v.reads,
                            last_referenced_at = GREATEST(t.last_referenced_at, $4)
         FROM unnest($2::uuid[], $3::int[]) AS v(id, reads)
         WHERE t.tenant_id = $1 AND t.id = v.id",
        memory_type.table()
    );
    let done = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(tenant_id)
        .bind(ids)
        .bind(reads)
        .bind(at)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}
