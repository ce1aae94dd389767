//! The lease on a shard's lifecycle work across instances: a session-level advisory lock
//! per shard, held on a connection of its own (from the store's lock pool) while one of the
//! shard's sweeps or consolidation runs, so that on several instances sharing the database
//! the shard's lifecycle work runs on one of them at a time. The lock belongs to the
//! session: an instance that dies loses its connections and with them its leases, at once.
//! With no other instance on the database the lease is held in this process instead
//! (`process_locks.rs`): it still keeps an admin's sweep and a scheduled one apart.

use sqlx::Postgres;
use sqlx::pool::PoolConnection;

use super::Store;
use super::process_locks::{LockKey, ProcessHold};
use crate::domain::shard_key::ShardKey;
use crate::error::MemoryResult;

/// The lock's key: one per shard, for every kind of lifecycle work.
const LOCK_KEY: &str = "hashtextextended('lifecycle:' || $1 || '/' || $2, 0)";

/// A held lease; [`LifecycleLease::release`] gives it back. Dropped without that (a panic),
/// its connection is closed rather than returned to the pool, which releases the lock.
pub struct LifecycleLease {
    conn: Option<PoolConnection<Postgres>>,
    shard: ShardKey,
    /// The lease held in this process (`Store::with_process_locks`), let go when dropped.
    _local: Option<ProcessHold>,
}

impl Store {
    /// The shard's lease, or `None` when another session (another instance) holds it.
    pub async fn try_lifecycle_lease(
        &self,
        shard: &ShardKey,
    ) -> MemoryResult<Option<LifecycleLease>> {
        if let Some(locks) = &self.process_locks {
            let hold = locks.try_take([LockKey::Shard(shard.clone())], 1);
            return Ok((!hold.keys().is_empty()).then(|| LifecycleLease {
                conn: None,
                shard: shard.clone(),
                _local: Some(hold),
            }));
        }
        let mut conn = self.locks.acquire().await?;
        let held: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT pg_try_advisory_lock({LOCK_KEY})"
        )))
        .bind(&shard.tenant_id)
        .bind(&shard.butler)
        .fetch_one(&mut *conn)
        .await?;
        Ok(held.then(|| LifecycleLease {
            conn: Some(conn),
            shard: shard.clone(),
            _local: None,
        }))
    }
}

impl LifecycleLease {
    /// Releases the lock; if that fails, the connection is closed, which releases it too. A
    /// lease held in this process is released as it is dropped here.
    pub async fn release(mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let released = sqlx::query_scalar::<_, bool>(sqlx::AssertSqlSafe(format!(
            "SELECT pg_advisory_unlock({LOCK_KEY})"
        )))
        .bind(&self.shard.tenant_id)
        .bind(&self.shard.butler)
        .fetch_one(&mut *conn)
        .await;
        if !matches!(released, Ok(true)) {
            drop(conn.detach());
        }
    }
}

impl Drop for LifecycleLease {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            drop(conn.detach());
        }
    }
}
