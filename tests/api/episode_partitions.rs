//! Episodes partitioned by month (migration 26): the migration keeps every episode and
//! idempotency key of a populated database (ids not time-ordered go to the default
//! partition, and the service goes on with them: keys still deduplicate, search still
//! finds); the scheduler makes months ahead; a past month whose episodes have all expired is
//! retired whole by the scheduled cleanup (its deletions logged, its counts out of the
//! stats, its keys freed, the partition dropped) while a month holding a live episode stays.

use std::sync::Arc;
use std::time::{Duration, Instant};

use butler_memory_actors::ManualClock;
use chrono::{DateTime, Datelike, Months, TimeZone, Utc};
use serde_json::{Value, json};

use crate::helpers::*;
use crate::stats_projection::answered_and_scanned;

/// The last migration before episodes were partitioned.
const BEFORE_PARTITIONS: i64 = 20261122000025;

/// Every episode, in id order, as one digest: what the migration must not change.
const DIGEST: &str = "SELECT count(*), md5(string_agg(concat_ws('|', id, tenant_id, butler,
        session_id, content, importance, consolidation_status, idempotency_key, created_at,
        expires_at, metadata::text, search_vector::text), ',' ORDER BY id)) FROM episodes";

/// The middle of the month `back` months before `now`'s, and its partition's name.
fn months_ago(now: DateTime<Utc>, back: u32) -> (DateTime<Utc>, String) {
    let at = now - Months::new(back);
    let at = Utc
        .with_ymd_and_hms(at.year(), at.month(), 15, 12, 0, 0)
        .unwrap();
    (at, format!("episodes_{}", at.format("%Y_%m")))
}

#[tokio::test]
async fn the_migration_keeps_every_episode_and_key_of_a_populated_database() {
    let (database, pool) = database_at(BEFORE_PARTITIONS).await;
    // 1,200 episodes over three months with UUIDv7 ids of their time (every third with a
    // key), and two whose ids are not time-ordered (UUIDv4), one of them keyed.
    sqlx::query(
        "INSERT INTO episodes (id, tenant_id, butler, content, created_at, last_referenced_at,
                               expires_at, idempotency_key, metadata)
         SELECT (lpad(to_hex(floor(extract(epoch FROM t) * 1000)::bigint), 12, '0') || '7'
                 || substr(md5(i::text), 1, 3) || '8' || substr(md5(i::text), 4, 15))::uuid,
                'tenant-a', 'health', 'Walked the dog to the lake, round ' || i, t, t,
                t + interval '10 years', CASE WHEN i % 3 = 0 THEN 'walk-' || i END,
                jsonb_build_object('round', i)
         FROM generate_series(1, 1200) AS i,
              LATERAL (SELECT timestamptz '2026-06-01 00:00+00' + i * interval '1 hour 48 minutes') AS s(t)",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO episodes (id, tenant_id, butler, content, created_at, last_referenced_at,
                               expires_at, idempotency_key)
         VALUES ('5d3c0a4e-9f1b-4c2a-8e7d-1a2b3c4d5e6f', 'tenant-a', 'health',
                 'Bought a kayak paddle', now(), now(), now() + interval '10 years', 'paddle'),
                ('a0b1c2d3-e4f5-4a6b-9c8d-7e6f5a4b3c2d', 'tenant-b', 'x',
                 'Another tenant''s note', now(), now(), now() + interval '10 years', NULL)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let before: (i64, String) = sqlx::query_as(DIGEST).fetch_one(&pool).await.unwrap();
    assert_eq!(before.0, 1202);

    butler_memory_actors::MIGRATOR.run(&pool).await.unwrap();
    let after: (i64, String) = sqlx::query_as(DIGEST).fetch_one(&pool).await.unwrap();
    assert_eq!(after, before, "the migration changed the episodes");
    let kind: String =
        sqlx::query_scalar("SELECT relkind::text FROM pg_class WHERE relname = 'episodes'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(kind, "p", "episodes is partitioned");
    assert_eq!(
        rows_per_partition(&pool, "episodes").await,
        vec![
            ("episodes_2026_06".to_owned(), 399),
            ("episodes_2026_07".to_owned(), 414),
            ("episodes_2026_08".to_owned(), 387),
            ("episodes_default".to_owned(), 2),
        ]
    );
    let keys: (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE EXISTS (
             SELECT 1 FROM episodes e WHERE e.tenant_id = k.tenant_id AND e.id = k.episode_id
               AND e.butler = k.butler AND e.idempotency_key = k.idempotency_key))
         FROM episode_keys k",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(keys, (401, 401), "every key, pointing at its episode");
    pool.close().await;

    // The service goes on with them: a key taken before the migration still admits nothing
    // new, a fresh one does, and both kinds of id are found.
    let app = spawn_on_database((database.url.clone(), database.options.clone()), |_| {}).await;
    let health = app.client(TENANT_A_HEALTH).await;
    for (key, id) in [
        ("paddle", "5d3c0a4e-9f1b-4c2a-8e7d-1a2b3c4d5e6f"),
        ("walk-300", ""),
    ] {
        let again = health
            .ok(
                "memory_store_episode",
                json!({"butler": "health", "content": "Said again", "idempotency_key": key}),
            )
            .await;
        assert_eq!(again["duplicate"], true, "{again}");
        if !id.is_empty() {
            assert_eq!(again["id"], id);
        }
        assert_ne!(again["content"], "Said again");
    }
    let fresh = health
        .ok(
            "memory_store_episode",
            json!({"butler": "health", "content": "Paddled across", "idempotency_key": "crossing"}),
        )
        .await;
    assert_eq!(fresh["duplicate"], false, "{fresh}");
    let found = health
        .ok(
            "memory_search",
            json!({"query": "kayak", "types": ["episode"], "mode": "keyword"}),
        )
        .await;
    assert_eq!(
        result_ids(&found),
        vec!["5d3c0a4e-9f1b-4c2a-8e7d-1a2b3c4d5e6f"]
    );
    let got = health
        .ok("memory_get", json!({"type": "episode", "id": fresh["id"]}))
        .await;
    assert_eq!(got["content"], "Paddled across", "{got}");
    app.stop().await;
}

/// Stores an episode for `health` at the clock's time, living `ttl_days`.
async fn store(health: &McpClient, content: &str, ttl_days: f64, key: Option<&str>) -> Value {
    let mut args = json!({"butler": "health", "content": content, "ttl_days": ttl_days});
    if let Some(key) = key {
        args["idempotency_key"] = json!(key);
    }
    let stored = health.ok("memory_store_episode", args).await;
    assert_eq!(stored["duplicate"], false, "{stored}");
    stored
}

/// Which partition holds how many episodes.
async fn placed(app: &TestApp) -> Vec<(String, i64)> {
    rows_per_partition(&mut app.sql().await, "episodes").await
}

/// Waits up to a minute for the episodes' placement to satisfy `done`.
async fn wait_for(app: &TestApp, what: &str, done: impl Fn(&[(String, i64)]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = placed(app).await;
        if done(&now) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: still {now:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_month_whose_episodes_all_expired_is_retired_whole_by_the_cleanup() {
    let now = Utc::now();
    let (old, old_partition) = months_ago(now, 3);
    let (recent, recent_partition) = months_ago(now, 2);
    let clock = Arc::new(ManualClock::new(old));
    // The second stage on: the indexer stores a token sketch with each embedding (migration
    // 32), which must go with its episode however the episode goes; and widening on: the
    // words only the month's episodes held go with them (migration 36).
    let app = spawn_app_at(
        "[lifecycle]\nepisode_cleanup_cron = \"0 4 * * *\"\nscheduler_tick_ms = 20\ncatch_up_missed_runs = false\n\
         [retrieval.rerank]\nenabled = true\n[retrieval.widening]\nenabled = true\n",
        clock.clone(),
    )
    .await;
    let health = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;

    // The scheduler made the clock's month and one ahead (lifecycle.episode_partitions_ahead),
    // not two.
    let made = partitions_of(&app, "episodes").await;
    for back in [3, 2] {
        assert!(made.contains(&months_ago(now, back).1), "{made:?}");
    }
    assert!(!made.contains(&months_ago(now, 1).1), "{made:?}");

    // Three months ago: three short-lived episodes, one keyed.
    let mut gone = Vec::new();
    for (content, key) in [
        ("Fed the cat at dawn", Some("feed-1")),
        ("Watered the ferns", None),
        ("Called the plumber", None),
    ] {
        gone.push(store(&health, content, 1.0, key).await["id"].clone());
    }
    assert_eq!(placed(&app).await, vec![(old_partition.clone(), 3)]);

    // A month later the cleanup fires: that month is past and all expired, and goes whole.
    // (Embedded first: an episode embedded while its month is retired makes the retirement
    // roll back, to the next cleanup, a day away on this clock.)
    app.engine().flush().await.unwrap();
    assert_eq!(sketched(&app).await, 3);
    assert!(words(&app).await.contains(&"plumber".to_owned()));
    clock.set(recent);
    wait_for(&app, "the expired month retired", |p| {
        !p.iter().any(|(name, _)| *name == old_partition)
    })
    .await;
    assert!(
        !partitions_of(&app, "episodes")
            .await
            .contains(&old_partition)
    );
    for id in &gone {
        let missing = health
            .err("memory_get", json!({"type": "episode", "id": id}))
            .await;
        assert_eq!(missing["class"], "not_found", "{missing}");
    }
    // The month's sketches went with it (a TRUNCATE fires no delete trigger), and its words.
    assert_eq!(sketched(&app).await, 0);
    assert_eq!(words(&app).await, Vec::<String>::new());

    // A month holding a live episode stays: its expired one goes row by row.
    store(&health, "Booked the dentist", 1.0, None).await;
    let kept = store(&health, "Moved to the house by the river", 365.0, None).await;
    assert_eq!(placed(&app).await, vec![(recent_partition.clone(), 2)]);
    clock.set(now);
    wait_for(&app, "the expired episode deleted", |p| {
        p == [(recent_partition.clone(), 1)]
    })
    .await;
    assert!(
        partitions_of(&app, "episodes")
            .await
            .contains(&recent_partition)
    );
    let got = health
        .ok("memory_get", json!({"type": "episode", "id": kept["id"]}))
        .await;
    assert_eq!(got["content"], "Moved to the house by the river");
    // The expired one's sketch went with its row, the kept one's stays.
    app.engine().flush().await.unwrap();
    let ids: Vec<uuid::Uuid> = sqlx::query_scalar("SELECT id FROM episode_sketches")
        .fetch_all(&mut app.sql().await)
        .await
        .unwrap();
    assert_eq!(
        ids.iter().map(|id| id.to_string()).collect::<Vec<_>>(),
        [kept["id"].as_str().unwrap()]
    );

    // Each deletion is logged, as a row-by-row cleanup logs it.
    let deleted: Vec<Value> = activity(&admin, 100)
        .await
        .into_iter()
        .filter(|e| e["event_type"] == "episode_deleted" && gone.contains(&e["entity_id"]))
        .collect();
    assert_eq!(deleted.len(), 3, "{deleted:?}");
    for event in &deleted {
        assert_eq!(event["actor"], "sweep", "{event}");
        assert_eq!(event["payload"]["reason"], "expired", "{event}");
        assert_eq!(event["payload"]["after"], Value::Null, "{event}");
    }
    // Its key is free again, and the stats count what is left.
    store(&health, "Fed the cat at dawn", 1.0, Some("feed-1")).await;
    // (Once the indexer has embedded it: the answer and the scan then see the same rows.)
    app.engine().flush().await.unwrap();
    let (answered, scanned) = answered_and_scanned(&app, TENANT_A_ADMIN, "").await;
    assert_eq!(answered, scanned);
    app.stop().await;
}

/// How many episodes have a token sketch stored.
async fn sketched(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM episode_sketches")
        .fetch_one(&mut app.sql().await)
        .await
        .unwrap()
}

/// The lexemes of the tenants' vocabularies (query widening), in order.
async fn words(app: &TestApp) -> Vec<String> {
    sqlx::query_scalar("SELECT lexeme FROM word_vectors ORDER BY lexeme")
        .fetch_all(&mut app.sql().await)
        .await
        .unwrap()
}
