//! The audit events of an import (docs/export.md): one `*_imported` event per record a
//! bundle's import wrote, whose `after` is the record as stored — read back as the engine
//! reads it and serialised as every other event's, so the stream replays to it — with where
//! it came from (the source tenant, butler and export time).

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::PgConnection;
use uuid::Uuid;

use super::columns::{episode_columns, fact_columns, rule_columns};
use super::{events, orchestrator_bundle};
use crate::domain::author::Author;
use crate::domain::bundle::{BundleHeader, RowKind};
use crate::domain::episode::Episode;
use crate::domain::event::{EventType, NewEvent};
use crate::domain::fact::Fact;
use crate::domain::record::MemoryRecord;
use crate::domain::request_context::Lineage;
use crate::domain::rule::Rule;
use crate::error::{MemoryError, MemoryResult};

/// One `*_imported` event per record written: `after` is the record as stored, serialised
/// as every other event's (so the stream replays to it), with where it came from.
pub(super) async fn append_imported_events(
    conn: &mut PgConnection,
    tenant_id: &str,
    header: &BundleHeader,
    imported: &[(RowKind, Uuid)],
    now: DateTime<Utc>,
    actor: &str,
) -> MemoryResult<()> {
    let source = json!({"tenant_id": header.tenant_id, "exported_at": header.exported_at,
                        "butler": header.butler});
    let ids = |wanted: RowKind| -> Vec<Uuid> {
        imported
            .iter()
            .filter(|(kind, _)| *kind == wanted)
            .map(|(_, id)| *id)
            .collect()
    };
    let author = Author::new(
        actor,
        Lineage {
            request_id: format!("import-{}", Uuid::now_v7()),
            subrequest_id: None,
            segment_id: None,
            generated: true,
        },
    );
    let mut records: Vec<MemoryRecord> = Vec::new();
    let episodes: Vec<Episode> = stored(
        conn,
        concat!("SELECT ", episode_columns!(), " FROM episodes"),
        tenant_id,
        ids(RowKind::Episode),
    )
    .await?;
    records.extend(episodes.into_iter().map(MemoryRecord::Episode));
    let facts: Vec<Fact> = stored(
        conn,
        concat!("SELECT ", fact_columns!(), " FROM facts"),
        tenant_id,
        ids(RowKind::Fact),
    )
    .await?;
    records.extend(facts.into_iter().map(MemoryRecord::Fact));
    let rules: Vec<Rule> = stored(
        conn,
        concat!("SELECT ", rule_columns!(), " FROM rules"),
        tenant_id,
        ids(RowKind::Rule),
    )
    .await?;
    records.extend(rules.into_iter().map(MemoryRecord::Rule));
    orchestrator_bundle::append_imported_events(
        conn,
        tenant_id,
        &ids(RowKind::OrchestratorMemory),
        &ids(RowKind::OrchestratorEdge),
        &source,
        &author,
        now,
    )
    .await?;
    let mut events = Vec::with_capacity(records.len());
    for record in &records {
        let (event_type, id, after) = match record {
            MemoryRecord::Episode(e) => (EventType::EpisodeImported, e.id, to_json(e)?),
            MemoryRecord::Fact(f) => (EventType::FactImported, f.id, to_json(f)?),
            MemoryRecord::Rule(r) => (EventType::RuleImported, r.id, to_json(r)?),
        };
        let payload = json!({"before": null, "after": after, "imported_from": source});
        events.push(NewEvent::about(
            tenant_id, event_type, record, id, &author, payload,
        ));
    }
    for new in &events {
        events::append(conn, new, now).await?;
    }
    Ok(())
}

/// The records of one table among `ids`, read as the engine reads them (`select` is the
/// columns and the table).
async fn stored<T>(
    conn: &mut PgConnection,
    select: &'static str,
    tenant_id: &str,
    ids: Vec<Uuid>,
) -> MemoryResult<Vec<T>>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    let sql = format!("{select} WHERE tenant_id = $1 AND id = ANY ($2) ORDER BY id");
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(tenant_id)
        .bind(ids)
        .fetch_all(conn)
        .await?)
}

fn to_json(record: &impl serde::Serialize) -> MemoryResult<Value> {
    serde_json::to_value(record).map_err(|e| MemoryError::internal(e.to_string()))
}
