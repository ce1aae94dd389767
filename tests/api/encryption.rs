//! Encrypted high-risk facts: a fact whose predicate or scope the policy names is stored
//! only sealed (no plaintext in a dump of the database, in its data files or in the audit
//! stream; no embedding; full text on subject and predicate only), and opened for whoever
//! may read it: get, search, context, the REST lists and provenance, supersession's
//! same-content check, export and import. A wrong or missing master key fails closed as
//! `integrity`; rotation re-wraps and re-seals, after which only the new key is needed.

use serde_json::{Value, json};
use sqlx::Connection;

use crate::binary::{Service, run_cli, write_config};
use crate::helpers::*;

const MASTER_A: &str = "master key A: 4f1c9e0b7d2a45e8b3c6a1f09d8e7c6b";
const MASTER_B: &str = "master key B: 9a8b7c6d5e4f30211f2e3d4c5b6a7980";

fn policy(master: &str) -> String {
    format!("[encryption]\npredicates = [\"health.*\"]\nmaster_key = \"{master}\"\n")
}

/// A text no other test writes, so finding it anywhere means this test leaked it.
fn secret(what: &str) -> String {
    format!("{what} {}", uuid::Uuid::new_v4().simple())
}

/// The files of the test database and of the cluster's write-ahead log that hold any of
/// `needles`, after a checkpoint (grep reads the hundreds of megabytes fast).
async fn files_holding(app: &TestApp, needles: &[&str]) -> Vec<String> {
    let mut sql = app.sql().await;
    sqlx::query("CHECKPOINT").execute(&mut sql).await.unwrap();
    let data_dir: String = sqlx::query_scalar("SELECT current_setting('data_directory')")
        .fetch_one(&mut sql)
        .await
        .unwrap();
    let oid: sqlx::postgres::types::Oid =
        sqlx::query_scalar("SELECT oid FROM pg_database WHERE datname = current_database()")
            .fetch_one(&mut sql)
            .await
            .unwrap();
    let mut grep = std::process::Command::new("grep");
    grep.arg("-rlaF");
    for needle in needles {
        grep.arg("-e").arg(needle);
    }
    let out = grep
        .arg(format!("{data_dir}/base/{}", oid.0))
        .arg(format!("{data_dir}/pg_wal"))
        .output()
        .expect("grep runs");
    // 0: found, 1: not found, 2: trouble.
    assert!(
        out.status.code().unwrap_or(2) < 2,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn high_risk_facts_are_sealed_at_rest_and_opened_for_their_readers() {
    let app = spawn_app_with(&policy(MASTER_A)).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let diagnosis = secret("Type 2 diabetes, managed with metformin");
    let doctor = secret("Dr. Okafor");
    let stored = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "health.condition", "content": diagnosis,
                   "metadata": {"doctor": doctor}, "importance": 9}),
        )
        .await;
    assert_eq!(stored["content"], json!(diagnosis), "{stored}");
    assert_eq!(stored["metadata"]["doctor"], json!(doctor), "{stored}");
    assert_eq!(stored["key_version"], 1, "{stored}");
    assert!(stored.get("sealed").is_none(), "{stored}");
    let id = stored["id"].as_str().unwrap().to_owned();
    // Not high-risk: stored, embedded and indexed as always.
    let tea = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "favourite_tea", "content": "Oolong, no sugar"}),
        )
        .await;
    assert!(tea.get("key_version").is_none(), "{tea}");
    // The indexer drains: a sealed fact is not waiting to be embedded.
    app.engine().flush().await.unwrap();

    // At rest: a placeholder, no metadata, the ciphertext, no embedding.
    let mut sql = app.sql().await;
    let (content, metadata, version, sealed_len, embedded): (String, Value, i32, i32, bool) =
        sqlx::query_as(
            "SELECT content, metadata, key_version, length(sealed), embedding IS NOT NULL
             FROM facts WHERE id = $1::uuid",
        )
        .bind(&id)
        .fetch_one(&mut sql)
        .await
        .unwrap();
    assert_eq!(
        (content.as_str(), metadata, version, embedded),
        ("[encrypted]", json!({}), 1, false)
    );
    assert!(sealed_len > diagnosis.len() as i32, "{sealed_len}");
    let tea_embedded: bool =
        sqlx::query_scalar("SELECT embedding IS NOT NULL FROM facts WHERE id = $1::uuid")
            .bind(tea["id"].as_str().unwrap())
            .fetch_one(&mut sql)
            .await
            .unwrap();
    assert!(tea_embedded);

    // Read back, opened.
    let got = mcp
        .ok("memory_get", json!({"type": "fact", "id": id}))
        .await;
    assert_eq!(got["content"], json!(diagnosis), "{got}");
    assert_eq!(got["metadata"]["doctor"], json!(doctor), "{got}");
    // Found by subject and predicate, not by its content (no index holds it).
    let by_key = mcp
        .ok(
            "memory_search",
            json!({"query": "health condition", "types": ["fact"], "mode": "keyword"}),
        )
        .await;
    let hit = &by_key["results"][0];
    assert_eq!(hit["id"], json!(id), "{by_key}");
    assert_eq!(hit["content"], json!(diagnosis), "{by_key}");
    for mode in ["keyword", "semantic", "hybrid"] {
        let by_content = mcp
            .ok(
                "memory_search",
                json!({"query": "metformin diabetes medication", "types": ["fact"], "mode": mode}),
            )
            .await;
        assert!(
            by_content["results"]
                .as_array()
                .unwrap()
                .iter()
                .all(|h| h["id"] != json!(id)),
            "{mode}: {by_content}"
        );
    }
    // In the session's context, opened.
    let context = mcp
        .ok(
            "memory_context",
            json!({"trigger_prompt": "How is the user's health?", "butler": "health"}),
        )
        .await;
    assert!(
        context["text"].as_str().unwrap().contains(&diagnosis),
        "{context}"
    );

    // Saying it again confirms it (compared opened); saying something else supersedes it.
    let again = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "health.condition", "content": diagnosis}),
        )
        .await;
    assert_eq!(again["outcome"], "confirmed", "{again}");
    let update = secret("Type 2 diabetes in remission");
    let newer = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "health.condition", "content": update}),
        )
        .await;
    assert_eq!(newer["outcome"], "superseded", "{newer}");
    assert_eq!(newer["content"], json!(update), "{newer}");

    // Opened only where the caller may read its scope: another butler of the tenant does
    // not see the health butler's own fact at all.
    let private = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "health.medication", "content": "Metformin",
                   "scope": "health"}),
        )
        .await;
    assert_eq!(private["content"], "Metformin", "{private}");
    let general = app.client(TENANT_A_GENERAL).await;
    let err = general
        .err("memory_get", json!({"type": "fact", "id": private["id"]}))
        .await;
    assert_eq!(err["class"], "not_found", "{err}");
    let seen = general
        .ok(
            "memory_search",
            json!({"query": "health medication", "types": ["fact"], "mode": "keyword"}),
        )
        .await;
    assert!(!seen.to_string().contains("Metformin"), "{seen}");

    // The answers of lifecycle writes, opened.
    let admin = app.client(TENANT_A_ADMIN).await;
    let forgotten = mcp
        .ok("memory_forget", json!({"type": "fact", "id": newer["id"]}))
        .await;
    assert_eq!(forgotten["content"], json!(update), "{forgotten}");
    let restored = admin
        .ok("memory_restore", json!({"type": "fact", "id": newer["id"]}))
        .await;
    assert_eq!(restored["content"], json!(update), "{restored}");
    let confirmed = mcp
        .ok("memory_confirm", json!({"type": "fact", "id": newer["id"]}))
        .await;
    assert_eq!(confirmed["content"], json!(update), "{confirmed}");

    // The dashboard's views, opened.
    let (status, list) = crate::rest::get(
        &app,
        Some(TENANT_A_ADMIN),
        "/api/memory/facts?validity=superseded",
    )
    .await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["items"][0]["content"], json!(diagnosis), "{list}");
    let (status, provenance) = crate::rest::get(
        &app,
        Some(TENANT_A_ADMIN),
        &format!(
            "/api/memory/facts/{}/provenance",
            newer["id"].as_str().unwrap()
        ),
    )
    .await;
    assert_eq!(status, 200, "{provenance}");
    let versions: Vec<&Value> = provenance["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["content"])
        .collect();
    assert_eq!(
        versions,
        vec![&json!(diagnosis), &json!(update)],
        "{provenance}"
    );

    // The audit stream carries the ciphertext, never the plaintext.
    let events = activity(&admin, 1).await;
    let stream = serde_json::to_string(&events).unwrap();
    assert!(stream.contains("\"sealed\""), "{stream}");
    let dump = pg_dump(&app.db_url);
    assert!(dump.contains("Oolong, no sugar"), "the dump holds the data");
    for text in [&diagnosis, &doctor, &update] {
        assert!(
            !stream.contains(text.as_str()),
            "{text} in the audit stream"
        );
        assert!(!dump.contains(text.as_str()), "{text} in the dump");
    }
    let texts = [diagnosis.as_str(), doctor.as_str(), update.as_str()];
    assert_eq!(files_holding(&app, &texts).await, Vec::<String>::new());
    // The control: what is not sealed is in the files (the scan can find things).
    assert!(!files_holding(&app, &["Oolong, no sugar"]).await.is_empty());
    app.stop().await;
}

#[tokio::test]
async fn a_wrong_or_missing_master_key_fails_closed() {
    let app = spawn_app_with(&policy(MASTER_A)).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let sealed = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "health.allergy", "content": "Penicillin"}),
        )
        .await;
    let clear = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "city", "content": "Lisbon"}),
        )
        .await;
    let database = app.database();
    app.stop().await;

    for (what, encryption) in [
        ("the wrong key", policy(MASTER_B)),
        ("no key at all", String::new()),
    ] {
        let app = spawn_on_database(database.clone(), |config| {
            let extra = base_config(&encryption);
            config.engine.encryption = extra.engine.encryption;
        })
        .await;
        let mcp = app.client(TENANT_A_HEALTH).await;
        let err = mcp
            .err("memory_get", json!({"type": "fact", "id": sealed["id"]}))
            .await;
        assert_eq!(err["class"], "integrity", "{what}: {err}");
        assert_eq!(err["code"], "sealed_unreadable", "{what}: {err}");
        assert!(!err.to_string().contains("Penicillin"), "{err}");
        // A search that would return it fails too: never the placeholder as content.
        let err = mcp
            .err(
                "memory_search",
                json!({"query": "allergy", "types": ["fact"], "mode": "keyword"}),
            )
            .await;
        assert_eq!(err["code"], "sealed_unreadable", "{what}: {err}");
        // What is stored in the clear stays readable.
        let got = mcp
            .ok("memory_get", json!({"type": "fact", "id": clear["id"]}))
            .await;
        assert_eq!(got["content"], "Lisbon");
        app.stop().await;
    }
}

#[tokio::test]
async fn an_export_opens_sealed_facts_and_an_import_seals_them_under_its_own_keys() {
    let source = spawn_app_with(&policy(MASTER_A)).await;
    let mcp = source.client(TENANT_A_HEALTH).await;
    let diagnosis = secret("Asthma");
    let fact = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "health.condition", "content": diagnosis,
                   "metadata": {"inhaler": "blue"}}),
        )
        .await;
    let response = crate::bundle::export(&source, TENANT_A_ADMIN, "?events=true").await;
    assert_eq!(response.status(), 200);
    let bundle = response.text().await.unwrap();
    let row = bundle
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|l| l["kind"] == "fact")
        .unwrap();
    assert_eq!(row["row"]["content"], json!(diagnosis), "{row}");
    assert_eq!(row["row"]["metadata"], json!({"inhaler": "blue"}), "{row}");
    assert!(row["row"].get("sealed").is_none(), "{row}");
    source.stop().await;

    // Into another database, under another master key: sealed again, and readable.
    let target = spawn_app_with(&policy(MASTER_B)).await;
    let (status, report) = crate::bundle::import(&target, TENANT_A_ADMIN, bundle).await;
    assert_eq!(status, 200, "{report}");
    let mut sql = target.sql().await;
    let (content, version): (String, i32) =
        sqlx::query_as("SELECT content, key_version FROM facts WHERE id = $1::uuid")
            .bind(fact["id"].as_str().unwrap())
            .fetch_one(&mut sql)
            .await
            .unwrap();
    assert_eq!((content.as_str(), version), ("[encrypted]", 1));
    let got = target
        .client(TENANT_A_HEALTH)
        .await
        .ok("memory_get", json!({"type": "fact", "id": fact["id"]}))
        .await;
    assert_eq!(got["content"], json!(diagnosis), "{got}");
    assert_eq!(got["metadata"], json!({"inhaler": "blue"}), "{got}");
    target.engine().flush().await.unwrap();
    target.stop().await;
}

#[tokio::test]
async fn rotation_rewraps_the_data_keys_and_reseals_every_fact_beside_the_service() {
    let (database, options) = fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let env = [("BUTLER_MEMORY_DATABASE_URL", database.as_str())];
    // The second stage on: a fact stored in the clear gets a token sketch with its embedding.
    let config = write_config(
        dir.path(),
        &format!("{}[retrieval.rerank]\nenabled = true\n", policy(MASTER_A)),
    );
    let service = Service::start_with(&config, &env);
    let mut ids = Vec::new();
    for (i, condition) in ["Migraine", "Hay fever", "Gout"].iter().enumerate() {
        let (failed, stored) = service
            .call(
                "memory_store_fact",
                json!({"subject": format!("patient {i}"), "predicate": "health.condition",
                       "content": condition, "butler": "health"}),
            )
            .await;
        assert!(!failed, "{stored}");
        ids.push(stored["id"].as_str().unwrap().to_owned());
    }

    // Stored in the clear: the policy does not name it yet.
    let (failed, clear) = service
        .call(
            "memory_store_fact",
            json!({"subject": "patient 0", "predicate": "diagnosis", "content": "Tinnitus",
                   "metadata": {"ear": "left"}, "butler": "health"}),
        )
        .await;
    assert!(!failed, "{clear}");
    let clear_id = clear["id"].as_str().unwrap().to_owned();

    let sketched = |id: String| {
        let options = options.clone();
        async move {
            let mut sql = sqlx::PgConnection::connect_with(&options).await.unwrap();
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM fact_sketches WHERE id = $1::uuid")
                .bind(id)
                .fetch_one(&mut sql)
                .await
                .unwrap()
        }
    };
    // The indexer embeds in the background and a stop does not wait for its backlog (on a
    // busy machine the last fact may still be in it): wait for its embedding first.
    for _ in 0..300 {
        if sketched(clear_id.clone()).await == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The new master key, the old one listed until the rotation is done, and a policy that
    // now names `diagnosis`: the service is restarted with them, and runs on while the
    // rotation re-seals.
    service.stop().await;
    assert_eq!(sketched(clear_id.clone()).await, 1, "embedded and sketched");
    // Its words learnt for query widening (on in the shipped configuration); a sealed fact's
    // never, as it is never embedded.
    let words = || {
        let options = options.clone();
        async move {
            let mut sql = sqlx::PgConnection::connect_with(&options).await.unwrap();
            sqlx::query_scalar::<_, String>("SELECT lexeme FROM word_vectors ORDER BY lexeme")
                .fetch_all(&mut sql)
                .await
                .unwrap()
        }
    };
    assert_eq!(words().await, ["diagnosi", "patient", "tinnitus"]);
    let rotated = write_config(
        dir.path(),
        &format!(
            "[encryption]\npredicates = [\"health.*\", \"diagnosis\"]\nmaster_key = \"{MASTER_B}\"\nprevious_master_keys = [\"{MASTER_A}\"]\n"
        ),
    );
    let service = Service::start_with(&rotated, &env);
    let out = run_cli(&rotated, &["rotate-keys"], &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["rewrapped"], 1, "{report}");
    assert_eq!(report["tenants"], 1, "{report}");
    assert_eq!(report["resealed"], 3, "{report}");
    assert_eq!(report["sealed_in_place"], 1, "{report}");
    // Still served by the running service, which loads the new data key when it meets it.
    let (failed, got) = service
        .call("memory_get", json!({"type": "fact", "id": ids[2]}))
        .await;
    assert!(!failed, "{got}");
    assert_eq!(got["content"], "Gout");
    service.stop().await;

    let mut sql = sqlx::PgConnection::connect_with(&options).await.unwrap();
    let keys: Vec<(i32, String)> = sqlx::query_as(
        "SELECT version, master_key_id FROM data_keys WHERE tenant_id = 'tenant-a' ORDER BY version",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_eq!(keys[0].1, keys[1].1, "both wrapped by the new master key");
    assert_eq!(keys[0].1, report["master_key_id"].as_str().unwrap());
    let versions: Vec<i32> =
        sqlx::query_scalar("SELECT DISTINCT key_version FROM facts WHERE sealed IS NOT NULL")
            .fetch_all(&mut sql)
            .await
            .unwrap();
    assert_eq!(versions, vec![2]);
    let (content, metadata, embedded): (String, Value, bool) = sqlx::query_as(
        "SELECT content, metadata, embedding IS NOT NULL FROM facts WHERE id = $1::uuid",
    )
    .bind(&clear_id)
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(
        (content.as_str(), metadata, embedded),
        ("[encrypted]", json!({}), false)
    );
    // A sketch of the text would leak it as the vector would: gone with it, and so is the
    // word only its text held (its subject and predicate still find it).
    assert_eq!(sketched(clear_id.clone()).await, 0);
    assert_eq!(words().await, ["diagnosi", "patient"]);
    let sealed_events: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM memory_events WHERE entity_id = $1::uuid AND event_type = 'fact_sealed'
           AND NOT payload::text LIKE '%Tinnitus%'",
    )
    .bind(&clear_id)
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(sealed_events, 1);

    // The new key alone reads everything; the old one alone reads nothing.
    let service = Service::start_with(&write_config(dir.path(), &policy(MASTER_B)), &env);
    let (failed, got) = service
        .call("memory_get", json!({"type": "fact", "id": clear_id}))
        .await;
    assert!(!failed, "{got}");
    assert_eq!(
        (&got["content"], &got["metadata"]),
        (&json!("Tinnitus"), &json!({"ear": "left"}))
    );
    for (id, condition) in ids.iter().zip(["Migraine", "Hay fever", "Gout"]) {
        let (failed, got) = service
            .call("memory_get", json!({"type": "fact", "id": id}))
            .await;
        assert!(!failed, "{got}");
        assert_eq!(got["content"], condition);
    }
    service.stop().await;
    let service = Service::start_with(&write_config(dir.path(), &policy(MASTER_A)), &env);
    let (failed, err) = service
        .call("memory_get", json!({"type": "fact", "id": ids[0]}))
        .await;
    assert!(failed, "{err}");
    assert_eq!(err["code"], "sealed_unreadable", "{err}");
    service.stop().await;
}
