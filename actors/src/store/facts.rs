//! Writing facts, with supersession: one live fact per `(tenant, scope, subject, predicate)`.
//!
//! Concurrent writers of the same key may come from different shards (two butlers writing
//! a `global` fact), so shard ordering alone cannot serialise them. A transaction-scoped
//! advisory lock on the key does: the second writer waits, then finds the first writer's
//! fact live and supersedes it. The partial unique index `facts_one_live` backs this up.

use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::author::Author;
use crate::domain::event::{EventType, NewEvent};
use crate::domain::fact::{Fact, FactOutcome, NewFact, StoredFact};
use crate::domain::memory_type::MemoryType;
use crate::domain::relation::Relation;
use crate::error::MemoryResult;

use super::columns::fact_columns;
use super::episodes::Embedded;
use super::{events, links, sealing};
use crate::vault::{SEALED_CONTENT, Vault};

/// Serialises, until the transaction ends, every writer of one fact key (supersession,
/// restore), whichever shard it runs in.
#[tracing::instrument(target = "otel", name = "db.lock_fact_key", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
pub async fn lock_fact_key(
    conn: &mut PgConnection,
    tenant_id: &str,
    scope: &str,
    subject: &str,
    predicate: &str,
) -> MemoryResult<()> {
    let key = format!("fact\u{1f}{tenant_id}\u{1f}{scope}\u{1f}{subject}\u{1f}{predicate}");
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(&key)
        .execute(conn)
        .await?;
    Ok(())
}

/// Stores a fact: supersedes the live fact with the same key, or confirms it when it
/// already says exactly the same thing (with the same permanence).
pub async fn insert_superseding(
    conn: &mut PgConnection,
    fact: &NewFact,
    embedding: Option<&Embedded>,
    author: &Author,
    vault: &Vault,
) -> MemoryResult<StoredFact> {
    insert_or_confirm(
        conn,
        fact,
        embedding,
        author,
        vault,
        Restated::SamePermanence,
    )
    .await
}

/// What a fact must repeat of the live one to confirm it rather than supersede it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restated {
    /// Its content and permanence: a caller who gives another permanence changes the fact.
    SamePermanence,
    /// Its content: an extractor's permanence is its guess, the live fact's stays.
    Content,
}

/// [`insert_superseding`], with what a restatement must repeat.
#[tracing::instrument(target = "otel", name = "db.insert_fact", skip_all, fields(db.system.name = "postgresql", db.operation.name = "INSERT"))]
pub async fn insert_or_confirm(
    conn: &mut PgConnection,
    fact: &NewFact,
    embedding: Option<&Embedded>,
    author: &Author,
    vault: &Vault,
    restated: Restated,
) -> MemoryResult<StoredFact> {
    lock_fact_key(
        conn,
        &fact.tenant_id,
        &fact.scope,
        &fact.subject,
        &fact.predicate,
    )
    .await?;

    let live: Option<Fact> = sqlx::query_as(concat!(
        "SELECT ",
        fact_columns!(),
        " FROM facts
         WHERE tenant_id = $1 AND scope = $2 AND subject = $3 AND predicate = $4
           AND validity IN ('active', 'fading')
         FOR UPDATE"
    ))
    .bind(&fact.tenant_id)
    .bind(&fact.scope)
    .bind(&fact.subject)
    .bind(&fact.predicate)
    .fetch_optional(&mut *conn)
    .await?;

    let event = |event_type, entity_id, payload| NewEvent {
        tenant_id: fact.tenant_id.clone(),
        event_type,
        entity_type: MemoryType::Fact,
        entity_id,
        author: author.clone(),
        scope: Some(fact.scope.clone()),
        butler: fact.source_butler.clone(),
        payload,
    };

    let old_content = match &live {
        Some(old) => Some(sealing::opened_in(conn, vault, old).await?.content),
        None => None,
    };
    if let Some(old) = &live
        && old_content.as_deref() == Some(fact.content.as_str())
        && (old.permanence == fact.permanence || restated == Restated::Content)
    {
        // Saying the same thing again confirms it; a duplicate would only dilute retrieval.
        let confirmed: Fact = sqlx::query_as(concat!(
            "UPDATE facts SET validity = 'active', last_confirmed_at = $2,
                              confidence = GREATEST(confidence, $3)
             WHERE tenant_id = $4 AND id = $1 RETURNING ",
            fact_columns!()
        ))
        .bind(old.id)
        .bind(fact.created_at)
        .bind(fact.confidence)
        .bind(&old.tenant_id)
        .fetch_one(&mut *conn)
        .await?;
        events::append(
            conn,
            &event(
                EventType::FactConfirmed,
                confirmed.id,
                json!({ "before": old, "after": confirmed, "reason": "restated" }),
            ),
            fact.created_at,
        )
        .await?;
        return Ok(StoredFact {
            fact: confirmed,
            outcome: FactOutcome::Confirmed,
            superseded: None,
        });
    }

    let superseded = match &live {
        Some(old) => {
            let after: Fact = sqlx::query_as(concat!(
                // It stopped being true when its successor became true (never before it began).
                "UPDATE facts SET validity = 'superseded', valid_until = GREATEST(valid_from, $3)
                 WHERE tenant_id = $2 AND id = $1 RETURNING ",
                fact_columns!()
            ))
            .bind(old.id)
            .bind(&old.tenant_id)
            .bind(fact.valid_from)
            .fetch_one(&mut *conn)
            .await?;
            events::append(
                conn,
                &event(
                    EventType::FactSuperseded,
                    old.id,
                    json!({ "before": old, "after": after, "superseded_by": fact.id }),
                ),
                fact.created_at,
            )
            .await?;
            Some(after)
        }
        None => None,
    };

    // A high-risk fact keeps its content and metadata only sealed, and no embedding.
    let sealed = sealing::seal_new(conn, vault, fact).await?;
    let embedding = embedding.filter(|_| sealed.is_none());
    let (content, metadata) = match &sealed {
        Some(_) => (SEALED_CONTENT.to_owned(), json!({})),
        None => (fact.content.clone(), fact.metadata.clone()),
    };
    let stored: Fact = sqlx::query_as(concat!(
        "INSERT INTO facts
             (id, tenant_id, subject, predicate, content, embedding, embedding_version_id,
              importance, confidence, decay_rate, permanence, scope, validity, source_butler,
              source_episode_id, supersedes_id, created_at, last_confirmed_at, last_referenced_at,
              tags, metadata, request_id, key_version, sealed, valid_from)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 'active', $13, $14, $15,
                 $16, $16, $16, $17, $18, $19, $20, $21, $22)
         RETURNING ",
        fact_columns!()
    ))
    .bind(fact.id)
    .bind(&fact.tenant_id)
    .bind(&fact.subject)
    .bind(&fact.predicate)
    .bind(&content)
    .bind(embedding.map(|e| &e.vector))
    .bind(embedding.map(|e| e.version_id))
    .bind(fact.importance)
    .bind(fact.confidence)
    .bind(fact.decay_rate)
    .bind(fact.permanence.as_str())
    .bind(&fact.scope)
    .bind(&fact.source_butler)
    .bind(fact.source_episode_id)
    .bind(superseded.as_ref().map(|old| old.id))
    .bind(fact.created_at)
    .bind(json!(fact.tags))
    .bind(&metadata)
    .bind(&author.lineage.request_id)
    .bind(sealed.as_ref().map(|s| s.key_version))
    .bind(sealed.as_ref().map(|s| &s.bytes))
    .bind(fact.valid_from)
    .fetch_one(&mut *conn)
    .await?;

    let mut written = Vec::new();
    if let Some(old) = &superseded {
        written.push(
            links::insert(
                conn,
                &fact.tenant_id,
                (MemoryType::Fact, stored.id),
                (MemoryType::Fact, old.id),
                Relation::Supersedes,
                fact.created_at,
            )
            .await?,
        );
    }
    written.extend(
        links::insert_requested(
            conn,
            &fact.tenant_id,
            (MemoryType::Fact, stored.id),
            &fact.links,
            fact.created_at,
        )
        .await?,
    );
    events::append(
        conn,
        &event(
            EventType::FactCreated,
            stored.id,
            with_redactions(
                json!({ "before": null, "after": stored, "links": written }),
                &fact.redacted,
            ),
        ),
        fact.created_at,
    )
    .await?;

    Ok(StoredFact {
        fact: stored,
        outcome: if superseded.is_some() {
            FactOutcome::Superseded
        } else {
            FactOutcome::Created
        },
        superseded,
    })
}

/// An event payload with what redaction found in the write (detectors and span counts,
/// never the spans), when it found anything.
pub(crate) fn with_redactions(
    mut payload: serde_json::Value,
    findings: &crate::domain::redaction::Findings,
) -> serde_json::Value {
    if !findings.is_empty() {
        payload["redacted"] = json!(findings);
    }
    payload
}

/// The facts of `seeds`' supersession chains, both ways.
pub(crate) async fn supersession_chains(
    conn: &mut PgConnection,
    tenant_id: &str,
    seeds: &[Uuid],
) -> MemoryResult<Vec<Uuid>> {
    Ok(sqlx::query_scalar(
        "WITH RECURSIVE chain (id) AS (
             SELECT unnest($2::uuid[])
             UNION
             SELECT CASE WHEN f.id = c.id THEN f.supersedes_id ELSE f.id END
             FROM facts f JOIN chain c ON f.id = c.id OR f.supersedes_id = c.id
             WHERE f.tenant_id = $1
         )
         SELECT id FROM chain WHERE id IS NOT NULL ORDER BY id",
    )
    .bind(tenant_id)
    .bind(seeds)
    .fetch_all(conn)
    .await?)
}
