//! Writing episodes.

use serde_json::json;
use sqlx::PgConnection;

use crate::domain::episode::{Episode, NewEpisode};
use crate::domain::event::{EventType, NewEvent};
use crate::domain::memory_type::MemoryType;
use crate::domain::request_context::Lineage;
use crate::error::{MemoryError, MemoryResult};

use super::columns::episode_columns;
use super::events;

/// An embedding and the registry id of the model that produced it.
#[derive(Debug, Clone)]
pub struct Embedded {
    pub vector: pgvector::Vector,
    pub version_id: i16,
}

/// One episode to insert, with who asked for it.
#[derive(Debug, Clone, Copy)]
pub struct Submitted<'a> {
    pub episode: &'a NewEpisode,
    pub actor: &'a str,
    pub lineage: &'a Lineage,
}

/// What became of one submitted episode.
#[derive(Debug, Clone)]
pub struct Inserted {
    pub episode: Episode,
    /// An episode with the same idempotency key was already stored: this is that one, and
    /// nothing was written.
    pub duplicate: bool,
}

/// Inserts episodes and their `episode_stored` events in submission order, in two
/// statements whatever their number (group commit). An episode whose idempotency key its
/// butler already used is not stored again: the stored one is returned, marked duplicate.
pub async fn insert_batch(
    conn: &mut PgConnection,
    batch: &[Submitted<'_>],
) -> MemoryResult<Vec<Inserted>> {
    let column =
        |f: fn(&NewEpisode) -> String| batch.iter().map(|s| f(s.episode)).collect::<Vec<_>>();
    let optional = |f: fn(&NewEpisode) -> Option<String>| {
        batch.iter().map(|s| f(s.episode)).collect::<Vec<_>>()
    };
    let stored: Vec<Episode> = sqlx::query_as(concat!(
        "INSERT INTO episodes
             (id, tenant_id, butler, session_id, content, importance, created_at,
              last_referenced_at, expires_at, metadata, request_id, idempotency_key)
         SELECT id, tenant_id, butler, session_id, content, importance, created_at, created_at,
                expires_at, metadata, request_id, idempotency_key
         FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::float8[],
                     $7::timestamptz[], $8::timestamptz[], $9::jsonb[], $10::text[], $11::text[])
              WITH ORDINALITY
              AS i(id, tenant_id, butler, session_id, content, importance, created_at,
                   expires_at, metadata, request_id, idempotency_key, ord)
         ORDER BY ord
         ON CONFLICT (tenant_id, butler, idempotency_key) WHERE idempotency_key IS NOT NULL
         DO NOTHING
         RETURNING ",
        episode_columns!()
    ))
    .bind(batch.iter().map(|s| s.episode.id).collect::<Vec<_>>())
    .bind(column(|e| e.tenant_id.clone()))
    .bind(column(|e| e.butler.clone()))
    .bind(optional(|e| e.session_id.clone()))
    .bind(column(|e| e.content.clone()))
    .bind(
        batch
            .iter()
            .map(|s| s.episode.importance)
            .collect::<Vec<_>>(),
    )
    .bind(
        batch
            .iter()
            .map(|s| s.episode.created_at)
            .collect::<Vec<_>>(),
    )
    .bind(
        batch
            .iter()
            .map(|s| s.episode.expires_at)
            .collect::<Vec<_>>(),
    )
    .bind(
        batch
            .iter()
            .map(|s| s.episode.metadata.clone())
            .collect::<Vec<_>>(),
    )
    .bind(
        batch
            .iter()
            .map(|s| s.lineage.request_id.clone())
            .collect::<Vec<_>>(),
    )
    .bind(optional(|e| e.idempotency_key.clone()))
    .fetch_all(&mut *conn)
    .await?;

    let mut by_id: std::collections::HashMap<uuid::Uuid, Episode> =
        stored.into_iter().map(|e| (e.id, e)).collect();
    let events: Vec<(NewEvent, _)> = batch
        .iter()
        .filter_map(|s| by_id.get(&s.episode.id).map(|stored| (s, stored)))
        .map(|(s, stored)| {
            (
                NewEvent {
                    tenant_id: stored.tenant_id.clone(),
                    event_type: EventType::EpisodeStored,
                    entity_type: MemoryType::Episode,
                    entity_id: stored.id,
                    actor: s.actor.to_owned(),
                    lineage: s.lineage.clone(),
                    scope: None,
                    butler: Some(stored.butler.clone()),
                    payload: json!({ "before": null, "after": stored }),
                },
                stored.created_at,
            )
        })
        .collect();
    events::append_all(conn, &events).await?;

    // Keys seen before: the episodes stored under them, found by key.
    let missing: Vec<&Submitted> = batch
        .iter()
        .filter(|s| !by_id.contains_key(&s.episode.id))
        .collect();
    let mut earlier: std::collections::HashMap<(String, String), Episode> = Default::default();
    if !missing.is_empty() {
        let found: Vec<Episode> = sqlx::query_as(concat!(
            "SELECT ",
            episode_columns!(),
            " FROM episodes
             WHERE (tenant_id, butler, idempotency_key) IN
                   (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))"
        ))
        .bind(
            missing
                .iter()
                .map(|s| s.episode.tenant_id.clone())
                .collect::<Vec<_>>(),
        )
        .bind(
            missing
                .iter()
                .map(|s| s.episode.butler.clone())
                .collect::<Vec<_>>(),
        )
        .bind(
            missing
                .iter()
                .map(|s| s.episode.idempotency_key.clone())
                .collect::<Vec<_>>(),
        )
        .fetch_all(&mut *conn)
        .await?;
        for e in found {
            let key = (
                e.butler.clone(),
                e.idempotency_key.clone().unwrap_or_default(),
            );
            earlier.insert(key, e);
        }
    }
    batch
        .iter()
        .map(|s| match by_id.remove(&s.episode.id) {
            Some(episode) => Ok(Inserted {
                episode,
                duplicate: false,
            }),
            None => {
                let key = (
                    s.episode.butler.clone(),
                    s.episode.idempotency_key.clone().unwrap_or_default(),
                );
                earlier
                    .get(&key)
                    .cloned()
                    .map(|episode| Inserted {
                        episode,
                        duplicate: true,
                    })
                    .ok_or_else(|| {
                        MemoryError::internal("an episode was neither stored nor found by its key")
                    })
            }
        })
        .collect()
}
