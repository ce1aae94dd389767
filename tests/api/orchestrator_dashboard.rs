//! The orchestrator's memory graph in the dashboard (issue 23): an orchestrator key (or its
//! tenant's admin) signs in to its graph, grouped by type, filtered by type, status and words;
//! a node opens with its provenance and edges both ways; a retraction is an audited status
//! change behind the session's CSRF token. Another orchestrator's nodes are not there; a
//! butler key has no graph.

use serde_json::json;

use crate::dashboard::{csrf, page, post, sign_in};
use crate::helpers::*;
use crate::orchestrator_graph::plan;

#[tokio::test]
async fn an_orchestrator_sees_its_graph_opens_a_node_with_its_edges_and_retracts_one() {
    let app = spawn_app().await;
    let one = app.client(ORCHESTRATOR_ONE).await;
    let written = one.ok("orchestrator_remember", plan()).await;
    let id = |i: usize| {
        written["memories"][i]["memoryId"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (goal, csv) = (id(0), id(1));
    let two = app.client(ORCHESTRATOR_TWO).await;
    let theirs = two
        .ok(
            "orchestrator_remember",
            json!({"source": {"sourceType": "manual", "capturedBy": "user"},
                   "memories": [{"type": "Goal", "content": "The other orchestrator's secret plan"}]}),
        )
        .await;
    let theirs = theirs["memories"][0]["memoryId"]
        .as_str()
        .unwrap()
        .to_owned();

    let cookie = sign_in(&app, ORCHESTRATOR_ONE).await;
    let root = page(&app, Some(&cookie), "/").await;
    assert_eq!(root.location.as_deref(), Some("/memory/graph"));
    let graph = page(&app, Some(&cookie), "/memory/graph").await;
    assert_eq!(graph.status, 200, "{}", graph.body);
    assert_eq!(graph.cache_control.as_deref(), Some("no-store"));
    let body = &graph.body;
    assert!(body.contains("Ship the billing export by Friday"), "{body}");
    assert!(body.contains("Exports are CSV, not XLSX"));
    assert!(!body.contains("secret plan"));
    assert!(body.contains("4 active"), "{body}");
    // Goals, then todos, then decisions, as bulletins keep them.
    let at = |t: &str| body.find(&format!("data-type=\"{t}\"")).unwrap();
    assert!(at("Goal") < at("Todo") && at("Todo") < at("Decision"));
    // Its navigation is its graph, not the butlers' memory.
    assert!(!body.contains("href=\"/memory/facts\""), "{body}");

    let todos = page(&app, Some(&cookie), "/memory/graph?type=Todo")
        .await
        .body;
    assert!(todos.contains("Write the CSV writer") && !todos.contains("Ship the billing"));
    let words = page(&app, Some(&cookie), "/memory/graph?q=XLSX").await.body;
    assert!(words.contains("Exports are CSV") && !words.contains("Write the CSV writer"));
    let bad = page(&app, Some(&cookie), "/memory/graph?type=Wish").await;
    assert_eq!(bad.status, 400, "{}", bad.body);

    // The goal opens with its provenance and both todos pointing at it.
    let drawer = page(&app, Some(&cookie), &format!("/memory/graph/{goal}")).await;
    assert_eq!(drawer.status, 200);
    let d = &drawer.body;
    assert!(d.contains("← PartOf"), "{d}");
    assert!(d.contains("Write the CSV writer") && d.contains("Document the export"));
    assert!(d.contains("run-1") && d.contains("chan-7"), "{d}");
    assert!(d.contains("weight 0.50"), "{d}");
    let hidden = page(&app, Some(&cookie), &format!("/memory/graph/{theirs}")).await;
    assert_eq!(hidden.status, 404);

    // Retracting a todo: behind the CSRF token, recorded, and shown.
    let todo_page = page(&app, Some(&cookie), &format!("/memory/graph/{csv}")).await;
    let token = csrf(&todo_page.body);
    let path = format!("/memory/graph/{csv}/status");
    let forged = post(
        &app,
        &cookie,
        &path,
        &[
            ("csrf", "forged"),
            ("status", "retracted"),
            ("reason", "done elsewhere"),
        ],
        None,
    )
    .await;
    assert_eq!(forged.status, 403);
    let changed = post(
        &app,
        &cookie,
        &path,
        &[
            ("csrf", &token),
            ("status", "retracted"),
            ("reason", "done elsewhere"),
        ],
        None,
    )
    .await;
    assert_eq!(changed.status, 303, "{}", changed.body);
    assert_eq!(
        changed.location.as_deref(),
        Some(format!("/memory/graph/{csv}?done=status").as_str())
    );
    let node = one.ok("orchestrator_get", json!({"memoryId": csv})).await;
    assert_eq!(node["node"]["status"], "retracted");
    let retracted = page(&app, Some(&cookie), "/memory/graph?status=retracted")
        .await
        .body;
    assert!(
        retracted.contains("Write the CSV writer") && !retracted.contains("Document the export")
    );
    let mut sql = app.sql().await;
    let (actor,): (String,) = sqlx::query_as(
        "SELECT actor FROM memory_events
         WHERE tenant_id = 'orch-one' AND event_type = 'orchestrator_memory_retracted'",
    )
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert!(actor.contains("orch-one"), "{actor}");

    // The tenant's admin sees the graph too; a butler key has none.
    let admin = sign_in(&app, ORCHESTRATOR_ONE_ADMIN).await;
    let seen = page(&app, Some(&admin), "/memory/graph").await;
    assert!(
        seen.body.contains("Ship the billing export"),
        "{}",
        seen.body
    );
    let butler = sign_in(&app, TENANT_A_HEALTH).await;
    let refused = page(&app, Some(&butler), "/memory/graph").await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(
        !page(&app, Some(&butler), "/memory")
            .await
            .body
            .contains("/memory/graph")
    );
}
