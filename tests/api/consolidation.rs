//! Consolidation through MCP with the heuristic extractor: episodes become facts and rules
//! with provenance and events, every episode ends consolidated, and a second run creates
//! nothing twice.

use serde_json::{Value, json};

use crate::helpers::*;

async fn consolidate(admin: &Mcp) -> Value {
    admin
        .ok("memory_run_sweep", json!({"kinds": ["consolidation"]}))
        .await
}

#[tokio::test]
async fn episodes_become_facts_and_rules_once() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let first = mcp
        .ok(
            "memory_store_episode",
            json!({"content": "Hi, my name is Ada. I'm allergic to peanuts. Always check labels before suggesting snacks.", "butler": "health"}),
        )
        .await;
    mcp.ok(
        "memory_store_episode",
        json!({"content": "We chatted about the weather.", "butler": "health"}),
    )
    .await;
    let report = consolidate(&admin).await;
    let changes = &report["reports"][0]["changes"];
    assert_eq!(changes["episodes_consolidated"], 2, "{report}");
    assert_eq!(changes["facts_created"], 2, "{report}");
    assert_eq!(changes["rules_created"], 1, "{report}");

    // The fact is retrievable, tied to its episode by id and by a derived_from link.
    app.engine().flush().await.unwrap();
    let recalled = mcp
        .ok("memory_recall", json!({"topic": "peanut allergy"}))
        .await;
    let fact = recalled["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["type"] == "fact")
        .cloned()
        .expect("the allergy fact is recalled");
    assert_eq!(fact["content"], "Allergic to peanuts", "{recalled}");
    let got = mcp
        .ok("memory_get", json!({"type": "fact", "id": fact["id"]}))
        .await;
    assert_eq!(got["source_episode_id"], first["id"]);
    assert_eq!(got["permanence"], "permanent");
    assert_eq!(
        got["links"]["outbound"][0]["relation"], "derived_from",
        "{got}"
    );
    // Every episode ends in exactly one terminal state, and every change is audited with
    // actor `consolidation`.
    let mut db = app.sql().await;
    let statuses: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT consolidation_status FROM episodes")
            .fetch_all(&mut db)
            .await
            .unwrap();
    assert_eq!(statuses, vec!["consolidated".to_owned()]);
    let events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM memory_events WHERE actor = 'consolidation'")
            .fetch_one(&mut db)
            .await
            .unwrap();
    assert_eq!(events, 3, "two facts and a rule");

    // Nothing is pending: a second run creates nothing.
    let again = consolidate(&admin).await;
    assert!(
        again["reports"][0]["changes"]
            .as_object()
            .unwrap()
            .is_empty(),
        "{again}"
    );
    // The same facts said again confirm instead of duplicating.
    mcp.ok(
        "memory_store_episode",
        json!({"content": "I'm allergic to peanuts, as you know.", "butler": "health"}),
    )
    .await;
    let restated = consolidate(&admin).await;
    assert_eq!(
        restated["reports"][0]["changes"]["facts_confirmed"], 1,
        "{restated}"
    );
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM facts WHERE predicate = 'allergic_to_peanuts' AND validity = 'active'",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(live, 1);
    let jobs: Vec<String> = sqlx::query_scalar("SELECT status FROM consolidation_jobs")
        .fetch_all(&mut db)
        .await
        .unwrap();
    assert_eq!(jobs, vec!["succeeded".to_owned(), "succeeded".to_owned()]);
    app.stop().await;
}
