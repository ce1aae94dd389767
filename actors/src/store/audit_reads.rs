//! The audit stream of reads: what auditor keys read, appended before each call runs,
//! listed to the tenant's admins.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::error::MemoryResult;

use super::Store;

/// One recorded call of an auditor.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow, schemars::JsonSchema)]
pub struct AuditRead {
    pub id: i64,
    pub tenant_id: String,
    /// The auditor key's name.
    pub auditor: String,
    pub reason: String,
    pub tool: String,
    pub arguments: Value,
    pub request_id: Option<String>,
    pub read_at: DateTime<Utc>,
}

/// A call about to run, as recorded.
pub struct NewAuditRead<'a> {
    pub tenant_id: &'a str,
    pub auditor: &'a str,
    pub reason: &'a str,
    pub tool: &'a str,
    pub arguments: &'a Value,
    pub request_id: &'a str,
    pub read_at: DateTime<Utc>,
}

impl Store {
    /// Appends one auditor call.
    #[tracing::instrument(target = "otel", name = "db.record_audit_read", skip_all, fields(db.system.name = "postgresql", db.operation.name = "INSERT"))]
    pub async fn record_audit_read(&self, read: &NewAuditRead<'_>) -> MemoryResult<()> {
        sqlx::query(
            "INSERT INTO audit_reads (tenant_id, auditor, reason, tool, arguments, request_id, read_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(read.tenant_id)
        .bind(read.auditor)
        .bind(read.reason)
        .bind(read.tool)
        .bind(read.arguments)
        .bind(read.request_id)
        .bind(read.read_at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The tenant's recorded auditor calls after `after` (an id), oldest first.
    pub async fn audit_reads(
        &self,
        tenant_id: &str,
        after: i64,
        limit: i64,
    ) -> MemoryResult<Vec<AuditRead>> {
        Ok(sqlx::query_as(
            "SELECT id, tenant_id, auditor, reason, tool, arguments, request_id, read_at
             FROM audit_reads WHERE tenant_id = $1 AND id > $2 ORDER BY id LIMIT $3",
        )
        .bind(tenant_id)
        .bind(after)
        .bind(limit)
        .fetch_all(self.pool())
        .await?)
    }
}
