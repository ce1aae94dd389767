//! The writes of one shard, received by two instances at once, commit in one total order:
//! every transaction of the shard takes the next number of the shard's head, with no gaps,
//! and the audit stream in id order shows that order.

use std::collections::BTreeSet;
use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::Utc;
use futures::future::join_all;
use serde_json::json;

use super::count;
use crate::helpers::*;

#[tokio::test]
async fn writes_of_one_shard_through_two_instances_commit_in_one_order() {
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let a = spawn_app_at("", clock.clone()).await;
    let b = spawn_beside(&a, "", clock).await;
    // Four writers per instance, each storing episodes (the group commit's statement) and
    // facts (transactions that append events one by one), all for the one shard.
    let writers = [&a, &b, &a, &b, &a, &b, &a, &b]
        .into_iter()
        .enumerate()
        .map(|(w, app)| async move {
            let mcp = app.client(TENANT_A_HEALTH).await;
            let mut ids = Vec::new();
            for i in 0..15 {
                let stored = if i % 3 == 2 {
                    mcp.ok(
                        "memory_store_fact",
                        json!({"subject": "user", "predicate": format!("habit_{w}_{i}"),
                               "content": format!("habit {i} of writer {w}"), "butler": "health"}),
                    )
                    .await
                } else {
                    mcp.ok(
                        "memory_store_episode",
                        json!({"content": format!("episode {i} of writer {w}"), "butler": "health"}),
                    )
                    .await
                };
                ids.push(stored["id"].as_str().unwrap().to_owned());
            }
            ids
        });
    let acknowledged: Vec<String> = join_all(writers).await.into_iter().flatten().collect();
    assert_eq!(acknowledged.len(), 120);

    let mut sql = a.sql().await;
    let events: Vec<(i64, Option<i64>, String)> = sqlx::query_as(
        "SELECT id, shard_seq, entity_id::text FROM memory_events
         WHERE butler = 'health' ORDER BY id",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    // Every acknowledged write has its event, numbered.
    let logged: BTreeSet<&str> = events.iter().map(|(_, _, e)| e.as_str()).collect();
    for id in &acknowledged {
        assert!(logged.contains(id.as_str()), "no event for {id}");
    }
    let seqs: Vec<i64> = events
        .iter()
        .map(|(id, seq, _)| seq.unwrap_or_else(|| panic!("event {id} has no shard_seq")))
        .collect();
    // In id order the numbers never go back: the stream shows the shard's order ...
    assert!(
        seqs.windows(2).all(|w| w[0] <= w[1]),
        "shard numbers out of id order: {seqs:?}"
    );
    // ... and they are 1, 2, 3, ... with no gaps, up to the shard's head.
    let distinct: Vec<i64> = seqs
        .iter()
        .copied()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(distinct, (1..=distinct.len() as i64).collect::<Vec<_>>());
    let head = count(
        &a,
        "SELECT seq FROM shard_heads WHERE tenant_id = 'tenant-a' AND butler = 'health'",
    )
    .await;
    assert_eq!(head, distinct.len() as i64);
    b.stop().await;
    a.stop().await;
}

#[tokio::test]
async fn a_transaction_takes_one_number_per_shard_and_a_rolled_back_one_takes_none() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    mcp.ok(
        "memory_store_episode",
        json!({"content": "first", "butler": "health"}),
    )
    .await;
    let mut sql = app.sql().await;
    let append = "INSERT INTO memory_events (tenant_id, event_type, entity_type, entity_id,
                                            occurred_at, actor, butler)
                  VALUES ('tenant-a', 'episode_stored', 'episode', gen_random_uuid(), now(),
                          'test', $1)";
    // Two events of one shard and one of another in one transaction: one number each.
    let mut tx = sqlx::Connection::begin(&mut sql).await.unwrap();
    for butler in [Some("health"), Some("health"), None] {
        sqlx::query(append)
            .bind(butler)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    // Rolled back: the number it took is taken back.
    let mut tx = sqlx::Connection::begin(&mut sql).await.unwrap();
    sqlx::query(append)
        .bind("health")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let numbered: Vec<(Option<String>, i64)> = sqlx::query_as(
        "SELECT butler, shard_seq FROM memory_events WHERE tenant_id = 'tenant-a' ORDER BY id",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    assert_eq!(
        numbered,
        vec![
            (Some("health".to_owned()), 1),
            (Some("health".to_owned()), 2),
            (Some("health".to_owned()), 2),
            (None, 1),
        ]
    );
    let heads: Vec<(String, i64)> =
        sqlx::query_as("SELECT butler, seq FROM shard_heads ORDER BY butler")
            .fetch_all(&mut sql)
            .await
            .unwrap();
    assert_eq!(
        heads,
        vec![("_tenant".to_owned(), 1), ("health".to_owned(), 2)]
    );
    // A number below 1 is refused (the trigger numbers every event that comes without one).
    let forged = sqlx::query(
        "INSERT INTO memory_events (tenant_id, event_type, entity_type, entity_id, occurred_at,
                                    actor, butler, shard_seq)
         VALUES ('tenant-a', 'episode_stored', 'episode', gen_random_uuid(), now(), 'test',
                 'health', 0)",
    )
    .execute(&mut sql)
    .await;
    assert!(forged.is_err());
    app.stop().await;
}

#[tokio::test]
async fn each_head_counts_the_transactions_that_changed_each_memory_type() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    // The group commit's statement, then a transaction appending one fact's events.
    mcp.ok(
        "memory_store_episode",
        json!({"content": "first", "butler": "health"}),
    )
    .await;
    mcp.ok(
        "memory_store_fact",
        json!({"subject": "user", "predicate": "tea", "content": "green tea", "butler": "health"}),
    )
    .await;
    let mut sql = app.sql().await;
    let append = "INSERT INTO memory_events (tenant_id, event_type, entity_type, entity_id,
                                            occurred_at, actor, butler)
                  VALUES ('tenant-a', 'changed', $1, gen_random_uuid(), now(), 'test', $2)";
    // One transaction: two fact events and a rule event of one shard, an episode event of
    // another. Each type counts once per shard, however many events of it.
    let mut tx = sqlx::Connection::begin(&mut sql).await.unwrap();
    for (entity, butler) in [
        ("fact", Some("health")),
        ("rule", Some("health")),
        ("fact", Some("health")),
        ("episode", None),
    ] {
        sqlx::query(append)
            .bind(entity)
            .bind(butler)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    // Rolled back: counts nothing.
    let mut tx = sqlx::Connection::begin(&mut sql).await.unwrap();
    sqlx::query(append)
        .bind("rule")
        .bind("health")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let heads: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT butler, seq, episode_writes, fact_writes, rule_writes FROM shard_heads
         WHERE tenant_id = 'tenant-a' ORDER BY butler",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    assert_eq!(
        heads,
        vec![
            ("_tenant".to_owned(), 1, 1, 0, 0),
            ("health".to_owned(), 3, 1, 2, 1),
        ]
    );
    app.stop().await;
}
