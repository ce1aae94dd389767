//! Supersession: one live fact per (tenant, scope, subject, predicate), also under
//! concurrent writers from different shards.

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn a_new_fact_supersedes_and_a_restated_one_confirms() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let first = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "User", "predicate": "Favourite  colour", "content": "Blue"}),
        )
        .await;
    assert_eq!(first["subject"], "user", "keys are normalised");
    assert_eq!(first["predicate"], "favourite colour");
    let second = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "favourite colour", "content": "Green",
                   "request_context": {"request_id": "req-supersede"}}),
        )
        .await;
    assert_eq!(second["outcome"], "superseded");
    assert_eq!(second["supersedes_id"], first["id"]);
    assert_eq!(second["superseded"]["id"], first["id"]);
    assert_eq!(second["superseded"]["validity"], "superseded");

    let old = mcp
        .ok("memory_get", json!({"type": "fact", "id": first["id"]}))
        .await;
    assert_eq!(old["validity"], "superseded");
    assert_eq!(old["links"]["inbound"][0]["relation"], "supersedes");
    assert_eq!(old["links"]["inbound"][0]["source_id"], second["id"]);

    let again = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "favourite colour", "content": "Green"}),
        )
        .await;
    assert_eq!(again["outcome"], "confirmed");
    assert_eq!(again["id"], second["id"]);

    // Both transitions are in the audit stream, with the request id that caused them.
    let mut sql = app.sql().await;
    let events: Vec<(String, String)> = sqlx::query_as(
        "SELECT event_type, entity_id::text FROM memory_events WHERE request_id = 'req-supersede' ORDER BY id",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    assert_eq!(
        events,
        vec![
            (
                "fact_superseded".to_owned(),
                first["id"].as_str().unwrap().to_owned()
            ),
            (
                "fact_created".to_owned(),
                second["id"].as_str().unwrap().to_owned()
            ),
        ]
    );
    app.stop().await;
}

#[tokio::test]
async fn scopes_do_not_supersede_each_other() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let global = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "mood", "content": "calm"}),
        )
        .await;
    let scoped = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "mood", "content": "tired", "scope": "health"}),
        )
        .await;
    assert_eq!(scoped["outcome"], "created");
    let still = mcp
        .ok("memory_get", json!({"type": "fact", "id": global["id"]}))
        .await;
    assert_eq!(still["validity"], "active");
    app.stop().await;
}

#[tokio::test]
async fn concurrent_writers_leave_exactly_one_live_fact() {
    let app = spawn_app().await;
    // Two butlers: two shards, so only the database can order them.
    let health = std::sync::Arc::new(app.client(TENANT_A_HEALTH).await);
    let general = std::sync::Arc::new(app.client(TENANT_A_GENERAL).await);
    let rounds = 15;
    let write = |mcp: std::sync::Arc<crate::helpers::McpClient>, who: &'static str| async move {
        let mut ids = Vec::new();
        for i in 0..rounds {
            let fact = mcp
                .ok(
                    "memory_store_fact",
                    json!({"subject": "user", "predicate": "current_city", "content": format!("{who} city {i}")}),
                )
                .await;
            ids.push(fact["id"].as_str().unwrap().to_owned());
        }
        ids
    };
    let (a, b) = tokio::join!(write(health, "health"), write(general, "general"));
    assert_eq!(a.len() + b.len(), 2 * rounds);

    let mut sql = app.sql().await;
    let live: Vec<String> = sqlx::query_scalar(
        "SELECT id::text FROM facts WHERE tenant_id = 'tenant-a' AND subject = 'user'
         AND predicate = 'current_city' AND validity IN ('active', 'fading')",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    assert_eq!(live.len(), 1, "exactly one live fact");
    let total: i64 =
        sqlx::query_scalar("SELECT count(*) FROM facts WHERE predicate = 'current_city'")
            .fetch_one(&mut sql)
            .await
            .unwrap();
    assert_eq!(total, 2 * rounds as i64, "no write was lost");
    // The supersession chain is a single line: every fact but the first is superseding
    // exactly one other, and no fact is superseded twice.
    let (chained, distinct): (i64, i64) = sqlx::query_as(
        "SELECT count(supersedes_id), count(DISTINCT supersedes_id) FROM facts WHERE predicate = 'current_city'",
    )
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(chained, 2 * rounds as i64 - 1);
    assert_eq!(distinct, chained);
    app.stop().await;
}
