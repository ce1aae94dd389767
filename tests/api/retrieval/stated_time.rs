//! The time a query states ("yesterday", "in March"), with a pinned clock: that time's
//! episodes and facts rank first (a superseded fact included) and the others keep a share of
//! their score; the answer names the time it read; a window the caller gives, a time with no
//! memories of its own, or `retrieval.stated_time_share = 1` moves nothing.

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::{contents, episode, fact};
use crate::helpers::*;

fn at(time: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(time)
        .unwrap()
        .with_timezone(&Utc)
}

/// The garden talks found, in order, each with its `time_weight`.
pub(super) fn weighed(result: &Value) -> Vec<(String, f64)> {
    result["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["content"].as_str().unwrap().contains("garden"))
        .map(|r| {
            let weight = r["scores"]["time_weight"].as_f64().unwrap();
            (r["content"].as_str().unwrap().to_owned(), weight)
        })
        .collect()
}

/// Two talks about the garden, on Monday 4 and Tuesday 5 May 2026, after three other
/// episodes on Friday the 1st (so that relevance is not two lists' extremes); now is
/// Wednesday 6 May.
async fn two_garden_talks(extra: &str) -> (TestApp, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(at("2026-05-01T10:00:00Z")));
    let app = spawn_app_at(extra, clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    for other in [
        "Booked a dentist appointment for the kids",
        "The car needs new winter tyres",
        "Read a chapter of the novel before bed",
    ] {
        episode(&mcp, other).await;
    }
    clock.set(at("2026-05-04T10:00:00Z"));
    episode(&mcp, "Talked with the landscaper about the garden layout").await;
    clock.set(at("2026-05-05T10:00:00Z"));
    episode(&mcp, "Talked with the landscaper about the garden budget").await;
    clock.set(at("2026-05-06T09:00:00Z"));
    embedded(&app, "tenant-a").await;
    (app, clock)
}

const LAYOUT: &str = "Talked with the landscaper about the garden layout";
const BUDGET: &str = "Talked with the landscaper about the garden budget";

async fn search(mcp: &McpClient, query: &str, more: Value) -> Value {
    let mut args = json!({"query": query, "types": ["episode"]});
    args.as_object_mut()
        .unwrap()
        .extend(more.as_object().unwrap().clone());
    mcp.ok("memory_search", args).await
}

#[tokio::test]
async fn the_episodes_of_the_time_a_query_states_rank_first() {
    let (app, _clock) = two_garden_talks("").await;
    let mcp = app.client(TENANT_A_HEALTH).await;

    let plain = search(&mcp, "what did we say about the garden", json!({})).await;
    assert_eq!(weighed(&plain).len(), 2, "{plain}");
    assert!(plain.get("stated_time").is_none(), "{plain}");
    assert!(weighed(&plain).iter().all(|(_, w)| *w == 1.0));

    let monday = search(
        &mcp,
        "what did we say about the garden the day before yesterday",
        json!({}),
    )
    .await;
    assert_eq!(
        weighed(&monday),
        vec![(LAYOUT.to_owned(), 1.0), (BUDGET.to_owned(), 0.5)],
        "{monday}"
    );
    assert_eq!(
        monday["stated_time"],
        json!({
            "phrase": "the day before yesterday",
            "since": "2026-05-04T00:00:00Z",
            "until": "2026-05-04T23:59:59.999999Z",
        })
    );
    // The same words, another day: the other talk leads.
    let yesterday = search(
        &mcp,
        "what did we say about the garden yesterday",
        json!({}),
    )
    .await;
    assert_eq!(
        weighed(&yesterday),
        vec![(BUDGET.to_owned(), 1.0), (LAYOUT.to_owned(), 0.5)],
        "{yesterday}"
    );
    let on_monday = search(&mcp, "the garden talk on Monday", json!({})).await;
    assert_eq!(contents(&on_monday)[0], LAYOUT, "{on_monday}");

    // A window the caller gives is what it means: the words are not read.
    let windowed = search(
        &mcp,
        "the garden talk on Monday",
        json!({"since": "2026-05-05"}),
    )
    .await;
    assert_eq!(contents(&windowed), vec![BUDGET]);
    assert!(windowed.get("stated_time").is_none(), "{windowed}");

    // A time with no memories of its own moves nothing, and is still named.
    let march = search(&mcp, "what did we say about the garden in March", json!({})).await;
    assert_eq!(weighed(&march).len(), 2, "{march}");
    assert!(
        march["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["scores"]["time_weight"] == 1.0)
    );
    assert_eq!(march["stated_time"]["phrase"], "in March");
    assert_eq!(march["stated_time"]["since"], "2026-03-01T00:00:00Z");
}

#[tokio::test]
async fn a_fact_true_in_the_stated_time_answers_before_the_one_true_now() {
    let clock = Arc::new(ManualClock::new(at("2026-03-10T08:00:00Z")));
    let app = spawn_app_at("", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let tea = fact(&mcp, "preferred drink", "Tea, always with milk").await;
    clock.set(at("2026-04-01T08:00:00Z"));
    let coffee = fact(&mcp, "preferred drink", "Coffee, black, no sugar").await;
    clock.set(at("2026-05-06T09:00:00Z"));
    embedded(&app, "tenant-a").await;
    let recall = |topic: &'static str| {
        let mcp = &mcp;
        async move { mcp.ok("memory_recall", json!({"topic": topic})).await }
    };

    let now = recall("what drink does the user prefer").await;
    assert_eq!(super::ids(&now), vec![coffee.clone()], "live facts only");

    let then = recall("what drink did the user prefer in March").await;
    assert_eq!(
        super::ids(&then),
        vec![tea.clone(), coffee.clone()],
        "{then}"
    );
    assert_eq!(then["results"][0]["validity"], "superseded");
    assert_eq!(then["results"][0]["scores"]["time_weight"], 1.0);
    assert_eq!(then["results"][1]["scores"]["time_weight"], 0.5);
    assert_eq!(then["stated_time"]["phrase"], "in March");
}

#[tokio::test]
async fn a_share_of_one_reads_no_time_from_queries() {
    let (app, _clock) = two_garden_talks("[retrieval]\nstated_time_share = 1.0\n").await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    for query in ["the garden talk on Monday", "the garden talk yesterday"] {
        let found = search(&mcp, query, json!({})).await;
        assert!(found.get("stated_time").is_none(), "{found}");
        assert!(weighed(&found).iter().all(|(_, w)| *w == 1.0), "{found}");
    }
}

/// The health butler's context block for `prompt`.
async fn context_text(mcp: &McpClient, prompt: &str) -> String {
    let block = mcp
        .ok(
            "memory_context",
            json!({"trigger_prompt": prompt, "butler": "health"}),
        )
        .await;
    block["text"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_context_block_lists_the_stated_times_episodes_first() {
    let (app, _clock) = two_garden_talks("").await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let first = |prompt: &'static str| {
        let mcp = &mcp;
        async move {
            let text = context_text(mcp, prompt).await;
            let (layout, budget) = (text.find(LAYOUT).unwrap(), text.find(BUDGET).unwrap());
            if layout < budget { LAYOUT } else { BUDGET }
        }
    };
    assert_eq!(
        first("What did we settle about the garden yesterday?").await,
        BUDGET
    );
    assert_eq!(
        first("What did we settle about the garden the day before yesterday?").await,
        LAYOUT
    );
}

const GREENHOUSE: &str = "Watered the tomatoes in the greenhouse";

#[tokio::test]
async fn a_prompt_about_today_is_not_a_look_back() {
    let (app, clock) = two_garden_talks("").await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    // A talk this morning, less relevant to the prompt than the older ones.
    clock.set(at("2026-05-06T08:00:00Z"));
    episode(&mcp, GREENHOUSE).await;
    clock.set(at("2026-05-06T09:00:00Z"));
    embedded(&app, "tenant-a").await;
    let order = |prompt: &'static str| {
        let mcp = &mcp;
        async move {
            let text = context_text(mcp, prompt).await;
            text.find(BUDGET).unwrap() < text.find(GREENHOUSE).unwrap()
        }
    };
    assert!(order("What did the landscaper say about the garden budget?").await);
    assert!(
        order("What did the landscaper say about the garden budget today?").await,
        "a prompt's today ranks this morning's talk first"
    );
    // A search asks memory: its today is a time to look in.
    let found = search(
        &mcp,
        "what did the landscaper say about the garden budget today",
        json!({}),
    )
    .await;
    assert_eq!(found["stated_time"]["phrase"], "today");
}

#[tokio::test]
async fn the_dashboards_search_says_what_time_it_read() {
    let (app, _clock) = two_garden_talks("").await;
    let admin = crate::dashboard::sign_in(&app, TENANT_A_ADMIN).await;
    let found = crate::dashboard::page(
        &app,
        Some(&admin),
        "/memory/search?q=the+garden+talk+yesterday&type=episode",
    )
    .await;
    assert_eq!(found.status, 200, "{}", found.body);
    assert!(
        found
            .body
            .contains("Read as a time: “yesterday”, 5 May 2026 00:00 to 5 May 2026 23:59 UTC."),
        "{}",
        found.body
    );
    let (budget, layout) = (
        found.body.find("garden budget").unwrap(),
        found.body.find("garden layout").unwrap(),
    );
    assert!(budget < layout, "yesterday's talk first");
    assert_eq!(
        found.body.matches("outside that time").count(),
        1 + 3,
        "{}",
        found.body
    );
    let plain =
        crate::dashboard::page(&app, Some(&admin), "/memory/search?q=the+garden+talk").await;
    assert!(!plain.body.contains("Read as a time"));
    assert!(!plain.body.contains("outside that time"));
}
