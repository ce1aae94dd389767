//! Query intent routing (`retrieval.intent_routing`): on, an identity question lifts facts and
//! a procedure question rules, and both show why (the answer's `intent`, each hit's
//! `scores.type_weight`, a score that is the routed weights' sum); a question without a
//! clear intent ranks as configured; off, nothing changes and no intent is named.

use serde_json::{Value, json};

use crate::helpers::*;

const ROUTING_ON: &str = "[retrieval.intent_routing]\nenabled = true\n";

/// A fact, a rule and an episode that all speak of the deploy.
async fn seed(mcp: &McpClient) {
    mcp.ok(
        "memory_store_fact",
        json!({"subject": "deploy", "predicate": "owner", "content": "The deploy owner is Marta Kowalczyk"}),
    )
    .await;
    mcp.ok(
        "memory_store_rule",
        json!({"content": "Run the deploy checklist before every deploy"}),
    )
    .await;
    mcp.ok(
        "memory_store_episode",
        json!({"butler": "health", "content": "Talked about the deploy checklist and the deploy owner"}),
    )
    .await;
}

async fn search(mcp: &McpClient, query: &str) -> Value {
    mcp.ok(
        "memory_search",
        json!({"query": query, "mode": "keyword", "limit": 10}),
    )
    .await
}

/// The `type_weight` of each hit, by type.
fn type_weights(answer: &Value) -> Vec<(String, f64)> {
    answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["type"].as_str().unwrap().to_owned(),
                r["scores"]["type_weight"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn weight_of(answer: &Value, memory_type: &str) -> f64 {
    type_weights(answer)
        .into_iter()
        .find(|(t, _)| t == memory_type)
        .unwrap_or_else(|| panic!("no {memory_type} in {answer}"))
        .1
}

#[tokio::test]
async fn an_intent_shifts_the_types_and_says_so() {
    let app = spawn_app_with(ROUTING_ON).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    seed(&mcp).await;

    let identity = search(&mcp, "who is the deploy owner").await;
    assert_eq!(identity["intent"], "identity", "{identity}");
    assert_eq!(weight_of(&identity, "fact"), 1.25);
    assert_eq!(weight_of(&identity, "episode"), 0.9);
    assert_eq!(identity["results"][0]["type"], "fact", "{identity}");

    let procedure = search(&mcp, "how should I run the deploy checklist").await;
    assert_eq!(procedure["intent"], "procedure", "{procedure}");
    assert_eq!(weight_of(&procedure, "rule"), 1.25);
    assert_eq!(procedure["results"][0]["type"], "rule", "{procedure}");

    // The score is the routed weights' sum times the multipliers: for identity, recency
    // counts for nothing (0.5 relevance, 0.2 importance, 0.3 confidence).
    for hit in identity["results"].as_array().unwrap() {
        let s = &hit["scores"];
        let f = |k: &str| s[k].as_f64().unwrap();
        let expected = f("maturity_weight")
            * f("type_weight")
            * (0.5 * f("relevance") + 0.2 * f("importance") + 0.3 * f("confidence"));
        let score = hit["score"].as_f64().unwrap();
        assert!(
            (score - expected).abs() < 1e-9,
            "{score} vs {expected}: {hit}"
        );
    }

    // No cue: ranked as configured, every type as it is.
    let general = search(&mcp, "deploy checklist").await;
    assert_eq!(general["intent"], "general", "{general}");
    assert!(
        type_weights(&general).iter().all(|(_, w)| *w == 1.0),
        "{general}"
    );
}

#[tokio::test]
async fn routing_off_changes_nothing() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    seed(&mcp).await;
    let answer = search(&mcp, "who is the deploy owner").await;
    assert!(answer.get("intent").is_none(), "{answer}");
    assert!(
        type_weights(&answer).iter().all(|(_, w)| *w == 1.0),
        "{answer}"
    );
}
