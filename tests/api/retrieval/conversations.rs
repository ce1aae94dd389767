//! Episodes a butler stores without a `session_id` close together in time are one
//! conversation (`episodes.conversation_gap_secs`): a search that finds one brings the
//! episodes just before and after it, as a session would, and nothing stored long after,
//! nothing of a session, nothing when the gap is 0.

use std::sync::Arc;

use butler_memory_actors::{Clock, ManualClock};
use chrono::{Duration, Utc};
use serde_json::{Value, json};

use crate::helpers::*;

/// Stores the episodes at their times (minutes after the start), each with its session or
/// none; answers their ids.
async fn store(
    app: &TestApp,
    clock: &ManualClock,
    episodes: &[(i64, Option<&str>, &str)],
) -> Vec<String> {
    let mcp = app.client(TENANT_A_ADMIN).await;
    let start = clock.now();
    let mut ids = Vec::new();
    for (minutes, session, content) in episodes {
        clock.set(start + Duration::minutes(*minutes));
        let mut args = json!({"butler": "health", "content": content});
        if let Some(session) = session {
            args["session_id"] = json!(session);
        }
        let episode = mcp.ok("memory_store_episode", args).await;
        ids.push(episode["id"].as_str().unwrap().to_owned());
    }
    ids
}

/// The `session_neighbour` score of each result, by id.
fn neighbour_scores(found: &Value) -> Vec<(String, f64)> {
    found["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_owned(),
                r["scores"]["session_neighbour"].as_f64().unwrap_or(0.0),
            )
        })
        .collect()
}

const DAY: &[(i64, Option<&str>, &str)] = &[
    (0, None, "We packed the tent and the sleeping bags"),
    (1, None, "The ferry to the island leaves at seven"),
    (1, Some("work"), "The quarterly report is due on Friday"),
    (2, None, "Dinner was grilled fish by the harbour"),
    (180, None, "Bought a new lamp for the study"),
];

/// A service with `conversation_gap_secs = gap`, the `DAY` stored in it (their ids), and a
/// keyword search that matches only the ferry.
async fn search_the_day(gap: f64) -> (TestApp, Vec<String>, Value) {
    search(gap, DAY, "ferry island").await
}

/// A service with `conversation_gap_secs = gap`, `day` stored in it (their ids), and the
/// health butler's episodes searched for `query` by keyword.
async fn search(
    gap: f64,
    day: &[(i64, Option<&str>, &str)],
    query: &str,
) -> (TestApp, Vec<String>, Value) {
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let config = format!("[episodes]\nconversation_gap_secs = {gap:?}\n");
    let app = spawn_app_at(&config, clock.clone()).await;
    let ids = store(&app, &clock, day).await;
    let found = app
        .client(TENANT_A_ADMIN)
        .await
        .ok(
            "memory_search",
            json!({"query": query, "mode": "keyword", "butler": "health"}),
        )
        .await;
    (app, ids, found)
}

#[tokio::test]
async fn episodes_stored_close_together_without_a_session_are_one_conversation() {
    // The documented default (the test configuration turns it off).
    let (app, ids, found) = search_the_day(1800.0).await;
    let [tent, ferry, report, dinner, lamp] = &ids[..] else {
        unreachable!()
    };
    let scores = neighbour_scores(&found);
    let score = |id: &String| scores.iter().find(|(i, _)| i == id).map(|(_, s)| *s);
    assert_eq!(score(ferry), Some(0.0), "the match itself: {found}");
    // The turns just before and after it, no list found them, come along with its relevance.
    for neighbour in [tent, dinner] {
        let inherited = score(neighbour).unwrap_or_else(|| panic!("{neighbour}: {found}"));
        assert!(inherited > 0.0, "{found}");
    }
    // Not an episode of a session stored in between, nor one stored three hours later.
    assert_eq!(score(report), None, "{found}");
    assert_eq!(score(lamp), None, "{found}");
    app.stop().await;
}

#[tokio::test]
async fn without_a_gap_only_a_session_makes_a_conversation() {
    let (app, ids, found) = search_the_day(0.0).await;
    assert_eq!(
        neighbour_scores(&found),
        vec![(ids[1].clone(), 0.0)],
        "{found}"
    );
    app.stop().await;
}

/// One search that finds an episode of a session and one without brings both kinds of
/// neighbours along (the statement then holds both kinds of turns).
#[tokio::test]
async fn a_search_finding_both_kinds_brings_both_kinds_of_neighbours() {
    let mut day = DAY.to_vec();
    day.push((3, Some("work"), "Charts for the slides are still missing"));
    let (app, ids, found) = search(1800.0, &day, "ferry island quarterly report").await;
    let [tent, ferry, report, dinner, lamp, charts] = &ids[..] else {
        unreachable!()
    };
    let scores = neighbour_scores(&found);
    let score = |id: &String| scores.iter().find(|(i, _)| i == id).map(|(_, s)| *s);
    assert_eq!(score(ferry), Some(0.0), "a match: {found}");
    assert_eq!(score(report), Some(0.0), "a match: {found}");
    // The ferry's conversation without a session, and the report's session.
    for neighbour in [tent, dinner, charts] {
        let inherited = score(neighbour).unwrap_or_else(|| panic!("{neighbour}: {found}"));
        assert!(inherited > 0.0, "{found}");
    }
    assert_eq!(score(lamp), None, "{found}");
    app.stop().await;
}

/// Episodes without a session stored one after another are one conversation only if they
/// also happened close together: an import of dated conversations stored in one go keeps
/// them apart, in what a search brings along and in the turn an episode is embedded with.
#[tokio::test]
async fn episodes_stored_together_that_happened_apart_are_not_one_conversation() {
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let app = spawn_app_at(
        "[episodes]\nconversation_gap_secs = 1800.0\n",
        clock.clone(),
    )
    .await;
    let mcp = app.client(TENANT_A_ADMIN).await;
    let start = clock.now();
    let mut ids = Vec::new();
    for (minutes, butler, occurred_at, content) in [
        (
            0,
            "health",
            "2025-03-01T10:00:00Z",
            "We packed the tent and the sleeping bags",
        ),
        (
            1,
            "health",
            "2025-03-01T10:01:00Z",
            "The ferry to the island leaves at seven",
        ),
        (
            2,
            "health",
            "2025-06-20T18:00:00Z",
            "Bought a new lamp for the study",
        ),
        // The same words alone, in a butler of their own: embedded without a turn before.
        (
            3,
            "finance",
            "2025-06-20T18:00:00Z",
            "Bought a new lamp for the study",
        ),
    ] {
        clock.set(start + Duration::minutes(minutes));
        let args = json!({"butler": butler, "content": content, "occurred_at": occurred_at});
        let episode = mcp.ok("memory_store_episode", args).await;
        ids.push(episode["id"].as_str().unwrap().to_owned());
    }
    let [tent, ferry, lamp, lone_lamp] = &ids[..] else {
        unreachable!()
    };
    let found = mcp
        .ok(
            "memory_search",
            json!({"query": "ferry island", "mode": "keyword", "butler": "health"}),
        )
        .await;
    let scores = neighbour_scores(&found);
    let score = |id: &String| scores.iter().find(|(i, _)| i == id).map(|(_, s)| *s);
    assert_eq!(score(ferry), Some(0.0), "the match itself: {found}");
    assert!(
        score(tent).is_some_and(|s| s > 0.0),
        "the turn before it: {found}"
    );
    assert_eq!(
        score(lamp),
        None,
        "stored next, happened months later: {found}"
    );

    // The lamp is embedded as the same words alone are, not blended with the ferry's turn.
    embedded(&app, "tenant-a").await;
    let distance = |a: &String, b: &String| {
        let (a, b) = (
            uuid::Uuid::parse_str(a).unwrap(),
            uuid::Uuid::parse_str(b).unwrap(),
        );
        let app = &app;
        async move {
            sqlx::query_scalar::<_, f64>(
                "SELECT a.embedding::vector <=> b.embedding::vector
                 FROM episodes a, episodes b WHERE a.id = $1 AND b.id = $2",
            )
            .bind(a)
            .bind(b)
            .fetch_one(&mut app.sql().await)
            .await
            .unwrap()
        }
    };
    let apart = distance(lamp, lone_lamp).await;
    assert!(apart < 1e-3, "cosine distance {apart}");
    // While the ferry is embedded with the tent's turn before it.
    let alone = mcp
        .ok(
            "memory_store_episode",
            json!({"butler": "finance", "content": "The ferry to the island leaves at seven",
                   "occurred_at": "2024-01-01T00:00:00Z"}),
        )
        .await;
    embedded(&app, "tenant-a").await;
    let blended = distance(ferry, &alone["id"].as_str().unwrap().to_owned()).await;
    assert!(blended > 0.01, "cosine distance {blended}");
    app.stop().await;
}
