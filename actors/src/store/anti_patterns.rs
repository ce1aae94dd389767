//! Inverting harmful rules into anti-patterns (memory_project_plan.md "Anti-Pattern
//! Learning"): the content becomes "ANTI-PATTERN: Do NOT {original}. This caused problems
//! because: {reasons}" (at most five reasons, each cut to 256 characters, so the warning
//! stays within a bound whatever was stored), the original is kept in `original_content`,
//! and the embedding is cleared so the indexer embeds the warning as it now reads. One
//! statement for any number of rules, used by harmful feedback and by the decay sweep alike.

use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::MemoryResult;

/// Distinct harmful reasons quoted in the warning, oldest first (application ids are
/// time-ordered UUIDv7, breaking ties of the engine clock); more would only bloat it.
const MAX_REASONS: i64 = 5;

/// Characters of each reason quoted: the warning is read by a model at every session, so
/// it stays a warning, however long the reasons stored were.
const QUOTED_REASON_CHARS: i32 = 256;

/// Inverts the given rules of the tenant that are not anti-patterns yet. Returns the ids
/// inverted.
#[tracing::instrument(target = "otel", name = "db.invert_rule", skip_all, fields(db.system.name = "postgresql", db.operation.name = "UPDATE"))]
pub async fn invert(
    conn: &mut PgConnection,
    tenant_id: &str,
    ids: &[Uuid],
) -> MemoryResult<Vec<Uuid>> {
    Ok(sqlx::query_scalar(
        "UPDATE rules AS r
         SET maturity = 'anti_pattern',
             original_content = r.content,
             content = 'ANTI-PATTERN: Do NOT ' || rtrim(r.content, '. ')
                       || '. This caused problems because: '
                       || COALESCE(
                              (SELECT string_agg(left(x.reason, $4), '; '
                                                 ORDER BY x.first_at, x.first_id)
                               FROM (SELECT a.reason, min(a.created_at) AS first_at,
                                            min(a.id::text) AS first_id
                                     FROM rule_applications a
                                     WHERE a.tenant_id = r.tenant_id AND a.rule_id = r.id
                                       AND a.outcome = 'harmful' AND btrim(COALESCE(a.reason, '')) <> ''
                                     GROUP BY a.reason
                                     ORDER BY first_at, first_id
                                     LIMIT $3) AS x),
                              'no reason was recorded'),
             embedding = NULL,
             embedding_version_id = NULL
         WHERE r.tenant_id = $1 AND r.id = ANY($2) AND r.maturity <> 'anti_pattern'
         RETURNING r.id",
    )
    .bind(tenant_id)
    .bind(ids)
    .bind(MAX_REASONS)
    .bind(QUOTED_REASON_CHARS)
    .fetch_all(conn)
    .await?)
}
