//! Export and import of a tenant's memories: over `/admin/export` and `/admin/import` into
//! another database, every record, link and search answer is identical and the stream
//! replays; a second import writes nothing; with the command line into another tenant the
//! ids are remapped consistently, and a bundle of another model is re-embedded by the
//! indexer; only admins export and import, and what is not a bundle is refused.

use serde_json::{Value, json};

use crate::binary::{run_cli, write_config};
use crate::events::replay;
use crate::helpers::*;

fn id(v: &Value) -> String {
    v["id"].as_str().unwrap().to_owned()
}

/// A tenant with one of everything: an episode in a session, a fact derived from it and
/// the version that superseded it (tags, metadata), a rule that was applied, a forgotten
/// fact.
async fn remember(app: &TestApp) -> Vec<(&'static str, String)> {
    let health = app.client(TENANT_A_HEALTH).await;
    let episode = id(&health
        .ok(
            "memory_store_episode",
            json!({"content": "Brewed oolong tea for Ana and Luis", "butler": "health",
                   "session_id": "s-1", "metadata": {"room": "kitchen"},
                   "occurred_at": "2025-12-24T18:00:00Z"}),
        )
        .await);
    let first = id(&health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "tea", "content": "Likes oolong tea",
                   "links": [{"target_type": "episode", "target_id": episode, "relation": "derived_from"}]}),
        )
        .await);
    let second = id(&health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "tea", "content": "Likes oolong tea, no sugar",
                   "tags": ["drinks"], "metadata": {"source": "chat"}}),
        )
        .await);
    let rule = id(&health
        .ok(
            "memory_store_rule",
            json!({"content": "Offer oolong tea after dinner"}),
        )
        .await);
    health
        .ok(
            "memory_mark_harmful",
            json!({"rule_id": rule, "reason": "too late at night"}),
        )
        .await;
    let forgotten = id(&health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "coffee", "content": "Drinks coffee"}),
        )
        .await);
    health
        .ok(
            "memory_forget",
            json!({"type": "fact", "id": forgotten, "reason": "wrong"}),
        )
        .await;
    app.engine().flush().await.unwrap();
    vec![
        ("episode", episode),
        ("fact", first),
        ("fact", second),
        ("rule", rule),
        ("fact", forgotten),
    ]
}

/// Each record by id (with links) and what searches answer, call-time values left out.
async fn answers(client: &McpClient, ids: &[(&str, String)]) -> Vec<Value> {
    let mut out = Vec::new();
    for (memory_type, id) in ids {
        out.push(time_free(
            client
                .ok("memory_get", json!({"type": memory_type, "id": id}))
                .await,
        ));
    }
    for mode in ["keyword", "semantic", "hybrid"] {
        out.push(time_free(
            client
                .ok(
                    "memory_search",
                    json!({"query": "what tea after dinner", "mode": mode, "min_confidence": 0}),
                )
                .await,
        ));
    }
    out
}

pub(crate) async fn export(app: &TestApp, key: &str, query: &str) -> reqwest::Response {
    reqwest::Client::new()
        .get(app.url(&format!("/admin/export{query}")))
        .header("Authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap()
}

pub(crate) async fn import(app: &TestApp, key: &str, body: String) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(app.url("/admin/import"))
        .header("Authorization", format!("Bearer {key}"))
        .body(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn an_export_imported_into_another_database_answers_identically() {
    let source = spawn_app().await;
    let ids = remember(&source).await;
    let response = export(&source, TENANT_A_ADMIN, "?events=true&embeddings=true").await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/x-ndjson");
    let bundle = response.text().await.unwrap();
    let header: Value = serde_json::from_str(bundle.lines().next().unwrap()).unwrap();
    assert_eq!(header["format"], "butler-memory/export");
    assert_eq!(header["tenant_id"], "tenant-a");
    assert_eq!(
        header["embedding_model"]["model"],
        "all-MiniLM-L6-v2-int8-compact"
    );

    let target = spawn_app().await;
    let (status, report) = import(&target, TENANT_A_ADMIN, bundle.clone()).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["remapped_ids"], false);
    assert_eq!(report["to_embed"], 0, "same model: embeddings kept");
    assert_eq!(
        json!([
            report["imported"]["episodes"],
            report["imported"]["facts"],
            report["imported"]["rules"],
            report["imported"]["links"],
            report["imported"]["rule_applications"]
        ]),
        json!([1, 3, 1, 2, 1]),
        "{report}"
    );
    let (from, to) = (
        source.client(TENANT_A_HEALTH).await,
        target.client(TENANT_A_HEALTH).await,
    );
    assert_eq!(answers(&to, &ids).await, answers(&from, &ids).await);

    // The imported stream: the source's history of each record, then its import; it
    // replays to the record.
    let admin = target.client(TENANT_A_ADMIN).await;
    let events = activity(&admin, 1000).await;
    assert_eq!(
        events.len() as u64,
        report["imported"]["events"].as_u64().unwrap() + 5
    );
    for (memory_type, record) in &ids {
        let history: Vec<Value> = events
            .iter()
            .filter(|e| e["entity_id"] == record.as_str())
            .cloned()
            .collect();
        assert!(history.len() >= 2, "{record}: {history:?}");
        assert!(
            history.last().unwrap()["event_type"]
                .as_str()
                .unwrap()
                .ends_with("_imported")
        );
        let state = replay(&history).expect("exists");
        let now = to
            .ok("memory_get", json!({"type": memory_type, "id": record}))
            .await;
        for (field, value) in &state {
            if let Some(current) = now.get(field)
                && ![
                    "effective_confidence",
                    "reference_count",
                    "last_referenced_at",
                ]
                .contains(&field.as_str())
            {
                assert_eq!(current, value, "{memory_type} {record} field {field}");
            }
        }
    }

    // Again: nothing new.
    let (_, again) = import(&target, TENANT_A_ADMIN, bundle).await;
    assert_eq!(again["imported"]["facts"], 0, "{again}");
    assert_eq!(again["skipped"]["facts"], 3, "{again}");

    // Only admins; only bundles.
    let refused = export(&source, TENANT_A_HEALTH, "").await;
    assert_eq!(refused.status(), 403);
    let (status, body) = import(&target, TENANT_A_HEALTH, "{}".into()).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("admin_only")));
    let (status, body) = import(&target, TENANT_A_ADMIN, "{\"format\": \"other\"}".into()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_bundle"))
    );
    let bad_query = export(&source, TENANT_A_ADMIN, "?colour=blue").await;
    assert_eq!(bad_query.status(), 400);
    source.stop().await;
    target.stop().await;
}

#[tokio::test]
async fn the_command_line_imports_into_another_tenant_remapping_ids_and_re_embedding() {
    let app = spawn_app().await;
    let ids = remember(&app).await;
    let (url, _) = app.database();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let cli = |args: &[&str]| {
        let out = run_cli(&config, args, &[("BUTLER_MEMORY_DATABASE_URL", &url)]);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let path = dir.path().join("tenant-a.jsonl");
    let out = cli(&[
        "export",
        "--tenant",
        "tenant-a",
        "--embeddings",
        "--output",
        &path.to_string_lossy(),
    ]);
    assert!(out.contains("Exported tenant tenant-a"), "{out}");
    // As if it came from a service that embedded with another model.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let mut header: Value = serde_json::from_str(&lines[0]).unwrap();
    header["embedding_model"]["model"] = json!("another-model");
    lines[0] = header.to_string();
    std::fs::write(&path, lines.join("\n")).unwrap();

    let report: Value = serde_json::from_str(&cli(&[
        "import",
        "--tenant",
        "tenant-b",
        "--input",
        &path.to_string_lossy(),
    ]))
    .unwrap();
    assert_eq!(report["remapped_ids"], true, "{report}");
    assert_eq!(report["to_embed"], 5, "{report}");
    let again: Value = serde_json::from_str(&cli(&[
        "import",
        "--tenant",
        "tenant-b",
        "--input",
        &path.to_string_lossy(),
    ]))
    .unwrap();
    assert_eq!(again["imported"]["facts"], 0, "idempotent: {again}");

    // Tenant b has the same memories under new ids, linked the same way, and the indexer
    // embeds them with the running model.
    let mut sql = app.sql().await;
    let contents = |tenant: &'static str| {
        let query = "SELECT content FROM facts WHERE tenant_id = $1 ORDER BY content";
        sqlx::query_scalar::<_, String>(query).bind(tenant)
    };
    assert_eq!(
        contents("tenant-b").fetch_all(&mut sql).await.unwrap(),
        contents("tenant-a").fetch_all(&mut sql).await.unwrap()
    );
    let theirs: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT id FROM facts WHERE tenant_id = 'tenant-b'")
            .fetch_all(&mut sql)
            .await
            .unwrap();
    assert!(
        ids.iter()
            .all(|(_, i)| !theirs.iter().any(|t| t.to_string() == *i))
    );
    let chain: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM facts n JOIN facts o ON n.supersedes_id = o.id
         WHERE n.tenant_id = 'tenant-b' AND o.tenant_id = 'tenant-b'",
    )
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(chain, 1, "the supersession survives the remapping");
    let linked: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM memory_links l JOIN episodes e ON e.id = l.target_id
         WHERE l.tenant_id = 'tenant-b' AND e.tenant_id = 'tenant-b'",
    )
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(linked, 1, "the link points at the remapped episode");
    embedded(&app, "tenant-b").await;
    let b = app.client(TENANT_B_HEALTH).await;
    let found = b
        .ok(
            "memory_search",
            json!({"query": "oolong tea", "mode": "semantic", "min_confidence": 0}),
        )
        .await;
    assert!(found.to_string().contains("no sugar"), "{found}");
    app.stop().await;
}

#[tokio::test]
async fn an_orchestrators_graph_travels_in_its_bundle_and_joins_what_the_target_holds() {
    use crate::orchestrator_graph::{plan, workflow_source};
    let app = spawn_app().await;
    let one = app.client(ORCHESTRATOR_ONE).await;
    let written = one.ok("orchestrator_remember", plan()).await;
    app.engine().flush().await.unwrap();
    let bundle = export(&app, ORCHESTRATOR_ONE_ADMIN, "?events=true&embeddings=true")
        .await
        .text()
        .await
        .unwrap();
    let kinds = |bundle: &str| -> Vec<String> {
        bundle
            .lines()
            .skip(1)
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["kind"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .filter(|k| k.starts_with("orchestrator"))
            .collect()
    };
    assert_eq!(
        kinds(&bundle),
        [
            "orchestrator_source",
            "orchestrator_memory",
            "orchestrator_memory",
            "orchestrator_memory",
            "orchestrator_memory",
            "orchestrator_edge",
            "orchestrator_edge",
        ]
    );
    assert!(
        bundle.contains("\"embedding\":["),
        "the nodes' vectors travel"
    );
    // A butler's bundle holds no graph: the graph is the tenant's.
    let butlers = export(&app, ORCHESTRATOR_ONE_ADMIN, "?butler=health")
        .await
        .text()
        .await
        .unwrap();
    assert!(kinds(&butlers).is_empty());

    // Into another tenant that already holds the decision (and the source) under ids of
    // its own: the rest is added and joined to them.
    let admin = app.client(TENANT_A_ADMIN).await;
    let held = admin
        .ok(
            "orchestrator_remember",
            json!({"source": workflow_source(),
                   "memories": [{"type": "Decision", "content": "Exports are CSV, not XLSX"}]}),
        )
        .await;
    let held_decision = held["memories"][0]["memoryId"].clone();
    let (status, report) = import(&app, TENANT_A_ADMIN, bundle.clone()).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["remapped_ids"], true);
    assert_eq!(report["imported"]["orchestrator_memories"], 3, "{report}");
    assert_eq!(report["skipped"]["orchestrator_memories"], 1);
    assert_eq!(report["skipped"]["orchestrator_sources"], 1);
    assert_eq!(report["imported"]["orchestrator_edges"], 2);
    assert_eq!(report["to_embed"], 0, "same model: vectors kept");
    let recalled = admin
        .ok(
            "orchestrator_recall",
            json!({"query": "billing export CSV"}),
        )
        .await;
    let memories = recalled["memories"].as_array().unwrap();
    assert_eq!(memories.len(), 4, "{recalled}");
    assert!(memories.iter().any(|m| m["memoryId"] == held_decision));
    assert!(
        !memories
            .iter()
            .any(|m| m["memoryId"] == written["memories"][0]["memoryId"]),
        "ids are the target tenant's"
    );
    assert_eq!(recalled["edges"].as_array().unwrap().len(), 2, "{recalled}");
    let mut sql = app.sql().await;
    let events: Vec<(String,)> = sqlx::query_as(
        "SELECT event_type FROM memory_events
         WHERE tenant_id = 'tenant-a' AND event_type LIKE 'orchestrator_%' ORDER BY id",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    let count = |t: &str| events.iter().filter(|(e,)| e == t).count();
    // The decision's own creation, the bundle's history of the three nodes and two edges
    // written, and an import event for each.
    assert_eq!(count("orchestrator_memory_created"), 1 + 3, "{events:?}");
    assert_eq!(count("orchestrator_edge_created"), 2);
    assert_eq!(count("orchestrator_memory_imported"), 3);
    assert_eq!(count("orchestrator_edge_imported"), 2);

    // Again: nothing.
    let (_, again) = import(&app, TENANT_A_ADMIN, bundle).await;
    assert_eq!(again["imported"]["orchestrator_memories"], 0, "{again}");
    assert_eq!(again["imported"]["orchestrator_edges"], 0);
}
