//! The orchestrator memory's graph (issue 23): typed nodes and edges persist with their
//! provenance, in one transaction with their events; writing the same again adds nothing;
//! contradictions are edges, supersession and retraction logged status changes; the
//! database refuses what the types refuse. (Who reaches a graph: `orchestrator_access.rs`.)

use serde_json::{Value, json};

use crate::helpers::*;

pub(crate) fn workflow_source() -> Value {
    json!({"sourceType": "workflow_output", "conversationId": "chan-7", "workflowRunId": "run-1",
           "stepId": "plan", "capturedBy": "extractor"})
}

pub(crate) fn plan() -> Value {
    json!({
        "source": workflow_source(),
        "memories": [
            {"ref": "goal", "type": "Goal", "content": "Ship the billing   export by Friday", "importance": 90},
            {"ref": "csv", "type": "Todo", "content": "Write the CSV writer"},
            {"ref": "docs", "type": "Todo", "content": "Document the export", "importance": 40},
            {"type": "Decision", "content": "Exports are CSV, not XLSX", "confidence": 0.9},
        ],
        "edges": [
            {"from": "csv", "to": "goal", "edgeType": "PartOf"},
            {"from": "docs", "to": "goal", "edgeType": "PartOf", "weight": 0.5},
        ],
    })
}

fn ids(answer: &Value, list: &str, field: &str) -> Vec<String> {
    answer[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m[field].as_str().unwrap().to_owned())
        .collect()
}

pub(crate) fn created(answer: &Value, list: &str) -> Vec<bool> {
    answer[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["created"].as_bool().unwrap())
        .collect()
}

async fn events(app: &TestApp, tenant: &str) -> Vec<(String, String, String)> {
    sqlx::query_as(
        "SELECT event_type, entity_type, actor FROM memory_events
         WHERE tenant_id = $1 ORDER BY id",
    )
    .bind(tenant)
    .fetch_all(&mut app.sql().await)
    .await
    .unwrap()
}

#[tokio::test]
async fn typed_nodes_and_edges_persist_with_their_provenance_and_events() {
    let app = spawn_app().await;
    let orchestrator = app.client(ORCHESTRATOR_ONE).await;
    let answer = orchestrator.ok("orchestrator_remember", plan()).await;
    assert_eq!(created(&answer, "memories"), [true; 4]);
    assert_eq!(created(&answer, "edges"), [true; 2]);
    let memories = &answer["memories"];
    assert_eq!(memories[0]["type"], "Goal");
    assert_eq!(memories[0]["orchestratorId"], "orch-one");
    // Normalised text; a summary derived from it; the defaults.
    assert_eq!(memories[0]["content"], "Ship the billing export by Friday");
    assert_eq!(memories[0]["summary"], "Ship the billing export by Friday");
    assert_eq!(memories[1]["importance"], 50);
    assert_eq!(memories[1]["confidence"], 0.8);
    assert_eq!(memories[3]["status"], "active");
    assert_eq!(memories[2]["source"], workflow_source());
    let [goal, csv, docs, _decision] =
        <[String; 4]>::try_from(ids(&answer, "memories", "memoryId")).unwrap();
    assert_eq!(answer["edges"][1]["fromMemoryId"], docs);
    assert_eq!(answer["edges"][1]["toMemoryId"], goal);
    assert_eq!(answer["edges"][1]["weight"], 0.5);

    // The goal, read back with both edges into it and its provenance.
    let got = orchestrator
        .ok("orchestrator_get", json!({"memoryId": goal}))
        .await;
    assert_eq!(got["node"]["content"], "Ship the billing export by Friday");
    assert_eq!(got["node"]["source"]["workflowRunId"], "run-1");
    let from: Vec<&str> = got["edges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["fromMemoryId"].as_str().unwrap())
        .collect();
    assert_eq!(from, [csv.as_str(), docs.as_str()]);

    // One source row for the four; one event per node and edge, by the orchestrator's key.
    let sources: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM orchestrator_sources WHERE tenant_id = 'orch-one'",
    )
    .fetch_one(&mut app.sql().await)
    .await
    .unwrap();
    assert_eq!(sources, 1);
    let logged = events(&app, "orch-one").await;
    let kinds: Vec<&str> = logged.iter().map(|(t, _, _)| t.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "orchestrator_memory_created",
            "orchestrator_memory_created",
            "orchestrator_memory_created",
            "orchestrator_memory_created",
            "orchestrator_edge_created",
            "orchestrator_edge_created",
        ]
    );
    assert!(
        logged
            .iter()
            .all(|(_, _, actor)| actor == "orchestrator:orch-one")
    );
    app.stop().await;
}

#[tokio::test]
async fn writing_the_same_again_adds_nothing() {
    let app = spawn_app().await;
    let orchestrator = app.client(ORCHESTRATOR_ONE).await;
    let first = orchestrator.ok("orchestrator_remember", plan()).await;
    let before = events(&app, "orch-one").await.len();
    // The same call again (a retry), and the same memories laid out differently.
    let again = orchestrator.ok("orchestrator_remember", plan()).await;
    assert_eq!(created(&again, "memories"), [false; 4]);
    assert_eq!(created(&again, "edges"), [false; 2]);
    assert_eq!(
        ids(&again, "memories", "memoryId"),
        ids(&first, "memories", "memoryId")
    );
    assert_eq!(
        ids(&again, "edges", "edgeId"),
        ids(&first, "edges", "edgeId")
    );
    let relaid = orchestrator
        .ok(
            "orchestrator_remember",
            json!({"source": workflow_source(),
                   "memories": [{"type": "Goal", "content": "  Ship the billing\texport by Friday\n"}]}),
        )
        .await;
    assert_eq!(
        relaid["memories"][0]["memoryId"],
        first["memories"][0]["memoryId"]
    );
    assert_eq!(events(&app, "orch-one").await.len(), before);
    // The same words as another type are another memory.
    let todo = orchestrator
        .ok(
            "orchestrator_remember",
            json!({"source": workflow_source(),
                   "memories": [{"type": "Todo", "content": "Ship the billing export by Friday"}]}),
        )
        .await;
    assert_eq!(created(&todo, "memories"), [true]);
    app.stop().await;
}

#[tokio::test]
async fn contradictions_are_edges_and_status_changes_are_explicit_and_logged() {
    let app = spawn_app().await;
    let orchestrator = app.client(ORCHESTRATOR_ONE).await;
    let manual = json!({"sourceType": "channel_transcript", "conversationId": "chan-1", "capturedBy": "user"});
    let first = orchestrator
        .ok(
            "orchestrator_remember",
            json!({"source": manual, "memories": [{"type": "Preference", "content": "Reports as PDF"}]}),
        )
        .await;
    let pdf = first["memories"][0]["memoryId"]
        .as_str()
        .unwrap()
        .to_owned();
    // A contradiction: both stay active, joined by an edge with its reason.
    let second = orchestrator
        .ok(
            "orchestrator_remember",
            json!({"source": manual,
                   "memories": [{"ref": "html", "type": "Preference", "content": "Reports as HTML"}],
                   "edges": [{"from": "html", "to": pdf, "edgeType": "Contradicts",
                              "reason": "said in another channel"}]}),
        )
        .await;
    let html = second["memories"][0]["memoryId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(second["edges"][0]["edgeType"], "Contradicts");
    assert_eq!(second["edges"][0]["reason"], "said in another channel");
    for id in [&pdf, &html] {
        let got = orchestrator
            .ok("orchestrator_get", json!({"memoryId": id}))
            .await;
        assert_eq!(got["node"]["status"], "active", "{got}");
    }

    // A newer preference supersedes the PDF one: explicit, with an `Updates` edge.
    let third = orchestrator
        .ok(
            "orchestrator_remember",
            json!({"source": manual,
                   "memories": [{"type": "Preference", "content": "Reports as HTML, always",
                                 "supersedes": [pdf]}]}),
        )
        .await;
    let newest = third["memories"][0]["memoryId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(third["superseded"], json!([pdf]));
    assert_eq!(third["edges"][0]["edgeType"], "Updates");
    assert_eq!(third["edges"][0]["fromMemoryId"], newest);
    assert_eq!(third["edges"][0]["toMemoryId"], pdf);
    let old = orchestrator
        .ok("orchestrator_get", json!({"memoryId": pdf}))
        .await;
    assert_eq!(old["node"]["status"], "superseded");

    // Retraction, with a reason; final.
    let retracted = orchestrator
        .ok(
            "orchestrator_set_status",
            json!({"memoryId": html, "status": "retracted", "reason": "misheard"}),
        )
        .await;
    assert_eq!(retracted["status"], "retracted");
    let again = orchestrator
        .ok(
            "orchestrator_set_status",
            json!({"memoryId": html, "status": "retracted", "reason": "misheard"}),
        )
        .await;
    assert_eq!(again["status"], "retracted");
    for (id, status) in [(&html, "superseded"), (&newest, "active")] {
        let refused = orchestrator
            .err(
                "orchestrator_set_status",
                json!({"memoryId": id, "status": status, "reason": "undo"}),
            )
            .await;
        assert_eq!(refused["code"], "invalid_transition", "{refused}");
    }
    let missing = orchestrator
        .err(
            "orchestrator_set_status",
            json!({"memoryId": uuid::Uuid::now_v7(), "status": "retracted", "reason": "x"}),
        )
        .await;
    assert_eq!(missing["class"], "not_found");

    // Every change in the audit stream, the retraction once, with its reason.
    let mut sql = app.sql().await;
    let changes: Vec<(String, Value)> = sqlx::query_as(
        "SELECT event_type, payload FROM memory_events
         WHERE tenant_id = 'orch-one' AND event_type IN
               ('orchestrator_memory_superseded', 'orchestrator_memory_retracted')
         ORDER BY id",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert_eq!(changes[0].1["superseded_by"], newest);
    assert_eq!(changes[1].1["reason"], "misheard");
    assert_eq!(changes[1].1["before"]["status"], "active");
    app.stop().await;
}

#[tokio::test]
async fn bad_input_is_refused_with_its_class_and_nothing_is_written() {
    let app = spawn_app().await;
    let orchestrator = app.client(ORCHESTRATOR_ONE).await;
    let source = workflow_source();
    let memory = |m: Value| json!({"source": source, "memories": [m]});
    for (args, code) in [
        (
            memory(json!({"type": "Task", "content": "x"})),
            "invalid_arguments",
        ),
        (
            memory(json!({"type": "Todo", "content": "x", "importance": 101})),
            "invalid_importance",
        ),
        (
            memory(json!({"type": "Todo", "content": "x", "confidence": 1.5})),
            "invalid_confidence",
        ),
        (
            memory(json!({"type": "Todo", "content": "  "})),
            "empty_content",
        ),
        (
            json!({"source": {"sourceType": "ingest_file", "capturedBy": "system"},
                   "memories": [{"type": "Todo", "content": "x"}]}),
            "invalid_source_path",
        ),
        (
            json!({"source": {"sourceType": "ingest_file", "sourcePath": "/srv/o/../p/a.md",
                              "capturedBy": "system"},
                   "memories": [{"type": "Todo", "content": "x"}]}),
            "invalid_source_path",
        ),
        (
            json!({"source": source, "memories": [{"ref": "a", "type": "Todo", "content": "x"}],
                   "edges": [{"from": "a", "to": "b", "edgeType": "PartOf"}]}),
            "unknown_reference",
        ),
        (
            json!({"source": source, "memories": [{"ref": "a", "type": "Todo", "content": "x"}],
                   "edges": [{"from": "a", "to": "a", "edgeType": "PartOf"}]}),
            "self_link",
        ),
        (
            json!({"source": source, "memories": [{"ref": "a", "type": "Todo", "content": "x"}],
                   "edges": [{"from": "a", "to": uuid::Uuid::now_v7().to_string(),
                              "edgeType": "PartOf"}]}),
            "not_found",
        ),
        (
            json!({"source": source, "memories": [{"ref": "a", "type": "Todo", "content": "x"}],
                   "edges": [{"from": "a", "to": "a", "edgeType": "Supports"}]}),
            "invalid_arguments",
        ),
        (json!({"source": source}), "invalid_batch"),
    ] {
        let refused = orchestrator
            .err("orchestrator_remember", args.clone())
            .await;
        assert_eq!(refused["code"], code, "{args}: {refused}");
    }
    // The edge to an unknown node came after its memory was written, in the same
    // transaction: rolled back with it.
    let mut sql = app.sql().await;
    let nodes: i64 = sqlx::query_scalar("SELECT count(*) FROM orchestrator_memories")
        .fetch_one(&mut sql)
        .await
        .unwrap();
    assert_eq!(nodes, 0);
    app.stop().await;
}

#[tokio::test]
async fn the_database_refuses_what_the_types_refuse() {
    let app = spawn_app().await;
    let orchestrator = app.client(ORCHESTRATOR_ONE).await;
    let answer = orchestrator.ok("orchestrator_remember", plan()).await;
    let [goal, csv, ..] = <[String; 4]>::try_from(ids(&answer, "memories", "memoryId")).unwrap();
    let mut sql = app.sql().await;
    let source: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM orchestrator_sources WHERE tenant_id = 'orch-one'")
            .fetch_one(&mut sql)
            .await
            .unwrap();
    let node = |column: &str, value: &str| {
        let mut row = vec![
            ("node_type", "'Goal'".to_owned()),
            ("importance", "10".to_owned()),
            ("content", "'c'".to_owned()),
            ("summary", "'s'".to_owned()),
            ("confidence", "0.5".to_owned()),
            ("status", "'active'".to_owned()),
        ];
        for (c, v) in &mut row {
            if *c == column {
                *v = value.to_owned();
            }
        }
        let (columns, values): (Vec<_>, Vec<_>) = row.into_iter().unzip();
        format!(
            "INSERT INTO orchestrator_memories (tenant_id, id, source_id, fingerprint, created_at,
                                                updated_at, {})
             VALUES ('orch-one', gen_random_uuid(), '{source}', sha256(random()::text::bytea),
                     now(), now(), {})",
            columns.join(", "),
            values.join(", ")
        )
    };
    let edge = |from: &str, to: &str, edge_type: &str, weight: &str| {
        format!(
            "INSERT INTO orchestrator_edges (tenant_id, id, from_id, to_id, edge_type, weight, created_at)
             VALUES ('orch-one', gen_random_uuid(), '{from}', '{to}', '{edge_type}', {weight}, now())"
        )
    };
    let path = |p: &str| {
        format!(
            "INSERT INTO orchestrator_sources (tenant_id, id, source_type, source_path, captured_by,
                                               fingerprint, created_at)
             VALUES ('orch-one', gen_random_uuid(), 'ingest_file', {p}, 'system',
                     sha256(random()::text::bytea), now())"
        )
    };
    // What a valid row looks like passes, so each refusal below is the one bad value.
    for ok in [node("", ""), path("'/srv/o/memory/ingest/a.md'")] {
        sqlx::query(sqlx::AssertSqlSafe(ok.clone()))
            .execute(&mut sql)
            .await
            .unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
    for bad in [
        node("node_type", "'Task'"),
        node("importance", "101"),
        node("importance", "-1"),
        node("confidence", "1.01"),
        node("status", "'deleted'"),
        node("content", "''"),
        edge(&csv, &goal, "Supports", "1"),
        edge(&csv, &goal, "PartOf", "1.5"),
        edge(&csv, &csv, "RelatedTo", "1"),
        edge(&csv, &uuid::Uuid::now_v7().to_string(), "RelatedTo", "1"),
        path("NULL"),
        path("'relative/a.md'"),
        path("'/srv/o/../p/a.md'"),
        path("'/srv//a.md'"),
        path("'/srv/a.md/'"),
    ] {
        let refused = sqlx::query(sqlx::AssertSqlSafe(bad.clone()))
            .execute(&mut sql)
            .await;
        assert!(refused.is_err(), "the database took {bad}");
    }
    app.stop().await;
}

#[tokio::test]
async fn a_captured_text_gives_typed_memories_with_its_source() {
    let app = spawn_app().await;
    let orchestrator = app.client(ORCHESTRATOR_ONE).await;
    let text = "Goal: Close the quarter\n- [ ] Reconcile the ledgers\n- [x] Export the invoices\n\nThe auditors arrive on Monday.";
    let source = json!({"sourceType": "workflow_output", "workflowRunId": "run-3", "stepId": "close",
                        "capturedBy": "extractor"});
    let answer = orchestrator
        .ok(
            "orchestrator_capture",
            json!({"source": source, "text": text}),
        )
        .await;
    let types: Vec<&str> = answer["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Goal", "Todo", "Observation"], "{answer}");
    assert_eq!(answer["memories"][1]["source"]["workflowRunId"], "run-3");
    assert_eq!(answer["edges"][0]["edgeType"], "PartOf");
    // The same text again finds what it stored.
    let again = orchestrator
        .ok(
            "orchestrator_capture",
            json!({"source": source, "text": text}),
        )
        .await;
    assert_eq!(created(&again, "memories"), [false, false, false]);
    // Only done items: nothing to write, nothing written.
    let nothing = orchestrator
        .ok(
            "orchestrator_capture",
            json!({"source": source, "text": "- [x] all done"}),
        )
        .await;
    assert_eq!(nothing["memories"], json!([]));
    // Files go through the drop-zone; an empty or oversized text is refused.
    let file =
        json!({"sourceType": "ingest_file", "sourcePath": "/srv/a.md", "capturedBy": "system"});
    for (source, text, code) in [
        (file, "TODO: x".to_owned(), "invalid_source_path"),
        (source.clone(), "  ".to_owned(), "empty_content"),
        (source.clone(), "x".repeat(300 * 1024), "content_too_large"),
    ] {
        let refused = orchestrator
            .err(
                "orchestrator_capture",
                json!({"source": source, "text": text}),
            )
            .await;
        assert_eq!(refused["code"], code, "{refused}");
    }
}
