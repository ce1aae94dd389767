//! Purge's SQL (`domain/purge.rs`): finding candidates about a subject, resolving a target
//! into the rows it erases (locked), and erasing them in one transaction: the rows (with
//! their embeddings and full-text vectors), the words of the tenant's vocabulary no other
//! memory holds (`store/vocabulary.rs`), their links, rule applications and
//! consolidation items, the output of the consolidation jobs that read or wrote them, and
//! the content of their past events, through `memory_events_purge` (the one rewrite the
//! append-only stream accepts, migration 15). One `*_purged` event per record is appended.

use chrono::{DateTime, Utc};
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::author::Author;
use crate::domain::event::EventType;
use crate::domain::memory_type::MemoryType;
use crate::domain::purge::{
    MAX_LISTED, Purge, PurgeRecord, PurgeScope, PurgeSet, PurgeTarget, confirmed_set, content_hash,
    preview,
};
use crate::domain::text::check_name;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

use super::{Store, vocabulary};

/// A purge is an admin's rare, possibly large, transaction: it may take longer than the
/// statement limit that keeps the butlers' path fast.
const PURGE_STATEMENT_TIMEOUT: &str = "SET LOCAL statement_timeout = '10min'";

/// `subject ILIKE` pattern matching `needle` anywhere, its wildcards taken literally.
fn contains_pattern(needle: &str) -> String {
    let escaped = needle
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    format!("%{escaped}%")
}

impl Store {
    /// The records of the tenant about `subject`, at most `limit` (subject matches first):
    /// facts whose subject it is (any case), and records of every state whose text, subject,
    /// predicate, tags or metadata contain it or whose full-text vector matches its words.
    #[tracing::instrument(target = "otel", name = "db.purge_candidates", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn purge_candidates(
        &self,
        tenant_id: &str,
        subject: &str,
        limit: usize,
    ) -> MemoryResult<Vec<PurgeRecord>> {
        let rows: Vec<(String, Uuid, String, bool)> = sqlx::query_as(
            "WITH q AS (SELECT plainto_tsquery('english', $2) AS words)
             SELECT 'fact', f.id, f.subject || ' / ' || f.predicate || ': ' || f.content,
                    lower(f.subject) = lower($2)
             FROM facts f, q
             WHERE f.tenant_id = $1
               AND (lower(f.subject) = lower($2) OR f.subject ILIKE $3 OR f.predicate ILIKE $3
                    OR f.content ILIKE $3 OR f.tags::text ILIKE $3 OR f.metadata::text ILIKE $3
                    OR f.search_vector @@ q.words)
             UNION ALL
             SELECT 'rule', r.id, r.content, false
             FROM rules r, q
             WHERE r.tenant_id = $1
               AND (r.content ILIKE $3 OR r.original_content ILIKE $3 OR r.tags::text ILIKE $3
                    OR r.metadata::text ILIKE $3 OR r.search_vector @@ q.words)
             UNION ALL
             SELECT 'episode', e.id, e.content, false
             FROM episodes e, q
             WHERE e.tenant_id = $1
               AND (e.content ILIKE $3 OR e.metadata::text ILIKE $3 OR e.session_id ILIKE $3
                    OR e.search_vector @@ q.words)
             ORDER BY 4 DESC, 1, 2
             LIMIT $4",
        )
        .bind(tenant_id)
        .bind(subject)
        .bind(contains_pattern(subject))
        .bind(limit as i64)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter()
            .map(|(memory_type, id, text, by_subject)| {
                Ok(PurgeRecord {
                    memory_type: memory_type.parse()?,
                    id,
                    preview: Some(preview(&text)),
                    matched: Some(if by_subject { "subject" } else { "text" }.to_owned()),
                    content_hash: None,
                })
            })
            .collect()
    }

    /// How many records a purge of one butler (or, with `None`, the whole tenant) erases,
    /// before supersession chains are followed.
    pub async fn purge_counts(
        &self,
        tenant_id: &str,
        butler: Option<&str>,
    ) -> MemoryResult<PurgeSet> {
        let mut conn = self.pool().acquire().await?;
        rows_of(&mut conn, tenant_id, butler, false).await
    }
}

/// The rows of one butler (or of the tenant), locked when `lock`.
async fn rows_of(
    conn: &mut PgConnection,
    tenant_id: &str,
    butler: Option<&str>,
    lock: bool,
) -> MemoryResult<PurgeSet> {
    Ok(PurgeSet {
        episodes: owned_ids(conn, tenant_id, MemoryType::Episode, butler, lock).await?,
        facts: owned_ids(conn, tenant_id, MemoryType::Fact, butler, lock).await?,
        rules: owned_ids(conn, tenant_id, MemoryType::Rule, butler, lock).await?,
    })
}

/// The ids of one table's rows of a butler (every row of the tenant with `None`).
async fn owned_ids(
    conn: &mut PgConnection,
    tenant_id: &str,
    memory_type: MemoryType,
    butler: Option<&str>,
    lock: bool,
) -> MemoryResult<Vec<Uuid>> {
    // Facts and rules written without a butler belong to the tenant shard (DECISIONS.md #13).
    let owner = match memory_type {
        MemoryType::Episode => "butler",
        MemoryType::Fact | MemoryType::Rule => "COALESCE(source_butler, '_tenant')",
    };
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT id FROM {} WHERE tenant_id = $1 AND ($2::text IS NULL OR {owner} = $2)
         ORDER BY id{}",
        memory_type.table(),
        if lock { " FOR UPDATE" } else { "" }
    )))
    .bind(tenant_id)
    .bind(butler)
    .fetch_all(conn)
    .await?)
}

/// Locks the given rows of `table` (those that exist in the tenant), answering their ids.
async fn lock_rows(
    conn: &mut PgConnection,
    tenant_id: &str,
    memory_type: MemoryType,
    ids: &[Uuid],
) -> MemoryResult<Vec<Uuid>> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT id FROM {} WHERE tenant_id = $1 AND id = ANY ($2) ORDER BY id FOR UPDATE",
        memory_type.table()
    )))
    .bind(tenant_id)
    .bind(ids)
    .fetch_all(conn)
    .await?)
}

/// The rows a purge erases, locked until the transaction ends: `set` as named (ids that do
/// not exist in the tenant left out), or every row of `owner` (a butler; `Some(None)`: the
/// tenant), with each fact's supersession chain. A fact that would supersede one of them
/// after this waits on the lock, then fails its foreign key: no new version of a purged
/// fact can appear behind the purge.
async fn lock_purge_set(
    conn: &mut PgConnection,
    tenant_id: &str,
    named: &PurgeSet,
    owner: Option<Option<&str>>,
) -> MemoryResult<PurgeSet> {
    sqlx::query(PURGE_STATEMENT_TIMEOUT)
        .execute(&mut *conn)
        .await?;
    let mut set = match owner {
        Some(butler) => rows_of(conn, tenant_id, butler, true).await?,
        None => PurgeSet {
            episodes: lock_rows(conn, tenant_id, MemoryType::Episode, &named.episodes).await?,
            facts: lock_rows(conn, tenant_id, MemoryType::Fact, &named.facts).await?,
            rules: lock_rows(conn, tenant_id, MemoryType::Rule, &named.rules).await?,
        },
    };
    // A chain may have grown between reading it and locking it: follow it until it stands.
    loop {
        let chain = super::facts::supersession_chains(conn, tenant_id, &set.facts).await?;
        if chain.len() == set.facts.len() {
            break;
        }
        set.facts = lock_rows(conn, tenant_id, MemoryType::Fact, &chain).await?;
    }
    Ok(set)
}

/// One purge as recorded: its id and kind, who ordered it, when and why, and the key of the
/// hashes of what it erased.
struct PurgeOrder<'a> {
    purge_id: Uuid,
    scope: PurgeScope,
    reason: &'a str,
    audit_key: &'a [u8],
    author: &'a Author,
    now: DateTime<Utc>,
}

/// A record about to be erased: what of it is erased, as PostgreSQL's canonical JSON text
/// (what the hash is over), and its scope and butler for the stream's filters.
#[derive(sqlx::FromRow)]
struct Erased {
    memory_type: String,
    id: Uuid,
    erased: String,
    scope: Option<String>,
    butler: Option<String>,
}

/// Erases `set` (locked by [`lock_purge_set`]) and records the purge. Answers each record
/// with the keyed hash of what was erased, and how many past events were rewritten.
#[tracing::instrument(target = "otel", name = "db.purge", skip_all, fields(db.system.name = "postgresql", db.operation.name = "DELETE"))]
async fn erase(
    conn: &mut PgConnection,
    tenant_id: &str,
    set: &PurgeSet,
    owner: Option<Option<&str>>,
    order: &PurgeOrder<'_>,
) -> MemoryResult<(Vec<PurgeRecord>, u64)> {
    let ids = set.all_ids();
    let erased: Vec<Erased> = sqlx::query_as(
        "SELECT 'episode' AS memory_type, id,
                jsonb_build_object('content', content, 'session_id', session_id,
                    'metadata', metadata)::text AS erased,
                NULL AS scope, butler
         FROM episodes WHERE tenant_id = $1 AND id = ANY ($2)
         UNION ALL
         SELECT 'fact', id, (jsonb_build_object('subject', subject, 'predicate', predicate,
                    'content', content, 'tags', tags, 'metadata', metadata)
                    -- A sealed fact's hash covers its ciphertext (its content is a placeholder).
                    || CASE WHEN sealed IS NULL THEN '{}'::jsonb
                            ELSE jsonb_build_object('sealed', encode(sealed, 'base64')) END)::text,
                scope, source_butler
         FROM facts WHERE tenant_id = $1 AND id = ANY ($3)
         UNION ALL
         SELECT 'rule', id, jsonb_build_object('content', content,
                    'original_content', original_content, 'tags', tags,
                    'metadata', metadata)::text,
                scope, source_butler
         FROM rules WHERE tenant_id = $1 AND id = ANY ($4)
         ORDER BY 1, 2",
    )
    .bind(tenant_id)
    .bind(&set.episodes)
    .bind(&set.facts)
    .bind(&set.rules)
    .fetch_all(&mut *conn)
    .await?;

    // The words the records hold, which the tenant's vocabulary may keep only while another
    // memory holds them (a purged tenant's vocabulary goes altogether).
    let lexemes = match owner {
        Some(None) => None,
        _ => Some(
            vocabulary::lexemes_of(conn, tenant_id, &set.episodes, &set.facts, &set.rules).await?,
        ),
    };

    // Consolidation's traces: the items that point at the records, and the output of every
    // job that read one of the episodes or wrote one of the records (an extractor's answer
    // quotes what it extracted).
    let jobs: Vec<Uuid> = sqlx::query_scalar(
        "SELECT job_id FROM consolidation_items WHERE tenant_id = $1 AND entity_id = ANY ($2)
         UNION
         SELECT id FROM consolidation_jobs WHERE tenant_id = $1 AND episode_ids && $3",
    )
    .bind(tenant_id)
    .bind(&ids)
    .bind(&set.episodes)
    .fetch_all(&mut *conn)
    .await?;
    sqlx::query("DELETE FROM consolidation_items WHERE tenant_id = $1 AND entity_id = ANY ($2)")
        .bind(tenant_id)
        .bind(&ids)
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "UPDATE consolidation_jobs SET output = NULL, error = NULL
         WHERE tenant_id = $1 AND id = ANY ($2)",
    )
    .bind(tenant_id)
    .bind(&jobs)
    .execute(&mut *conn)
    .await?;
    if let Some(butler) = owner {
        // The butler's (the tenant's) jobs go altogether.
        sqlx::query(
            "DELETE FROM consolidation_items WHERE tenant_id = $1 AND job_id IN
                 (SELECT id FROM consolidation_jobs
                  WHERE tenant_id = $1 AND ($2::text IS NULL OR butler = $2))",
        )
        .bind(tenant_id)
        .bind(butler)
        .execute(&mut *conn)
        .await?;
        sqlx::query(
            "DELETE FROM consolidation_jobs WHERE tenant_id = $1 AND ($2::text IS NULL OR butler = $2)",
        )
        .bind(tenant_id)
        .bind(butler)
        .execute(&mut *conn)
        .await?;
    }
    if owner == Some(None) {
        // A purged tenant's data keys go too: what they sealed, wherever a copy survives
        // (a backup, an export of the stream), can never be opened again.
        sqlx::query("DELETE FROM data_keys WHERE tenant_id = $1")
            .bind(tenant_id)
            .execute(&mut *conn)
            .await?;
    }

    // The fleet's keyword statistics of the tenant (migration 27) hold words of its queries,
    // which may name what is purged: every purge takes them all (a cache, counted again).
    for table in ["corpus_counts", "word_counts"] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE tenant_id = $1"
        )))
        .bind(tenant_id)
        .execute(&mut *conn)
        .await?;
    }
    sqlx::query(
        "DELETE FROM memory_links
         WHERE tenant_id = $1 AND (source_id = ANY ($2) OR target_id = ANY ($2))",
    )
    .bind(tenant_id)
    .bind(&ids)
    .execute(&mut *conn)
    .await?;
    sqlx::query("DELETE FROM rule_applications WHERE tenant_id = $1 AND rule_id = ANY ($2)")
        .bind(tenant_id)
        .bind(&set.rules)
        .execute(&mut *conn)
        .await?;
    for (memory_type, of_type) in set.by_type() {
        // One statement per table: a supersession chain goes at once, so the foreign key
        // between its versions is checked when none is left.
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {} WHERE tenant_id = $1 AND id = ANY ($2)",
            memory_type.table()
        )))
        .bind(tenant_id)
        .bind(of_type)
        .execute(&mut *conn)
        .await?;
    }
    vocabulary::forget_words(conn, tenant_id, lexemes.as_deref()).await?;

    if owner == Some(None) {
        // The tenant's counts go with it (the deletes above left only their negations).
        for table in ["memory_counts", "memory_days", "memory_bands"] {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DELETE FROM {table} WHERE tenant_id = $1"
            )))
            .bind(tenant_id)
            .execute(&mut *conn)
            .await?;
        }
    }

    let mut ids = ids;
    if owner == Some(None) {
        let payload = json!({
            "after": null,
            "purge_id": order.purge_id,
            "purge_scope": order.scope,
            "reason": order.reason,
        });
        ids.extend(
            super::orchestrator_purge::erase_graph(
                conn,
                tenant_id,
                &payload,
                order.author,
                order.now,
            )
            .await?,
        );
    }
    let rewritten: i64 = sqlx::query_scalar("SELECT memory_events_purge($1, $2)")
        .bind(tenant_id)
        .bind(&ids)
        .fetch_one(&mut *conn)
        .await?;

    let mut records = Vec::with_capacity(erased.len());
    let (mut types, mut entity_types, mut entity_ids) = (Vec::new(), Vec::new(), Vec::new());
    let (mut scopes, mut butlers, mut payloads) = (Vec::new(), Vec::new(), Vec::new());
    for record in erased {
        let (memory_type, id): (MemoryType, Uuid) = (record.memory_type.parse()?, record.id);
        let hash = content_hash(order.audit_key, tenant_id, memory_type, id, &record.erased);
        let event_type = match memory_type {
            MemoryType::Episode => EventType::EpisodePurged,
            MemoryType::Fact => EventType::FactPurged,
            MemoryType::Rule => EventType::RulePurged,
        };
        types.push(event_type.as_str());
        entity_types.push(memory_type.as_str());
        entity_ids.push(id);
        scopes.push(record.scope);
        butlers.push(record.butler);
        payloads.push(json!({
            "after": null,
            "purge_id": order.purge_id,
            "purge_scope": order.scope,
            "reason": order.reason,
            "content_hash": hash,
        }));
        records.push(PurgeRecord {
            memory_type,
            id,
            preview: None,
            matched: None,
            content_hash: Some(hash),
        });
    }
    sqlx::query(
        "INSERT INTO memory_events
             (tenant_id, event_type, entity_type, entity_id, occurred_at, actor,
              request_id, subrequest_id, segment_id, scope, butler, payload)
         SELECT $1, e.event_type, e.entity_type, e.entity_id, $2, $3, $4, $5, $6,
                e.scope, e.butler, e.payload
         FROM unnest($7::text[], $8::text[], $9::uuid[], $10::text[], $11::text[], $12::jsonb[])
              WITH ORDINALITY AS e (event_type, entity_type, entity_id, scope, butler, payload, ord)
         -- Shard by shard in key order: each shard's write number (migration 21) is taken
         -- at its first event, so a purge and a batch of writes never wait in a cycle.
         ORDER BY coalesce(e.butler, '_tenant'), e.ord",
    )
    .bind(tenant_id)
    .bind(order.now)
    .bind(&order.author.name)
    .bind(&order.author.lineage.request_id)
    .bind(&order.author.lineage.subrequest_id)
    .bind(&order.author.lineage.segment_id)
    .bind(&types)
    .bind(&entity_types)
    .bind(&entity_ids)
    .bind(&scopes)
    .bind(&butlers)
    .bind(&payloads)
    .execute(&mut *conn)
    .await?;
    Ok((records, rewritten as u64))
}

/// Most candidates a purge by subject considers: a subject with more records than this is
/// purged in rounds (each round's purge removes what it confirmed from the next list).
const MAX_CANDIDATES: usize = 10_000;

impl Store {
    /// Purges `target` in `tenant` (the caller's: a `Tenant` target must name it) for good,
    /// or with `dry_run` lists what it would purge. Answers what was erased; caches and
    /// metrics are the caller's business.
    #[allow(
        clippy::too_many_arguments,
        reason = "one purge as ordered: all of it is needed"
    )]
    pub async fn purge(
        &self,
        tenant: &str,
        target: &PurgeTarget,
        reason: &str,
        dry_run: bool,
        audit_key: &[u8],
        author: &Author,
        now: DateTime<Utc>,
    ) -> MemoryResult<Purge> {
        let scope = target.scope();
        // What is named: ids (records, confirmed candidates), or an owner whose rows all go.
        let (named, owner): (PurgeSet, Option<Option<&str>>) = match &target {
            PurgeTarget::Record { memory_type, id } => {
                if self.record(tenant, *memory_type, *id, now).await?.is_none() {
                    return Err(MemoryError::not_found(*memory_type, *id));
                }
                (PurgeSet::of([(*memory_type, id)]), None)
            }
            PurgeTarget::Subject { subject, confirm } => {
                if subject.trim().is_empty() {
                    return Err(MemoryError::new(
                        ErrorCode::EmptyValue,
                        "`subject` is empty: name who or what to purge",
                    ));
                }
                let candidates = self
                    .purge_candidates(tenant, subject.trim(), MAX_CANDIDATES + 1)
                    .await?;
                match confirm {
                    Some(confirm) if !dry_run => (confirmed_set(&candidates, confirm)?, None),
                    _ => return Ok(Purge::candidates(scope, candidates)),
                }
            }
            PurgeTarget::Butler(butler) => {
                check_name("butler", butler)?;
                (PurgeSet::default(), Some(Some(butler.as_str())))
            }
            PurgeTarget::Tenant(named) if named == tenant => (PurgeSet::default(), Some(None)),
            PurgeTarget::Tenant(named) => {
                return Err(MemoryError::new(
                    ErrorCode::InvalidPurgeTarget,
                    format!(
                        "`tenant` must name the key's own tenant to confirm; `{named}` does not"
                    ),
                ));
            }
        };
        if dry_run {
            let set = match owner {
                Some(butler) => self.purge_counts(tenant, butler).await?,
                None => named,
            };
            return Ok(Purge::would_erase(scope, &set));
        }

        let purge_id = Uuid::now_v7();
        let mut tx = self.begin().await?;
        let set = lock_purge_set(&mut tx, tenant, &named, owner).await?;
        let order = PurgeOrder {
            purge_id,
            scope,
            reason,
            audit_key,
            author,
            now,
        };
        let (mut records, events_rewritten) = erase(&mut tx, tenant, &set, owner, &order).await?;
        tx.commit().await?;
        tracing::info!(
            %purge_id, %scope, episodes = set.episodes.len(), facts = set.facts.len(),
            rules = set.rules.len(), events_rewritten, "purged"
        );
        let truncated = records.len() > MAX_LISTED;
        records.truncate(MAX_LISTED);
        Ok(Purge {
            dry_run: false,
            scope,
            purge_id: Some(purge_id),
            counts: set.counts(),
            records,
            truncated,
            events_rewritten,
        })
    }

    /// Vacuums the tables a purge deleted from, so the erased rows' space (and their index
    /// entries) is reclaimed soon rather than at autovacuum's leisure. Best effort.
    pub async fn vacuum_after_purge(&self) {
        let sql = "VACUUM episodes, facts, rules, memory_links, rule_applications, \
                   consolidation_items, consolidation_jobs, memory_events, word_vectors";
        if let Err(e) = sqlx::query(sql).execute(self.pool()).await {
            tracing::warn!(error = %e, "vacuum after a purge failed; autovacuum will get there");
        }
    }
}
