//! The ingestion drop-zone (issue 23): files dropped in an orchestrator's `memory/ingest/`
//! become typed memories and move to `processed/` beside a manifest of what they gave, or to
//! `rejected/` beside the machine-readable reasons; the same content again, or a file
//! read again after a crash mid-way, creates nothing; nothing outside the orchestrator's
//! folder or a shared one is read; the folder is watched. (The watch may take a file before
//! a test's `flush_ingest` does: tests look at what became of files, not at who took them.)

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::Row;

use crate::helpers::*;
use crate::orchestrator_graph::created;

const NOTES: &str = "\
# Billing export

Goal: Ship the billing export by Friday
- [ ] Write the CSV writer for the billing export
- [x] Pick the export format
Decision: Billing exports are CSV, not XLSX.

## Preferences
- The finance team reads reports as PDF

## Replication
The billing database is replicated to Dublin every night.
";

/// `<data_dir>/orchestrators/<orchestrator>/memory`.
fn memory_dir(app: &TestApp, orchestrator: &str) -> PathBuf {
    app.service
        .data_dir()
        .join("orchestrators")
        .join(orchestrator)
        .join("memory")
        .canonicalize()
        .expect("the orchestrator's folder was made at start")
}

/// Drops `bytes` as `ingest/<name>` the way a careful writer does: written aside, then
/// renamed in.
fn drop_file(memory: &Path, name: &str, bytes: impl AsRef<[u8]>) {
    let aside = memory.join("ingest").join(format!(".{name}.tmp"));
    std::fs::write(&aside, bytes).unwrap();
    std::fs::rename(&aside, memory.join("ingest").join(name)).unwrap();
}

fn manifest(memory: &Path, folder: &str, stored_as: &str) -> Value {
    let path = memory
        .join("ingest")
        .join(folder)
        .join(format!("{stored_as}.manifest.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The names waiting in `ingest/` (its two folders aside).
fn waiting(memory: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(memory.join("ingest"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "processed" && n != "rejected")
        .collect();
    names.sort();
    names
}

fn log_lines(memory: &Path) -> Vec<Value> {
    std::fs::read_to_string(memory.join("logs/memory.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// How many nodes, sources and audit events the orchestrator `orch-one` has.
async fn counts(app: &TestApp) -> (i64, i64, i64) {
    let mut sql = app.sql().await;
    let row = sqlx::query(
        "SELECT (SELECT count(*) FROM orchestrator_memories WHERE tenant_id = 'orch-one'),
                (SELECT count(*) FROM orchestrator_sources WHERE tenant_id = 'orch-one'),
                (SELECT count(*) FROM memory_events WHERE tenant_id = 'orch-one')",
    )
    .fetch_one(&mut sql)
    .await
    .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

fn types(manifest: &Value) -> Vec<&str> {
    manifest["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["type"].as_str().unwrap())
        .collect()
}

const QUICK: &str = "[memory.ingest]\nsettle_ms = 0\n";

#[tokio::test]
async fn a_dropped_file_becomes_typed_memories_cited_to_it_and_moves_to_processed() {
    let app = spawn_app_with(QUICK).await;
    let memory = memory_dir(&app, "orch-one");
    for folder in ["ingest/processed", "ingest/rejected", "bulletins", "logs"] {
        assert!(memory.join(folder).is_dir(), "{folder}");
    }
    drop_file(&memory, "notes.md", NOTES);
    app.engine().flush_ingest().await.unwrap();

    assert!(waiting(&memory).is_empty(), "{:?}", waiting(&memory));
    let processed = memory.join("ingest/processed/notes.md");
    assert_eq!(std::fs::read_to_string(&processed).unwrap(), NOTES);
    let m = manifest(&memory, "processed", "notes.md");
    assert_eq!(m["outcome"], "processed");
    assert_eq!(m["file"], "notes.md");
    assert_eq!(m["extractor"], "deterministic");
    assert_eq!(m["doneItems"], 1);
    assert_eq!(m["sourcePath"], processed.to_str().unwrap());
    assert_eq!(
        types(&m),
        ["Goal", "Todo", "Decision", "Preference", "Observation"]
    );
    assert!(
        m["memories"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["created"] == true)
    );
    // The section's todo is part of its goal.
    let edge = &m["edges"][0];
    assert_eq!(edge["edgeType"], "PartOf");
    assert_eq!(edge["fromMemoryId"], m["memories"][1]["memoryId"]);
    assert_eq!(edge["toMemoryId"], m["memories"][0]["memoryId"]);

    // Each memory cites the file where it rests, and was written by the ingester with the
    // manifest's request id in the audit stream.
    let one = app.client(ORCHESTRATOR_ONE).await;
    let goal = one
        .ok(
            "orchestrator_get",
            json!({"memoryId": m["memories"][0]["memoryId"]}),
        )
        .await;
    assert_eq!(goal["node"]["content"], "Ship the billing export by Friday");
    let source = &goal["node"]["source"];
    assert_eq!(source["sourceType"], "ingest_file");
    assert_eq!(source["capturedBy"], "extractor");
    assert_eq!(source["sourcePath"], processed.to_str().unwrap());
    let mut sql = app.sql().await;
    let events: Vec<(String, String)> = sqlx::query_as(
        "SELECT event_type, actor FROM memory_events
         WHERE tenant_id = 'orch-one' AND request_id = $1 ORDER BY id",
    )
    .bind(m["requestId"].as_str().unwrap())
    .fetch_all(&mut sql)
    .await
    .unwrap();
    assert_eq!(events.len(), 6, "{events:?}");
    assert!(events.iter().all(|(_, actor)| actor == "ingest"));

    // Recalled like any memory, across the orchestrator's conversations.
    app.engine().flush().await.unwrap();
    let recalled = one
        .ok(
            "orchestrator_recall",
            json!({"query": "where is the billing database replicated"}),
        )
        .await;
    assert!(
        recalled["memories"][0]["content"]
            .as_str()
            .unwrap()
            .contains("Dublin"),
        "{recalled}"
    );
    let log = log_lines(&memory);
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["event"], "ingest_processed");
    assert_eq!(log[0]["file"], "notes.md");
    assert_eq!(log[0]["created"], 5);
    // (The recorder is the test process's: other tests' files count too.)
    let metrics = app.metrics().await;
    let processed = metrics
        .lines()
        .find_map(|l| l.strip_prefix("butler_memory_ingest_files_total{outcome=\"processed\"} "))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(processed.parse::<f64>().unwrap() >= 1.0, "{processed}");
}

#[tokio::test]
async fn json_files_carry_typed_nodes_and_edges_and_what_is_wrong_is_rejected_with_reasons() {
    let app = spawn_app_with("[memory.ingest]\nsettle_ms = 0\nmax_file_size_mb = 1\n").await;
    let memory = memory_dir(&app, "orch-one");
    let run = json!({
        "source": {"sourceType": "workflow_output", "workflowRunId": "run-42", "stepId": "plan"},
        "memories": [
            {"ref": "goal", "type": "Goal", "content": "Migrate billing to Postgres 17", "importance": 90},
            {"ref": "todo", "type": "Todo", "content": "Dump the old billing cluster"}
        ],
        "edges": [{"from": "todo", "to": "goal", "edgeType": "PartOf", "reason": "a step of it"}]
    });
    drop_file(&memory, "run-42.json", run.to_string());
    // One good memory beside a bad one: nothing of the file is written.
    let half_bad = json!({"memories": [
        {"type": "Fact", "content": "a fact that must not be stored"},
        {"type": "Goal", "content": "too important", "importance": 500}
    ]});
    drop_file(&memory, "half-bad.json", half_bad.to_string());
    drop_file(
        &memory,
        "typo.json",
        "{\n  \"memories\": [\n    {\"type\": \"Wish\", \"content\": \"x\"}\n  ]\n}",
    );
    drop_file(&memory, "report.pdf", b"%PDF-1.7");
    drop_file(&memory, "big.txt", "TODO: x\n".repeat(200_000));
    drop_file(&memory, "latin1.txt", b"caf\xe9 au lait");
    drop_file(&memory, "empty.md", "\n\n- [x] all done\n");
    app.engine().flush_ingest().await.unwrap();
    assert!(waiting(&memory).is_empty(), "{:?}", waiting(&memory));

    let m = manifest(&memory, "processed", "run-42.json");
    assert_eq!(m["extractor"], "json");
    assert_eq!(types(&m), ["Goal", "Todo"]);
    assert_eq!(m["edges"][0]["edgeType"], "PartOf");
    let one = app.client(ORCHESTRATOR_ONE).await;
    let todo = one
        .ok(
            "orchestrator_get",
            json!({"memoryId": m["memories"][1]["memoryId"]}),
        )
        .await;
    assert_eq!(todo["node"]["source"]["sourceType"], "workflow_output");
    assert_eq!(todo["node"]["source"]["workflowRunId"], "run-42");
    assert_eq!(todo["edges"][0]["reason"], "a step of it");

    let reasons = |name: &str| -> Vec<Value> {
        let m = manifest(&memory, "rejected", name);
        assert_eq!(m["outcome"], "rejected", "{m}");
        assert!(memory.join("ingest/rejected").join(name).exists(), "{name}");
        m["reasons"].as_array().unwrap().clone()
    };
    let code = |name: &str| reasons(name)[0]["code"].as_str().unwrap().to_owned();
    assert_eq!(code("half-bad.json"), "invalid_importance");
    // A refused file's manifest says where it rests.
    assert_eq!(
        manifest(&memory, "rejected", "half-bad.json")["sourcePath"],
        memory
            .join("ingest/rejected/half-bad.json")
            .to_str()
            .unwrap()
    );
    let typo = reasons("typo.json");
    assert_eq!(typo[0]["code"], "invalid_json");
    assert_eq!(typo[0]["line"], 3);
    assert_eq!(code("report.pdf"), "unsupported_type");
    assert_eq!(code("big.txt"), "too_large");
    assert_eq!(code("latin1.txt"), "not_utf8");
    assert_eq!(code("empty.md"), "no_memories");
    // Only the run's two memories were stored.
    assert_eq!(counts(&app).await.0, 2);
    let rejected: Vec<Value> = log_lines(&memory)
        .into_iter()
        .filter(|l| l["event"] == "ingest_rejected")
        .collect();
    assert_eq!(rejected.len(), 6);
}

#[tokio::test]
async fn the_same_content_dropped_again_creates_nothing() {
    let app = spawn_app_with(QUICK).await;
    let memory = memory_dir(&app, "orch-one");
    drop_file(&memory, "notes.md", NOTES);
    app.engine().flush_ingest().await.unwrap();
    let before = counts(&app).await;
    assert_eq!(before.0, 5);

    drop_file(&memory, "notes.md", NOTES);
    app.engine().flush_ingest().await.unwrap();
    // Kept under another name beside the first, with a manifest of what it found.
    let again: Vec<String> = std::fs::read_dir(memory.join("ingest/processed"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("notes.") && n.ends_with(".md") && n != "notes.md")
        .collect();
    assert_eq!(again.len(), 1, "{again:?}");
    let m = manifest(&memory, "processed", &again[0]);
    assert_eq!(m["memories"].as_array().unwrap().len(), 5);
    assert!(created(&m, "memories").iter().all(|c| !c), "{m}");
    assert!(created(&m, "edges").iter().all(|c| !c), "{m}");
    // No node, no source, no event more.
    assert_eq!(counts(&app).await, before);
}

#[tokio::test]
async fn a_crash_mid_file_leaves_it_to_the_restarted_ingester_which_creates_nothing_twice() {
    let app = spawn_app_with(QUICK).await;
    let memory = memory_dir(&app, "orch-one");
    // Once the scan at start is done, the next file read is this test's.
    app.engine().flush_ingest().await.unwrap();
    app.engine().crash_ingest_after_commit().unwrap();
    drop_file(&memory, "notes.md", NOTES);
    // The ingester (woken by the watch, or by this flush) dies after the commit, before
    // the manifest and the move.
    let _ = app.engine().flush_ingest().await;
    let manifest_path = memory.join("ingest/processed/notes.md.manifest.json");
    eventually(Duration::from_secs(60), || async {
        // The restarted ingester scans at start; a flush makes sure it has.
        let _ = app.engine().flush_ingest().await;
        if manifest_path.exists() {
            Ok(())
        } else {
            Err("the restarted ingester did not read the file".to_owned())
        }
    })
    .await
    .unwrap();
    let m = manifest(&memory, "processed", "notes.md");
    assert_eq!(m["memories"].as_array().unwrap().len(), 5);
    assert!(created(&m, "memories").iter().all(|c| !c), "{m}");
    assert!(waiting(&memory).is_empty());
    let (nodes, sources, events) = counts(&app).await;
    assert_eq!((nodes, sources), (5, 1));
    // The first pass's five memories and one edge, each once.
    assert_eq!(events, 6);
    let actors = app.engine().actors();
    let ingester = actors
        .iter()
        .find(|a| a.kind == butler_memory_actors::ActorKind::Ingester)
        .unwrap_or_else(|| panic!("{actors:?}"));
    assert_eq!(ingester.restarts, 1, "{ingester:?}");
}

#[tokio::test]
async fn nothing_outside_the_orchestrators_folder_or_a_shared_one_is_read() {
    let outside = tempfile::tempdir().unwrap();
    let base = outside.path().canonicalize().unwrap();
    let shared = base.join("shared");
    let elsewhere = base.join("elsewhere");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(
        shared.join("plan.md"),
        "Goal: Share the roadmap with finance\n",
    )
    .unwrap();
    std::fs::write(
        elsewhere.join("secret.md"),
        "Fact: the root password is hunter2\n",
    )
    .unwrap();
    let app = spawn_app_with(&format!(
        "[memory.ingest]\nsettle_ms = 0\nshared_paths = [{:?}]\n",
        shared.to_str().unwrap()
    ))
    .await;
    let memory = memory_dir(&app, "orch-one");
    let two = memory_dir(&app, "orch-two");
    std::fs::write(two.join("notes.md"), "Decision: orch-two's own decision\n").unwrap();
    let ingest = memory.join("ingest");
    let link = |name: &str, to: &Path| std::os::unix::fs::symlink(to, ingest.join(name)).unwrap();
    link("shared.md", &shared.join("plan.md"));
    link("secret.md", &elsewhere.join("secret.md"));
    link(
        "climb.md",
        Path::new("../../../../../../../../../../..")
            .join(elsewhere.strip_prefix("/").unwrap())
            .join("secret.md")
            .as_path(),
    );
    link("two.md", &two.join("notes.md"));
    drop_file(
        &memory,
        "cites.json",
        json!({"source": {"sourcePath": format!("{}/../elsewhere/secret.md", shared.display())},
               "memories": [{"type": "Fact", "content": "cited from outside"}]})
        .to_string(),
    );
    app.engine().flush_ingest().await.unwrap();

    // The link into the shared folder is read, and cites the file it leads to.
    let m = manifest(&memory, "processed", "shared.md");
    assert_eq!(m["sourcePath"], shared.join("plan.md").to_str().unwrap());
    assert_eq!(types(&m), ["Goal"]);
    let code = |name: &str| manifest(&memory, "rejected", name)["reasons"][0]["code"].clone();
    assert_eq!(code("secret.md"), "path_outside_workspace");
    assert_eq!(code("climb.md"), "path_outside_workspace");
    assert_eq!(code("two.md"), "other_orchestrator");
    assert_eq!(code("cites.json"), "invalid_source_path");
    // The links were moved, not what they lead to.
    assert!(elsewhere.join("secret.md").exists());
    assert!(shared.join("plan.md").exists());
    assert_eq!(counts(&app).await.0, 1);
    let logged: Vec<String> = log_lines(&memory)
        .iter()
        .filter(|l| l["event"] == "ingest_rejected")
        .map(|l| l["reasons"][0]["code"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(logged.len(), 4, "{logged:?}");
    assert!(logged.contains(&"other_orchestrator".to_owned()));
}

#[tokio::test]
async fn a_dropped_file_is_found_by_the_watch_without_waiting_for_a_rescan() {
    let app = spawn_app_with("[memory.ingest]\nsettle_ms = 0\nrescan_secs = 3600\n").await;
    let memory = memory_dir(&app, "orch-one");
    // Let the scan at start pass, so that only the watch can find the file.
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop_file(&memory, "notes.md", NOTES);
    let manifest_path = memory.join("ingest/processed/notes.md.manifest.json");
    eventually(Duration::from_secs(30), || async {
        if manifest_path.exists() {
            Ok(())
        } else {
            Err("the watch did not see the file".to_owned())
        }
    })
    .await
    .unwrap();
    assert_eq!(
        manifest(&memory, "processed", "notes.md")["outcome"],
        "processed"
    );
}

#[tokio::test]
async fn with_ingestion_off_or_no_orchestrator_key_files_are_left_alone() {
    let app = spawn_app_with("[memory.ingest]\nenabled = false\n").await;
    let root = app.service.data_dir().join("orchestrators");
    let memory = root.join("orch-one/memory");
    std::fs::create_dir_all(memory.join("ingest")).unwrap();
    drop_file(&memory, "notes.md", NOTES);
    app.engine().flush_ingest().await.unwrap();
    assert_eq!(waiting(&memory), ["notes.md"]);

    let on = spawn_app_with(QUICK).await;
    let nobody = on
        .service
        .data_dir()
        .join("orchestrators/orch-nobody/memory");
    std::fs::create_dir_all(nobody.join("ingest")).unwrap();
    drop_file(&nobody, "notes.md", NOTES);
    assert_eq!(on.engine().flush_ingest().await.unwrap(), 0);
    assert_eq!(waiting(&nobody), ["notes.md"]);
}

#[tokio::test]
async fn the_llm_extractor_reads_text_files_falls_back_when_it_cannot_and_files_wait_while_it_is_down()
 {
    use crate::llm_server::{Script, llm_server};
    let server = llm_server(vec![
        Script::Memories,
        Script::Malformed,
        Script::RateLimited,
        Script::Memories,
    ])
    .await;
    let app = spawn_app_with(&format!(
        "[memory.ingest]\nsettle_ms = 60000\nextractor = \"llm\"\n\
         [consolidation.llm]\nbase_url = \"{}\"\nmodel = \"test-model\"\ntimeout_ms = 2000\n",
        server.base_url
    ))
    .await;
    let memory = memory_dir(&app, "orch-one");
    // Files settle for a minute: only this test's flushes read them, one model answer each.
    app.engine().flush_ingest().await.unwrap();

    // The model reads the file: its memories, typed and linked as it said.
    drop_file(
        &memory,
        "brief.txt",
        "Open the Lisbon office by June\nSign the Lisbon lease\n",
    );
    app.engine().flush_ingest().await.unwrap();
    let m = manifest(&memory, "processed", "brief.txt");
    assert_eq!(m["extractor"], "llm", "{m}");
    assert_eq!(types(&m), ["Goal", "Todo"]);
    assert_eq!(m["edges"][0]["edgeType"], "PartOf");
    assert!(m.get("warnings").is_none(), "{m}");
    let sent = server.requests.lock().unwrap()[0].clone();
    let user: Value =
        serde_json::from_str(sent["messages"][1]["content"].as_str().unwrap()).unwrap();
    assert!(user["document"].as_str().unwrap().contains("Lisbon lease"));
    assert_eq!(sent["response_format"]["json_schema"]["strict"], true);

    // An answer that is not valid: the deterministic extractor reads it, and says so.
    drop_file(&memory, "notes.md", NOTES);
    app.engine().flush_ingest().await.unwrap();
    let m = manifest(&memory, "processed", "notes.md");
    assert_eq!(m["extractor"], "deterministic", "{m}");
    assert!(
        m["warnings"][0].as_str().unwrap().contains("not JSON"),
        "{m}"
    );
    assert_eq!(types(&m).len(), 5);

    // The model does not answer now (429): the file waits, then goes through.
    drop_file(
        &memory,
        "later.md",
        "Hire two engineers\nPost the job ads\n",
    );
    app.engine().flush_ingest().await.unwrap();
    assert_eq!(waiting(&memory), ["later.md"]);
    let deferred = log_lines(&memory);
    assert!(
        deferred
            .iter()
            .any(|l| l["event"] == "ingest_deferred" && l["code"] == "extractor_unavailable"),
        "{deferred:?}"
    );
    app.engine().flush_ingest().await.unwrap();
    assert!(waiting(&memory).is_empty());
    let m = manifest(&memory, "processed", "later.md");
    assert_eq!(m["extractor"], "llm");
    assert_eq!(m["memories"][0]["summary"], "Hire two engineers");
}
