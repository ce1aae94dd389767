//! Appending to the audit stream, always inside the transaction of the change it records.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::event::NewEvent;
use crate::error::MemoryResult;

use super::Store;

/// An event as stored.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct StoredEvent {
    pub id: i64,
    pub tenant_id: String,
    pub event_type: String,
    pub entity_type: String,
    pub entity_id: Uuid,
    pub occurred_at: DateTime<Utc>,
    pub actor: String,
    pub request_id: Option<String>,
    pub subrequest_id: Option<String>,
    pub segment_id: Option<String>,
    pub payload: Value,
}

/// Appends one event.
pub async fn append(
    conn: &mut PgConnection,
    event: &NewEvent,
    occurred_at: DateTime<Utc>,
) -> MemoryResult<()> {
    sqlx::query(
        "INSERT INTO memory_events
             (tenant_id, event_type, entity_type, entity_id, occurred_at, actor,
              request_id, subrequest_id, segment_id, scope, butler, payload)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(&event.tenant_id)
    .bind(event.event_type.as_str())
    .bind(event.entity_type.as_str())
    .bind(event.entity_id)
    .bind(occurred_at)
    .bind(&event.actor)
    .bind(&event.lineage.request_id)
    .bind(&event.lineage.subrequest_id)
    .bind(&event.lineage.segment_id)
    .bind(&event.scope)
    .bind(&event.butler)
    .bind(&event.payload)
    .execute(conn)
    .await?;
    Ok(())
}

/// Appends many events in one statement, in order.
pub async fn append_all(
    conn: &mut PgConnection,
    events: &[(NewEvent, DateTime<Utc>)],
) -> MemoryResult<()> {
    if events.is_empty() {
        return Ok(());
    }
    let col =
        |f: fn(&NewEvent) -> Option<String>| events.iter().map(|(e, _)| f(e)).collect::<Vec<_>>();
    sqlx::query(
        "INSERT INTO memory_events
             (tenant_id, event_type, entity_type, entity_id, occurred_at, actor,
              request_id, subrequest_id, segment_id, scope, butler, payload)
         SELECT tenant_id, event_type, entity_type, entity_id, occurred_at, actor,
                request_id, subrequest_id, segment_id, scope, butler, payload
         FROM unnest($1::text[], $2::text[], $3::text[], $4::uuid[], $5::timestamptz[],
                     $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[],
                     $12::jsonb[]) WITH ORDINALITY
              AS e(tenant_id, event_type, entity_type, entity_id, occurred_at, actor,
                   request_id, subrequest_id, segment_id, scope, butler, payload, ord)
         ORDER BY ord",
    )
    .bind(col(|e| Some(e.tenant_id.clone())))
    .bind(col(|e| Some(e.event_type.as_str().to_owned())))
    .bind(col(|e| Some(e.entity_type.as_str().to_owned())))
    .bind(events.iter().map(|(e, _)| e.entity_id).collect::<Vec<_>>())
    .bind(events.iter().map(|(_, at)| *at).collect::<Vec<_>>())
    .bind(col(|e| Some(e.actor.clone())))
    .bind(col(|e| Some(e.lineage.request_id.clone())))
    .bind(col(|e| e.lineage.subrequest_id.clone()))
    .bind(col(|e| e.lineage.segment_id.clone()))
    .bind(col(|e| e.scope.clone()))
    .bind(col(|e| e.butler.clone()))
    .bind(
        events
            .iter()
            .map(|(e, _)| e.payload.clone())
            .collect::<Vec<_>>(),
    )
    .execute(conn)
    .await?;
    Ok(())
}

impl Store {
    /// The events of one entity, oldest first.
    pub async fn events_for(
        &self,
        tenant_id: &str,
        entity_id: Uuid,
    ) -> MemoryResult<Vec<StoredEvent>> {
        Ok(sqlx::query_as(
            "SELECT id, tenant_id, event_type, entity_type, entity_id, occurred_at, actor,
                    request_id, subrequest_id, segment_id, payload
             FROM memory_events WHERE tenant_id = $1 AND entity_id = $2 ORDER BY id",
        )
        .bind(tenant_id)
        .bind(entity_id)
        .fetch_all(self.pool())
        .await?)
    }
}
