//! Writing episodes.

use serde::Serialize;
use sqlx::PgConnection;
use sqlx::types::Json;

use crate::domain::episode::{Episode, Inserted, Submission};
use crate::domain::event::EventType;
use crate::domain::memory_type::MemoryType;
use crate::domain::redaction::Findings;
use crate::domain::request_context::Lineage;
use crate::error::{MemoryError, MemoryResult};

use super::columns::episode_columns;

/// An embedding and the registry id of the model that produced it.
#[derive(Debug, Clone)]
pub struct Embedded {
    pub vector: pgvector::Vector,
    pub version_id: i16,
}

/// The payload of an `episode_stored` event, serialized straight from the record (no
/// intermediate JSON tree: at thousands of episodes a second it shows in profiles).
#[derive(Serialize)]
struct StoredEvent<'a> {
    before: Option<()>,
    after: &'a Episode,
    /// Which redaction detectors fired and how many spans (never the spans).
    #[serde(skip_serializing_if = "Findings::is_empty")]
    redacted: &'a Findings,
}

/// Inserts episodes and appends their `episode_stored` events in submission order (event
/// ids follow it; rows need no insertion order, their timestamps carry it), in one
/// statement whatever their number (group commit): a single round trip, atomic on its own,
/// so it needs no transaction around it. The stored records (and so the events' `after`
/// objects) are built before the insert (`NewEpisode::stored`): nothing about a new row is
/// decided by the database but its defaults. An episode whose idempotency key its butler
/// already used is not stored again (nor is its event written): the stored one is
/// returned, marked duplicate.
#[tracing::instrument(target = "otel", name = "db.insert_episodes", skip_all, fields(db.system.name = "postgresql", db.operation.name = "INSERT"))]
pub async fn insert_batch(
    conn: &mut PgConnection,
    batch: &[Submission],
) -> MemoryResult<Vec<Inserted>> {
    let stored: Vec<Episode> = batch
        .iter()
        .map(|s| s.episode.stored(&s.author.lineage.request_id))
        .collect();
    let inserted = insert_rows(conn, batch, &stored).await?;

    let inserted: std::collections::HashSet<uuid::Uuid> = inserted.into_iter().collect();
    let mut by_id: std::collections::HashMap<uuid::Uuid, Episode> = stored
        .into_iter()
        .filter(|e| inserted.contains(&e.id))
        .map(|e| (e.id, e))
        .collect();

    // Keys seen before: the episodes stored under them, found by key.
    let missing: Vec<&Submission> = batch
        .iter()
        .filter(|s| !by_id.contains_key(&s.episode.id))
        .collect();
    let mut earlier: std::collections::HashMap<(String, String), Episode> = Default::default();
    if !missing.is_empty() {
        let found: Vec<Episode> = sqlx::query_as(concat!(
            "SELECT ",
            episode_columns!(),
            " FROM episodes
             WHERE (tenant_id, id) IN
                   (SELECT tenant_id, episode_id FROM episode_keys
                    WHERE (tenant_id, butler, idempotency_key) IN
                          (SELECT * FROM unnest($1::text[], $2::text[], $3::text[])))"
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

/// Prepares the insert on a fresh write connection by running it with no rows: the
/// statement is parsed, planned and cached, and the backend has loaded the tables and their
/// indexes, before the first burst needs them. Writes nothing.
pub async fn prepare_insert(conn: &mut PgConnection) -> sqlx::Result<()> {
    insert_rows(conn, &[], &[]).await.map(drop)
}

/// The insert statement: the rows of `stored` (built from `batch`, in its order) and their
/// events; answers the ids actually inserted.
async fn insert_rows(
    conn: &mut PgConnection,
    batch: &[Submission],
    stored: &[Episode],
) -> sqlx::Result<Vec<uuid::Uuid>> {
    let column = |f: fn(&Episode) -> String| stored.iter().map(f).collect::<Vec<_>>();
    let optional = |f: fn(&Episode) -> Option<String>| stored.iter().map(f).collect::<Vec<_>>();
    let lineage = |f: fn(&Lineage) -> Option<String>| {
        batch
            .iter()
            .map(|s| f(&s.author.lineage))
            .collect::<Vec<_>>()
    };
    sqlx::query_scalar(
        "WITH input AS MATERIALIZED (
             SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[],
                                  $6::float8[], $7::timestamptz[], $8::timestamptz[], $9::jsonb[],
                                  $10::text[], $11::text[], $12::text[], $13::text[], $14::text[],
                                  $15::jsonb[], $18::timestamptz[])
                  WITH ORDINALITY
                  AS i(id, tenant_id, butler, session_id, content, importance, created_at,
                       expires_at, metadata, request_id, idempotency_key, actor, subrequest_id,
                       segment_id, payload, occurred_at, ord)),
         -- An idempotency key admits its episode once (migration 26: the keys are a table
         -- of their own, `episodes` being partitioned by id): a key already taken, or taken
         -- twice in this batch, admits nothing. A concurrent holder is waited for.
         keyed AS (
             INSERT INTO episode_keys (tenant_id, butler, idempotency_key, episode_id)
             SELECT tenant_id, butler, idempotency_key, id FROM input
             WHERE idempotency_key IS NOT NULL
             ON CONFLICT DO NOTHING
             RETURNING episode_id),
         inserted AS (
             INSERT INTO episodes
                 (id, tenant_id, butler, session_id, content, importance, created_at,
                  last_referenced_at, expires_at, metadata, request_id, idempotency_key,
                  occurred_at)
             SELECT id, tenant_id, butler, session_id, content, importance, created_at, created_at,
                    expires_at, metadata, request_id, idempotency_key, occurred_at
             FROM input
             WHERE idempotency_key IS NULL OR id IN (SELECT episode_id FROM keyed)
             RETURNING id, tenant_id, butler, created_at),
         -- The stats' projections (migration 19) count new episodes here rather than in a
         -- trigger, which would lengthen every group commit: a new episode is pending, not
         -- forgotten and not embedded.
         counted AS (
             INSERT INTO memory_counts (tenant_id, kind, part, dim, key, n)
             SELECT g.tenant_id, 'episode', g.butler, k.dim, k.key, g.n
             FROM (SELECT tenant_id, butler, count(*) AS n FROM inserted GROUP BY 1, 2) g,
                  episode_count_keys('pending', false, NULL) k),
         by_day AS (
             INSERT INTO memory_days (tenant_id, butler, day, status, n)
             SELECT tenant_id, butler, (created_at AT TIME ZONE 'UTC')::date, 'pending', count(*)
             FROM inserted GROUP BY 1, 2, 3),
         -- The next number of each shard in the batch (migration 21), taken in key order
         -- so that two instances' batches never wait for each other in a cycle; and one
         -- more transaction that changed the shard's episodes (migration 28).
         heads AS (
             INSERT INTO shard_heads AS h (tenant_id, butler, seq, episode_writes)
             SELECT DISTINCT tenant_id, butler, 1, 1 FROM inserted ORDER BY 1, 2
             ON CONFLICT (tenant_id, butler)
                 DO UPDATE SET seq = h.seq + 1, episode_writes = h.episode_writes + 1
             RETURNING tenant_id, butler, seq),
         logged AS (
             INSERT INTO memory_events
                 (tenant_id, event_type, entity_type, entity_id, occurred_at, actor,
                  request_id, subrequest_id, segment_id, scope, butler, payload, shard_seq)
             SELECT i.tenant_id, $16, $17, i.id, i.created_at, i.actor,
                    i.request_id, i.subrequest_id, i.segment_id, NULL, i.butler, i.payload,
                    heads.seq
             FROM input i JOIN inserted USING (id)
                  JOIN heads ON heads.tenant_id = i.tenant_id AND heads.butler = i.butler
             ORDER BY i.ord)
         SELECT id FROM inserted",
    )
    .bind(stored.iter().map(|e| e.id).collect::<Vec<_>>())
    .bind(column(|e| e.tenant_id.clone()))
    .bind(column(|e| e.butler.clone()))
    .bind(optional(|e| e.session_id.clone()))
    .bind(column(|e| e.content.clone()))
    .bind(stored.iter().map(|e| e.importance).collect::<Vec<_>>())
    .bind(stored.iter().map(|e| e.created_at).collect::<Vec<_>>())
    .bind(stored.iter().map(|e| e.expires_at).collect::<Vec<_>>())
    .bind(stored.iter().map(|e| Json(&e.metadata)).collect::<Vec<_>>())
    .bind(optional(|e| e.request_id.clone()))
    .bind(optional(|e| e.idempotency_key.clone()))
    .bind(
        batch
            .iter()
            .map(|s| s.author.name.clone())
            .collect::<Vec<_>>(),
    )
    .bind(lineage(|l| l.subrequest_id.clone()))
    .bind(lineage(|l| l.segment_id.clone()))
    .bind(
        stored
            .iter()
            .zip(batch)
            .map(|(e, s)| {
                Json(StoredEvent {
                    before: None,
                    after: e,
                    redacted: &s.episode.redacted,
                })
            })
            .collect::<Vec<_>>(),
    )
    .bind(EventType::EpisodeStored.as_str())
    .bind(MemoryType::Episode.as_str())
    .bind(
        batch
            .iter()
            .map(|s| s.episode.occurred_at)
            .collect::<Vec<_>>(),
    )
    .fetch_all(&mut *conn)
    .await
}
