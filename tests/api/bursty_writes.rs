//! The write path under bursts: idempotency keys store once, a spent write budget refuses
//! at once and writes nothing, group commit keeps each shard's arrival order, and
//! memory_ingest_batch stores many episodes per call.

use std::sync::Arc;
use std::time::Duration;

use butler_memory_actors::Engine;
use butler_memory_actors::EpisodeInput;
use butler_memory_actors::FactInput;
use butler_memory_actors::Lineage;
use butler_memory_actors::ManualClock;
use butler_memory_actors::{Caller, Role};
use serde_json::{Value, json};
use sqlx::Connection;

use crate::helpers::*;

async fn count(db: &mut sqlx::PgConnection, sql: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(db)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_idempotency_key_stores_an_episode_once() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let episode = json!({"content": "Ran 5 km", "butler": "health", "idempotency_key": "run-42"});
    let first = mcp.ok("memory_store_episode", episode.clone()).await;
    assert_eq!(first["duplicate"], false);
    let again = mcp.ok("memory_store_episode", episode.clone()).await;
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["id"], first["id"]);
    assert_eq!(again["idempotency_key"], "run-42");
    // In a batch: a key seen before, a key repeated within the batch, and fresh ones.
    let batch = mcp
        .ok(
            "memory_ingest_batch",
            json!({"episodes": [
                {"content": "Ran 5 km", "butler": "health", "idempotency_key": "run-42"},
                {"content": "Swam", "butler": "health", "idempotency_key": "swim-1"},
                {"content": "Swam", "butler": "health", "idempotency_key": "swim-1"},
                {"content": "Stretched", "butler": "health"},
            ]}),
        )
        .await;
    assert_eq!(batch["count"], 4, "{batch}");
    assert_eq!(batch["stored"], 2, "{batch}");
    assert_eq!(batch["duplicates"], json!([0, 2]));
    assert_eq!(batch["ids"][0], first["id"]);
    assert_eq!(batch["ids"][1], batch["ids"][2]);
    let mut db = app.sql().await;
    assert_eq!(count(&mut db, "SELECT count(*) FROM episodes").await, 3);
    assert_eq!(
        count(
            &mut db,
            "SELECT count(*) FROM memory_events WHERE event_type = 'episode_stored'"
        )
        .await,
        3
    );
    // Keys are per butler: another butler may use the same one.
    let general = app.client(TENANT_A_GENERAL).await;
    let other = general
        .ok(
            "memory_store_episode",
            json!({"content": "Ran 5 km", "butler": "general", "idempotency_key": "run-42"}),
        )
        .await;
    assert_eq!(other["duplicate"], false);
    app.stop().await;
}

#[tokio::test]
async fn a_spent_write_budget_refuses_at_once_and_writes_nothing() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let max = app.engine().config().writes.max_in_flight;
    let held = app.engine().reserve_write_room(max - 1).unwrap();
    let started = std::time::Instant::now();
    // One episode still fits; a batch of two does not, and none of it is written.
    mcp.ok(
        "memory_store_episode",
        json!({"content": "fits", "butler": "health"}),
    )
    .await;
    let refused = mcp
        .err(
            "memory_ingest_batch",
            json!({"episodes": [
                {"content": "one", "butler": "health"},
                {"content": "two", "butler": "health"},
            ]}),
        )
        .await;
    assert_eq!(refused["class"], "overloaded", "{refused}");
    assert!(refused["retry_after_ms"].as_u64().unwrap() > 0, "{refused}");
    let held_all = app.engine().reserve_write_room(1).unwrap();
    let refused = mcp
        .err(
            "memory_store_episode",
            json!({"content": "no room", "butler": "health"}),
        )
        .await;
    assert_eq!(refused["class"], "overloaded");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "refusals are immediate"
    );
    let mut db = app.sql().await;
    assert_eq!(count(&mut db, "SELECT count(*) FROM episodes").await, 1);
    assert_eq!(
        count(&mut db, "SELECT count(*) FROM memory_events").await,
        1
    );
    // Reads have their own budget: they are served while writes are refused.
    let ctx = mcp
        .ok(
            "memory_context",
            json!({"trigger_prompt": "anything", "butler": "health"}),
        )
        .await;
    assert!(ctx["text"].is_string());
    // Room given back: writes are accepted again.
    drop((held, held_all));
    mcp.ok(
        "memory_store_episode",
        json!({"content": "room again", "butler": "health"}),
    )
    .await;
    app.stop().await;
}

/// The health butler of tenant A, as the engine sees it.
fn health_butler() -> Caller {
    Caller {
        tenant_id: "tenant-a".into(),
        role: Role::Butler,
        butler: Some("health".into()),
        key_name: "a-health".into(),
        audit_reason: None,
    }
}

/// Starts the health butler's shard with its episode 0, and returns the butler.
async fn started_health_shard(engine: &Engine) -> Caller {
    let caller = health_butler();
    engine
        .store_episode(&caller, step(0), Lineage::generated())
        .await
        .unwrap();
    caller
}

/// The health butler's `i`th numbered episode.
fn step(i: usize) -> EpisodeInput {
    EpisodeInput {
        butler: "health".into(),
        content: format!("step {i:03}"),
        ..Default::default()
    }
}

#[tokio::test]
async fn group_commit_keeps_the_shards_arrival_order() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("", clock).await;
    let engine = app.engine();
    // Start the shard, then send 200 writes without waiting for each: they queue in order.
    // A fact sent after them is written after them, although the shard hands episodes over
    // without waiting for their commits.
    let caller = started_health_shard(engine).await;
    let writes = (1..=200).map(|i| engine.store_episode(&caller, step(i), Lineage::generated()));
    let fact = FactInput {
        subject: "user".into(),
        predicate: "drinks".into(),
        content: "tea".into(),
        ..Default::default()
    };
    let fact = engine.store_fact(&caller, fact, Lineage::generated());
    let (stored, fact) = tokio::join!(futures::future::join_all(writes), fact);
    assert!(stored.iter().all(|r| r.is_ok()));
    fact.unwrap();
    let mut db = app.sql().await;
    let order: Vec<String> = sqlx::query_scalar(
        "SELECT coalesce(e.content, 'fact: ' || f.content) FROM memory_events m
         LEFT JOIN episodes e ON e.id = m.entity_id LEFT JOIN facts f ON f.id = m.entity_id
         ORDER BY m.id",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let mut expected: Vec<String> = (0..=200).map(|i| format!("step {i:03}")).collect();
    expected.push("fact: tea".into());
    assert_eq!(order, expected);
    // They were committed in groups, not one transaction each.
    let transactions = count(&mut db, "SELECT count(DISTINCT xmin::text) FROM episodes").await;
    assert!(
        transactions < 100,
        "{transactions} transactions for 201 writes"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_barrier_waits_for_the_episodes_handed_over_before_it() {
    let app = spawn_app().await;
    let engine = app.engine();
    let caller = started_health_shard(engine).await;
    engine.flush().await.unwrap();
    // The episodes cannot commit while a test transaction holds the table.
    let mut db = app.sql().await;
    let mut hold = db.begin().await.unwrap();
    sqlx::query("LOCK TABLE episodes IN SHARE MODE")
        .execute(&mut *hold)
        .await
        .unwrap();
    // One poll sends every write to the shard; nobody waits for their answers yet, and the
    // shard hands them over without waiting for their commit either.
    let writes = (1..=200).map(|i| engine.store_episode(&caller, step(i), Lineage::generated()));
    let mut writes = Box::pin(futures::future::join_all(writes));
    assert!(futures::poll!(writes.as_mut()).is_pending());
    // The barrier is a write like any other but an episode: it waits for them to commit.
    let mut flush = Box::pin(engine.flush());
    let early = tokio::time::timeout(Duration::from_millis(300), flush.as_mut()).await;
    assert!(
        early.is_err(),
        "the barrier answered before the episodes sent before it were committed"
    );
    hold.rollback().await.unwrap();
    flush.await.unwrap();
    assert_eq!(count(&mut db, "SELECT count(*) FROM episodes").await, 201);
    assert!(writes.await.iter().all(|r| r.is_ok()));
    drop(db);
    app.stop().await;
}

#[tokio::test]
async fn a_batch_is_validated_whole_and_answered_in_input_order() {
    let app = spawn_app().await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let err = admin
        .err(
            "memory_ingest_batch",
            json!({"episodes": [
                {"content": "fine", "butler": "health"},
                {"content": "", "butler": "health"},
            ]}),
        )
        .await;
    assert_eq!(err["class"], "invalid_input");
    assert!(
        err["message"].as_str().unwrap().starts_with("episodes[1]"),
        "{err}"
    );
    let err = admin
        .err("memory_ingest_batch", json!({"episodes": []}))
        .await;
    assert_eq!(err["class"], "invalid_input");
    // Two butlers interleaved: each shard commits its share, ids come back in input order.
    let episodes: Vec<Value> = (0..10)
        .map(|i| json!({"content": format!("e{i}"), "butler": if i % 2 == 0 { "health" } else { "general" }}))
        .collect();
    let stored = admin
        .ok("memory_ingest_batch", json!({"episodes": episodes}))
        .await;
    assert_eq!(stored["stored"], 10);
    for (i, id) in stored["ids"].as_array().unwrap().iter().enumerate() {
        let got = admin
            .ok("memory_get", json!({"type": "episode", "id": id}))
            .await;
        assert_eq!(got["content"], format!("e{i}"));
    }
    // A butler key may only ingest for its own butler.
    let health = app.client(TENANT_A_HEALTH).await;
    let err = health
        .err(
            "memory_ingest_batch",
            json!({"episodes": [{"content": "x", "butler": "general"}]}),
        )
        .await;
    assert_eq!(err["class"], "forbidden");
    // Episodes stored in a batch are found by keyword at once, by meaning once embedded.
    health
        .ok(
            "memory_ingest_batch",
            json!({"episodes": [{"content": "Cleaned the kitchen windows", "butler": "health"}]}),
        )
        .await;
    let found = health
        .ok(
            "memory_search",
            json!({"query": "kitchen windows", "types": ["episode"], "mode": "keyword"}),
        )
        .await;
    assert_eq!(found["count"], 1, "{found}");
    app.engine().flush().await.unwrap();
    let found = health
        .ok(
            "memory_search",
            json!({"query": "washing glass at home", "types": ["episode"], "mode": "semantic", "limit": 1}),
        )
        .await;
    assert_eq!(
        found["results"][0]["content"], "Cleaned the kitchen windows",
        "{found}"
    );
    app.stop().await;
}

/// Episodes and events are analysed every few seconds in a burst (migration 10); every
/// column, including ones added later, has a small statistics target of its own, so that an
/// analysis samples a few thousand rows rather than 30,000 (migration 14). Both tables are
/// partitioned by month (migrations 24 and 26): each partition is analysed on its own, and
/// every one has them, the default partitions and those made ahead included.
#[tokio::test]
async fn the_burst_tables_gather_statistics_from_small_samples() {
    let (_, options) = fresh_database().await;
    let mut db = sqlx::PgConnection::connect_with(&options).await.unwrap();
    let targets: Vec<(String, String, Option<i16>)> = sqlx::query_as(
        "SELECT c.relname::text, a.attname::text, a.attstattarget::int2
         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
         WHERE c.oid IN (SELECT inhrelid FROM pg_inherits
                         WHERE inhparent IN ('episodes'::regclass, 'memory_events'::regclass))
           AND a.attnum > 0 AND NOT a.attisdropped
         ORDER BY 1, 2",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let tables: std::collections::BTreeSet<&str> =
        targets.iter().map(|(table, ..)| table.as_str()).collect();
    assert!(
        tables.contains("episodes_default") && tables.contains("memory_events_default"),
        "{tables:?}"
    );
    assert!(
        tables.len() >= 6,
        "partitions made at migration: {tables:?}"
    );
    for (table, column, target) in &targets {
        let target = target.unwrap_or(-1);
        assert!(
            (0..=20).contains(&target),
            "{table}.{column} samples by the default statistics target ({target})"
        );
    }
}
