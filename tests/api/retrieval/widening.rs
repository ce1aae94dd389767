//! Keyword queries widened by the model's word vectors (`domain::widening`): the indexer keeps
//! each tenant's vocabulary with the real model's vectors; a query word then also finds
//! memories of the words the model places beside it, below a memory of its own word, never
//! another tenant's words; off, nothing is widened and no word is kept; turned on over a
//! store, the rows embedded before get their words by a walk; a purge or an episode's expiry
//! takes the words no remaining memory holds, a tenant's purge all of them.

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::{Duration, Utc};
use serde_json::{Value, json};

use crate::helpers::*;

const WIDENING_ON: &str = "[retrieval.widening]\nenabled = true\n";
const WIDENING_OFF: &str = "[retrieval.widening]\nenabled = false\n";

const BAND: &str = "Our band still needs another instrument for the summer concert";
const VIOLIN: &str = "I have been practising the violin every evening";
const GUITAR: &str = "She finally bought a guitar from the shop downtown";
const KITCHEN: &str = "We repainted the kitchen cabinets on Sunday";

/// Stores `contents` as the health butler's episodes of `client`'s tenant and waits for
/// the indexer; answers their ids.
async fn store(app: &TestApp, client: &McpClient, contents: &[&str]) -> Vec<String> {
    let mut ids = Vec::new();
    for content in contents {
        let stored = client
            .ok(
                "memory_store_episode",
                json!({"butler": "health", "content": content}),
            )
            .await;
        ids.push(stored["id"].as_str().unwrap().to_owned());
    }
    app.engine().flush().await.unwrap();
    ids
}

/// The ids a keyword search for `query` finds, best first, with their keyword scores.
async fn keyword_search(client: &McpClient, query: &str) -> (Vec<(String, f64)>, Value) {
    let found = client
        .ok(
            "memory_search",
            json!({"query": query, "mode": "keyword", "butler": "health"}),
        )
        .await;
    let hits = found["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_owned(),
                r["scores"]["keyword"].as_f64().unwrap_or(0.0),
            )
        })
        .collect();
    (hits, found)
}

/// The tenant's vocabulary: each lexeme with the word it stands for, by lexeme.
async fn vocabulary(app: &TestApp, tenant: &str) -> Vec<(String, String)> {
    sqlx::query_as("SELECT lexeme, word FROM word_vectors WHERE tenant_id = $1 ORDER BY lexeme")
        .bind(tenant)
        .fetch_all(&mut app.sql().await)
        .await
        .unwrap()
}

fn has(vocabulary: &[(String, String)], lexeme: &str) -> bool {
    vocabulary.iter().any(|(l, _)| l == lexeme)
}

#[tokio::test]
async fn a_query_word_also_finds_the_words_the_model_places_beside_it() {
    let app = spawn_app_with(WIDENING_ON).await;
    let health = app.client(TENANT_A_HEALTH).await;
    let ids = store(&app, &health, &[BAND, VIOLIN, GUITAR, KITCHEN]).await;
    let [band, violin, guitar, kitchen] = &ids[..] else {
        unreachable!()
    };
    // Another tenant's word is no word of this tenant's.
    let other = app.client(TENANT_B_HEALTH).await;
    store(&app, &other, &["The cello lessons start in May"]).await;

    let words = vocabulary(&app, "tenant-a").await;
    // Stemmed as the full-text index stems them, spelled as written; no stop words.
    assert!(
        words.contains(&("practis".into(), "practising".into())),
        "{words:?}"
    );
    assert!(
        has(&words, "violin") && has(&words, "instrument"),
        "{words:?}"
    );
    assert!(!has(&words, "the") && !has(&words, "cello"), "{words:?}");
    let stored: i64 =
        sqlx::query_scalar("SELECT count(*) FROM word_vectors WHERE tenant_id = 'tenant-a'")
            .fetch_one(&mut app.sql().await)
            .await
            .unwrap();
    assert_eq!(stored as usize, words.len());

    let (hits, found) = keyword_search(&health, "instrument").await;
    let at = |id: &String| hits.iter().position(|(i, _)| i == id);
    // The memory of the query's own word first, then those of the words beside it.
    assert_eq!(at(band), Some(0), "{found}");
    for near in [violin, guitar] {
        let i = at(near).unwrap_or_else(|| panic!("{near} not found: {found}"));
        assert!(hits[i].1 > 0.0 && hits[i].1 < hits[0].1, "{found}");
    }
    assert_eq!(at(kitchen), None, "{found}");
    assert_eq!(hits.len(), 3, "{found}");
    app.stop().await;
}

/// A text searched for the first time has its words and their neighbours looked up in one
/// statement; searched again, its words come from the cache and only their neighbours from
/// the store. Both widen the same words, the query's longest when it has more than
/// `max_query_words` (ties by byte order): the same hits with the same keyword scores.
#[tokio::test]
async fn a_new_text_and_a_cached_one_are_widened_alike() {
    let app = spawn_app_with("[retrieval.widening]\nenabled = true\nmax_query_words = 2\n").await;
    let health = app.client(TENANT_A_HEALTH).await;
    let ids = store(&app, &health, &[BAND, VIOLIN, GUITAR, KITCHEN]).await;
    // "instrument" is the longest word; "band" and "shop" tie for the second place.
    let search = |limit: u32| {
        health.ok(
            "memory_search",
            json!({"query": "shop band instrument", "mode": "keyword", "butler": "health",
                   "limit": limit}),
        )
    };
    let scores = |found: &Value| -> Vec<(String, f64)> {
        found["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let id = r["id"].as_str().unwrap().to_owned();
                (id, r["scores"]["keyword"].as_f64().unwrap_or(0.0))
            })
            .collect()
    };
    let first = search(10).await;
    // Another limit: another request, so no answer is remembered for it; the same text.
    let again = search(9).await;
    let (first_hits, again_hits) = (scores(&first), scores(&again));
    assert!(!again_hits.is_empty() && again_hits.len() <= 9, "{again}");
    assert_eq!(
        first_hits[..again_hits.len()],
        again_hits[..],
        "{first}\n{again}"
    );
    // The violin was found through "instrument": the longest word was widened.
    let violin = first_hits.iter().find(|(id, _)| id == &ids[1]);
    assert!(violin.is_some_and(|(_, score)| *score > 0.0), "{first}");
    app.stop().await;
}

#[tokio::test]
async fn off_nothing_is_widened_and_no_word_is_kept() {
    let app = spawn_app_with(WIDENING_OFF).await;
    let health = app.client(TENANT_A_HEALTH).await;
    let ids = store(&app, &health, &[BAND, VIOLIN, GUITAR, KITCHEN]).await;
    let (hits, found) = keyword_search(&health, "instrument").await;
    assert_eq!(
        hits.iter().map(|(id, _)| id).collect::<Vec<_>>(),
        [&ids[0]],
        "{found}"
    );
    assert!(vocabulary(&app, "tenant-a").await.is_empty());
    app.stop().await;
}

#[tokio::test]
async fn a_purge_takes_the_words_no_remaining_memory_holds() {
    let app = spawn_app_with(WIDENING_ON).await;
    let health = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let ids = store(
        &app,
        &health,
        &[
            VIOLIN,
            "The violin teacher moved to Leeds",
            "Chemotherapy starts on Monday",
        ],
    )
    .await;
    let other = app.client(TENANT_B_HEALTH).await;
    store(&app, &other, &["Chemotherapy was moved to Tuesday"]).await;
    let before = vocabulary(&app, "tenant-a").await;
    assert!(
        has(&before, "chemotherapi") && has(&before, "monday"),
        "{before:?}"
    );

    admin
        .ok(
            "memory_purge",
            json!({"type": "episode", "id": ids[2], "reason": "asked"}),
        )
        .await;
    let after = vocabulary(&app, "tenant-a").await;
    assert!(
        !has(&after, "chemotherapi") && !has(&after, "monday"),
        "{after:?}"
    );
    // Nothing else went: every other word is still some memory's.
    let rest: Vec<_> = before
        .iter()
        .filter(|(l, _)| l != "chemotherapi" && l != "monday" && l != "start")
        .cloned()
        .collect();
    assert_eq!(after, rest);

    // The violin stays while the teacher's memory holds it; practising goes with its own.
    admin
        .ok(
            "memory_purge",
            json!({"type": "episode", "id": ids[0], "reason": "asked"}),
        )
        .await;
    let after = vocabulary(&app, "tenant-a").await;
    assert!(has(&after, "violin") && has(&after, "teacher"), "{after:?}");
    assert!(!has(&after, "practis") && !has(&after, "even"), "{after:?}");

    admin
        .ok(
            "memory_purge",
            json!({"tenant": "tenant-a", "reason": "account closed"}),
        )
        .await;
    assert!(vocabulary(&app, "tenant-a").await.is_empty());
    // Another tenant's words are its own.
    assert!(has(&vocabulary(&app, "tenant-b").await, "chemotherapi"));
    app.stop().await;
}

/// Whether the database says every embedded row's words are learnt.
async fn complete(app: &TestApp) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM vocabulary_complete)")
        .fetch_one(&mut app.sql().await)
        .await
        .unwrap()
}

#[tokio::test]
async fn memories_embedded_while_widening_was_off_get_their_words_when_it_is_on() {
    let app = spawn_app_with(WIDENING_OFF).await;
    let health = app.client(TENANT_A_HEALTH).await;
    let ids = store(&app, &health, &[BAND, VIOLIN, KITCHEN]).await;
    assert!(vocabulary(&app, "tenant-a").await.is_empty());
    assert!(!complete(&app).await);
    let database = (app.db_url.clone(), app.db.clone());
    app.stop().await;

    // Turned on: a walk learns the stored rows' words, once.
    let app = spawn_on_database(database, |config| {
        config.engine.retrieval.widening.enabled = true;
    })
    .await;
    app.engine().flush().await.unwrap();
    let words = vocabulary(&app, "tenant-a").await;
    assert!(
        has(&words, "violin") && has(&words, "instrument") && has(&words, "kitchen"),
        "{words:?}"
    );
    assert!(complete(&app).await);
    let health = app.client(TENANT_A_HEALTH).await;
    let (hits, found) = keyword_search(&health, "instrument").await;
    assert_eq!(
        hits.iter().map(|(id, _)| id).collect::<Vec<_>>(),
        [&ids[0], &ids[1]],
        "{found}"
    );
    let database = (app.db_url.clone(), app.db.clone());
    app.stop().await;

    // Off again: this instance embeds rows without their words, so the next start with
    // widening on must walk again.
    let app = spawn_on_database(database, |config| {
        config.engine.retrieval.widening.enabled = false;
    })
    .await;
    app.engine().flush().await.unwrap();
    assert!(!complete(&app).await);
    app.stop().await;
}

#[tokio::test]
async fn an_expired_episode_takes_the_words_no_other_memory_holds() {
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let app = spawn_app_at(WIDENING_ON, clock.clone()).await;
    let health = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    health
        .ok(
            "memory_store_episode",
            json!({"butler": "health", "content": "Chemotherapy starts on Monday", "ttl_days": 1}),
        )
        .await;
    store(&app, &health, &["The violin teacher starts on Monday"]).await;
    let before = vocabulary(&app, "tenant-a").await;
    assert!(
        has(&before, "chemotherapi") && has(&before, "violin"),
        "{before:?}"
    );

    clock.advance(Duration::days(2));
    let swept = admin.ok("memory_run_sweep", json!({})).await;
    let expired: u64 = swept["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["changes"]["expired_deleted"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(expired, 1, "{swept}");
    let after = vocabulary(&app, "tenant-a").await;
    // Its own word goes; the words the other episode holds too stay.
    assert!(!has(&after, "chemotherapi"), "{after:?}");
    assert!(
        has(&after, "violin") && has(&after, "start") && has(&after, "monday"),
        "{after:?}"
    );
    app.stop().await;
}
