//! Each row is embedded by one instance: two indexers draining one backlog at once claim
//! the rows they embed, and between them embed every row exactly once.

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::Utc;
use serde_json::json;

use super::count;
use crate::helpers::*;

/// Rows this instance's indexer embedded since start (`/actors`).
async fn rows_embedded(app: &TestApp) -> u64 {
    let (status, body) = crate::rest::get(app, Some(OPERATOR), "/actors").await;
    assert_eq!(status, 200);
    let indexer = body["actors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == "indexer")
        .unwrap_or_else(|| panic!("no indexer in {body}"));
    indexer["rows_embedded"].as_u64().unwrap()
}

#[tokio::test]
async fn two_instances_embed_each_row_of_one_backlog_once() {
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let a = spawn_app_at("", clock.clone()).await;
    let b = spawn_beside(&a, "", clock).await;
    let mcp = a.client(TENANT_A_HEALTH).await;
    // A backlog written in a few batches; both indexers drain it at once.
    for batch in 0..6 {
        let episodes: Vec<_> = (0..50)
            .map(|i| json!({"content": format!("Note {i} of batch {batch} about the garden"), "butler": "health"}))
            .collect();
        mcp.ok("memory_ingest_batch", json!({"episodes": episodes}))
            .await;
    }
    let (drained_a, drained_b) = tokio::join!(a.engine().flush(), b.engine().flush());
    drained_a.unwrap();
    drained_b.unwrap();

    assert_eq!(
        count(&a, "SELECT count(*) FROM episodes WHERE embedding IS NULL").await,
        0
    );
    let (on_a, on_b) = (rows_embedded(&a).await, rows_embedded(&b).await);
    assert_eq!(on_a + on_b, 300, "a embedded {on_a}, b {on_b}");
    b.stop().await;
    a.stop().await;
}
