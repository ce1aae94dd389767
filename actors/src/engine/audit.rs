//! Elevated access (memory_butler.md §10): an auditor's every call is recorded before it
//! runs, and fails when it cannot be (fail closed: no unrecorded read). A tenant's admins
//! read the record of who read their tenant, what and why.

use serde_json::Value;

use super::Engine;
use super::lifecycle::MAX_ACTIVITY_PAGE;
use crate::domain::caller::{Caller, Role};
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::store::audit_reads::{AuditRead, NewAuditRead};

impl Engine {
    /// Records an auditor's call of `tool` with `arguments` before it runs. Other callers
    /// are not recorded here (their changes are in the event stream).
    pub async fn record_audit_read(
        &self,
        caller: &Caller,
        tool: &str,
        arguments: &Value,
        request_id: &str,
    ) -> MemoryResult<()> {
        if caller.role != Role::Auditor {
            return Ok(());
        }
        self.services.database.check()?;
        let reason = caller.audit_reason.as_deref().ok_or_else(|| {
            MemoryError::new(
                ErrorCode::AuditContextMissing,
                "an auditor's call needs a reason",
            )
        })?;
        self.services
            .store
            .record_audit_read(&NewAuditRead {
                tenant_id: &caller.tenant_id,
                auditor: &caller.key_name,
                reason,
                tool,
                arguments,
                request_id,
                read_at: self.services.clock.now(),
            })
            .await
    }

    /// `memory_audit_reads` (admin, auditor): the recorded auditor calls on the tenant,
    /// oldest first, after `after`.
    pub async fn audit_reads(
        &self,
        caller: &Caller,
        after: Option<i64>,
        limit: Option<u32>,
    ) -> MemoryResult<Vec<AuditRead>> {
        self.services.database.check()?;
        caller.require_admin_read()?;
        let limit = limit.unwrap_or(100);
        if limit == 0 || limit > MAX_ACTIVITY_PAGE {
            return Err(MemoryError::new(
                ErrorCode::InvalidLimit,
                format!("`limit` must be between 1 and {MAX_ACTIVITY_PAGE}"),
            ));
        }
        self.services
            .store
            .audit_reads(&caller.tenant_id, after.unwrap_or(0), i64::from(limit))
            .await
    }
}
