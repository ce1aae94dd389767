//! An admin's lifecycle writes on rules and episodes over REST: forgetting (`DELETE`) and
//! restoring a rule and an episode, and every decision about a rule (promote, demote,
//! disable, enable). Each leaves the record in the state it names and one event in the
//! audit stream, carrying the request's `X-Request-Id` and the acting key.

use serde_json::{Value, json};

use crate::helpers::*;

/// The last event of `id`: its type, actor, request id and payload.
async fn last_event(app: &TestApp, id: &str) -> (String, String, Option<String>, Value) {
    events_of(app, id).await.pop().expect("an event")
}

#[tokio::test]
async fn an_admin_forgets_and_restores_rules_and_episodes_under_its_request() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let id = |v: Value| v["id"].as_str().unwrap().to_owned();
    let rule = id(health
        .ok(
            "memory_store_rule",
            json!({"content": "Remind Ann of her vitamins at breakfast"}),
        )
        .await);
    let episode = id(health
        .ok(
            "memory_store_episode",
            json!({"content": "Ann shared her bank PIN by mistake", "butler": "health"}),
        )
        .await);
    let admin = "admin:a-admin";

    // A rule: forgotten (retracted, with the reason), then restored (live again).
    let (status, gone) = rest(
        &app,
        TENANT_A_ADMIN,
        "DELETE",
        &format!("/api/memory/rules/{rule}?reason=no%20longer%20wanted"),
        None,
        "forget-rule-1",
    )
    .await;
    assert_eq!(
        (status, gone["validity"].as_str()),
        (200, Some("retracted"))
    );
    let (kind, actor, request, payload) = last_event(&app, &rule).await;
    assert_eq!(
        (kind.as_str(), actor.as_str(), request.as_deref()),
        ("rule_retracted", admin, Some("forget-rule-1"))
    );
    assert_eq!(payload["reason"], "no longer wanted", "{payload}");
    let searched = health
        .ok(
            "memory_search",
            json!({"query": "vitamins at breakfast", "mode": "keyword"}),
        )
        .await;
    assert!(result_ids(&searched).is_empty(), "{searched}");
    let (status, back) = rest(
        &app,
        TENANT_A_ADMIN,
        "POST",
        &format!("/api/memory/rules/{rule}/restore"),
        None,
        "restore-rule-1",
    )
    .await;
    assert_eq!((status, back["validity"].as_str()), (200, Some("active")));
    let (kind, actor, request, _) = last_event(&app, &rule).await;
    assert_eq!(
        (kind.as_str(), actor.as_str(), request.as_deref()),
        ("rule_restored", admin, Some("restore-rule-1"))
    );
    let searched = health
        .ok(
            "memory_search",
            json!({"query": "vitamins at breakfast", "mode": "keyword"}),
        )
        .await;
    assert_eq!(result_ids(&searched), vec![rule.clone()]);

    // An episode: forgotten (a tombstone, out of retrieval), then restored.
    let (status, gone) = rest(
        &app,
        TENANT_A_ADMIN,
        "DELETE",
        &format!("/api/memory/episodes/{episode}?reason=private"),
        None,
        "forget-episode-1",
    )
    .await;
    assert_eq!(status, 200, "{gone}");
    assert!(gone["forgotten_at"].is_string(), "{gone}");
    let (kind, actor, request, payload) = last_event(&app, &episode).await;
    assert_eq!(
        (kind.as_str(), actor.as_str(), request.as_deref()),
        ("episode_forgotten", admin, Some("forget-episode-1"))
    );
    assert_eq!(payload["reason"], "private");
    let pin = json!({"query": "bank PIN", "mode": "keyword", "types": ["episode"]});
    let searched = health.ok("memory_search", pin.clone()).await;
    assert!(
        result_ids(&searched).is_empty(),
        "out of retrieval: {searched}"
    );
    let (status, back) = rest(
        &app,
        TENANT_A_ADMIN,
        "POST",
        &format!("/api/memory/episodes/{episode}/restore"),
        None,
        "restore-episode-1",
    )
    .await;
    assert_eq!(status, 200, "{back}");
    assert!(back["forgotten_at"].is_null(), "{back}");
    let (kind, actor, request, _) = last_event(&app, &episode).await;
    assert_eq!(
        (kind.as_str(), actor.as_str(), request.as_deref()),
        ("episode_restored", admin, Some("restore-episode-1"))
    );
    let searched = health.ok("memory_search", pin).await;
    assert_eq!(result_ids(&searched), vec![episode.clone()]);

    // Restoring what is not forgotten changes nothing and writes no event.
    let before = events_of(&app, &episode).await.len();
    let (status, body) = rest(
        &app,
        TENANT_A_ADMIN,
        "POST",
        &format!("/api/memory/episodes/{episode}/restore"),
        None,
        "restore-episode-2",
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("not_forgotten"))
    );
    assert_eq!(events_of(&app, &episode).await.len(), before);
    app.stop().await;
}

#[tokio::test]
async fn each_decision_about_a_rule_is_an_event_of_its_own_request() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let rule = health
        .ok(
            "memory_store_rule",
            json!({"content": "Offer chamomile tea before bed"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let decisions = [
        ("promote", "rule_promoted", "established"),
        ("promote", "rule_promoted", "proven"),
        ("demote", "rule_demoted", "established"),
        ("disable", "rule_disabled", "established"),
        ("enable", "rule_enabled", "established"),
    ];
    for (n, (decision, _, maturity)) in decisions.iter().enumerate() {
        let (status, after) = rest(
            &app,
            TENANT_A_ADMIN,
            "POST",
            &format!("/api/memory/rules/{rule}/{decision}"),
            Some(json!({"reason": format!("decision {n}")})),
            &format!("govern-{n}"),
        )
        .await;
        assert_eq!(status, 200, "{decision}: {after}");
        assert_eq!(after["maturity"], *maturity, "{decision}: {after}");
        assert_eq!(
            after["disabled_at"].is_string(),
            *decision == "disable",
            "{after}"
        );
    }
    let events: Vec<_> = events_of(&app, &rule).await.into_iter().skip(1).collect();
    assert_eq!(events.len(), decisions.len(), "{events:?}");
    for (n, ((kind, actor, request, payload), (_, expected, _))) in
        events.iter().zip(decisions).enumerate()
    {
        assert_eq!(kind, expected);
        assert_eq!(actor, "admin:a-admin");
        assert_eq!(request.as_deref(), Some(format!("govern-{n}").as_str()));
        assert_eq!(payload["reason"], format!("decision {n}"), "{payload}");
    }
    app.stop().await;
}
