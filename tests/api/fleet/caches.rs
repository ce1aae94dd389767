//! No stale reads across instances: a read on one instance that starts after a write
//! committed on another sees the write, even with that read's answer already cached (and
//! the tenant's memory types known empty) on the reading instance, whichever types the
//! write changed.

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::Utc;
use futures::future::join_all;
use serde_json::{Value, json};

use crate::helpers::*;

fn ids(result: &Value) -> Vec<&str> {
    result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a_write_on_one_instance_is_seen_at_once_by_cached_reads_on_another() {
    // The engine clock stands still: nothing but a write can take a cached answer away.
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let a = spawn_app_at("", clock.clone()).await;
    let b = spawn_beside(&a, "", clock).await;
    let on_a = a.client(TENANT_A_HEALTH).await;
    let on_b = b.client(TENANT_A_HEALTH).await;
    on_a.ok(
        "memory_store_episode",
        json!({"content": "Watered the tomatoes", "butler": "health"}),
    )
    .await;

    // Warm B: the answers are cached there, and B knows the tenant has no facts.
    let search = json!({"query": "zucchini harvest", "mode": "keyword", "limit": 10});
    let recall = json!({"topic": "zucchini harvest", "butler": "health"});
    let context = json!({"trigger_prompt": "zucchini harvest", "butler": "health"});
    for _ in 0..2 {
        assert!(ids(&on_b.ok("memory_search", search.clone()).await).is_empty());
        assert!(ids(&on_b.ok("memory_recall", recall.clone()).await).is_empty());
        let block = on_b.ok("memory_context", context.clone()).await;
        assert!(!block.to_string().contains("zucchini"), "{block}");
    }

    // A writes; B reads at once.
    let episode = on_a
        .ok(
            "memory_store_episode",
            json!({"content": "Picked the zucchini harvest", "butler": "health"}),
        )
        .await;
    let fact = on_a
        .ok(
            "memory_store_fact",
            json!({"subject": "garden", "predicate": "zucchini_harvest", "content": "twelve zucchini",
                   "butler": "health"}),
        )
        .await;
    let rule = on_a
        .ok(
            "memory_store_rule",
            json!({"content": "Mention the zucchini harvest when planning meals", "butler": "health"}),
        )
        .await;
    let found = on_b.ok("memory_search", search.clone()).await;
    let found = ids(&found);
    assert!(
        found.contains(&episode["id"].as_str().unwrap()),
        "{found:?}"
    );
    assert!(found.contains(&fact["id"].as_str().unwrap()), "{found:?}");
    assert!(found.contains(&rule["id"].as_str().unwrap()), "{found:?}");
    let recalled = on_b.ok("memory_recall", recall).await;
    let mut recalled = ids(&recalled);
    recalled.sort();
    let mut expected = vec![fact["id"].as_str().unwrap(), rule["id"].as_str().unwrap()];
    expected.sort();
    assert_eq!(recalled, expected);
    let block = on_b.ok("memory_context", context).await;
    assert!(block.to_string().contains("twelve zucchini"), "{block}");
    assert!(block.to_string().contains("planning meals"), "{block}");
    b.stop().await;
    a.stop().await;
}

#[tokio::test]
async fn reads_in_flight_together_share_a_look_and_each_sees_the_write() {
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let a = spawn_app_at("", clock.clone()).await;
    let b = spawn_beside(&a, "", clock).await;
    let on_a = a.client(TENANT_A_HEALTH).await;
    let readers = join_all((0..16).map(|_| b.client(TENANT_A_HEALTH))).await;
    let search = json!({"query": "parsnip", "mode": "keyword", "limit": 10});
    for round in 0..5 {
        // Every reader's answer is cached on B ...
        for reader in &readers {
            reader.ok("memory_search", search.clone()).await;
        }
        // ... A writes, then all of B's readers ask at once: each sees the write.
        let stored = on_a
            .ok(
                "memory_store_episode",
                json!({"content": format!("Parsnip bed {round} weeded"), "butler": "health"}),
            )
            .await;
        let id = stored["id"].as_str().unwrap().to_owned();
        let answers = join_all(
            readers
                .iter()
                .map(|r| r.ok("memory_search", search.clone())),
        )
        .await;
        for answer in &answers {
            assert!(
                ids(answer).contains(&id.as_str()),
                "round {round}: {answer}"
            );
        }
    }
    b.stop().await;
    a.stop().await;
}
