//! memory_search and memory_recall through MCP: each mode finds what it should, scope and
//! tenant boundaries hold, invalid states never appear, ordering is explainable and stable.

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::Duration;
use serde_json::{Value, json};

use crate::helpers::result_ids as ids;
use crate::helpers::*;

mod conversations;
mod half_precision;
mod intent_routing;
mod keyword_statistics;
mod neighbour_reach;
mod occurred_at;
mod second_stage;
mod sketches;
mod stated_time;
mod time_aware;
mod widening;

fn contents(result: &Value) -> Vec<String> {
    result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["content"].as_str().unwrap().to_owned())
        .collect()
}

/// The value of the series `series` (name and labels, as exposed) in a scrape; 0 if absent.
fn counter(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.split_whitespace().next() == Some(series))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .unwrap_or(0.0)
}

async fn fact(mcp: &McpClient, predicate: &str, content: &str) -> String {
    let stored = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": predicate, "content": content}),
        )
        .await;
    stored["id"].as_str().unwrap().to_owned()
}

/// Stores an episode of the health butler; returns its id.
async fn episode(mcp: &McpClient, content: &str) -> String {
    let stored = mcp
        .ok(
            "memory_store_episode",
            json!({"butler": "health", "content": content}),
        )
        .await;
    stored["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn each_mode_finds_what_it_should() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_ADMIN).await;
    let code = fact(
        &mcp,
        "wifi_network",
        "The wifi network is called Plover-7731",
    )
    .await;
    let hiking = fact(
        &mcp,
        "weekend_activity",
        "Goes hiking in the mountains every weekend",
    )
    .await;
    for (p, c) in [
        ("pet", "Has a cat named Miso"),
        ("birds", "Likes watching birds at the lake"),
        ("job", "Works as a nurse at the city hospital"),
        ("drink", "Drinks green tea in the afternoon"),
    ] {
        fact(&mcp, p, c).await;
    }
    app.engine().flush().await.unwrap();

    // An exact, rare term: full text finds it; it is all full text finds.
    let keyword = mcp
        .ok(
            "memory_search",
            json!({"query": "Plover-7731", "mode": "keyword"}),
        )
        .await;
    assert_eq!(ids(&keyword), vec![code.clone()], "{keyword}");
    assert_eq!(keyword["mode"], "keyword");
    // A paraphrase with no word in common: only meaning finds it.
    let paraphrase = "outdoor trekking on Saturdays";
    let keyword = mcp
        .ok(
            "memory_search",
            json!({"query": paraphrase, "mode": "keyword"}),
        )
        .await;
    assert!(ids(&keyword).is_empty(), "{keyword}");
    let semantic = mcp
        .ok(
            "memory_search",
            json!({"query": paraphrase, "mode": "semantic", "limit": 1}),
        )
        .await;
    assert_eq!(ids(&semantic), vec![hiking.clone()], "{semantic}");
    // Hybrid finds both kinds at once.
    let hybrid = mcp
        .ok(
            "memory_search",
            json!({"query": "Plover-7731 outdoor trekking on Saturdays", "limit": 2}),
        )
        .await;
    let found = ids(&hybrid);
    assert!(found.contains(&code) && found.contains(&hiking), "{hybrid}");
    assert_eq!(hybrid["mode"], "hybrid");
    assert_eq!(hybrid["degraded"], false);

    // Every result explains its score.
    let first = &hybrid["results"][0];
    let s = &first["scores"];
    let weighted = 0.4 * s["relevance"].as_f64().unwrap()
        + 0.3 * s["importance"].as_f64().unwrap()
        + 0.2 * s["recency"].as_f64().unwrap()
        + 0.1 * s["confidence"].as_f64().unwrap();
    assert!(
        (first["score"].as_f64().unwrap() - weighted).abs() < 1e-9,
        "{first}"
    );
    assert_eq!(first["type"], "fact");
    assert!(first["metadata"].is_object());
    assert_eq!(first["subject"], "user");
    app.stop().await;
}

#[tokio::test]
async fn searches_stay_inside_the_tenant_and_the_callers_scopes() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let general = app.client(TENANT_A_GENERAL).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let other_tenant = app.client(TENANT_B_HEALTH).await;
    health
        .ok("memory_store_fact", json!({"subject": "user", "predicate": "blood_type", "content": "Blood type is O negative", "scope": "health"}))
        .await;
    health
        .ok("memory_store_fact", json!({"subject": "user", "predicate": "home_city", "content": "Lives in Oslo, blood bank nearby", "scope": "global"}))
        .await;
    health
        .ok(
            "memory_store_episode",
            json!({"content": "Discussed blood test results", "butler": "health"}),
        )
        .await;
    app.engine().flush().await.unwrap();
    let query = json!({"query": "blood", "mode": "keyword"});
    assert_eq!(health.ok("memory_search", query.clone()).await["count"], 3);
    // Another butler sees the global fact only: not the health scope, not health's episodes.
    let seen = general.ok("memory_search", query.clone()).await;
    assert_eq!(
        contents(&seen),
        vec!["Lives in Oslo, blood bank nearby"],
        "{seen}"
    );
    assert_eq!(admin.ok("memory_search", query.clone()).await["count"], 3);
    let narrowed = admin
        .ok(
            "memory_search",
            json!({"query": "blood", "mode": "keyword", "scope": "health", "types": ["fact"]}),
        )
        .await;
    assert_eq!(narrowed["count"], 1);
    assert_eq!(
        other_tenant.ok("memory_search", query.clone()).await["count"],
        0
    );
    let err = general
        .err(
            "memory_search",
            json!({"query": "blood", "scope": "health"}),
        )
        .await;
    assert_eq!(err["class"], "forbidden");
    app.stop().await;
}

#[tokio::test]
async fn invalid_states_never_appear_and_fading_needs_min_confidence_zero() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let marker = "zebra";
    let old = fact(
        &mcp,
        "fav_animal",
        &format!("Favourite animal was the {marker}"),
    )
    .await;
    let current = fact(
        &mcp,
        "fav_animal",
        &format!("Favourite animal is the {marker} finch"),
    )
    .await;
    let retracted = fact(&mcp, "zoo", &format!("Visited the {marker} enclosure")).await;
    let expired = fact(&mcp, "zoo_trip", &format!("Plans a {marker} safari")).await;
    let ephemeral = mcp
        .ok("memory_store_fact", json!({"subject": "user", "predicate": "today", "content": format!("Saw a {marker} on TV"), "permanence": "ephemeral"}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let rule = mcp
        .ok(
            "memory_store_rule",
            json!({"content": format!("Mention the {marker} gently")}),
        )
        .await;
    let episode = mcp
        .ok(
            "memory_store_episode",
            json!({"content": format!("Talked about a {marker}"), "butler": "health"}),
        )
        .await;
    let short = mcp
        .ok(
            "memory_store_episode",
            json!({"content": format!("A {marker} joke"), "butler": "health", "ttl_days": 1}),
        )
        .await;
    for (memory_type, id) in [
        ("fact", retracted.as_str()),
        ("rule", rule["id"].as_str().unwrap()),
        ("episode", episode["id"].as_str().unwrap()),
    ] {
        mcp.ok("memory_forget", json!({"type": memory_type, "id": id}))
            .await;
    }
    // No sweep has run: expiry set as the sweep would set it.
    let mut sql = app.sql().await;
    sqlx::query("UPDATE facts SET validity = 'expired' WHERE id = $1::uuid")
        .bind(&expired)
        .execute(&mut sql)
        .await
        .unwrap();
    // Two days on: the one-day episode has expired, the ephemeral fact has decayed to
    // exp(-0.1 * 2) = 0.82 (still above 0.2); at 20 days it is 0.135: fading.
    clock.advance(Duration::days(2));
    let query = json!({"query": marker, "mode": "keyword"});
    let result = mcp.ok("memory_search", query.clone()).await;
    let found = ids(&result);
    assert_eq!(found.len(), 2, "{result}");
    assert!(found.contains(&current) && found.contains(&ephemeral));
    for gone in [
        &old,
        &retracted,
        &expired,
        rule["id"].as_str().unwrap(),
        episode["id"].as_str().unwrap(),
        short["id"].as_str().unwrap(),
    ] {
        assert!(!found.contains(&gone.to_string()));
    }
    clock.advance(Duration::days(18));
    let found = ids(&mcp.ok("memory_search", query.clone()).await);
    assert_eq!(found, vec![current.clone()], "the faded fact is left out");
    let with_fading = mcp
        .ok(
            "memory_search",
            json!({"query": marker, "mode": "keyword", "min_confidence": 0}),
        )
        .await;
    let found = ids(&with_fading);
    assert!(
        found.contains(&ephemeral) && found.contains(&current),
        "{with_fading}"
    );
    assert!(!found.contains(&old) && !found.contains(&retracted));
    let faded = with_fading["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == ephemeral.as_str())
        .unwrap();
    assert!(
        (faded["effective_confidence"].as_f64().unwrap() - (-0.1f64 * 20.0).exp()).abs() < 1e-6
    );
    app.stop().await;
}

#[tokio::test]
async fn ties_break_on_created_at_then_id_and_clusters_are_capped() {
    let clock = Arc::new(ManualClock::new(t0()));
    // Without recency, memories that say the same thing score the same.
    let app = spawn_app_at("[retrieval.score_weights]\nrecency = 0.0", clock.clone()).await;
    let mcp = app.client(TENANT_A_ADMIN).await;
    let mut same_time = Vec::new();
    for i in 0..3 {
        same_time.push(fact(&mcp, &format!("same_{i}"), "Keeps a copper kettle").await);
    }
    clock.advance(Duration::minutes(5));
    let newer = fact(&mcp, "same_new", "Keeps a copper kettle").await;
    let result = mcp
        .ok(
            "memory_search",
            json!({"query": "copper kettle", "mode": "keyword"}),
        )
        .await;
    let mut expected_old = same_time.clone();
    expected_old.sort();
    let mut expected = vec![newer];
    expected.extend(expected_old);
    assert_eq!(
        ids(&result),
        expected,
        "score DESC, created_at DESC, id ASC: {result}"
    );

    // Diversification: eight facts about one subject outrank one about another, but their
    // third and later hits move below the other subject's in a top 4 (cap: half of it).
    for i in 0..8 {
        mcp.ok(
            "memory_store_fact",
            json!({"subject": "garden", "predicate": format!("plant_{i}"), "content": format!("The garden has tomato plant number {i} tomato tomato")}),
        )
        .await;
    }
    mcp.ok(
        "memory_store_fact",
        json!({"subject": "kitchen", "predicate": "sauce", "content": "Makes tomato sauce"}),
    )
    .await;
    let result = mcp
        .ok(
            "memory_search",
            json!({"query": "tomato", "mode": "keyword", "types": ["fact"], "limit": 4}),
        )
        .await;
    let subjects: Vec<&str> = result["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["subject"].as_str().unwrap())
        .collect();
    // The third garden fact is demoted below the kitchen one (not dropped: with no other
    // subject left it still fills the fourth place).
    assert_eq!(subjects, vec!["garden", "garden", "kitchen", "garden"]);
    app.stop().await;
}

#[tokio::test]
async fn recall_returns_facts_and_rules_and_bumps_references() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let f = fact(&mcp, "allergy", "Allergic to peanuts").await;
    let r = mcp
        .ok(
            "memory_store_rule",
            json!({"content": "Check snacks for peanuts before suggesting them"}),
        )
        .await;
    mcp.ok(
        "memory_store_episode",
        json!({"content": "Asked about peanut butter cookies", "butler": "health"}),
    )
    .await;
    app.engine().flush().await.unwrap();
    let recalled = mcp
        .ok("memory_recall", json!({"topic": "peanut allergy"}))
        .await;
    let found = ids(&recalled);
    assert!(
        found.contains(&f) && found.contains(&r["id"].as_str().unwrap().to_owned()),
        "{recalled}"
    );
    assert!(
        recalled["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["type"] != "episode")
    );
    app.engine().flush().await.unwrap();
    let got = mcp.ok("memory_get", json!({"type": "fact", "id": f})).await;
    assert_eq!(got["reference_count"], 1, "recall bumped it once");
    app.stop().await;
}

#[tokio::test]
async fn a_read_over_nothing_neither_waits_for_the_embedder_nor_degrades() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    app.engine().set_embedder_running(false).await.unwrap();
    let search = json!({"query": "Volvo car", "mode": "hybrid"});
    // The first read counts the tenant's memories; from then on it is known to have none.
    mcp.ok("memory_search", search.clone()).await;
    let result = mcp.ok("memory_search", search).await;
    assert_eq!(result["degraded"], false, "{result}");
    assert_eq!(result["mode"], "hybrid");
    assert_eq!(result["count"], 0);
    let ctx = mcp
        .ok(
            "memory_context",
            json!({"trigger_prompt": "Which car?", "butler": "health"}),
        )
        .await;
    assert_eq!(ctx["degraded"], false, "{ctx}");
    app.stop().await;
}

#[tokio::test]
async fn without_the_embedder_reads_degrade_to_keyword_instead_of_failing() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let id = fact(&mcp, "car", "Drives a red Volvo").await;
    app.engine().flush().await.unwrap();
    app.engine().set_embedder_running(false).await.unwrap();
    for mode in ["hybrid", "semantic"] {
        let result = mcp
            .ok("memory_search", json!({"query": "Volvo car", "mode": mode}))
            .await;
        assert_eq!(result["degraded"], true, "{mode}");
        assert_eq!(result["mode"], "keyword");
        assert_eq!(ids(&result), vec![id.clone()]);
    }
    let ctx = mcp
        .ok(
            "memory_context",
            json!({"trigger_prompt": "Which car?", "butler": "health"}),
        )
        .await;
    assert_eq!(ctx["degraded"], true);
    let ready = reqwest::get(app.url("/readyz")).await.unwrap();
    assert_eq!(ready.status(), 503);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["failing"], json!(["embedder"]));
    // Writes do not need the model: they are embedded once it is back.
    mcp.ok(
        "memory_store_episode",
        json!({"content": "Washed the Volvo", "butler": "health"}),
    )
    .await;
    app.engine().set_embedder_running(true).await.unwrap();
    app.engine().flush().await.unwrap();
    let result = mcp
        .ok(
            "memory_search",
            json!({"query": "cleaning the automobile", "mode": "semantic", "limit": 1}),
        )
        .await;
    assert_eq!(result["degraded"], false);
    assert_eq!(contents(&result), vec!["Washed the Volvo"]);
    app.stop().await;
}

#[tokio::test]
async fn bad_search_input_is_classified() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    for (args, code) in [
        (json!({"query": "x", "limit": 0}), "invalid_limit"),
        (json!({"query": "x", "limit": 101}), "invalid_limit"),
        (
            json!({"query": "x", "min_confidence": 1.5}),
            "invalid_min_confidence",
        ),
        (json!({"query": "  "}), "empty_content"),
        (json!({"query": "x", "types": []}), "empty_types"),
        (json!({"query": "x", "mode": "fuzzy"}), "invalid_arguments"),
        (
            json!({"query": "x", "types": ["thought"]}),
            "invalid_arguments",
        ),
    ] {
        let err = mcp.err("memory_search", args.clone()).await;
        assert_eq!(err["class"], "invalid_input", "{args}");
        assert_eq!(err["code"], code, "{args}");
    }
    app.stop().await;
}

#[tokio::test]
async fn a_repeated_read_is_never_staler_than_the_last_write_or_the_cache_ttl() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let first = fact(&mcp, "bike", "Rides a green gravel bike").await;
    app.engine().flush().await.unwrap();
    let search = json!({"query": "gravel bike", "mode": "hybrid"});
    let context = json!({"trigger_prompt": "Plan a gravel bike ride", "butler": "health"});
    let before = mcp.ok("memory_search", search.clone()).await;
    let block_before = mcp.ok("memory_context", context.clone()).await;
    assert_eq!(ids(&before), vec![first.clone()]);
    // Served again from the cache: same answer, same scores.
    assert_eq!(
        mcp.ok("memory_search", search.clone()).await["results"],
        before["results"]
    );
    assert_eq!(
        mcp.ok("memory_context", context.clone()).await["text"],
        block_before["text"]
    );

    // A write to the tenant invalidates at once, before it is even embedded.
    let second = fact(&mcp, "bike_shop", "Buys gravel bike parts at Spoke & Co").await;
    let after = mcp.ok("memory_search", search.clone()).await;
    assert!(ids(&after).contains(&second), "{after}");
    let block_after = mcp.ok("memory_context", context.clone()).await;
    assert!(
        block_after["text"].as_str().unwrap().contains("Spoke & Co"),
        "{block_after}"
    );

    // Time alone expires an entry: scores move with recency and decay.
    let settled = mcp.ok("memory_search", search.clone()).await;
    clock.advance(Duration::days(20));
    let later = mcp.ok("memory_search", search.clone()).await;
    assert_ne!(
        later["results"][0]["score"], settled["results"][0]["score"],
        "{settled} vs {later}"
    );
    app.stop().await;
}

#[tokio::test]
async fn an_episode_found_brings_its_session_neighbours_along() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_ADMIN).await;
    let mut stored = Vec::new();
    for (session, content) in [
        ("trip", "We packed the tent and the sleeping bags"),
        ("trip", "The ferry to the island leaves at seven"),
        ("trip", "Dinner was grilled fish by the harbour"),
        ("work", "The quarterly report is due on Friday"),
        ("solo", "Ferry tickets cost twelve euros each"),
    ] {
        let episode = mcp
            .ok(
                "memory_store_episode",
                json!({"butler": "health", "session_id": session, "content": content}),
            )
            .await;
        stored.push(episode["id"].as_str().unwrap().to_owned());
    }
    let [tent, ferry, dinner, report, tickets] = &stored[..] else {
        unreachable!()
    };

    let found = mcp
        .ok(
            "memory_search",
            json!({"query": "ferry", "mode": "keyword", "butler": "health"}),
        )
        .await;
    let score = |id: &str| {
        found["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .map(|r| r["scores"]["session_neighbour"].clone())
    };
    // The matches: one between two neighbours no list found, one alone in its session.
    assert_eq!(score(ferry), Some(json!(0.0)), "{found}");
    assert_eq!(score(tickets), Some(json!(0.0)), "{found}");
    // Both neighbours of the match come along, carrying its relevance.
    for neighbour in [tent, dinner] {
        let inherited = score(neighbour).unwrap_or_else(|| panic!("{neighbour}: {found}"));
        assert!(inherited.as_f64().unwrap() > 0.0, "{found}");
    }
    // Nothing of another session does.
    assert_eq!(score(report), None, "{found}");
}
