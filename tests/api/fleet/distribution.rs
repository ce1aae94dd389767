//! Ready for a PostgreSQL distributed by tenant (issue 21, docs/scaling.md): every primary
//! key and unique index of a tenant table leads with `tenant_id`, every foreign key between
//! tenant tables carries it (both read from the catalog of a migrated database), and every
//! statement in `store/` that touches a tenant table filters by it, but for the fleet-wide
//! maintenance listed below with its reason (read from the source).

use std::collections::BTreeSet;

use crate::helpers::*;

/// Statements that touch tenant tables across tenants on purpose: (file, a fragment of the
/// statement, why). On a distributed database they run as multi-node queries.
const FLEET_WIDE: &[(&str, &str, &str)] = &[
    (
        "orchestrator_embedding.rs",
        "UPDATE orchestrator_memories SET embedding = NULL, embedding_version_id = NULL",
        "a model change is the whole service's: every tenant's nodes another model embedded",
    ),
    (
        "consolidation_queue.rs",
        "SELECT count(*), min(created_at) FROM episodes",
        "the consolidation backlog's size and age over every tenant, for /metrics",
    ),
    (
        "embedding_backlog.rs",
        "SELECT (SELECT count(*) FROM episodes WHERE embedding_version_id <> $1)",
        "rows another model embedded, over every tenant, counted once at start",
    ),
    (
        "embedding_backlog.rs",
        "SELECT min(oldest) FROM (",
        "the indexer's backlog is every tenant's: its oldest row",
    ),
    (
        "embedding_backlog.rs",
        "SELECT sum(n)::bigint, min(oldest) FROM (",
        "the indexer's backlog is every tenant's: its size, for /readyz and /metrics",
    ),
    (
        "episode_partitions.rs",
        "SELECT EXISTS (SELECT 1 FROM {partition} WHERE {KEPT})",
        "a month's partition of episodes holds every tenant's: whether it still keeps one",
    ),
    (
        "episode_partitions.rs",
        "SELECT count(*), {STATE} FROM {partition}",
        "a month's partition of episodes holds every tenant's: how many, against those logged",
    ),
    (
        "keyword_counts.rs",
        "DELETE FROM word_counts WHERE counted_at < $1",
        "the fleet's keyword statistics of every tenant pruned by the scheduler once too old",
    ),
    (
        "keyword_counts.rs",
        "DELETE FROM corpus_counts WHERE counted_at < $1",
        "the fleet's collection statistics of every tenant pruned by the scheduler once too old",
    ),
    (
        "lifecycle_claims.rs",
        "DELETE FROM lifecycle_claims WHERE finished_at < $1",
        "old claims of every shard pruned by the scheduler",
    ),
    (
        "lifecycle_runs.rs",
        "SELECT max(finished_at) FROM lifecycle_runs WHERE kind = $1",
        "when a sweep last ran on any shard, for the scheduler's catch-up",
    ),
    (
        "listing.rs",
        "{FACT_FILTERS}",
        "the tenant filter is in FACT_FILTERS (checked below)",
    ),
    (
        "listing.rs",
        "{RULE_FILTERS}",
        "the tenant filter is in RULE_FILTERS (checked below)",
    ),
    (
        "listing.rs",
        "{EPISODE_FILTERS}",
        "the tenant filter is in EPISODE_FILTERS (checked below)",
    ),
];

/// The tables with a `tenant_id` column.
async fn tenant_tables(sql: &mut sqlx::PgConnection) -> BTreeSet<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
         WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
           AND a.attname = 'tenant_id' AND NOT a.attisdropped",
    )
    .fetch_all(sql)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

#[tokio::test]
async fn every_key_of_a_tenant_table_leads_with_tenant_id() {
    let (_, options) = fresh_database().await;
    let mut sql = <sqlx::PgConnection as sqlx::Connection>::connect_with(&options)
        .await
        .unwrap();
    let tables = tenant_tables(&mut sql).await;
    for table in [
        "episodes",
        "facts",
        "rules",
        "memory_events",
        "shard_heads",
        "orchestrator_memories",
        "orchestrator_edges",
        "orchestrator_sources",
    ] {
        assert!(tables.contains(table), "{table} has tenant_id: {tables:?}");
    }
    // Primary keys and unique indexes: their first column.
    let keys: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT c.relname::text, i.relname::text, a.attname::text
         FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid
              JOIN pg_class i ON i.oid = x.indexrelid
              JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = x.indkey[0]
         WHERE x.indisunique AND c.relnamespace = current_schema()::regnamespace",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    let mut checked = 0;
    for (table, index, first) in &keys {
        if tables.contains(table) {
            assert_eq!(first, "tenant_id", "{table}: {index} leads with {first}");
            checked += 1;
        }
    }
    assert!(checked >= 15, "{keys:?}");
    // Foreign keys between tenant tables carry the tenant on both sides.
    type ForeignKey = (String, String, String, Vec<String>, Vec<String>);
    let foreign: Vec<ForeignKey> = sqlx::query_as(
        "SELECT f.conname::text, c.relname::text, r.relname::text,
                (SELECT array_agg(attname::text) FROM pg_attribute
                 WHERE attrelid = f.conrelid AND attnum = ANY (f.conkey)),
                (SELECT array_agg(attname::text) FROM pg_attribute
                 WHERE attrelid = f.confrelid AND attnum = ANY (f.confkey))
         FROM pg_constraint f JOIN pg_class c ON c.oid = f.conrelid
              JOIN pg_class r ON r.oid = f.confrelid
         WHERE f.contype = 'f' AND c.relnamespace = current_schema()::regnamespace",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    let mut between = 0;
    for (name, from, to, columns, referenced) in &foreign {
        if tables.contains(from) && tables.contains(to) {
            assert!(
                columns.contains(&"tenant_id".to_owned())
                    && referenced.contains(&"tenant_id".to_owned()),
                "{name}: {from}{columns:?} -> {to}{referenced:?}"
            );
            between += 1;
        }
    }
    // Supersession, rule applications, consolidation items; an orchestrator node's source,
    // an edge's two ends.
    assert_eq!(between, 6, "{foreign:?}");
}

/// The string literals of a Rust source file (raw strings aside), with their line.
fn literals(source: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut chars = source.char_indices().peekable();
    let mut line = 1;
    while let Some((_, c)) = chars.next() {
        match c {
            '\n' => line += 1,
            '/' if chars.peek().map(|(_, n)| *n) == Some('/') => {
                // A comment: to the end of the line.
                for (_, n) in chars.by_ref() {
                    if n == '\n' {
                        line += 1;
                        break;
                    }
                }
            }
            '\'' => {
                // A char literal ('"' among them) or a lifetime: skip what cannot open a string.
                if let Some((_, '\\')) = chars.peek() {
                    chars.next();
                    chars.next();
                }
                chars.next();
            }
            '"' => {
                let start = line;
                let mut text = String::new();
                while let Some((_, n)) = chars.next() {
                    match n {
                        '\\' => {
                            if let Some((_, e)) = chars.next() {
                                if e == '\n' {
                                    line += 1;
                                }
                                text.push(e);
                            }
                        }
                        '"' => break,
                        '\n' => {
                            line += 1;
                            text.push('\n');
                        }
                        _ => text.push(n),
                    }
                }
                found.push((start, text));
            }
            _ => {}
        }
    }
    found
}

#[tokio::test]
async fn every_statement_on_a_tenant_table_filters_by_tenant_id() {
    let (_, options) = fresh_database().await;
    let mut sql = <sqlx::PgConnection as sqlx::Connection>::connect_with(&options)
        .await
        .unwrap();
    let mut tables = tenant_tables(&mut sql).await;
    // A month's partition of a tenant table, named at run time (`{partition}` in the SQL of
    // episode_partitions.rs).
    tables.insert("partition".to_owned());
    let store = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("actors/src/store");
    let mut unfiltered = Vec::new();
    let mut allowed_used = BTreeSet::new();
    let mut statements = 0;
    for entry in std::fs::read_dir(&store).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let source = std::fs::read_to_string(&path).unwrap();
        for (line, text) in literals(&source) {
            let words: Vec<&str> = text
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .filter(|w| !w.is_empty())
                .collect();
            let is_statement = words
                .iter()
                .any(|w| ["SELECT", "UPDATE", "DELETE", "INSERT"].contains(w));
            let touches = words.windows(2).any(|w| {
                ["FROM", "UPDATE", "INTO", "JOIN"].contains(&w[0]) && tables.contains(w[1])
            });
            if !(is_statement && touches) {
                continue;
            }
            statements += 1;
            if text.contains("tenant_id") {
                continue;
            }
            let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
            match FLEET_WIDE
                .iter()
                .position(|(f, fragment, _)| *f == file && flat.contains(fragment))
            {
                Some(i) => {
                    allowed_used.insert(i);
                }
                None => unfiltered.push(format!("{file}:{line}: {flat}")),
            }
        }
        if file == "listing.rs" {
            for filters in ["FACT_FILTERS", "RULE_FILTERS", "EPISODE_FILTERS"] {
                let at = source.find(&format!("const {filters}")).unwrap();
                let head: String = source[at..].chars().take(200).collect();
                assert!(head.contains("tenant_id = $1"), "{filters}: {head}");
            }
        }
    }
    assert!(statements > 100, "only {statements} statements found");
    assert!(
        unfiltered.is_empty(),
        "statements without a tenant filter:\n{}",
        unfiltered.join("\n")
    );
    for (i, (file, fragment, why)) in FLEET_WIDE.iter().enumerate() {
        assert!(
            allowed_used.contains(&i),
            "{file}: no statement matches {fragment:?} ({why}): drop it from the list"
        );
    }
}
