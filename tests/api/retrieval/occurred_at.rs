//! Episodes stored with the time they happened (`occurred_at`), as a butler importing last
//! year's conversation stores them, with a pinned clock: they are found by that time (a
//! window, a time the query states, `as_of`), carry it in records and hits, date their lines
//! in a context block, date the facts consolidation draws from them; and a time after now is
//! refused.

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::contents;
use super::stated_time::weighed;
use crate::helpers::*;

fn at(time: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(time)
        .unwrap()
        .with_timezone(&Utc)
}

const LAYOUT: &str = "Talked with the landscaper about the garden layout";
const BUDGET: &str = "Talked with the landscaper about the garden budget";

/// Today, 6 May 2026: three unrelated episodes, the garden budget talked about now, and the
/// garden layout imported as having happened on 10 March 2025.
async fn one_imported_talk() -> (TestApp, String) {
    let clock = Arc::new(ManualClock::new(at("2026-05-06T09:00:00Z")));
    let app = spawn_app_at("", clock).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    for other in [
        "Booked a dentist appointment for the kids",
        "The car needs new winter tyres",
        "Read a chapter of the novel before bed",
        BUDGET,
    ] {
        mcp.ok(
            "memory_store_episode",
            json!({"butler": "health", "content": other}),
        )
        .await;
    }
    let imported = mcp
        .ok(
            "memory_store_episode",
            json!({"butler": "health", "content": LAYOUT, "occurred_at": "2025-03-10T14:00:00Z"}),
        )
        .await;
    embedded(&app, "tenant-a").await;
    (app, imported["id"].as_str().unwrap().to_owned())
}

async fn garden(mcp: &McpClient, query: &str, window: Value) -> Value {
    let mut args = json!({"query": query, "types": ["episode"]});
    args.as_object_mut()
        .unwrap()
        .extend(window.as_object().unwrap().clone());
    mcp.ok("memory_search", args).await
}

fn garden_talks(result: &Value) -> Vec<String> {
    contents(result)
        .into_iter()
        .filter(|c| c.contains("garden"))
        .collect()
}

#[tokio::test]
async fn an_imported_episode_is_found_by_when_it_happened() {
    let (app, imported) = one_imported_talk().await;
    let mcp = app.client(TENANT_A_HEALTH).await;

    // The record says both times: stored now, happened last March; so does its event.
    let record = mcp
        .ok("memory_get", json!({"type": "episode", "id": imported}))
        .await;
    assert_eq!(record["occurred_at"], "2025-03-10T14:00:00Z", "{record}");
    assert_eq!(record["created_at"], "2026-05-06T09:00:00Z", "{record}");
    let events: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT payload->'after'->>'content', payload->'after'->>'occurred_at'
         FROM memory_events WHERE event_type = 'episode_stored'",
    )
    .fetch_all(&mut app.sql().await)
    .await
    .unwrap();
    assert_eq!(events.len(), 5);
    for (content, occurred_at) in &events {
        let expected = (content == LAYOUT).then_some("2025-03-10T14:00:00Z");
        assert_eq!(occurred_at.as_deref(), expected, "{events:?}");
    }

    // A window selects it by when it happened, not by when it was stored.
    let march = garden(
        &mcp,
        "the garden",
        json!({"since": "2025-03-01", "until": "2025-03-31"}),
    )
    .await;
    assert_eq!(garden_talks(&march), vec![LAYOUT], "{march}");
    assert_eq!(
        march["results"][0]["occurred_at"], "2025-03-10T14:00:00Z",
        "{march}"
    );
    let today = garden(&mcp, "the garden", json!({"since": "2026-05-06"})).await;
    assert_eq!(garden_talks(&today), vec![BUDGET], "{today}");
    // An episode that happened as it was stored says nothing more.
    let live = today["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["content"] == BUDGET)
        .unwrap();
    assert!(live.get("occurred_at").is_none(), "{live}");
    // As things stood at the end of 2025, it had happened; today's talk had not.
    let end_of_2025 = garden(&mcp, "the garden", json!({"as_of": "2025-12-31"})).await;
    assert_eq!(garden_talks(&end_of_2025), vec![LAYOUT], "{end_of_2025}");

    // A query that names its time ranks it first; today's keeps a share.
    let stated = garden(
        &mcp,
        "what did we say about the garden in March 2025",
        json!({}),
    )
    .await;
    assert_eq!(stated["stated_time"]["phrase"], "in March 2025", "{stated}");
    assert_eq!(
        weighed(&stated),
        vec![(LAYOUT.to_owned(), 1.0), (BUDGET.to_owned(), 0.5)],
        "{stated}"
    );

    // In a context block its line is dated by when it happened (421 days and 19 hours before now).
    let block = mcp
        .ok(
            "memory_context",
            json!({"trigger_prompt": "the garden", "butler": "health"}),
        )
        .await;
    let text = block["text"].as_str().unwrap();
    assert!(text.contains(&format!("[421d ago] {LAYOUT}")), "{text}");
    assert!(text.contains(&format!("[0m ago] {BUDGET}")), "{text}");
    app.stop().await;
}

#[tokio::test]
async fn a_fact_drawn_from_an_imported_episode_became_true_when_it_happened() {
    let clock = Arc::new(ManualClock::new(at("2026-05-06T09:00:00Z")));
    let app = spawn_app_at("", clock).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    // The heuristic extractor reads the name; the episode happened in 2024.
    mcp.ok(
        "memory_store_episode",
        json!({"butler": "health", "content": "Hi, my name is Ada.",
               "metadata": {"occurred_at": "2024-07-01", "source": "import"}}),
    )
    .await;
    let report = admin
        .ok("memory_run_sweep", json!({"kinds": ["consolidation"]}))
        .await;
    assert_eq!(
        report["reports"][0]["changes"]["facts_created"], 1,
        "{report}"
    );
    let valid_from: DateTime<Utc> =
        sqlx::query_scalar("SELECT valid_from FROM facts WHERE tenant_id = 'tenant-a'")
            .fetch_one(&mut app.sql().await)
            .await
            .unwrap();
    assert_eq!(valid_from, at("2024-07-01T00:00:00Z"));
    app.stop().await;
}

#[tokio::test]
async fn a_time_after_now_or_no_time_at_all_is_refused() {
    let clock = Arc::new(ManualClock::new(at("2026-05-06T09:00:00Z")));
    let app = spawn_app_at("", clock).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let store = |occurred_at: Value, metadata: Value| {
        json!({"butler": "health", "content": "Watered the tomatoes",
               "occurred_at": occurred_at, "metadata": metadata})
    };
    for (args, why) in [
        (store(json!("2026-05-07"), json!({})), "after now"),
        (store(json!("tomorrow"), json!({})), "RFC 3339"),
        (
            store(Value::Null, json!({"occurred_at": "last spring"})),
            "RFC 3339",
        ),
    ] {
        let refused = mcp.err("memory_store_episode", args).await;
        assert_eq!(refused["code"], "invalid_time", "{refused}");
        assert!(
            refused["message"].as_str().unwrap().contains(why),
            "{refused}"
        );
    }
    // A batch refuses the same way, and stores nothing of it.
    let refused = mcp
        .err(
            "memory_ingest_batch",
            json!({"episodes": [
                {"butler": "health", "content": "Watered the tomatoes", "occurred_at": "2026-04-01"},
                {"butler": "health", "content": "Picked the beans", "occurred_at": "2027-01-01"},
            ]}),
        )
        .await;
    assert_eq!(refused["code"], "invalid_time", "{refused}");
    // A clock a minute fast is read as now; a batch stores each episode's own time.
    let stored = mcp
        .ok(
            "memory_ingest_batch",
            json!({"episodes": [
                {"butler": "health", "content": "Watered the tomatoes", "occurred_at": "2026-05-06T09:01:00Z"},
                {"butler": "health", "content": "Picked the beans", "occurred_at": "2026-04-01"},
            ]}),
        )
        .await;
    let times: Vec<(String, DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(
        "SELECT content, COALESCE(occurred_at, created_at), created_at FROM episodes
         ORDER BY content",
    )
    .fetch_all(&mut app.sql().await)
    .await
    .unwrap();
    let now = at("2026-05-06T09:00:00Z");
    assert_eq!(
        times,
        vec![
            (
                "Picked the beans".to_owned(),
                at("2026-04-01T00:00:00Z"),
                now
            ),
            ("Watered the tomatoes".to_owned(), now, now),
        ],
        "{stored}"
    );
    app.stop().await;
}
