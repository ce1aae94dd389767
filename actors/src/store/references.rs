//! Reference counting: reads bump `reference_count` and `last_referenced_at`, the signal
//! that keeps used memories recent. Bookkeeping of access, not a change of what is
//! remembered, so it writes no audit event.
//!
//! A read is tallied beside its record (`memory_reads`, migration 33) unless the record's
//! own `last_referenced_at` is older than the configured resolution: then the record is
//! written, with its tally folded in. Rewriting a two-kilobyte record (and, when its page
//! is full, every index entry of it) on every read was the dearest statement a search left
//! behind; recency, which scores by the record's date, decays over days, so an hour's
//! resolution changes no ranking that matters. A record read shows both (store/columns.rs).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::memory_type::MemoryType;
use crate::error::MemoryResult;

/// Adds each id's count of reads at `at`, in one statement per memory type: into the
/// record where its `last_referenced_at` is before `dated_before`, into its tally otherwise.
/// Ids no longer stored are passed over (deleted since they were read).
#[tracing::instrument(target = "otel", name = "db.bump_references", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
pub async fn bump(
    conn: &mut PgConnection,
    memory_type: MemoryType,
    tenant_id: &str,
    counts: HashMap<Uuid, i32>,
    at: DateTime<Utc>,
    dated_before: DateTime<Utc>,
) -> MemoryResult<()> {
    let (ids, reads): (Vec<Uuid>, Vec<i32>) = counts.into_iter().unzip();
    // One snapshot for every part: `found` decides, once, which records are written and
    // which are tallied; the tallies of the written ones are folded in and deleted.
    let sql = format!(
        "WITH v AS (SELECT * FROM unnest($2::uuid[], $3::int[]) AS v(id, reads)),
         found AS (
             SELECT t.id, v.reads, t.last_referenced_at < $5 AS dated
             FROM {table} t JOIN v ON t.id = v.id
             WHERE t.tenant_id = $1),
         folded AS (
             DELETE FROM memory_reads r USING found f
             WHERE f.dated AND r.memory_tenant_id = $1 AND r.memory_id = f.id
             RETURNING r.memory_id, r.reads, r.last_read_at),
         written AS (
             UPDATE {table} AS t
             SET reference_count = t.reference_count + f.reads + COALESCE(p.reads, 0),
                 last_referenced_at = GREATEST(t.last_referenced_at, $4, p.last_read_at)
             FROM found f LEFT JOIN folded p ON p.memory_id = f.id
             WHERE f.dated AND t.tenant_id = $1 AND t.id = f.id)
         INSERT INTO memory_reads AS r (memory_tenant_id, memory_id, reads, last_read_at)
         SELECT $1, f.id, f.reads, $4 FROM found f WHERE NOT f.dated
         ON CONFLICT (memory_tenant_id, memory_id) DO UPDATE
         SET reads = r.reads + excluded.reads,
             last_read_at = GREATEST(r.last_read_at, excluded.last_read_at)",
        table = memory_type.table()
    );
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(tenant_id)
        .bind(ids)
        .bind(reads)
        .bind(at)
        .bind(dated_before)
        .execute(conn)
        .await?;
    Ok(())
}
