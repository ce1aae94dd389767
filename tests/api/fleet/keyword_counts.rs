//! Keyword statistics kept once for the fleet (migration 27, `store/keyword_counts.rs`): a
//! count one instance made is taken by another while it is fresh (the other does not count
//! again), a stale one is counted again and replaced, a rare word's count (cheaper to make
//! than to share) is kept by no one, and an instance alone on its database keeps none.

use std::sync::Arc;

use butler_memory_actors::{DatabaseSharing, ManualClock};
use chrono::{DateTime, Duration, SubsecRound, Utc};
use serde_json::json;

use crate::helpers::*;

/// When the tenant's episode counts were made: the collection statistics and the word.
async fn counted_at(app: &TestApp, word: &str) -> (Option<DateTime<Utc>>, Option<DateTime<Utc>>) {
    let mut sql = app.sql().await;
    let corpus = sqlx::query_scalar(
        "SELECT counted_at FROM corpus_counts WHERE tenant_id = 'tenant-a' AND memory_type = 'episode'",
    )
    .fetch_optional(&mut sql)
    .await
    .unwrap();
    let word = sqlx::query_scalar(
        "SELECT counted_at FROM word_counts
         WHERE tenant_id = 'tenant-a' AND memory_type = 'episode' AND word = $1",
    )
    .bind(word)
    .fetch_optional(&mut sql)
    .await
    .unwrap();
    (corpus, word)
}

#[tokio::test]
async fn a_fresh_count_of_one_instance_is_taken_by_another_and_a_stale_one_made_again() {
    // PostgreSQL keeps microseconds.
    let t = Utc::now().trunc_subsecs(6);
    let clock = Arc::new(ManualClock::new(t));
    let a = spawn_app_at("", clock.clone()).await;
    let b = spawn_beside(&a, "", clock.clone()).await;
    let on_a = a.client(TENANT_A_HEALTH).await;
    let on_b = b.client(TENANT_A_HEALTH).await;
    // "tomato" is common enough to be worth sharing (50 memories); "basil" is not.
    let mut contents: Vec<String> = (0..49)
        .map(|i| format!("Watered the tomatoes, bed {i}"))
        .collect();
    contents.push("Staked the tomatoes".into());
    contents.push("Picked basil".into());
    for content in &contents {
        on_a.ok(
            "memory_store_episode",
            json!({"content": content, "butler": "health"}),
        )
        .await;
    }
    let search =
        |query: &str| json!({"query": query, "mode": "keyword", "types": ["episode"], "limit": 10});

    // A counts, for the fleet; a rare word it counts for itself.
    let found = on_a.ok("memory_search", search("tomatoes")).await;
    assert_eq!(found["count"], 10, "{found}");
    assert_eq!(counted_at(&a, "tomato").await, (Some(t), Some(t)));
    let found = on_a.ok("memory_search", search("basil")).await;
    assert_eq!(found["count"], 1, "{found}");
    assert_eq!(
        counted_at(&a, "basil").await.1,
        None,
        "a rare word is not shared"
    );

    // Half a second later (a small tenant's counts are trusted for a second), B
    // answers with A's counts: it counts nothing, so nothing newer is kept.
    clock.set(t + Duration::milliseconds(500));
    let found = on_b.ok("memory_search", search("tomatoes")).await;
    assert_eq!(found["count"], 10, "{found}");
    assert_eq!(counted_at(&b, "tomato").await, (Some(t), Some(t)));

    // Past the window, B counts again (another query: the answer above is cached), and its
    // count replaces A's.
    let later = t + Duration::seconds(5);
    clock.set(later);
    let found = on_b
        .ok("memory_search", search("the tomatoes we watered"))
        .await;
    assert_eq!(found["count"], 10, "{found}");
    assert_eq!(counted_at(&a, "tomato").await, (Some(later), Some(later)));
    b.stop().await;
    a.stop().await;
}

#[tokio::test]
async fn an_instance_alone_on_its_database_keeps_no_counts_for_a_fleet() {
    let database = cluster().fresh_database().await;
    let app = spawn_on_database((database.url, database.options), |config| {
        config.edge.database.shared = DatabaseSharing::Never;
    })
    .await;
    let health = app.client(TENANT_A_HEALTH).await;
    // Common enough that a fleet would keep its count.
    for i in 0..50 {
        health
            .ok(
                "memory_store_episode",
                json!({"content": format!("Watered the tomatoes, bed {i}"), "butler": "health"}),
            )
            .await;
    }
    let found = health
        .ok(
            "memory_search",
            json!({"query": "tomatoes", "mode": "keyword", "types": ["episode"], "limit": 10}),
        )
        .await;
    assert_eq!(found["count"], 10, "{found}");
    assert_eq!(counted_at(&app, "tomato").await, (None, None));
    app.stop().await;
}
