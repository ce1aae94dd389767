//! Who reaches an orchestrator's memory graph (issue 23): an orchestrator only its own (another's
//! ids are not there for it, naming another is refused and logged), butler keys none; the
//! `[memory]` settings are validated and turning it off answers `unavailable`; a purge of the
//! orchestrator erases its graph.

use serde_json::{Value, json};

use crate::binary::{Service, write_config};
use crate::helpers::*;
use crate::orchestrator_graph::{plan, workflow_source};

#[tokio::test]
async fn an_orchestrator_reaches_only_its_own_graph() {
    let app = spawn_app().await;
    let one = app.client(ORCHESTRATOR_ONE).await;
    let two = app.client(ORCHESTRATOR_TWO).await;
    let answer = one.ok("orchestrator_remember", plan()).await;
    let goal = answer["memories"][0]["memoryId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Another orchestrator's node is not there for it, nor may it link to it.
    let unseen = two.err("orchestrator_get", json!({"memoryId": goal})).await;
    assert_eq!(unseen["class"], "not_found");
    let link = two
        .err(
            "orchestrator_remember",
            json!({"source": workflow_source(),
                   "memories": [{"ref": "t", "type": "Todo", "content": "steal it"}],
                   "edges": [{"from": "t", "to": goal, "edgeType": "PartOf"}]}),
        )
        .await;
    assert_eq!(link["class"], "not_found");
    // Naming another orchestrator is refused outright.
    for (tool, args) in [
        (
            "orchestrator_get",
            json!({"orchestratorId": "orch-one", "memoryId": goal}),
        ),
        (
            "orchestrator_remember",
            json!({"orchestratorId": "orch-one", "source": workflow_source(),
                                         "memories": [{"type": "Todo", "content": "x"}]}),
        ),
    ] {
        let refused = two.err(tool, args).await;
        assert_eq!(refused["class"], "forbidden");
        assert_eq!(refused["code"], "cross_orchestrator");
    }
    // Its own name is fine; a butler key reaches no orchestrator memory, nor an
    // orchestrator key the butlers' memory.
    one.ok(
        "orchestrator_get",
        json!({"orchestratorId": "orch-one", "memoryId": goal}),
    )
    .await;
    let butler = app.client(TENANT_A_HEALTH).await;
    let refused = butler
        .err("orchestrator_get", json!({"memoryId": goal}))
        .await;
    assert_eq!(refused["class"], "forbidden");
    let refused = one.err("memory_search", json!({"query": "billing"})).await;
    assert_eq!(refused["class"], "forbidden");
    app.stop().await;
}

#[tokio::test]
async fn a_refusal_across_orchestrators_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        r#"[[auth.keys]]
key = "key-orchestrator-two-00000"
tenant = "orch-two"
role = "orchestrator"
"#,
    );
    let service = Service::start(&config);
    let (failed, refused) = service
        .call_as(
            "key-orchestrator-two-00000",
            "orchestrator_get",
            json!({"orchestratorId": "orch-one", "memoryId": uuid::Uuid::now_v7()}),
        )
        .await;
    assert!(failed, "{refused}");
    let log = service.stop().await;
    let line = log
        .iter()
        .find(|l| l.contains("refused across orchestrators"))
        .unwrap_or_else(|| panic!("no log line of the refusal in {log:#?}"));
    let event: Value = serde_json::from_str(line).unwrap();
    assert_eq!(event["level"], "WARN", "{line}");
    assert_eq!(event["fields"]["orchestrator"], "orch-two", "{line}");
    assert_eq!(event["fields"]["requested"], "orch-one", "{line}");
}

#[test]
fn the_memory_section_is_validated_and_recall_across_orchestrators_refused() {
    use butler_memory::config::Config;
    let problems = |toml: &str| match Config::from_toml(toml) {
        Ok(_) => String::new(),
        Err(e) => e.to_string(),
    };
    assert_eq!(problems("[memory]\nenabled = false\n"), "");
    let refused = problems("[memory.scope]\ncross_orchestrator = true\n");
    assert!(
        refused.contains("memory.scope.cross_orchestrator: must be false"),
        "{refused}"
    );
    for (toml, key) in [
        ("[memory.retrieval]\ntop_k = 5\n", "memory.retrieval.top_k"),
        (
            "[memory]\nbulletin_mode = \"hourly\"\n",
            "memory.bulletin_mode",
        ),
        ("[memory.retrieval]\nrrf_k = 0\n", "memory.retrieval.rrf_k"),
        (
            "[memory.ingest]\nmax_file_size_mb = \"big\"\n",
            "memory.ingest.max_file_size_mb",
        ),
        (
            "[memory.retrieval]\ntop_n = 500\n",
            "memory.retrieval.top_n",
        ),
        (
            "[memory.ingest]\nextractor = \"llm\"\n",
            "memory.ingest.extractor: `llm` reads with the endpoint of [consolidation.llm]",
        ),
        (
            "[memory.ingest]\nextractor = \"magic\"\n",
            "memory.ingest.extractor",
        ),
        (
            "[memory.ingest]\nshared_paths = [\"relative/dir\"]\n",
            "memory.ingest.shared_paths: relative/dir is not absolute",
        ),
        (
            "[memory.ingest]\nsettle_ms = 120000\n",
            "memory.ingest.settle_ms",
        ),
    ] {
        let refused = problems(toml);
        assert!(refused.contains(key), "{toml}: {refused}");
    }
}

#[tokio::test]
async fn a_turned_off_orchestrator_memory_answers_unavailable() {
    let app = spawn_app_with("[memory]\nenabled = false\n").await;
    let refused = app
        .client(ORCHESTRATOR_ONE)
        .await
        .err("orchestrator_remember", plan())
        .await;
    assert_eq!(refused["class"], "unavailable");
    assert_eq!(refused["code"], "orchestrator_memory_disabled");
    app.stop().await;
}

#[tokio::test]
async fn a_purge_of_the_orchestrator_erases_its_graph_and_the_content_of_its_events() {
    let app = spawn_app().await;
    let one = app.client(ORCHESTRATOR_ONE).await;
    one.ok("orchestrator_remember", plan()).await;
    let two = app.client(ORCHESTRATOR_TWO).await;
    let kept = two.ok("orchestrator_remember", plan()).await;
    let admin = app.client(ORCHESTRATOR_ONE_ADMIN).await;
    admin
        .ok(
            "memory_purge",
            json!({"tenant": "orch-one", "reason": "orchestrator decommissioned"}),
        )
        .await;
    let mut sql = app.sql().await;
    for table in [
        "orchestrator_memories",
        "orchestrator_edges",
        "orchestrator_sources",
    ] {
        let left: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE tenant_id = 'orch-one'"
        )))
        .fetch_one(&mut sql)
        .await
        .unwrap();
        assert_eq!(left, 0, "{table}");
    }
    // The stream keeps every event, the content gone from each, and one purge event a node.
    let stream: Vec<(String, String)> = sqlx::query_as(
        "SELECT event_type, payload::text FROM memory_events
         WHERE tenant_id = 'orch-one' ORDER BY id",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    let purged = stream
        .iter()
        .filter(|(t, _)| t == "orchestrator_memory_purged")
        .count();
    assert_eq!(purged, 4);
    assert_eq!(stream.len(), 6 + 4);
    for (event_type, payload) in &stream {
        assert!(!payload.contains("billing"), "{event_type}: {payload}");
        assert!(!payload.contains("run-1"), "{event_type}: {payload}");
    }
    // The other orchestrator's graph is untouched.
    let goal = kept["memories"][0]["memoryId"].clone();
    let got = two.ok("orchestrator_get", json!({"memoryId": goal})).await;
    assert_eq!(got["node"]["content"], "Ship the billing export by Friday");
    app.stop().await;
}

#[tokio::test]
async fn the_status_says_what_the_memory_holds_and_disabled_with_the_reason_when_its_store_breaks()
{
    let app = spawn_app_with("[memory.ingest]\nsettle_ms = 0\n").await;
    let one = app.client(ORCHESTRATOR_ONE).await;
    one.ok("orchestrator_remember", plan()).await;
    let ingest = app
        .service
        .data_dir()
        .join("orchestrators/orch-one/memory/ingest");
    std::fs::write(ingest.join("report.pdf"), "%PDF").unwrap();
    app.engine().flush_ingest().await.unwrap();
    std::fs::write(ingest.join(".still-writing.md"), "TODO: x").unwrap();

    let status = one.ok("orchestrator_status", json!({})).await;
    assert_eq!(status["orchestratorId"], "orch-one");
    assert_eq!(status["status"], "enabled", "{status}");
    assert!(status.get("reason").is_none(), "{status}");
    let graph = &status["graph"];
    assert_eq!(
        (graph["active"].as_i64(), graph["edges"].as_i64()),
        (Some(4), Some(2))
    );
    assert_eq!(graph["retracted"], 0);
    let folder = &status["ingest"];
    assert_eq!(folder["enabled"], true);
    assert_eq!(
        folder["folder"],
        ingest.canonicalize().unwrap().to_str().unwrap()
    );
    assert_eq!(
        (folder["waiting"].as_u64(), folder["rejected"].as_u64()),
        (Some(0), Some(1))
    );
    assert!(status["lastBulletinAt"].is_null());
    one.ok("orchestrator_bulletin", json!({"message": "billing"}))
        .await;
    let status = one.ok("orchestrator_status", json!({})).await;
    assert!(status["lastBulletinAt"].is_string(), "{status}");

    // The store breaks under it: disabled, with the reason, not an error.
    let mut sql = app.sql().await;
    sqlx::query("ALTER TABLE orchestrator_edges RENAME TO orchestrator_edges_gone")
        .execute(&mut sql)
        .await
        .unwrap();
    let broken = one.ok("orchestrator_status", json!({})).await;
    assert_eq!(broken["status"], "disabled", "{broken}");
    assert!(
        broken["reason"]
            .as_str()
            .unwrap()
            .contains("cannot be read"),
        "{broken}"
    );
    assert!(broken["graph"].is_null());
    sqlx::query("ALTER TABLE orchestrator_edges_gone RENAME TO orchestrator_edges")
        .execute(&mut sql)
        .await
        .unwrap();
    let mended = one.ok("orchestrator_status", json!({})).await;
    assert_eq!(mended["status"], "enabled", "{mended}");
    // Another orchestrator's status is refused, as all of its memory is.
    let refused = one
        .err("orchestrator_status", json!({"orchestratorId": "orch-two"}))
        .await;
    assert_eq!(refused["code"], "cross_orchestrator");

    let off = spawn_app_with("[memory]\nenabled = false\n").await;
    let status = off
        .client(ORCHESTRATOR_ONE)
        .await
        .ok("orchestrator_status", json!({}))
        .await;
    assert_eq!(status["status"], "disabled");
    assert!(
        status["reason"]
            .as_str()
            .unwrap()
            .contains("memory.enabled"),
        "{status}"
    );
    assert_eq!(status["ingest"], Value::Null);
    off.stop().await;
    app.stop().await;
}
