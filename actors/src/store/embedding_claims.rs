//! Claims on rows to embed, so that with several instances on one database each row is
//! embedded by one of them (issue 21): a session-level advisory lock per row, taken with
//! `pg_try_advisory_lock` (a row another instance holds is skipped, never waited for) on a
//! connection the claim keeps until it is released (from the store's lock pool). Nothing
//! is written to claim a row: the locks live in PostgreSQL's lock table, and an instance
//! that dies loses its connection and with it its claims, at once. Rows are re-read after they are claimed, in a new
//! statement, so a row another instance embedded just before letting go is seen as done.
//! With no other instance on the database the claims are held in this process instead
//! (`process_locks.rs`).

use sqlx::Postgres;
use sqlx::pool::PoolConnection;
use uuid::Uuid;

use super::Store;
use super::process_locks::{LockKey, ProcessHold};
use crate::error::MemoryResult;

/// The advisory lock space of embedding claims (two-key locks, apart from the shard leases'
/// one-key locks): 'emb'.
const CLAIM_CLASS: i32 = 0x0065_6d62;

/// Rows claimed for embedding; [`EmbeddingClaim::release`] lets them go. Dropped without
/// that (a panic), its connection is closed rather than returned to the pool, which lets
/// them go too.
pub struct EmbeddingClaim {
    conn: Option<PoolConnection<Postgres>>,
    /// The claim held in this process (`Store::with_process_locks`), let go when dropped.
    _local: Option<ProcessHold>,
}

impl Store {
    /// Claims up to `limit` of `candidates`, in their order, skipping those another session
    /// (another instance) holds; answers the claimed ids and the claim.
    #[tracing::instrument(target = "otel", name = "db.claim_for_embedding", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn claim_for_embedding(
        &self,
        candidates: &[Uuid],
        limit: i64,
    ) -> MemoryResult<(Vec<Uuid>, EmbeddingClaim)> {
        if let Some(locks) = &self.process_locks {
            let rows = candidates.iter().map(|id| LockKey::Row(*id));
            let hold = locks.try_take(rows, usize::try_from(limit).unwrap_or(0));
            let claimed = hold
                .keys()
                .iter()
                .filter_map(|key| match key {
                    LockKey::Row(id) => Some(*id),
                    LockKey::Shard(_) => None,
                })
                .collect();
            let claim = EmbeddingClaim {
                conn: None,
                _local: Some(hold),
            };
            return Ok((claimed, claim));
        }
        let mut conn = self.locks.acquire().await?;
        // `unnest` yields the candidates in order and the limit stops the scan: no row past
        // the limit is locked.
        let claimed: Vec<Uuid> = sqlx::query_scalar(
            "SELECT id FROM unnest($1::uuid[]) AS c(id)
             WHERE pg_try_advisory_lock($2, hashtext(id::text)) LIMIT $3",
        )
        .bind(candidates)
        .bind(CLAIM_CLASS)
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?;
        let claim = EmbeddingClaim {
            conn: Some(conn),
            _local: None,
        };
        Ok((claimed, claim))
    }
}

impl EmbeddingClaim {
    /// A claim on no row (nothing was waiting): holds no connection.
    pub fn nothing() -> Self {
        EmbeddingClaim {
            conn: None,
            _local: None,
        }
    }

    /// Lets the claimed rows go; if that fails, the connection is closed, which does too. A
    /// claim held in this process lets go as it is dropped here.
    pub async fn release(mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        // The connection holds no other session lock: it was taken from the lock pool for
        // this claim, and leases keep their own connections until they end.
        let released = sqlx::query("SELECT pg_advisory_unlock_all()")
            .execute(&mut *conn)
            .await;
        if released.is_err() {
            drop(conn.detach());
        }
    }
}

impl Drop for EmbeddingClaim {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            drop(conn.detach());
        }
    }
}
