//! The tenants' data keys, stored wrapped by a master key (`vault/`), and the sealed rows
//! that key rotation re-encrypts.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::error::MemoryResult;

/// A data key as stored: wrapped, with the master key that wrapped it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WrappedKey {
    pub tenant_id: String,
    pub version: i32,
    pub wrapped: Vec<u8>,
    pub master_key_id: String,
}

/// A fact sealed under an older data key than its tenant's newest.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SealedRow {
    pub id: Uuid,
    pub key_version: i32,
    pub sealed: Vec<u8>,
}

/// The tenant's newest data key.
pub async fn newest(conn: &mut PgConnection, tenant_id: &str) -> MemoryResult<Option<WrappedKey>> {
    Ok(sqlx::query_as(
        "SELECT tenant_id, version, wrapped, master_key_id FROM data_keys
         WHERE tenant_id = $1 ORDER BY version DESC LIMIT 1",
    )
    .bind(tenant_id)
    .fetch_optional(conn)
    .await?)
}

/// One version of the tenant's data key.
pub async fn version(
    conn: &mut PgConnection,
    tenant_id: &str,
    version: i32,
) -> MemoryResult<Option<WrappedKey>> {
    Ok(sqlx::query_as(
        "SELECT tenant_id, version, wrapped, master_key_id FROM data_keys
         WHERE tenant_id = $1 AND version = $2",
    )
    .bind(tenant_id)
    .bind(version)
    .fetch_optional(conn)
    .await?)
}

/// Stores a new version; false when another writer stored that version first.
pub async fn insert(conn: &mut PgConnection, key: &WrappedKey) -> MemoryResult<bool> {
    let done = sqlx::query(
        "INSERT INTO data_keys (tenant_id, version, wrapped, master_key_id)
         VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
    )
    .bind(&key.tenant_id)
    .bind(key.version)
    .bind(&key.wrapped)
    .bind(&key.master_key_id)
    .execute(conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Every data key of every tenant, for re-wrapping.
pub async fn all(conn: &mut PgConnection) -> MemoryResult<Vec<WrappedKey>> {
    Ok(sqlx::query_as(
        "SELECT tenant_id, version, wrapped, master_key_id FROM data_keys
         ORDER BY tenant_id, version",
    )
    .fetch_all(conn)
    .await?)
}

/// Replaces a data key's wrapping (the key itself is unchanged, so no row changes).
pub async fn rewrap(
    conn: &mut PgConnection,
    key: &WrappedKey,
    now: DateTime<Utc>,
) -> MemoryResult<()> {
    sqlx::query(
        "UPDATE data_keys SET wrapped = $3, master_key_id = $4, rewrapped_at = $5
         WHERE tenant_id = $1 AND version = $2",
    )
    .bind(&key.tenant_id)
    .bind(key.version)
    .bind(&key.wrapped)
    .bind(&key.master_key_id)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

/// Up to `limit` of the tenant's facts sealed under a version older than `newest`, locked
/// (skipping rows another transaction holds: they are taken on the next pass).
pub async fn sealed_before(
    conn: &mut PgConnection,
    tenant_id: &str,
    newest: i32,
    limit: i64,
) -> MemoryResult<Vec<SealedRow>> {
    Ok(sqlx::query_as(
        "SELECT id, key_version, sealed FROM facts
         WHERE tenant_id = $1 AND key_version < $2
         ORDER BY id LIMIT $3 FOR UPDATE SKIP LOCKED",
    )
    .bind(tenant_id)
    .bind(newest)
    .bind(limit)
    .fetch_all(conn)
    .await?)
}

/// How many of the tenant's facts an older data key than `newest` still seals.
pub async fn count_sealed_before(
    conn: &mut PgConnection,
    tenant_id: &str,
    newest: i32,
) -> MemoryResult<i64> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM facts WHERE tenant_id = $1 AND key_version < $2")
            .bind(tenant_id)
            .bind(newest)
            .fetch_one(conn)
            .await?,
    )
}

/// Stores a fact's content re-sealed under another data key version.
pub async fn reseal(
    conn: &mut PgConnection,
    tenant_id: &str,
    id: Uuid,
    key_version: i32,
    sealed: &[u8],
) -> MemoryResult<()> {
    sqlx::query("UPDATE facts SET key_version = $3, sealed = $4 WHERE tenant_id = $1 AND id = $2")
        .bind(tenant_id)
        .bind(id)
        .bind(key_version)
        .bind(sealed)
        .execute(conn)
        .await?;
    Ok(())
}
