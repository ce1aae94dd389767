//! Paging through the audit stream (`memory_activity_stream`): a tenant's events in id
//! order after a cursor, optionally narrowed to scopes and butlers. The id is the cursor,
//! so pages are stable while new events are appended.

use crate::error::MemoryResult;

use super::Store;
use crate::domain::event::StoredEvent;

/// Which events to page through.
#[derive(Debug, Clone)]
pub struct ActivityFilter {
    pub tenant_id: String,
    /// Events after this id.
    pub after_id: i64,
    /// Events at or after this time (with `after_id`, both hold).
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    pub scopes: Option<Vec<String>>,
    pub butlers: Option<Vec<String>>,
    pub limit: i64,
}

impl Store {
    /// One page of events, oldest first.
    #[tracing::instrument(target = "otel", name = "db.activity", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn activity(&self, filter: &ActivityFilter) -> MemoryResult<Vec<StoredEvent>> {
        Ok(sqlx::query_as(
            "SELECT id, tenant_id, event_type, entity_type, entity_id, occurred_at, actor,
                    request_id, subrequest_id, segment_id, payload
             FROM memory_events
             WHERE tenant_id = $1 AND id > $2
               AND ($3::timestamptz IS NULL OR occurred_at >= $3)
               AND ($4::text[] IS NULL OR scope = ANY($4))
               AND ($5::text[] IS NULL OR butler = ANY($5))
             ORDER BY id
             LIMIT $6",
        )
        .bind(&filter.tenant_id)
        .bind(filter.after_id)
        .bind(filter.since)
        .bind(&filter.scopes)
        .bind(&filter.butlers)
        .bind(filter.limit)
        .fetch_all(self.pool())
        .await?)
    }
}
