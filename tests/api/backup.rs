//! `butler-memory backup` and `restore` with the real binary: a backup taken while the
//! embedded service runs restores into another data directory (and into an external
//! database) with every record, link and event identical and search answering the same; a
//! restore is refused while the service runs, and over memories unless forced; what is not
//! a backup is refused before anything is touched.

use std::process::Output;

use serde_json::{Value, json};

use crate::binary::{Service, run_cli as cli, write_config};
use crate::helpers::*;

fn succeeded(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn failed(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// What a service answers about the records: each by id (with links), a search, and the
/// audit stream. Without the reference counts and when they were last bumped: reads bump
/// them (these included), and a shard writes its bumps a moment later, so a backup taken
/// while the service runs holds those of the reads before it, or not, by timing: access
/// bookkeeping, not memory (`store/references.rs`).
async fn answers(service: &Service, ids: &[(&str, String)]) -> Vec<Value> {
    let mut out = Vec::new();
    for (memory_type, id) in ids {
        let (error, record) = service
            .call("memory_get", json!({"type": memory_type, "id": id}))
            .await;
        assert!(!error, "{record}");
        out.push(without_references(time_free(record)));
    }
    let (_, found) = service
        .call(
            "memory_search",
            json!({"query": "oolong tea", "mode": "keyword"}),
        )
        .await;
    out.push(without_references(time_free(found)));
    let (_, events) = service
        .call_as(
            TENANT_A_ADMIN,
            "memory_activity_stream",
            json!({"limit": 1000}),
        )
        .await;
    out.push(time_free(events));
    out
}

fn without_references(mut answer: Value) -> Value {
    fn strip(value: &mut Value) {
        match value {
            Value::Object(map) => {
                map.remove("reference_count");
                map.remove("last_referenced_at");
                map.values_mut().for_each(strip);
            }
            Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut answer);
    answer
}

#[tokio::test]
async fn a_backup_of_a_running_service_restores_elsewhere_identically() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let service = Service::start(&config);
    let (_, episode) = service
        .call(
            "memory_store_episode",
            json!({"content": "Made oolong tea for the guests", "butler": "health"}),
        )
        .await;
    let episode = episode["id"].as_str().unwrap().to_owned();
    let (_, fact) = service
        .call(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "tea", "content": "Prefers oolong tea",
                   "source_episode_id": episode,
                   "links": [{"target_type": "episode", "target_id": episode, "relation": "derived_from"}]}),
        )
        .await;
    let fact = fact["id"].as_str().unwrap().to_owned();
    let (_, rule) = service
        .call(
            "memory_store_rule",
            json!({"content": "Offer oolong tea after dinner"}),
        )
        .await;
    let rule = rule["id"].as_str().unwrap().to_owned();
    let ids = [("episode", episode), ("fact", fact), ("rule", rule)];
    // Once the indexer has embedded all three: the backup must not race it.
    let before = eventually(std::time::Duration::from_secs(30), || async {
        let before = answers(&service, &ids).await;
        if before[..3].iter().all(|r| !r["embedding_model"].is_null()) {
            Ok(before)
        } else {
            Err("not embedded yet".to_owned())
        }
    })
    .await
    .unwrap();

    // Taken while the service runs, through its database's socket.
    let archive = dir.path().join("memory.backup");
    let out = succeeded(&cli(
        &config,
        &["backup", "--output", &archive.to_string_lossy()],
        &[],
    ));
    assert!(out.contains("Backed up the database"), "{out}");
    // A restore under the running service is refused, and changes nothing.
    let err = failed(&cli(
        &config,
        &["restore", "--input", &archive.to_string_lossy()],
        &[],
    ));
    assert!(err.contains("stop it first"), "{err}");
    service.stop().await;

    // Into a new data directory (the command starts and stops its database itself).
    let elsewhere = tempfile::tempdir().unwrap();
    let config2 = write_config(elsewhere.path(), "");
    let not_a_backup = elsewhere.path().join("notes.txt");
    std::fs::write(&not_a_backup, "not a backup").unwrap();
    let err = failed(&cli(
        &config2,
        &["restore", "--input", &not_a_backup.to_string_lossy()],
        &[],
    ));
    assert!(err.contains("is not a backup"), "{err}");
    let out = succeeded(&cli(
        &config2,
        &["restore", "--input", &archive.to_string_lossy()],
        &[],
    ));
    assert!(out.contains("Restored"), "{out}");
    let err = failed(&cli(
        &config2,
        &["restore", "--input", &archive.to_string_lossy()],
        &[],
    ));
    assert!(err.contains("--force"), "{err}");
    succeeded(&cli(
        &config2,
        &["restore", "--input", &archive.to_string_lossy(), "--force"],
        &[],
    ));
    let restored = Service::start(&config2);
    assert_eq!(answers(&restored, &ids).await, before);
    // The restored stream stays append-only, and new writes continue its order.
    let (error, _) = restored
        .call(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "tea", "content": "Prefers green tea"}),
        )
        .await;
    assert!(!error);
    restored.stop().await;

    // Into an external PostgreSQL.
    let (url, options) = fresh_database().await;
    succeeded(&cli(
        &config2,
        &["restore", "--input", &archive.to_string_lossy()],
        &[("BUTLER_MEMORY_DATABASE_URL", &url)],
    ));
    let mut sql = <sqlx::PgConnection as sqlx::Connection>::connect_with(&options)
        .await
        .unwrap();
    let counts: (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM episodes), (SELECT count(*) FROM facts),
                (SELECT count(*) FROM rules), (SELECT count(*) FROM memory_links)",
    )
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(counts, (1, 1, 1, 1));
    let err = sqlx::query("DELETE FROM memory_events")
        .execute(&mut sql)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
}
