//! The audit stream partitioned by month (migration 24): the migration keeps every event of
//! a populated database (same ids, same contents, the stream replays through the service and
//! goes on from its last id); partitions are made ahead, a month whose events already sit in
//! the default partition is left there, and old months are dropped only under an explicit
//! retention. Partitions stay append-only.

use std::sync::Arc;

use butler_memory_actors::{ManualClock, Store};
use chrono::{DateTime, Datelike, Months, TimeZone, Utc};
use serde_json::json;

use crate::helpers::*;

/// The last migration before the audit stream was partitioned.
const BEFORE_PARTITIONS: i64 = 20261122000023;

/// Every event, in id order, as one digest: what a migration must not change.
const DIGEST: &str = "SELECT count(*), md5(string_agg(concat_ws('|', id, tenant_id, event_type,
        entity_type, entity_id, occurred_at, actor, request_id, payload::text, scope, butler,
        shard_seq), ',' ORDER BY id)) FROM memory_events";

#[tokio::test]
async fn the_migration_keeps_every_event_of_a_populated_database() {
    let (database, pool) = database_at(BEFORE_PARTITIONS).await;
    // Three thousand events over four months (one transaction per month, so each month's
    // share of a shard is numbered once), one more month in another tenant.
    for month in 0..4 {
        sqlx::query(
            "INSERT INTO memory_events (tenant_id, event_type, entity_type, entity_id,
                                        occurred_at, actor, butler, payload)
             SELECT 'tenant-a', 'fact_created', 'fact', gen_random_uuid(),
                    timestamptz '2026-07-01 00:00+00' + make_interval(months => $1)
                        + i * interval '10 minutes',
                    'butler:health', 'health', jsonb_build_object('n', i, 'month', $1)
             FROM generate_series(1, 750) AS i",
        )
        .bind(month)
        .execute(&pool)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO memory_events (tenant_id, event_type, entity_type, entity_id, occurred_at,
                                    actor, payload)
         VALUES ('tenant-b', 'rule_created', 'rule', gen_random_uuid(),
                 timestamptz '2025-12-31 23:59+00', 'butler:x', '{}')",
    )
    .execute(&pool)
    .await
    .unwrap();
    let before: (i64, String) = sqlx::query_as(DIGEST).fetch_one(&pool).await.unwrap();
    assert_eq!(before.0, 3001);

    butler_memory_actors::MIGRATOR.run(&pool).await.unwrap();
    let after: (i64, String) = sqlx::query_as(DIGEST).fetch_one(&pool).await.unwrap();
    assert_eq!(after, before, "the migration changed the audit stream");
    let kind: String =
        sqlx::query_scalar("SELECT relkind::text FROM pg_class WHERE relname = 'memory_events'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(kind, "p", "memory_events is partitioned");
    assert_eq!(
        rows_per_partition(&pool, "memory_events").await,
        vec![
            ("memory_events_2025_12".to_owned(), 1),
            ("memory_events_2026_07".to_owned(), 750),
            ("memory_events_2026_08".to_owned(), 750),
            ("memory_events_2026_09".to_owned(), 750),
            ("memory_events_2026_10".to_owned(), 750),
        ]
    );
    let max_id: i64 = sqlx::query_scalar("SELECT max(id) FROM memory_events")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;

    // The service replays it in order and goes on from its last id.
    let app = spawn_on_database((database.url.clone(), database.options.clone()), |_| {}).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let events = activity(&admin, 1000).await;
    assert_eq!(events.len(), 3000);
    let ids: Vec<i64> = events.iter().map(|e| e["id"].as_i64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "not in id order");
    assert_eq!(events[2999]["payload"]["n"], 750);
    let health = app.client(TENANT_A_HEALTH).await;
    health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "tea", "content": "Prefers oolong tea"}),
        )
        .await;
    let events = activity(&admin, 1000).await;
    let last = &events[events.len() - 1];
    assert!(last["id"].as_i64().unwrap() > max_id, "{last}");
    assert_eq!(last["event_type"], "fact_created");
    app.stop().await;
}

/// The middle of the month `back` months before `now`'s, and its partition's name.
fn months_ago(now: DateTime<Utc>, back: u32) -> (DateTime<Utc>, String) {
    let at = now - Months::new(back);
    let at = Utc
        .with_ymd_and_hms(at.year(), at.month(), 15, 12, 0, 0)
        .unwrap();
    (at, format!("memory_events_{}", at.format("%Y_%m")))
}

#[tokio::test]
async fn partitions_are_made_ahead_and_old_months_go_only_under_a_retention() {
    let now = Utc::now();
    let clock = Arc::new(ManualClock::new(now));
    let app = spawn_app_at("", clock.clone()).await;
    let store: &Store = app.engine().store();
    let health = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;

    // Made ahead, once.
    let later = now + Months::new(6);
    let upkeep = store.keep_event_partitions(later, 2, 0).await.unwrap();
    assert_eq!(upkeep.created.len(), 3, "{upkeep:?}");
    assert!(
        store
            .keep_event_partitions(later, 2, 0)
            .await
            .unwrap()
            .created
            .is_empty()
    );

    // A month with a partition, and one whose events came before it and stay in the
    // default partition (a partition cannot be made over them).
    let (old, old_partition) = months_ago(now, 10);
    let (older, _) = months_ago(now, 18);
    store.keep_event_partitions(old, 0, 0).await.unwrap();
    clock.set(old);
    health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "old", "content": "Skated that winter"}),
        )
        .await;
    clock.set(older);
    health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "older", "content": "Planted that spring"}),
        )
        .await;
    let upkeep = store.keep_event_partitions(older, 0, 0).await.unwrap();
    assert!(upkeep.created.is_empty(), "{upkeep:?}");
    clock.set(now);
    health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "now", "content": "Reads in the evening"}),
        )
        .await;
    let mut conn = app.sql().await;
    let placed: Vec<(String, String)> = sqlx::query_as(
        "SELECT payload->'after'->>'predicate', tableoid::regclass::text FROM memory_events
         ORDER BY id",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let current = format!("memory_events_{}", now.format("%Y_%m"));
    assert_eq!(
        placed,
        vec![
            ("old".to_owned(), old_partition.clone()),
            ("older".to_owned(), "memory_events_default".to_owned()),
            ("now".to_owned(), current.clone()),
        ]
    );

    // Partitions stay append-only.
    for statement in [
        format!("UPDATE {old_partition} SET actor = 'someone else'"),
        format!("DELETE FROM {old_partition}"),
        format!("TRUNCATE {old_partition}"),
        "TRUNCATE memory_events_default".to_owned(),
    ] {
        let refused = sqlx::raw_sql(sqlx::AssertSqlSafe(statement.clone()))
            .execute(&mut conn)
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains("append-only"),
            "{statement}: {refused}"
        );
    }

    // Without a retention nothing goes; with one, the months before it do (the default
    // partition never).
    let upkeep = store.keep_event_partitions(now, 2, 0).await.unwrap();
    assert!(upkeep.dropped.is_empty());
    let upkeep = store.keep_event_partitions(now, 2, 3).await.unwrap();
    assert_eq!(upkeep.dropped, vec![old_partition], "{upkeep:?}");
    let kept = partitions_of(&app, "memory_events").await;
    assert!(kept.contains(&"memory_events_default".to_owned()));
    assert!(kept.contains(&current));
    let events = activity(&admin, 100).await;
    let predicates: Vec<&str> = events
        .iter()
        .filter_map(|e| e["payload"]["after"]["predicate"].as_str())
        .collect();
    assert_eq!(predicates, vec!["older", "now"]);
    app.stop().await;
}
