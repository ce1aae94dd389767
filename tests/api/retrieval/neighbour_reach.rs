//! A found episode brings the turns near it in its session, up to
//! `retrieval.session_neighbour_reach` on each side (for the more relevant half of the
//! episodes found; the rest bring one), each with a share of its relevance that shrinks with
//! the distance (`session_neighbour_decay` per turn beyond the first); turns further away
//! come with nothing.

use serde_json::{Value, json};

use crate::helpers::*;

/// The trip: seven turns of which only the middle one says "ferry", among few words.
const TRIP: [&str; 7] = [
    "We booked the cottage in March",
    "We packed the tent and the sleeping bags",
    "The car was full by noon",
    "The ferry to the island leaves at seven",
    "Dinner was grilled fish by the harbour",
    "The kids fell asleep on the sofa",
    "We drove home on Sunday evening",
];

/// Stores `contents` in order as one session of the health butler; answers their ids.
async fn store_session(mcp: &McpClient, session: &str, contents: &[&str]) -> Vec<String> {
    let mut ids = Vec::new();
    for content in contents {
        let episode = mcp
            .ok(
                "memory_store_episode",
                json!({"butler": "health", "session_id": session, "content": content}),
            )
            .await;
        ids.push(episode["id"].as_str().unwrap().to_owned());
    }
    ids
}

/// A keyword search for the ferry.
async fn search_ferry(mcp: &McpClient) -> Value {
    mcp.ok(
        "memory_search",
        json!({"query": "ferry", "mode": "keyword", "butler": "health"}),
    )
    .await
}

/// The trip stored; answers its ids and a keyword search for the ferry.
async fn search_the_trip(app: &TestApp) -> (Vec<String>, Value) {
    let mcp = app.client(TENANT_A_ADMIN).await;
    let ids = store_session(&mcp, "trip", &TRIP).await;
    (ids, search_ferry(&mcp).await)
}

/// Each result's `session_neighbour` score, by id.
fn neighbour_score(found: &Value, id: &str) -> Option<f64> {
    found["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id)
        .map(|r| r["scores"]["session_neighbour"].as_f64().unwrap())
}

/// The positions among `ids` of the episodes `found` brought with a neighbour score.
fn brought(found: &Value, ids: &[String]) -> Vec<usize> {
    (0..ids.len())
        .filter(|i| neighbour_score(found, &ids[*i]).is_some())
        .collect()
}

#[tokio::test]
async fn turns_two_away_come_along_with_a_smaller_share() {
    let app =
        spawn_app_with("[retrieval]\nsession_neighbour_reach = 2\nsession_neighbour_decay = 0.5")
            .await;
    let (ids, found) = search_the_trip(&app).await;
    let score = |i: usize| neighbour_score(&found, &ids[i]);
    assert_eq!(score(3), Some(0.0), "the match itself: {found}");
    let beside = score(2).unwrap_or_else(|| panic!("{found}"));
    assert!(beside > 0.0, "{found}");
    assert_eq!(score(4), Some(beside), "{found}");
    // Two turns away: half of what the turn beside it got.
    for two_away in [1, 5] {
        let share = score(two_away).unwrap_or_else(|| panic!("{found}"));
        assert!(
            (share - 0.5 * beside).abs() < 1e-9,
            "{share} vs {beside}: {found}"
        );
    }
    // Three turns away: nothing.
    assert_eq!(score(0), None, "{found}");
    assert_eq!(score(6), None, "{found}");
    app.stop().await;
}

#[tokio::test]
async fn a_reach_of_one_brings_only_the_turns_beside() {
    let app = spawn_app_with("[retrieval]\nsession_neighbour_reach = 1").await;
    let (ids, found) = search_the_trip(&app).await;
    assert_eq!(brought(&found, &ids), vec![2, 3, 4], "{found}");
    app.stop().await;
}

#[tokio::test]
async fn only_the_more_relevant_half_reaches_two_turns() {
    let app = spawn_app_with("[retrieval]\nsession_neighbour_reach = 2").await;
    // The trip's ferry turn says "ferry" once among few words; a second session's middle turn
    // says it once among many, so it ranks below.
    let mcp = app.client(TENANT_A_ADMIN).await;
    let trip = store_session(&mcp, "trip", &TRIP).await;
    let work = store_session(
        &mcp,
        "work",
        &[
            "The printer on the third floor jammed again",
            "Lunch was a sandwich at the desk",
            "Someone mentioned the ferry strike during a very long and rather tedious budget meeting",
            "The quarterly numbers look better than expected",
            "Left the office late on Thursday",
        ],
    )
    .await;
    let found = search_ferry(&mcp).await;
    // Two found episodes: the better (the trip's) brings two turns each side, the other one.
    assert_eq!(brought(&found, &trip), vec![1, 2, 3, 4, 5], "{found}");
    assert_eq!(brought(&found, &work), vec![1, 2, 3], "{found}");
    app.stop().await;
}
