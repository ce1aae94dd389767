//! Dashboard sessions (migration 22), shared by every instance on the database: found by
//! the SHA-256 of their token, ended after an idle spell, at sign-out, or when too many are
//! open. Times are the database's (`now()`), the one clock all instances share.

use crate::domain::caller::{Caller, Role};
use crate::error::{ErrorCode, MemoryError, MemoryResult};

use super::Store;

/// How stale a session's last-seen time may get before a request refreshes it: a page view
/// does not write a row each time, and idle expiry is counted in minutes.
const TOUCH_AFTER_SECS: i64 = 30;

impl Store {
    /// Starts a session for `caller` under `token_sha256`, first ending sessions idle longer
    /// than `idle_secs`; refused (`too_many_sessions`) when `max` are open.
    pub async fn start_dashboard_session(
        &self,
        token_sha256: &[u8; 32],
        caller: &Caller,
        idle_secs: i64,
        max: i64,
    ) -> MemoryResult<()> {
        let mut tx = self.pool().begin().await?;
        sqlx::query(
            "DELETE FROM dashboard_sessions
             WHERE last_seen_at < now() - make_interval(secs => $1)",
        )
        .bind(idle_secs as f64)
        .execute(&mut *tx)
        .await?;
        let open: i64 = sqlx::query_scalar("SELECT count(*) FROM dashboard_sessions")
            .fetch_one(&mut *tx)
            .await?;
        if open >= max {
            return Err(MemoryError::new(
                ErrorCode::TooManySessions,
                "too many dashboard sessions are open; try again later",
            ));
        }
        sqlx::query(
            "INSERT INTO dashboard_sessions
                 (token_sha256, caller_tenant, caller_role, caller_butler, key_name)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&token_sha256[..])
        .bind(&caller.tenant_id)
        .bind(caller.role.as_str())
        .bind(&caller.butler)
        .bind(&caller.key_name)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The caller of the live session under `token_sha256` (seen within `idle_secs`), whose
    /// last-seen time this request moves on.
    pub async fn find_dashboard_session(
        &self,
        token_sha256: &[u8; 32],
        idle_secs: i64,
    ) -> MemoryResult<Option<Caller>> {
        let found: Option<(String, String, Option<String>, String, bool)> = sqlx::query_as(
            "SELECT caller_tenant, caller_role, caller_butler, key_name,
                    last_seen_at < now() - make_interval(secs => $3)
             FROM dashboard_sessions
             WHERE token_sha256 = $1 AND last_seen_at >= now() - make_interval(secs => $2)",
        )
        .bind(&token_sha256[..])
        .bind(idle_secs as f64)
        .bind(TOUCH_AFTER_SECS as f64)
        .fetch_optional(self.pool())
        .await?;
        let Some((tenant_id, role, butler, key_name, stale)) = found else {
            return Ok(None);
        };
        if stale {
            sqlx::query(
                "UPDATE dashboard_sessions SET last_seen_at = now() WHERE token_sha256 = $1",
            )
            .bind(&token_sha256[..])
            .execute(self.pool())
            .await?;
        }
        let role = Role::parse(&role)
            .ok_or_else(|| MemoryError::internal("a dashboard session has an unknown role"))?;
        Ok(Some(Caller {
            tenant_id,
            role,
            butler,
            key_name,
            audit_reason: None,
        }))
    }

    /// Ends the session under `token_sha256`, on every instance.
    pub async fn end_dashboard_session(&self, token_sha256: &[u8; 32]) -> MemoryResult<()> {
        sqlx::query("DELETE FROM dashboard_sessions WHERE token_sha256 = $1")
            .bind(&token_sha256[..])
            .execute(self.pool())
            .await?;
        Ok(())
    }
}
