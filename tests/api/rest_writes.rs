//! The REST API's writes over HTTP against the real service: an admin's corrections (a
//! fact edit supersedes, a rule rewrite is a new candidate, delete is forget, restore) and
//! decisions about rules (promote, demote, disable, enable), each through the engine and in
//! the audit stream with the key and request id; refused for butler keys and bad bodies.

use serde_json::{Value, json};

use crate::helpers::*;

pub(crate) async fn send(
    app: &TestApp,
    key: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .request(method.parse().unwrap(), app.url(path))
        .header("Authorization", format!("Bearer {key}"))
        .header("X-Request-Id", "dashboard-edit-1");
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn corrections_go_through_the_engine_and_are_audited() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let fact = health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "city", "content": "Lives in Oslo", "tags": ["home"]}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let rule = health
        .ok(
            "memory_store_rule",
            json!({"content": "Suggest walks in the morning"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Butler keys read; only admins correct.
    let (status, body) = send(
        &app,
        TENANT_A_HEALTH,
        "PUT",
        &format!("/api/memory/facts/{fact}"),
        Some(json!({"content": "Lives in Bergen"})),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("admin_only")),
        "{body}"
    );
    let (status, body) = send(
        &app,
        TENANT_A_ADMIN,
        "PUT",
        &format!("/api/memory/facts/{fact}"),
        Some(json!({"content": "Lives in Bergen", "colour": "blue"})),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_arguments")),
        "{body}"
    );

    // An oversized body is refused in the error shape, never a 500.
    let huge = "x".repeat(3 * 1024 * 1024);
    let (status, body) = send(
        &app,
        TENANT_A_ADMIN,
        "PUT",
        &format!("/api/memory/facts/{fact}"),
        Some(json!({ "content": huge })),
    )
    .await;
    assert!(status == 400 || status == 413, "{status}");
    assert_eq!(body["class"], "invalid_input", "{body}");

    // Editing a fact writes a new version that supersedes it, with what was not given kept.
    let (status, edited) = send(
        &app,
        TENANT_A_ADMIN,
        "PUT",
        &format!("/api/memory/facts/{fact}"),
        Some(json!({"content": "Lives in Bergen"})),
    )
    .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["outcome"], "superseded");
    assert_eq!(edited["tags"], json!(["home"]));
    assert_eq!(edited["source_butler"], "health");
    let new_fact = edited["id"].as_str().unwrap().to_owned();
    let old = admin
        .ok("memory_get", json!({"type": "fact", "id": fact}))
        .await;
    assert_eq!(old["validity"], "superseded");
    assert_eq!(old["links"]["inbound"][0]["source_id"], new_fact.as_str());
    let (status, body) = send(
        &app,
        TENANT_A_ADMIN,
        "PUT",
        &format!("/api/memory/facts/{fact}"),
        Some(json!({"content": "Lives in Tromsø"})),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("not_live")),
        "{body}"
    );

    // Rewriting a rule: a new candidate linked to the old one, which is retracted.
    let (status, rewritten) = send(
        &app,
        TENANT_A_ADMIN,
        "PUT",
        &format!("/api/memory/rules/{rule}"),
        Some(json!({"content": "Suggest walks after lunch", "reason": "mornings are busy"})),
    )
    .await;
    assert_eq!(status, 200, "{rewritten}");
    assert_eq!(rewritten["maturity"], "candidate");
    let old_rule = admin
        .ok("memory_get", json!({"type": "rule", "id": rule}))
        .await;
    assert_eq!(old_rule["validity"], "retracted");
    assert_eq!(old_rule["links"]["inbound"][0]["relation"], "supersedes");
    let context = health
        .ok(
            "memory_context",
            json!({"trigger_prompt": "When should I suggest a walk?", "butler": "health"}),
        )
        .await;
    assert!(!context.to_string().contains("in the morning"), "{context}");

    // Delete is memory_forget; restore undoes it.
    let (status, gone) = send(
        &app,
        TENANT_A_ADMIN,
        "DELETE",
        &format!("/api/memory/facts/{new_fact}?reason=wrong%20city"),
        None,
    )
    .await;
    assert_eq!(
        (status, gone["validity"].as_str()),
        (200, Some("retracted")),
        "{gone}"
    );
    let (status, back) = send(
        &app,
        TENANT_A_ADMIN,
        "POST",
        &format!("/api/memory/facts/{new_fact}/restore"),
        None,
    )
    .await;
    assert_eq!(
        (status, back["validity"].as_str()),
        (200, Some("active")),
        "{back}"
    );
    let (status, body) = send(
        &app,
        TENANT_A_ADMIN,
        "POST",
        &format!("/api/memory/facts/{new_fact}/restore"),
        None,
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("not_forgotten"))
    );

    // Every change is in the audit stream with the acting key and the request id.
    let events = activity(&admin, 1000).await;
    let by_dashboard: Vec<&Value> = events
        .iter()
        .filter(|e| e["request_id"] == "dashboard-edit-1")
        .collect();
    let kinds: Vec<&str> = by_dashboard
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    for kind in [
        "fact_superseded",
        "fact_created",
        "rule_created",
        "rule_retracted",
        "fact_retracted",
        "fact_restored",
    ] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    assert!(by_dashboard.iter().all(|e| e["actor"] == "admin:a-admin"));
    app.stop().await;
}

#[tokio::test]
async fn an_admin_governs_rules_and_a_disabled_rule_never_reaches_retrieval() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let rule = health
        .ok(
            "memory_store_rule",
            json!({"content": "Offer chamomile tea before bed"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let decide = |decision: &'static str, key: &'static str, body: Value| {
        let path = format!("/api/memory/rules/{rule}/{decision}");
        let app = &app;
        async move { send(app, key, "POST", &path, Some(body)).await }
    };
    let why = json!({"reason": "the household asked for it"});

    let (status, body) = decide("promote", TENANT_A_HEALTH, why.clone()).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("admin_only")));
    let (status, body) = decide("promote", TENANT_A_ADMIN, json!({})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_arguments")),
        "{body}"
    );
    for expected in ["established", "proven"] {
        let (status, promoted) = decide("promote", TENANT_A_ADMIN, why.clone()).await;
        assert_eq!(
            (status, promoted["maturity"].as_str()),
            (200, Some(expected)),
            "{promoted}"
        );
    }
    let (status, body) = decide("promote", TENANT_A_ADMIN, why.clone()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("no_such_transition"))
    );
    let (_, demoted) = decide("demote", TENANT_A_ADMIN, why.clone()).await;
    assert_eq!(demoted["maturity"], "established");

    // Disabled: out of search and context, state kept; enabled: back.
    let search = json!({"query": "chamomile tea before bed", "mode": "keyword"});
    let found = |v: &Value| v.to_string().contains("chamomile");
    assert!(found(&health.ok("memory_search", search.clone()).await));
    let (status, disabled) = decide(
        "disable",
        TENANT_A_ADMIN,
        json!({"reason": "keeps people awake"}),
    )
    .await;
    assert_eq!(status, 200, "{disabled}");
    assert!(disabled["disabled_at"].is_string());
    assert_eq!(disabled["maturity"], "established");
    assert!(!found(&health.ok("memory_search", search.clone()).await));
    let context = health
        .ok(
            "memory_context",
            json!({"trigger_prompt": "Time for bed, any tea?", "butler": "health"}),
        )
        .await;
    assert!(!found(&context), "{context}");
    let (status, body) = decide("disable", TENANT_A_ADMIN, why.clone()).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("no_such_transition"))
    );
    let (status, enabled) = decide("enable", TENANT_A_ADMIN, why.clone()).await;
    assert_eq!(
        (status, enabled["disabled_at"].is_null()),
        (200, true),
        "{enabled}"
    );
    assert!(found(&health.ok("memory_search", search).await));

    // Each decision is its own audited transition with the reason.
    let events: Vec<Value> = activity(&admin, 1000)
        .await
        .into_iter()
        .filter(|e| e["entity_id"] == rule.as_str())
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        vec![
            "rule_created",
            "rule_promoted",
            "rule_promoted",
            "rule_demoted",
            "rule_disabled",
            "rule_enabled"
        ]
    );
    let disabling = &events[4];
    assert_eq!(disabling["payload"]["reason"], "keeps people awake");
    assert_eq!(disabling["actor"], "admin:a-admin");
    let state = crate::events::replay(&events).unwrap();
    assert!(state["disabled_at"].is_null());
    assert_eq!(state["maturity"], "established");
    app.stop().await;
}
