//! Keys, tenants and scopes: the tenant comes from the key, never from arguments.

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn requests_without_a_known_key_get_401() {
    let app = spawn_app().await;
    let http = reqwest::Client::new();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    for auth in [
        None,
        Some("Bearer wrong-key-0000000000000"),
        Some(TENANT_A_ADMIN),
    ] {
        let mut request = http
            .post(app.url("/mcp"))
            .header("Accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(value) = auth {
            request = request.header("Authorization", value);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "auth header {auth:?}");
        let challenge = response.headers()["www-authenticate"].to_str().unwrap();
        assert!(challenge.starts_with("Bearer realm="), "{challenge}");
        let error: serde_json::Value = response.json().await.unwrap();
        assert_eq!(error["code"], "unauthenticated");
    }
    // The right key passes.
    let response = http
        .post(app.url("/mcp"))
        .header("Accept", "application/json, text/event-stream")
        .header("Authorization", format!("Bearer {TENANT_A_ADMIN}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    app.stop().await;
}

#[tokio::test]
async fn another_tenant_cannot_read_a_record_by_id() {
    let app = spawn_app().await;
    let a = app.client(TENANT_A_HEALTH).await;
    let b = app.client(TENANT_B_HEALTH).await;
    let fact = a
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "name", "content": "John"}),
        )
        .await;
    let episode = a
        .ok(
            "memory_store_episode",
            json!({"content": "private", "butler": "health"}),
        )
        .await;
    for (ty, id) in [("fact", &fact["id"]), ("episode", &episode["id"])] {
        let err = b.err("memory_get", json!({"type": ty, "id": id})).await;
        assert_eq!(err["class"], "not_found", "{ty}");
    }
    // Tenant B's writes and counts live in its own space, even with the same names.
    let b_fact = b
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "name", "content": "Jane"}),
        )
        .await;
    assert_eq!(
        b_fact["outcome"], "created",
        "tenant A's fact is not superseded"
    );
    let stats = b.ok("memory_stats", json!({})).await;
    assert_eq!(stats["facts"]["total"], 1);
    assert_eq!(stats["episodes"]["total"], 0);
    let a_fact = a
        .ok("memory_get", json!({"type": "fact", "id": fact["id"]}))
        .await;
    assert_eq!(a_fact["validity"], "active");
    app.stop().await;
}

#[tokio::test]
async fn butler_keys_stay_in_their_lane() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let general = app.client(TENANT_A_GENERAL).await;
    let admin = app.client(TENANT_A_ADMIN).await;

    let err = health
        .err(
            "memory_store_episode",
            json!({"content": "x", "butler": "general"}),
        )
        .await;
    assert_eq!(err["class"], "forbidden");
    assert_eq!(err["code"], "other_butler");
    let err = health
        .err(
            "memory_store_fact",
            json!({"subject": "s", "predicate": "p", "content": "c", "scope": "general"}),
        )
        .await;
    assert_eq!(err["class"], "forbidden");
    assert_eq!(err["code"], "scope_forbidden");

    // Scoped facts and episodes of one butler are invisible to another butler's key,
    // visible to the tenant's admin.
    let scoped = health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "weight", "content": "75kg", "scope": "health"}),
        )
        .await;
    let episode = health
        .ok(
            "memory_store_episode",
            json!({"content": "weighed in", "butler": "health"}),
        )
        .await;
    for (ty, id) in [("fact", &scoped["id"]), ("episode", &episode["id"])] {
        let err = general
            .err("memory_get", json!({"type": ty, "id": id}))
            .await;
        assert_eq!(err["class"], "not_found", "{ty}");
        let seen = admin.ok("memory_get", json!({"type": ty, "id": id})).await;
        assert_eq!(seen["id"], *id);
    }
    // An unbound butler key acts as the butler it names.
    let unbound = app.client(TENANT_A_UNBOUND).await;
    let got = unbound
        .ok(
            "memory_get",
            json!({"type": "episode", "id": episode["id"], "butler": "health"}),
        )
        .await;
    assert_eq!(got["id"], episode["id"]);
    let err = unbound
        .err(
            "memory_get",
            json!({"type": "episode", "id": episode["id"]}),
        )
        .await;
    assert_eq!(err["class"], "not_found");
    app.stop().await;
}

#[tokio::test]
async fn operator_keys_see_no_memory_content() {
    let app = spawn_app().await;
    let operator = app.client(OPERATOR).await;
    let err = operator
        .err(
            "memory_store_episode",
            json!({"content": "x", "butler": "health"}),
        )
        .await;
    assert_eq!(err["class"], "forbidden");
    let err = operator.err("memory_stats", json!({})).await;
    assert_eq!(err["class"], "forbidden");
    app.stop().await;
}

async fn episode_of(mcp: &McpClient, butler: &str) -> String {
    mcp.ok(
        "memory_store_episode",
        json!({"content": "Talked about the garden", "butler": butler}),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A store call that refers to episode `id` in each way a caller can: a link, a fact's
/// source episode, a rule's source episode.
fn references(id: &str) -> [(&'static str, serde_json::Value); 3] {
    [
        (
            "memory_store_fact",
            json!({"subject": "user", "predicate": "hobby", "content": "gardening",
                   "links": [{"target_type": "episode", "target_id": id, "relation": "related_to"}]}),
        ),
        (
            "memory_store_fact",
            json!({"subject": "user", "predicate": "plant", "content": "roses",
                   "source_episode_id": id}),
        ),
        (
            "memory_store_rule",
            json!({"content": "Suggest roses", "source_episode_id": id}),
        ),
    ]
}

/// A reference a caller may not read is answered exactly like one that does not exist:
/// links and `source_episode_id` are no oracle of what other butlers or tenants hold.
#[tokio::test]
async fn references_the_caller_cannot_read_are_not_found() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let own = episode_of(&health, "health").await;
    let generals = episode_of(&app.client(TENANT_A_GENERAL).await, "general").await;
    let elsewhere = episode_of(&app.client(TENANT_B_HEALTH).await, "health").await;
    let unknown = uuid::Uuid::new_v4().to_string();
    // An error with the id taken out, to compare with what an unknown id gets.
    let refusal = |err: serde_json::Value, id: &str| {
        assert_eq!(err["class"], "not_found", "{err}");
        (
            err["code"].clone(),
            err["message"].as_str().unwrap().replace(id, "<id>"),
        )
    };
    for case in 0..3 {
        let (tool, args) = references(&unknown)[case].clone();
        let absent = refusal(health.err(tool, args).await, &unknown);
        for hidden in [&generals, &elsewhere] {
            let (tool, args) = references(hidden)[case].clone();
            let got = refusal(health.err(tool, args.clone()).await, hidden);
            assert_eq!(got, absent, "{tool} {args} answered unlike an unknown id");
        }
        let (tool, args) = references(&own)[case].clone();
        health.ok(tool, args).await;
    }
    app.stop().await;
}
