//! Paging through the audit stream (`memory_activity_stream`): a tenant's events in id
//! order after a cursor, optionally narrowed to scopes and butlers. The id is the cursor,
//! so pages are stable while new events are appended.

use crate::error::MemoryResult;

use super::Store;
use crate::domain::event::StoredEvent;
use crate::domain::search::SearchScope;

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
    /// What the reader may see (`None`: everything of the tenant): the events of facts and
    /// rules of `visible.scopes`, and of episodes of `visible.butlers`.
    pub visible: Option<SearchScope>,
    pub limit: i64,
    /// The newest events first (the dashboard's feed), instead of oldest first.
    pub newest_first: bool,
}

impl Store {
    /// One page of events, oldest first (or newest first, when the filter says so).
    #[tracing::instrument(target = "otel", name = "db.activity", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn activity(&self, filter: &ActivityFilter) -> MemoryResult<Vec<StoredEvent>> {
        let order = if filter.newest_first { "id DESC" } else { "id" };
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT id, tenant_id, event_type, entity_type, entity_id, occurred_at, actor,
                    request_id, subrequest_id, segment_id, payload, butler, shard_seq
             FROM memory_events
             WHERE tenant_id = $1 AND id > $2
               AND ($3::timestamptz IS NULL OR occurred_at >= $3)
               AND ($4::text[] IS NULL OR scope = ANY($4))
               AND ($5::text[] IS NULL OR butler = ANY($5))
               AND ($7::bool IS NULL
                    OR (entity_type <> 'episode' AND scope = ANY($8))
                    OR (entity_type = 'episode' AND butler = ANY($9)))
             ORDER BY {order}
             LIMIT $6"
        )))
        .bind(&filter.tenant_id)
        .bind(filter.after_id)
        .bind(filter.since)
        .bind(&filter.scopes)
        .bind(&filter.butlers)
        .bind(filter.limit)
        .bind(filter.visible.as_ref().map(|_| true))
        .bind(
            filter
                .visible
                .as_ref()
                .and_then(|v| v.scopes.clone())
                .unwrap_or_default(),
        )
        .bind(
            filter
                .visible
                .as_ref()
                .and_then(|v| v.butlers.clone())
                .unwrap_or_default(),
        )
        .fetch_all(self.pool())
        .await?)
    }
}
