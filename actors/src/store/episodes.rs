//! Writing episodes.

use serde_json::json;
use sqlx::PgConnection;

use crate::domain::episode::{Episode, NewEpisode};
use crate::domain::event::{EventType, NewEvent};
use crate::domain::memory_type::MemoryType;
use crate::domain::request_context::Lineage;
use crate::error::MemoryResult;

use super::columns::episode_columns;
use super::events;

/// An embedding and the registry id of the model that produced it.
#[derive(Debug, Clone)]
pub struct Embedded {
    pub vector: pgvector::Vector,
    pub version_id: i16,
}

/// Inserts an episode and its `episode_stored` event.
pub async fn insert(
    conn: &mut PgConnection,
    episode: &NewEpisode,
    embedding: Option<&Embedded>,
    actor: &str,
    lineage: &Lineage,
) -> MemoryResult<Episode> {
    let stored: Episode = sqlx::query_as(concat!(
        "INSERT INTO episodes
             (id, tenant_id, butler, session_id, content, embedding, embedding_version_id,
              importance, created_at, last_referenced_at, expires_at, metadata, request_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10, $11, $12)
         RETURNING ",
        episode_columns!()
    ))
    .bind(episode.id)
    .bind(&episode.tenant_id)
    .bind(&episode.butler)
    .bind(&episode.session_id)
    .bind(&episode.content)
    .bind(embedding.map(|e| &e.vector))
    .bind(embedding.map(|e| e.version_id))
    .bind(episode.importance)
    .bind(episode.created_at)
    .bind(episode.expires_at)
    .bind(&episode.metadata)
    .bind(&lineage.request_id)
    .fetch_one(&mut *conn)
    .await?;
    events::append(
        conn,
        &NewEvent {
            tenant_id: stored.tenant_id.clone(),
            event_type: EventType::EpisodeStored,
            entity_type: MemoryType::Episode,
            entity_id: stored.id,
            actor: actor.to_owned(),
            lineage: lineage.clone(),
            scope: None,
            butler: Some(stored.butler.clone()),
            payload: json!({ "before": null, "after": stored }),
        },
        episode.created_at,
    )
    .await?;
    Ok(stored)
}
