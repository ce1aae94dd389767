//! List filters that find what they name, and only that: facts by `scope`, rules by
//! `scope` and by words (`q`), episodes by time (`from` / `to`) over REST and through the
//! episodes page's date inputs (whole UTC days, the last one included).

use std::collections::BTreeSet;
use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use crate::dashboard::{page, sign_in};
use crate::helpers::*;

async fn listed(app: &TestApp, path: &str) -> BTreeSet<String> {
    let (status, body) = rest(app, TENANT_A_ADMIN, "GET", path, None, "filter").await;
    assert_eq!(status, 200, "{path}: {body}");
    body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

fn set(ids: &[&String]) -> BTreeSet<String> {
    ids.iter().map(|id| (*id).clone()).collect()
}

#[tokio::test]
async fn facts_and_rules_are_filtered_by_scope_and_rules_by_words() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let general = app.client(TENANT_A_GENERAL).await;
    let id = |v: Value| v["id"].as_str().unwrap().to_owned();
    let global_fact = id(health
        .ok(
            "memory_store_fact",
            json!({"subject": "ann", "predicate": "drink", "content": "Ann likes tea"}),
        )
        .await);
    let general_fact = id(general
        .ok(
            "memory_store_fact",
            json!({"subject": "cal", "predicate": "drink", "content": "Cal likes coffee", "scope": "general"}),
        )
        .await);
    let walk = id(health
        .ok(
            "memory_store_rule",
            json!({"content": "Suggest a walk after lunch"}),
        )
        .await);
    let tea = id(health
        .ok(
            "memory_store_rule",
            json!({"content": "Offer tea in the evening"}),
        )
        .await);
    let bills = id(general
        .ok(
            "memory_store_rule",
            json!({"content": "Pay the bills on Monday", "scope": "general"}),
        )
        .await);

    assert_eq!(
        listed(&app, "/api/memory/facts?scope=general").await,
        set(&[&general_fact])
    );
    assert_eq!(
        listed(&app, "/api/memory/facts?scope=global").await,
        set(&[&global_fact])
    );
    assert_eq!(
        listed(&app, "/api/memory/rules?scope=general").await,
        set(&[&bills])
    );
    assert_eq!(
        listed(&app, "/api/memory/rules?scope=global").await,
        set(&[&walk, &tea])
    );
    assert_eq!(
        listed(&app, "/api/memory/rules?q=walk").await,
        set(&[&walk])
    );
    assert_eq!(
        listed(&app, "/api/memory/rules?q=evening%20tea").await,
        set(&[&tea])
    );
    assert_eq!(
        listed(&app, "/api/memory/rules?q=bills&scope=global").await,
        set(&[])
    );
    assert_eq!(
        listed(&app, "/api/memory/rules?q=bills&scope=general").await,
        set(&[&bills])
    );
    // The playbook's filters are the same query.
    let cookie = sign_in(&app, TENANT_A_ADMIN).await;
    let playbook = page(&app, Some(&cookie), "/memory/playbook?q=walk&scope=global").await;
    assert_eq!(playbook.status, 200);
    assert!(playbook.body.contains(&walk), "{}", playbook.body);
    assert!(!playbook.body.contains(&tea) && !playbook.body.contains(&bills));
    app.stop().await;
}

fn day(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

#[tokio::test]
async fn episodes_are_filtered_by_time_over_rest_and_by_day_on_the_page() {
    let clock = Arc::new(ManualClock::new(day("2026-05-01T09:00:00Z")));
    let app = spawn_app_at("", clock.clone()).await;
    let health = app.client(TENANT_A_HEALTH).await;
    let mut stored = Vec::new();
    for text in ["first of May", "third of May", "fifth of May"] {
        let episode = health
            .ok(
                "memory_store_episode",
                json!({"content": format!("Ann called on the {text}"), "butler": "health"}),
            )
            .await;
        stored.push(episode["id"].as_str().unwrap().to_owned());
        clock.advance(Duration::days(2));
    }
    let [may_1, may_3, may_5] = [&stored[0], &stored[1], &stored[2]];

    let episodes = |query: &str| format!("/api/memory/episodes?{query}");
    assert_eq!(
        listed(&app, &episodes("from=2026-05-02T00:00:00Z")).await,
        set(&[may_3, may_5])
    );
    assert_eq!(
        listed(&app, &episodes("to=2026-05-04T00:00:00Z")).await,
        set(&[may_1, may_3])
    );
    assert_eq!(
        listed(
            &app,
            &episodes("from=2026-05-02T00:00:00Z&to=2026-05-04T00:00:00Z")
        )
        .await,
        set(&[may_3])
    );
    // `to` is exclusive: an episode stored at that very moment is not in the range.
    assert_eq!(
        listed(&app, &episodes("to=2026-05-03T09:00:00Z")).await,
        set(&[may_1])
    );

    // The page's date inputs: whole days, the last one included, kept in the form.
    let cookie = sign_in(&app, TENANT_A_ADMIN).await;
    let shown = page(
        &app,
        Some(&cookie),
        "/memory/episodes?from=2026-05-03&to=2026-05-03",
    )
    .await;
    assert_eq!(shown.status, 200, "{}", shown.body);
    assert!(shown.body.contains("third of May"), "{}", shown.body);
    assert!(!shown.body.contains("first of May") && !shown.body.contains("fifth of May"));
    assert!(
        shown
            .body
            .contains(r#"type="date" name="from" value="2026-05-03""#)
    );
    assert!(
        shown
            .body
            .contains(r#"type="date" name="to" value="2026-05-03""#)
    );
    let from_only = page(&app, Some(&cookie), "/memory/episodes?from=2026-05-03").await;
    assert!(from_only.body.contains("third of May") && from_only.body.contains("fifth of May"));
    assert!(!from_only.body.contains("first of May"));
    let to_only = page(&app, Some(&cookie), "/memory/episodes?to=2026-05-01&from=").await;
    assert!(to_only.body.contains("first of May"), "{}", to_only.body);
    assert!(!to_only.body.contains("third of May"));
    app.stop().await;
}
