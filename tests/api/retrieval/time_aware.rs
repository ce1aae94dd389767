//! Time-aware reads (`as_of`, `since`, `until`) with a pinned clock: a superseded fact
//! answers for the time it was true and only then, by its validity time (stated or derived
//! from supersession), through search, recall and context; episodes by when they happened;
//! bad windows are refused with their codes. And migration 25 gives a populated database's
//! facts their validity time.

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{contents, ids};
use crate::helpers::*;

fn day(date: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(&format!("{date}T00:00:00Z"))
        .unwrap()
        .with_timezone(&Utc)
}

/// A search for the user's drink in a window (`window` merged into the arguments).
async fn drinks(mcp: &McpClient, tool: &str, window: Value) -> Value {
    let mut args = match tool {
        "memory_recall" => json!({"topic": "preferred drink"}),
        _ => json!({"query": "preferred drink", "types": ["fact"]}),
    };
    args.as_object_mut()
        .unwrap()
        .extend(window.as_object().unwrap().clone());
    mcp.ok(tool, args).await
}

/// Tea from March, superseded by coffee on April 1st; now is May.
async fn tea_then_coffee() -> (TestApp, Arc<ManualClock>, String, String) {
    let clock = Arc::new(ManualClock::new(day("2026-03-01")));
    let app = spawn_app_at("", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let store = |content: &'static str| {
        let mcp = &mcp;
        async move {
            let stored = mcp
                .ok(
                    "memory_store_fact",
                    json!({"subject": "user", "predicate": "preferred drink", "content": content}),
                )
                .await;
            stored["id"].as_str().unwrap().to_owned()
        }
    };
    let tea = store("Tea, always with milk").await;
    clock.set(day("2026-04-01"));
    let coffee = store("Coffee, black, no sugar").await;
    clock.set(day("2026-05-01"));
    (app, clock, tea, coffee)
}

#[tokio::test]
async fn a_superseded_fact_answers_for_its_time_and_only_then() {
    let (app, clock, tea, coffee) = tea_then_coffee().await;
    let mcp = app.client(TENANT_A_HEALTH).await;

    let now = drinks(&mcp, "memory_search", json!({})).await;
    assert_eq!(
        ids(&now),
        vec![coffee.clone()],
        "without a window: live only"
    );

    let march = drinks(&mcp, "memory_search", json!({"as_of": "2026-03-15"})).await;
    assert_eq!(ids(&march), vec![tea.clone()]);
    let found = &march["results"][0];
    assert_eq!(found["validity"], "superseded");
    assert_eq!(found["valid_from"], "2026-03-01T00:00:00Z");
    assert_eq!(found["valid_until"], "2026-04-01T00:00:00Z");

    let april = drinks(
        &mcp,
        "memory_search",
        json!({"as_of": "2026-04-15T12:00:00Z"}),
    )
    .await;
    assert_eq!(ids(&april), vec![coffee.clone()]);
    assert_eq!(april["results"][0]["valid_until"], Value::Null);
    // The moment of the change belongs to the new fact.
    let at_change = drinks(
        &mcp,
        "memory_search",
        json!({"as_of": "2026-04-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(ids(&at_change), vec![coffee.clone()]);

    let in_march = drinks(
        &mcp,
        "memory_search",
        json!({"since": "2026-03-01", "until": "2026-03-31"}),
    )
    .await;
    assert_eq!(ids(&in_march), vec![tea.clone()]);
    let across = drinks(
        &mcp,
        "memory_search",
        json!({"since": "2026-03-20", "until": "2026-04-10"}),
    )
    .await;
    let mut both = ids(&across);
    both.sort();
    let mut expected = vec![tea.clone(), coffee.clone()];
    expected.sort();
    assert_eq!(both, expected, "both were true within the span");
    let after = drinks(&mcp, "memory_search", json!({"since": "2026-04-02"})).await;
    assert_eq!(ids(&after), vec![coffee.clone()]);

    let recalled = drinks(&mcp, "memory_recall", json!({"as_of": "2026-03-15"})).await;
    assert_eq!(ids(&recalled), vec![tea.clone()]);

    // The context block of a past moment holds what was true then, and says until when.
    let context = |window: Value| {
        let mut args =
            json!({"trigger_prompt": "What does the user like to drink?", "butler": "health"});
        args.as_object_mut()
            .unwrap()
            .extend(window.as_object().unwrap().clone());
        let mcp = &mcp;
        async move { mcp.ok("memory_context", args).await }
    };
    let then = context(json!({"as_of": "2026-03-15"})).await;
    let text = then["text"].as_str().unwrap();
    assert!(text.contains("Tea, always with milk"), "{text}");
    assert!(text.contains("true until 2026-04-01"), "{text}");
    assert!(!text.contains("Coffee"), "{text}");
    let today = context(json!({})).await;
    let text = today["text"].as_str().unwrap();
    assert!(text.contains("Coffee") && !text.contains("Tea"), "{text}");
    let batch = mcp
        .ok(
            "memory_context_batch",
            json!({"requests": [
                {"trigger_prompt": "What does the user drink?", "butler": "health", "as_of": "2026-03-15"},
                {"trigger_prompt": "What does the user drink?", "butler": "health"},
            ]}),
        )
        .await;
    assert!(
        batch["results"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Tea")
    );
    assert!(
        batch["results"][1]["text"]
            .as_str()
            .unwrap()
            .contains("Coffee")
    );

    // A year on, both have decayed below the threshold today, but tea still answers for
    // March: its confidence is judged as it was then, not decayed since.
    clock.set(day("2027-06-01"));
    assert_eq!(
        ids(&drinks(&mcp, "memory_search", json!({})).await),
        Vec::<String>::new()
    );
    // (Another moment than before, so that no cached answer stands in.)
    let march = drinks(&mcp, "memory_search", json!({"as_of": "2026-03-20"})).await;
    assert_eq!(ids(&march), vec![tea]);
    app.stop().await;
}

#[tokio::test]
async fn a_stated_start_places_the_fact_and_ends_the_one_it_supersedes() {
    let clock = Arc::new(ManualClock::new(day("2026-03-01")));
    let app = spawn_app_at("", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let fact = |content: &str, valid_from: Option<&str>| {
        let mut args = json!({"subject": "user", "predicate": "home city", "content": content});
        if let Some(valid_from) = valid_from {
            args["valid_from"] = json!(valid_from);
        }
        args
    };
    let lisbon = mcp
        .ok("memory_store_fact", fact("Lives in Lisbon", None))
        .await;
    clock.set(day("2026-05-01"));
    // Told in May that the move happened on April 10th.
    let berlin = mcp
        .ok(
            "memory_store_fact",
            fact("Moved to Berlin", Some("2026-04-10")),
        )
        .await;
    assert_eq!(berlin["valid_from"], "2026-04-10T00:00:00Z");
    assert_eq!(berlin["superseded"]["valid_until"], "2026-04-10T00:00:00Z");
    let city = |as_of: &'static str| {
        let mcp = &mcp;
        async move {
            let found = mcp
                .ok(
                    "memory_search",
                    json!({"query": "home city", "types": ["fact"], "as_of": as_of}),
                )
                .await;
            contents(&found)
        }
    };
    assert_eq!(city("2026-04-01").await, vec!["Lives in Lisbon"]);
    assert_eq!(city("2026-04-20").await, vec!["Moved to Berlin"]);
    let old = mcp
        .ok("memory_get", json!({"type": "fact", "id": lisbon["id"]}))
        .await;
    assert_eq!(old["valid_until"], "2026-04-10T00:00:00Z");

    let refused = mcp
        .err("memory_store_fact", fact("Lives in Paris", Some("soon")))
        .await;
    assert_eq!(refused["code"], "invalid_time", "{refused}");
    // A start kept in metadata counts as one stated (the parameter wins over it).
    let job = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "employer", "content": "Works at Acme",
                   "metadata": {"valid_from": "2025-09-01", "source": "CV"}}),
        )
        .await;
    assert_eq!(job["valid_from"], "2025-09-01T00:00:00Z");
    let refused = mcp
        .err(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "employer", "content": "Works at Initech",
                   "metadata": {"valid_from": "last autumn"}}),
        )
        .await;
    assert_eq!(refused["code"], "invalid_time", "{refused}");
    app.stop().await;
}

#[tokio::test]
async fn episodes_are_selected_by_when_they_happened_neighbours_too() {
    let clock = Arc::new(ManualClock::new(day("2026-03-01")));
    let app = spawn_app_at("", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let mut stored = Vec::new();
    for (date, content) in [
        ("2026-03-01", "Booked the ferry tickets for the island trip"),
        ("2026-04-01", "The island ferry was cancelled by the storm"),
        ("2026-05-01", "Took the island ferry at last"),
    ] {
        clock.set(day(date));
        let episode = mcp
            .ok(
                "memory_store_episode",
                json!({"butler": "health", "content": content, "session_id": "island-trip", "ttl_days": 365}),
            )
            .await;
        stored.push(episode["id"].as_str().unwrap().to_owned());
    }
    let search = |window: Value| {
        // Only April's episode has these words; March's and May's are its session neighbours.
        let mut args = json!({"query": "cancelled storm", "types": ["episode"], "mode": "keyword"});
        args.as_object_mut()
            .unwrap()
            .extend(window.as_object().unwrap().clone());
        let mcp = &mcp;
        async move {
            let mut found = ids(&mcp.ok("memory_search", args).await);
            found.sort();
            found
        }
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    // Without a window April's episode brings its session neighbours along.
    assert_eq!(search(json!({})).await, sorted(stored.clone()));
    assert_eq!(
        search(json!({"as_of": "2026-04-15"})).await,
        sorted(stored[..2].to_vec()),
        "what had happened by mid-April"
    );
    assert_eq!(
        search(json!({"since": "2026-03-15", "until": "2026-04-15"})).await,
        vec![stored[1].clone()],
        "no neighbour from outside the span"
    );
    assert_eq!(
        search(json!({"since": "2026-03-15"})).await,
        sorted(stored[1..].to_vec())
    );
    assert_eq!(
        search(json!({"until": "2026-03-31"})).await,
        Vec::<String>::new()
    );
    app.stop().await;
}

#[tokio::test]
async fn bad_windows_are_refused_with_their_codes() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let cases = [
        (
            json!({"as_of": "2026-03-01", "since": "2026-02-01"}),
            "invalid_time_window",
        ),
        (
            json!({"since": "2026-04-01", "until": "2026-03-01"}),
            "invalid_time_window",
        ),
        (json!({"as_of": "yesterday"}), "invalid_time"),
        (json!({"until": "2026-02-30"}), "invalid_time"),
    ];
    for (window, code) in cases {
        for tool in ["memory_search", "memory_recall", "memory_context"] {
            let mut args = match tool {
                "memory_search" => json!({"query": "tea"}),
                "memory_recall" => json!({"topic": "tea"}),
                _ => json!({"trigger_prompt": "tea", "butler": "health"}),
            };
            args.as_object_mut()
                .unwrap()
                .extend(window.as_object().unwrap().clone());
            let refused = mcp.err(tool, args).await;
            assert_eq!(
                refused["class"], "invalid_input",
                "{tool} {window}: {refused}"
            );
            assert_eq!(refused["code"], code, "{tool} {window}: {refused}");
        }
    }
    // In a batch, only the request with the bad window fails.
    let batch = mcp
        .ok(
            "memory_context_batch",
            json!({"requests": [
                {"trigger_prompt": "tea", "butler": "health", "as_of": "never"},
                {"trigger_prompt": "tea", "butler": "health"},
            ]}),
        )
        .await;
    assert_eq!(batch["results"][0]["error"]["code"], "invalid_time");
    assert!(batch["results"][1]["text"].is_string());
    app.stop().await;
}

/// The last migration before facts had validity time.
const BEFORE_VALIDITY_TIME: i64 = 20261122000024;

#[tokio::test]
async fn the_migration_gives_existing_facts_their_validity_time() {
    let (_, pool) = database_at(BEFORE_VALIDITY_TIME).await;
    // A chain of three (March, April, May), a fact superseded with no successor naming it
    // (last confirmed in June), and a live fact of another tenant.
    sqlx::query(
        "INSERT INTO facts (id, tenant_id, subject, predicate, content, validity, supersedes_id,
                            created_at, last_confirmed_at, last_referenced_at)
         VALUES
           ('00000000-0000-0000-0000-000000000001', 'a', 'user', 'drink', 'tea', 'superseded', NULL,
            '2026-03-01 00:00+00', '2026-03-01 00:00+00', '2026-03-01 00:00+00'),
           ('00000000-0000-0000-0000-000000000002', 'a', 'user', 'drink', 'coffee', 'superseded',
            '00000000-0000-0000-0000-000000000001', '2026-04-01 00:00+00', '2026-04-01 00:00+00', '2026-04-01 00:00+00'),
           ('00000000-0000-0000-0000-000000000003', 'a', 'user', 'drink', 'water', 'active',
            '00000000-0000-0000-0000-000000000002', '2026-05-01 00:00+00', '2026-05-01 00:00+00', '2026-05-01 00:00+00'),
           ('00000000-0000-0000-0000-000000000004', 'a', 'user', 'mood', 'calm', 'superseded', NULL,
            '2026-03-01 00:00+00', '2026-06-01 00:00+00', '2026-06-01 00:00+00'),
           ('00000000-0000-0000-0000-000000000005', 'b', 'user', 'drink', 'juice', 'active', NULL,
            '2026-02-01 00:00+00', '2026-02-01 00:00+00', '2026-02-01 00:00+00')",
    )
    .execute(&pool)
    .await
    .unwrap();

    butler_memory_actors::MIGRATOR.run(&pool).await.unwrap();
    let validity: Vec<(String, DateTime<Utc>, Option<DateTime<Utc>>)> =
        sqlx::query_as("SELECT content, valid_from, valid_until FROM facts ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        validity,
        vec![
            ("tea".into(), day("2026-03-01"), Some(day("2026-04-01"))),
            ("coffee".into(), day("2026-04-01"), Some(day("2026-05-01"))),
            ("water".into(), day("2026-05-01"), None),
            ("calm".into(), day("2026-03-01"), Some(day("2026-06-01"))),
            ("juice".into(), day("2026-02-01"), None),
        ]
    );
    // The database refuses an interval that ends before it starts.
    let backwards = sqlx::query(
        "UPDATE facts SET valid_until = '2026-01-01 00:00+00' WHERE tenant_id = 'a'
           AND id = '00000000-0000-0000-0000-000000000003'",
    )
    .execute(&pool)
    .await;
    assert!(
        backwards.is_err(),
        "valid_until before valid_from was accepted"
    );
    pool.close().await;
}
