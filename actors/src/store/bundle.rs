//! Export and import of bundles (`domain/bundle.rs`). Rows travel as PostgreSQL's JSON of
//! them, so every stored column goes, and an import writes the columns the target table
//! and the row have in common: a bundle from an older schema imports into a newer one.
//!
//! Export reads page by page (bounded memory, one statement each). Import runs in one
//! transaction: all or nothing, and every row that is already there (same id) is skipped,
//! so running it again writes nothing.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::domain::bundle::{
    BundleHeader, BundleRow, EmbeddingModel, FORMAT, IdMap, ImportReport, RowKind, VERSION,
};
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::vault::{Opened, SEALED_CONTENT, Vault};

use super::Store;
use super::import_events;
use super::orchestrator_bundle::{is_graph, point_at_stored, stored_id};

/// Records per export page.
const PAGE: i64 = 500;

/// The row's JSON as exported: generated columns and the model id left out, the embedding
/// as an array when asked for.
fn row_json(table: &str, embeddings: bool) -> String {
    let embedded = ["episodes", "facts", "rules", "orchestrator_memories"].contains(&table);
    let embedding = if embeddings && embedded {
        "|| CASE WHEN t.embedding IS NULL THEN '{}'::jsonb
                 ELSE jsonb_build_object('embedding', t.embedding::text::jsonb) END"
    } else {
        ""
    };
    let generated = match table {
        "episodes" => {
            "- 'search_vector' - 'consolidated' - 'embedding' - 'embedding_version_id'"
        }
        "facts" => {
            "- 'search_vector' - 'embedding' - 'embedding_version_id' - 'sealed'
             || CASE WHEN t.sealed IS NULL THEN '{}'::jsonb
                     ELSE jsonb_build_object('sealed', replace(encode(t.sealed, 'base64'), E'\\n', '')) END"
        }
        "rules" => "- 'search_vector' - 'embedding' - 'embedding_version_id'",
        "orchestrator_memories" => "- 'search_vector' - 'embedding' - 'embedding_version_id'",
        _ => "",
    };
    // The reads tallied apart since a record was last written (migration 33) travel in its
    // count and date, as a record read shows them.
    let reads = if ["episodes", "facts", "rules"].contains(&table) {
        "|| COALESCE((SELECT jsonb_build_object(
                 'reference_count', t.reference_count + r.reads,
                 'last_referenced_at', GREATEST(t.last_referenced_at, r.last_read_at))
             FROM memory_reads r WHERE r.memory_tenant_id = t.tenant_id AND r.memory_id = t.id),
             '{}'::jsonb)"
    } else {
        ""
    };
    format!("(to_jsonb(t) {generated}) {embedding} {reads}")
}

/// Where an export is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    Header,
    Records(RowKind, Option<Uuid>),
    Events(i64),
    Done,
}

/// Reads one tenant's (or butler's) bundle page by page: call [`Exporter::next_lines`]
/// until it answers `None`.
pub struct Exporter {
    store: Store,
    header: BundleHeader,
    stage: Stage,
}

impl Store {
    /// An export of `tenant_id` (only `butler`'s records when given).
    pub async fn exporter(
        &self,
        tenant_id: &str,
        butler: Option<&str>,
        events: bool,
        embeddings: bool,
        now: DateTime<Utc>,
    ) -> MemoryResult<Exporter> {
        let schema_version: i64 =
            sqlx::query_scalar("SELECT COALESCE(max(version), 0) FROM _sqlx_migrations")
                .fetch_one(self.pool())
                .await?;
        // The model of the tenant's embeddings: the most recent one registered that any of
        // its rows uses (one model but during a re-embedding).
        let embedding_model = if embeddings {
            sqlx::query_as::<_, (String, String)>(
                "SELECT v.model, v.model_sha256 FROM embedding_versions v
                 WHERE EXISTS (SELECT 1 FROM facts f WHERE f.tenant_id = $1 AND f.embedding_version_id = v.id)
                    OR EXISTS (SELECT 1 FROM episodes e WHERE e.tenant_id = $1 AND e.embedding_version_id = v.id)
                    OR EXISTS (SELECT 1 FROM rules r WHERE r.tenant_id = $1 AND r.embedding_version_id = v.id)
                    OR EXISTS (SELECT 1 FROM orchestrator_memories m
                               WHERE m.tenant_id = $1 AND m.embedding_version_id = v.id)
                 ORDER BY v.id DESC LIMIT 1",
            )
            .bind(tenant_id)
            .fetch_optional(self.pool())
            .await?
            .map(|(model, model_sha256)| EmbeddingModel {
                model,
                model_sha256,
            })
        } else {
            None
        };
        Ok(Exporter {
            store: self.clone(),
            header: BundleHeader {
                format: FORMAT.to_owned(),
                version: VERSION,
                tenant_id: tenant_id.to_owned(),
                butler: butler.map(str::to_owned),
                exported_at: now,
                schema_version,
                embedding_model,
                events,
                embeddings,
            },
            stage: Stage::Header,
        })
    }
}

impl Exporter {
    pub fn header(&self) -> &BundleHeader {
        &self.header
    }

    /// The next lines of the bundle (the header first), or `None` when it is complete.
    pub async fn next_lines(&mut self) -> MemoryResult<Option<Vec<Value>>> {
        loop {
            let (lines, next) = match self.stage {
                Stage::Done => return Ok(None),
                Stage::Header => (
                    vec![
                        serde_json::to_value(&self.header)
                            .map_err(|e| MemoryError::internal(e.to_string()))?,
                    ],
                    Stage::Records(RowKind::Episode, None),
                ),
                Stage::Records(kind, after) => self.records_page(kind, after).await?,
                Stage::Events(after) => self.events_page(after).await?,
            };
            self.stage = next;
            if !lines.is_empty() {
                return Ok(Some(lines));
            }
        }
    }

    /// A page of records of one kind after `after`, with the links out of them and a rule
    /// page's applications.
    async fn records_page(
        &self,
        kind: RowKind,
        after: Option<Uuid>,
    ) -> MemoryResult<(Vec<Value>, Stage)> {
        let table = kind.table();
        let owner = match kind {
            RowKind::Episode => "t.butler",
            // The graph is the tenant's, in whole-tenant bundles only (see `next` below).
            _ if is_graph(kind) => "NULL::text",
            _ => "COALESCE(t.source_butler, '_tenant')",
        };
        let sql = format!(
            "SELECT t.id, {} FROM {table} t
             WHERE t.tenant_id = $1 AND ($2::text IS NULL OR {owner} = $2)
               AND ($3::uuid IS NULL OR t.id > $3)
             ORDER BY t.id LIMIT $4",
            row_json(table, self.header.embeddings)
        );
        let rows: Vec<(Uuid, Value)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(&self.header.tenant_id)
            .bind(&self.header.butler)
            .bind(after)
            .bind(PAGE)
            .fetch_all(self.store.pool())
            .await?;
        let ids: Vec<Uuid> = rows.iter().map(|(id, _)| *id).collect();
        let mut rows = rows;
        for (_, row) in &mut rows {
            self.store.open_row(row).await?;
        }
        let mut lines: Vec<Value> = rows
            .into_iter()
            .map(|(_, row)| json!({"kind": kind, "row": row}))
            .collect();
        let links: Vec<Value> = if is_graph(kind) {
            Vec::new()
        } else {
            sqlx::query_scalar(
                "SELECT to_jsonb(t) FROM memory_links t
             WHERE t.tenant_id = $1 AND t.source_id = ANY ($2)
             ORDER BY t.source_id, t.target_type, t.target_id, t.relation",
            )
            .bind(&self.header.tenant_id)
            .bind(&ids)
            .fetch_all(self.store.pool())
            .await?
        };
        lines.extend(
            links
                .into_iter()
                .map(|row| json!({"kind": RowKind::Link, "row": row})),
        );
        if kind == RowKind::Rule {
            let applications: Vec<Value> = sqlx::query_scalar(
                "SELECT to_jsonb(t) FROM rule_applications t
                 WHERE t.tenant_id = $1 AND t.rule_id = ANY ($2) ORDER BY t.created_at, t.id",
            )
            .bind(&self.header.tenant_id)
            .bind(&ids)
            .fetch_all(self.store.pool())
            .await?;
            lines.extend(
                applications
                    .into_iter()
                    .map(|row| json!({"kind": RowKind::RuleApplication, "row": row})),
            );
        }
        let next = match (ids.last(), kind) {
            (Some(last), _) if ids.len() as i64 == PAGE => Stage::Records(kind, Some(*last)),
            (_, RowKind::Episode) => Stage::Records(RowKind::Fact, None),
            (_, RowKind::Fact) => Stage::Records(RowKind::Rule, None),
            (_, RowKind::Rule) if self.header.butler.is_none() => {
                Stage::Records(RowKind::OrchestratorSource, None)
            }
            (_, RowKind::OrchestratorSource) => Stage::Records(RowKind::OrchestratorMemory, None),
            (_, RowKind::OrchestratorMemory) => Stage::Records(RowKind::OrchestratorEdge, None),
            _ if self.header.events => Stage::Events(0),
            _ => Stage::Done,
        };
        Ok((lines, next))
    }

    /// A page of the audit stream after event `after` (the butler's, for a butler's export).
    async fn events_page(&self, after: i64) -> MemoryResult<(Vec<Value>, Stage)> {
        let rows: Vec<(i64, Value)> = sqlx::query_as(
            // A shard's write numbers are this database's (migration 21): the importing
            // one numbers the events it writes in its own shards' order.
            "SELECT t.id, to_jsonb(t) - 'id' - 'shard_seq' FROM memory_events t
             WHERE t.tenant_id = $1 AND ($2::text IS NULL OR COALESCE(t.butler, '_tenant') = $2)
               AND t.id > $3
             ORDER BY t.id LIMIT $4",
        )
        .bind(&self.header.tenant_id)
        .bind(&self.header.butler)
        .bind(after)
        .bind(PAGE)
        .fetch_all(self.store.pool())
        .await?;
        let next = match rows.last() {
            Some((last, _)) if rows.len() as i64 == PAGE => Stage::Events(*last),
            _ => Stage::Done,
        };
        let lines = rows
            .into_iter()
            .map(|(_, row)| json!({"kind": RowKind::Event, "row": row}))
            .collect();
        Ok((lines, next))
    }
}

/// The columns an import may write into `table`: stored, not generated, not an identity
/// that is always generated.
async fn writable_columns(conn: &mut PgConnection, table: &str) -> MemoryResult<Vec<String>> {
    Ok(sqlx::query_scalar(
        "SELECT attname::text FROM pg_attribute
         WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped
           AND attgenerated = '' AND attidentity <> 'a'
         ORDER BY attnum",
    )
    .bind(table)
    .fetch_all(conn)
    .await?)
}

/// Writes one bundle row (if its key is not taken); answers whether it was written.
async fn insert_row(
    conn: &mut PgConnection,
    columns: &HashMap<&'static str, Vec<String>>,
    kind: RowKind,
    row: &Value,
) -> MemoryResult<bool> {
    let table = kind.table();
    let fields = row.as_object().expect("rows are objects (parse_row)");
    let named: Vec<&str> = columns[table]
        .iter()
        .filter(|c| fields.contains_key(c.as_str()))
        .map(String::as_str)
        .collect();
    let list = named
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = if kind == RowKind::Episode {
        // An episode's idempotency key is held in `episode_keys` (migration 26): the episode
        // is written only if its key is free (as the unique index on the key refused it
        // before), and a key is taken only for an episode that is written.
        format!(
            "WITH r AS (SELECT * FROM jsonb_populate_record(NULL::episodes, $1)),
             keyed AS (
                 INSERT INTO episode_keys (tenant_id, butler, idempotency_key, episode_id)
                 SELECT tenant_id, butler, idempotency_key, id FROM r
                 WHERE idempotency_key IS NOT NULL AND NOT EXISTS (
                     SELECT 1 FROM episodes e WHERE e.tenant_id = r.tenant_id AND e.id = r.id)
                 ON CONFLICT DO NOTHING
                 RETURNING episode_id)
             INSERT INTO episodes ({list}) SELECT {list} FROM r
             WHERE r.idempotency_key IS NULL OR EXISTS (SELECT 1 FROM keyed)
             ON CONFLICT DO NOTHING"
        )
    } else {
        format!(
            "INSERT INTO {table} ({list}) SELECT {list} FROM jsonb_populate_record(NULL::{table}, $1)
             ON CONFLICT DO NOTHING"
        )
    };
    let written = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(row)
        .execute(conn)
        .await
        .map_err(|e| match e {
            sqlx::Error::Database(db) => MemoryError::new(
                ErrorCode::InvalidBundle,
                format!("a {kind} row of the bundle does not fit: {}", db.message()),
            ),
            other => other.into(),
        })?;
    Ok(written.rows_affected() == 1)
}

/// Who imports, when, and the vault that seals what this database's policy names.
#[derive(Clone, Copy)]
struct Importer<'a> {
    now: DateTime<Utc>,
    actor: &'a str,
    vault: &'a Vault,
}

/// Imports bundle rows into `tenant_id` in one transaction: ids kept, or remapped when the
/// bundle is another tenant's; rows already there skipped; embeddings kept only when they
/// are `model`'s (the running model, whose version id is `model_version`), otherwise left
/// for the indexer. Each record written gets an `*_imported` event whose `after` is the
/// record, after the bundle's own events of it.
async fn import(
    conn: &mut PgConnection,
    tenant_id: &str,
    header: &BundleHeader,
    rows: Vec<BundleRow>,
    running_model: Option<(&EmbeddingModel, i16)>,
    by: &Importer<'_>,
) -> MemoryResult<ImportReport> {
    let Importer { now, actor, vault } = *by;
    sqlx::query("SET LOCAL statement_timeout = '10min'")
        .execute(&mut *conn)
        .await?;
    let mut ids = if header.tenant_id == tenant_id {
        IdMap::keep()
    } else {
        IdMap::into_tenant(tenant_id)
    };
    let keep_embeddings = match (&header.embedding_model, running_model) {
        (Some(theirs), Some((ours, version))) if theirs == ours => Some(version),
        _ => None,
    };
    let mut columns = HashMap::new();
    for kind in RowKind::ALL {
        columns.insert(kind.table(), writable_columns(conn, kind.table()).await?);
    }
    let mut report = ImportReport {
        tenant_id: tenant_id.to_owned(),
        remapped_ids: ids.remaps(),
        ..ImportReport::default()
    };
    // Supersession references are set once every fact is in, whatever the order.
    let mut supersedes: Vec<(Value, Value)> = Vec::new();
    // Graph sources and nodes the tenant already held under another id: that id.
    let mut stored_graph: HashMap<String, String> = HashMap::new();
    let mut written: HashSet<String> = HashSet::new();
    let mut imported: Vec<(RowKind, Uuid)> = Vec::new();
    for BundleRow { kind, mut row } in rows {
        ids.apply(&mut row);
        let fields = row.as_object_mut().expect("rows are objects (parse_row)");
        fields.insert("tenant_id".into(), json!(tenant_id));
        if matches!(
            kind,
            RowKind::Episode | RowKind::Fact | RowKind::Rule | RowKind::OrchestratorMemory
        ) {
            // The model of an embedding is this database's, never the bundle's say: kept
            // when it is the running one.
            fields.remove("embedding_version_id");
            match (fields.contains_key("embedding"), keep_embeddings) {
                (true, Some(version)) => {
                    fields.insert("embedding_version_id".into(), json!(version));
                }
                _ => {
                    fields.remove("embedding");
                }
            }
        }
        match kind {
            RowKind::Episode | RowKind::Fact | RowKind::Rule => {
                // Consolidation jobs stay with the database they ran in.
                fields.remove("consolidation_job_id");
                // Sealing is this database's decision, under its keys, never the bundle's.
                fields.remove("key_version");
                fields.remove("sealed");
                // A bundle from before validity time: a fact was true from when it was recorded.
                if kind == RowKind::Fact && !fields.contains_key("valid_from") {
                    let recorded = fields.get("created_at").cloned().unwrap_or(Value::Null);
                    fields.insert("valid_from".into(), recorded);
                }
                if let Some(old) = fields.remove("supersedes_id")
                    && !old.is_null()
                {
                    supersedes.push((fields["id"].clone(), old));
                }
            }
            RowKind::Event => {
                // Numbered by this database's shard order, whatever the bundle says.
                fields.remove("shard_seq");
                // The bundle's history of the records this import writes; a record that was
                // already there has its own.
                if !written.contains(fields["entity_id"].as_str().unwrap_or_default()) {
                    report.skipped.add(kind, 1);
                    continue;
                }
            }
            RowKind::OrchestratorMemory | RowKind::OrchestratorEdge => {
                point_at_stored(&mut row, &stored_graph)
            }
            RowKind::Link | RowKind::RuleApplication | RowKind::OrchestratorSource => {}
        }
        if kind == RowKind::Fact {
            seal_row(conn, vault, &mut row).await?;
        }
        if insert_row(conn, &columns, kind, &row).await? {
            report.imported.add(kind, 1);
            if matches!(
                kind,
                RowKind::Episode
                    | RowKind::Fact
                    | RowKind::Rule
                    | RowKind::OrchestratorMemory
                    | RowKind::OrchestratorEdge
            ) {
                let id = row["id"].as_str().unwrap_or_default().to_owned();
                if kind != RowKind::OrchestratorEdge
                    && (keep_embeddings.is_none() || row.get("embedding").is_none())
                    && row.get("sealed").is_none()
                {
                    report.to_embed += 1;
                }
                imported.push((kind, id.parse().map_err(|_| invalid_row(kind, "id"))?));
                written.insert(id);
            }
        } else {
            report.skipped.add(kind, 1);
            if let Some(held) = stored_id(conn, tenant_id, kind, &row).await? {
                let own = row["id"].as_str().unwrap_or_default().to_owned();
                stored_graph.insert(own, held);
            }
        }
    }
    for (id, old) in &supersedes {
        sqlx::query(
            "UPDATE facts SET supersedes_id = $3::uuid
             WHERE tenant_id = $1 AND id = $2::uuid AND supersedes_id IS NULL",
        )
        .bind(tenant_id)
        .bind(id.as_str())
        .bind(old.as_str())
        .execute(&mut *conn)
        .await?;
        // And, from a bundle made before validity time, when the superseded one stopped.
        sqlx::query(
            "UPDATE facts o SET valid_until = GREATEST(o.valid_from, n.valid_from)
             FROM facts n
             WHERE o.tenant_id = $1 AND o.id = $3::uuid AND n.tenant_id = $1 AND n.id = $2::uuid
               AND o.valid_until IS NULL
               AND (o.validity = 'superseded' OR o.retracted_from = 'superseded')",
        )
        .bind(tenant_id)
        .bind(id.as_str())
        .bind(old.as_str())
        .execute(&mut *conn)
        .await?;
    }
    import_events::append_imported_events(conn, tenant_id, header, &imported, now, actor).await?;
    Ok(report)
}

/// A fact row sealed in place (placeholder content, no metadata, no embedding) when this
/// database's policy names its scope or predicate.
async fn seal_row(conn: &mut PgConnection, vault: &Vault, row: &mut Value) -> MemoryResult<()> {
    let text = |field: &str| row.get(field).and_then(Value::as_str).unwrap_or_default();
    if !vault.seals(text("tenant_id"), text("scope"), text("predicate")) {
        return Ok(());
    }
    let id: Uuid = text("id")
        .parse()
        .map_err(|_| invalid_row(RowKind::Fact, "id"))?;
    let opened = Opened {
        content: text("content").to_owned(),
        metadata: row.get("metadata").cloned().unwrap_or_else(|| json!({})),
    };
    let sealed = vault.seal(conn, text("tenant_id"), id, &opened).await?;
    let fields = row.as_object_mut().expect("rows are objects (parse_row)");
    fields.insert("content".into(), json!(SEALED_CONTENT));
    fields.insert("metadata".into(), json!({}));
    fields.insert("key_version".into(), json!(sealed.key_version));
    // bytea's text form, which jsonb_populate_record reads.
    let hex = crate::domain::text::hex(&sealed.bytes);
    fields.insert("sealed".into(), json!(format!("\\x{hex}")));
    fields.remove("embedding");
    Ok(())
}

fn invalid_row(kind: RowKind, field: &str) -> MemoryError {
    MemoryError::new(
        ErrorCode::InvalidBundle,
        format!("a {kind} row of the bundle has no valid `{field}`"),
    )
}

impl Store {
    /// Imports a parsed bundle into `tenant_id` in one transaction (see [`import`]), with
    /// `running_model` the model the service embeds with.
    pub async fn import_bundle(
        &self,
        tenant_id: &str,
        header: &BundleHeader,
        rows: Vec<BundleRow>,
        running_model: &EmbeddingModel,
        now: DateTime<Utc>,
        actor: &str,
    ) -> MemoryResult<ImportReport> {
        let version: Option<i16> = sqlx::query_scalar(
            "SELECT id FROM embedding_versions WHERE model = $1 AND model_sha256 = $2",
        )
        .bind(&running_model.model)
        .bind(&running_model.model_sha256)
        .fetch_optional(self.pool())
        .await?;
        let mut tx = self.begin().await?;
        let report = import(
            &mut tx,
            tenant_id,
            header,
            rows,
            version.map(|v| (running_model, v)),
            &Importer {
                now,
                actor,
                vault: self.vault(),
            },
        )
        .await?;
        tx.commit().await?;
        Ok(report)
    }
}
