//! The export bundle (memory_butler.md §10): one tenant's memories (or one butler's) as
//! JSON Lines, versioned, readable by `import` into an empty or another tenant of any
//! database. The first line is the [`BundleHeader`]; every other line is one row:
//! `{"kind": "<kind>", "row": {...}}`, the row as PostgreSQL's JSON of it (every stored
//! column but generated ones and the embedding's model id; the embedding itself only when
//! asked for, as an array). Kinds come in import order: each page of episodes, facts or
//! rules is followed by the links out of them (and a rule page by the rules'
//! applications), then the events. docs/export.md documents the format.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// `format` of every bundle.
pub const FORMAT: &str = "butler-memory/export";
/// The format version this build writes; it reads this one and older.
pub const VERSION: u32 = 1;

/// What the bundle holds and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BundleHeader {
    pub format: String,
    pub version: u32,
    pub tenant_id: String,
    /// Only this butler's records (its episodes, the facts and rules it wrote).
    pub butler: Option<String>,
    pub exported_at: DateTime<Utc>,
    /// The newest migration of the database it came from.
    pub schema_version: i64,
    /// The model of the embeddings in it (when it has them).
    pub embedding_model: Option<EmbeddingModel>,
    /// Whether the audit stream's events are in it.
    pub events: bool,
    /// Whether rows carry their embeddings.
    pub embeddings: bool,
}

/// A model, as `embedding_versions` records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EmbeddingModel {
    pub model: String,
    pub model_sha256: String,
}

super::string_enum! {
    /// What a bundle line holds, and the table it goes to.
    RowKind {
        Episode => "episode",
        Fact => "fact",
        Rule => "rule",
        Link => "link",
        RuleApplication => "rule_application",
        /// The orchestrator memory's graph (docs/orchestrator.md): its sources, nodes and
        /// edges, in that order (each refers to the one before).
        OrchestratorSource => "orchestrator_source",
        OrchestratorMemory => "orchestrator_memory",
        OrchestratorEdge => "orchestrator_edge",
        Event => "event",
    }
}

impl RowKind {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }

    /// The table the rows go to. Only `store/` interpolates it into SQL.
    pub fn table(self) -> &'static str {
        match self {
            RowKind::Episode => "episodes",
            RowKind::Fact => "facts",
            RowKind::Rule => "rules",
            RowKind::Link => "memory_links",
            RowKind::RuleApplication => "rule_applications",
            RowKind::OrchestratorSource => "orchestrator_sources",
            RowKind::OrchestratorMemory => "orchestrator_memories",
            RowKind::OrchestratorEdge => "orchestrator_edges",
            RowKind::Event => "memory_events",
        }
    }
}

/// One line after the header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BundleRow {
    pub kind: RowKind,
    pub row: Value,
}

/// Counts of rows by kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct RowCounts {
    pub episodes: u64,
    pub facts: u64,
    pub rules: u64,
    pub links: u64,
    pub rule_applications: u64,
    pub orchestrator_sources: u64,
    pub orchestrator_memories: u64,
    pub orchestrator_edges: u64,
    pub events: u64,
}

impl RowCounts {
    pub fn add(&mut self, kind: RowKind, n: u64) {
        *match kind {
            RowKind::Episode => &mut self.episodes,
            RowKind::Fact => &mut self.facts,
            RowKind::Rule => &mut self.rules,
            RowKind::Link => &mut self.links,
            RowKind::RuleApplication => &mut self.rule_applications,
            RowKind::OrchestratorSource => &mut self.orchestrator_sources,
            RowKind::OrchestratorMemory => &mut self.orchestrator_memories,
            RowKind::OrchestratorEdge => &mut self.orchestrator_edges,
            RowKind::Event => &mut self.events,
        } += n;
    }
}

/// What an import did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ImportReport {
    pub tenant_id: String,
    /// Rows written.
    pub imported: RowCounts,
    /// Rows already there (an import is idempotent: running it again writes nothing).
    pub skipped: RowCounts,
    /// Ids were given new values (the bundle came from another tenant).
    pub remapped_ids: bool,
    /// Records stored without their embedding, for the indexer to embed with the running
    /// model (the bundle had none, or another model's).
    pub to_embed: u64,
}

/// Reads the header line, refusing what is not a bundle this build can read.
pub fn parse_header(line: &str) -> MemoryResult<BundleHeader> {
    let header: BundleHeader = serde_json::from_str(line).map_err(|e| {
        invalid(format!(
            "the first line is not a bundle header ({e}); expected {{\"format\": \"{FORMAT}\", ...}}"
        ))
    })?;
    if header.format != FORMAT {
        return Err(invalid(format!(
            "format `{}` is not `{FORMAT}`",
            header.format
        )));
    }
    if header.version == 0 || header.version > VERSION {
        return Err(invalid(format!(
            "bundle version {} is newer than this build reads ({VERSION})",
            header.version
        )));
    }
    Ok(header)
}

/// Reads one row line.
pub fn parse_row(number: usize, line: &str) -> MemoryResult<BundleRow> {
    let row: BundleRow = serde_json::from_str(line)
        .map_err(|e| invalid(format!("line {number} is not a bundle row: {e}")))?;
    if !row.row.is_object() {
        return Err(invalid(format!("line {number}: `row` is not an object")));
    }
    Ok(row)
}

/// Reads a whole bundle: its header and rows (blank lines are skipped).
pub fn parse_bundle<'a>(
    lines: impl IntoIterator<Item = &'a str>,
) -> MemoryResult<(BundleHeader, Vec<BundleRow>)> {
    let mut lines = lines
        .into_iter()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (_, first) = lines
        .next()
        .ok_or_else(|| invalid("the bundle is empty".into()))?;
    let header = parse_header(first)?;
    let rows = lines
        .map(|(i, line)| parse_row(i + 1, line))
        .collect::<MemoryResult<_>>()?;
    Ok((header, rows))
}

fn invalid(message: String) -> MemoryError {
    MemoryError::new(ErrorCode::InvalidBundle, message)
}

/// New ids for a bundle imported into another tenant: the same old id always becomes the
/// same new id there (so an import stays idempotent), and differs across tenants.
#[derive(Debug, Default)]
pub struct IdMap {
    tenant: Option<String>,
    seen: HashMap<Uuid, Uuid>,
}

/// Prefix of the hashed names of remapped ids.
const REMAP_NAMESPACE: &[u8] = b"butler-memory/import-id\x1f";

impl IdMap {
    /// Ids kept as they are.
    pub fn keep() -> IdMap {
        IdMap::default()
    }

    /// Ids remapped for `tenant`.
    pub fn into_tenant(tenant: &str) -> IdMap {
        IdMap {
            tenant: Some(tenant.to_owned()),
            seen: HashMap::new(),
        }
    }

    pub fn remaps(&self) -> bool {
        self.tenant.is_some()
    }

    fn map(&mut self, id: Uuid) -> Uuid {
        match &self.tenant {
            None => id,
            // RFC 9562's name-based UUIDv8 with SHA-256 (v5 would need SHA-1 as well).
            Some(tenant) => *self.seen.entry(id).or_insert_with(|| {
                let digest = Sha256::new()
                    .chain_update(REMAP_NAMESPACE)
                    .chain_update(tenant.as_bytes())
                    .chain_update([0x1f])
                    .chain_update(id.as_bytes())
                    .finalize();
                let mut bytes = [0u8; 16];
                bytes.copy_from_slice(&digest[..16]);
                Uuid::new_v8(bytes)
            }),
        }
    }

    /// Every UUID string in `value`, at any depth, remapped (ids, references between
    /// records, ids inside event payloads). Other strings are left alone.
    pub fn apply(&mut self, value: &mut Value) {
        if self.tenant.is_none() {
            return;
        }
        match value {
            Value::String(s) => {
                if s.len() == 36
                    && let Ok(id) = Uuid::parse_str(s)
                {
                    *s = self.map(id).to_string();
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.apply(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.apply(v)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn header(version: u32, format: &str) -> String {
        json!({"format": format, "version": version, "tenant_id": "t", "butler": null,
               "exported_at": "2026-11-24T00:00:00Z", "schema_version": 20261122000015i64,
               "embedding_model": null, "events": true, "embeddings": false})
        .to_string()
    }

    #[test]
    fn only_a_readable_header_is_accepted() {
        assert!(parse_header(&header(1, FORMAT)).is_ok());
        for bad in [
            header(2, FORMAT),
            header(0, FORMAT),
            header(1, "mem0/export"),
            "{}".into(),
            "not json".into(),
        ] {
            let err = parse_header(&bad).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidBundle, "{bad}");
        }
    }

    #[test]
    fn remapping_is_consistent_per_tenant_and_touches_only_uuids() {
        let old = "01a20b8f-211d-76dd-b1d2-9610b42b8494";
        let mut row = json!({"id": old, "content": "kept", "links": [{"target_id": old}],
                             "payload": {"after": {"id": old}}, "n": 3});
        let mut a = IdMap::into_tenant("a");
        a.apply(&mut row);
        let new = row["id"].as_str().unwrap().to_owned();
        assert_ne!(new, old);
        assert_eq!(row["links"][0]["target_id"], new.as_str());
        assert_eq!(row["payload"]["after"]["id"], new.as_str());
        assert_eq!(row["content"], "kept");
        let mut again = json!({"id": old});
        IdMap::into_tenant("a").apply(&mut again);
        assert_eq!(again["id"], new.as_str(), "stable across imports");
        let mut elsewhere = json!({"id": old});
        IdMap::into_tenant("b").apply(&mut elsewhere);
        assert_ne!(elsewhere["id"], new.as_str());
        let mut kept = json!({"id": old});
        IdMap::keep().apply(&mut kept);
        assert_eq!(kept["id"], old);
    }
}
