//! Appending to the audit stream, always inside the transaction of the change it records.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::author::Author;
use crate::domain::event::{NewEvent, StoredEvent};
use crate::error::MemoryResult;

use super::Store;

/// Appends one event.
pub async fn append(
    conn: &mut PgConnection,
    event: &NewEvent,
    occurred_at: DateTime<Utc>,
) -> MemoryResult<()> {
    let row = EventRow {
        tenant_id: &event.tenant_id,
        event_type: event.event_type.as_str(),
        entity_type: event.entity_type.as_str(),
        entity_id: event.entity_id,
        author: &event.author,
        scope: event.scope.as_deref(),
        butler: event.butler.as_deref(),
        payload: &event.payload,
    };
    append_row(conn, &row, occurred_at).await
}

/// An event as its row is written: for entities beyond the butlers' memory types (the
/// orchestrator memory's nodes and edges), whose vocabulary is their own.
pub struct EventRow<'a> {
    pub tenant_id: &'a str,
    pub event_type: &'a str,
    pub entity_type: &'a str,
    pub entity_id: Uuid,
    pub author: &'a Author,
    pub scope: Option<&'a str>,
    pub butler: Option<&'a str>,
    pub payload: &'a Value,
}

/// Appends one event row.
#[tracing::instrument(target = "otel", name = "db.append_event", skip_all, fields(db.system.name = "postgresql", db.operation.name = "INSERT"))]
pub async fn append_row(
    conn: &mut PgConnection,
    event: &EventRow<'_>,
    occurred_at: DateTime<Utc>,
) -> MemoryResult<()> {
    sqlx::query(
        "INSERT INTO memory_events
             (tenant_id, event_type, entity_type, entity_id, occurred_at, actor,
              request_id, subrequest_id, segment_id, scope, butler, payload)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(event.tenant_id)
    .bind(event.event_type)
    .bind(event.entity_type)
    .bind(event.entity_id)
    .bind(occurred_at)
    .bind(&event.author.name)
    .bind(&event.author.lineage.request_id)
    .bind(&event.author.lineage.subrequest_id)
    .bind(&event.author.lineage.segment_id)
    .bind(event.scope)
    .bind(event.butler)
    .bind(event.payload)
    .execute(conn)
    .await?;
    Ok(())
}

impl Store {
    /// How many events have been appended so far by every instance (the audit stream's id
    /// sequence; ids a rolled-back transaction took count too). Read without a lock and
    /// outside any transaction: a fleet-wide write rate for background work to yield to.
    #[tracing::instrument(target = "otel", name = "db.events_appended", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn events_appended(&self) -> MemoryResult<u64> {
        let last: Option<i64> = sqlx::query_scalar(
            "SELECT pg_sequence_last_value(pg_get_serial_sequence('memory_events', 'id')::regclass)",
        )
        .fetch_one(self.pool())
        .await?;
        Ok(last.unwrap_or(0).max(0) as u64)
    }

    /// The events of one entity, oldest first.
    #[tracing::instrument(target = "otel", name = "db.events_for", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn events_for(
        &self,
        tenant_id: &str,
        entity_id: Uuid,
    ) -> MemoryResult<Vec<StoredEvent>> {
        Ok(sqlx::query_as(
            "SELECT id, tenant_id, event_type, entity_type, entity_id, occurred_at, actor,
                    request_id, subrequest_id, segment_id, payload, butler, shard_seq
             FROM memory_events WHERE tenant_id = $1 AND entity_id = $2 ORDER BY id",
        )
        .bind(tenant_id)
        .bind(entity_id)
        .fetch_all(self.pool())
        .await?)
    }
}
