//! The store tools and `memory_get` / `memory_stats`, end to end over MCP.

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn an_episode_is_stored_echoed_and_read_back() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let stored = mcp
        .ok(
            "memory_store_episode",
            json!({
                "content": "  User asked to log weight 75kg; started a new diet last week  ",
                "butler": "health",
                "session_id": "sess-42",
                "importance": 7,
                "metadata": {"channel": "telegram"},
                "request_context": {"request_id": "req-1", "subrequest_id": "sub-1"},
            }),
        )
        .await;
    assert_eq!(stored["type"], "episode");
    assert_eq!(
        stored["content"],
        "User asked to log weight 75kg; started a new diet last week"
    );
    assert_eq!(stored["butler"], "health");
    assert_eq!(stored["tenant_id"], "tenant-a");
    assert_eq!(stored["session_id"], "sess-42");
    assert_eq!(stored["importance"], 7.0);
    assert_eq!(stored["consolidation_status"], "pending");
    assert_eq!(stored["consolidated"], false);
    assert_eq!(stored["metadata"], json!({"channel": "telegram"}));
    assert_eq!(stored["request_context"]["request_id"], "req-1");
    assert_eq!(stored["request_context"]["subrequest_id"], "sub-1");
    assert_eq!(stored["request_id"], "req-1");
    let created =
        chrono::DateTime::parse_from_rfc3339(stored["created_at"].as_str().unwrap()).unwrap();
    let expires =
        chrono::DateTime::parse_from_rfc3339(stored["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!((expires - created).num_days(), 7, "default TTL");

    let id = stored["id"].as_str().unwrap();
    let got = mcp
        .ok("memory_get", json!({"type": "episode", "id": id}))
        .await;
    assert_eq!(got["id"], id);
    assert_eq!(got["content"], stored["content"]);
    assert_eq!(got["links"], json!({"inbound": [], "outbound": []}));
    app.stop().await;
}

#[tokio::test]
async fn facts_and_rules_are_stored_with_links_visible_from_both_ends() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let episode = mcp
        .ok(
            "memory_store_episode",
            json!({"content": "User said they are lactose intolerant", "butler": "health"}),
        )
        .await;
    let episode_id = episode["id"].as_str().unwrap();
    let fact = mcp
        .ok(
            "memory_store_fact",
            json!({
                "subject": "user",
                "predicate": "dietary_restriction",
                "content": "Lactose intolerant",
                "permanence": "stable",
                "importance": 8,
                "scope": "health",
                "tags": ["diet", "health", "diet"],
                "source_episode_id": episode_id,
                "links": [{"target_type": "episode", "target_id": episode_id, "relation": "derived_from"}],
            }),
        )
        .await;
    assert_eq!(fact["type"], "fact");
    assert_eq!(fact["outcome"], "created");
    assert_eq!(fact["validity"], "active");
    assert_eq!(fact["permanence"], "stable");
    assert_eq!(fact["decay_rate"], 0.002);
    assert_eq!(fact["confidence"], 1.0);
    assert_eq!(fact["effective_confidence"], 1.0);
    assert_eq!(fact["scope"], "health");
    assert_eq!(fact["source_butler"], "health");
    assert_eq!(fact["source_episode_id"], episode_id);
    assert_eq!(fact["tags"], json!(["diet", "health"]));
    assert_eq!(fact["superseded"], json!(null));

    let rule = mcp
        .ok(
            "memory_store_rule",
            json!({
                "content": "Suggest lactose-free options when planning meals",
                "scope": "health",
                "links": [{"target_type": "fact", "target_id": fact["id"], "relation": "supports"}],
            }),
        )
        .await;
    assert_eq!(rule["type"], "rule");
    assert_eq!(rule["maturity"], "candidate");
    assert_eq!(rule["validity"], "active");
    assert_eq!(rule["confidence"], 0.5);
    assert_eq!(rule["effectiveness_score"], 0.0);
    assert_eq!(rule["importance"], 5.0);

    let got_fact = mcp
        .ok("memory_get", json!({"type": "fact", "id": fact["id"]}))
        .await;
    let outbound = got_fact["links"]["outbound"].as_array().unwrap();
    assert_eq!(outbound.len(), 1);
    assert_eq!(outbound[0]["relation"], "derived_from");
    assert_eq!(outbound[0]["target_id"], episode_id);
    let inbound = got_fact["links"]["inbound"].as_array().unwrap();
    assert_eq!(inbound.len(), 1);
    assert_eq!(inbound[0]["source_type"], "rule");
    assert_eq!(inbound[0]["relation"], "supports");

    let got_episode = mcp
        .ok("memory_get", json!({"type": "episode", "id": episode_id}))
        .await;
    assert_eq!(got_episode["links"]["inbound"][0]["source_id"], fact["id"]);

    // A link to something that does not exist refuses the whole write.
    let err = mcp
        .err(
            "memory_store_rule",
            json!({
                "content": "Dangling",
                "links": [{"target_type": "fact", "target_id": uuid::Uuid::new_v4(), "relation": "supports"}],
            }),
        )
        .await;
    assert_eq!(err["class"], "not_found");
    let mut sql = app.sql().await;
    let dangling: i64 = sqlx::query_scalar("SELECT count(*) FROM rules WHERE content = 'Dangling'")
        .fetch_one(&mut sql)
        .await
        .unwrap();
    assert_eq!(dangling, 0);
    app.stop().await;
}

#[tokio::test]
async fn get_bumps_the_reference_count_through_the_shard() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let fact = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "name", "content": "John"}),
        )
        .await;
    for _ in 0..3 {
        mcp.ok("memory_get", json!({"type": "fact", "id": fact["id"]}))
            .await;
    }
    app.engine().flush().await.unwrap();
    let got = mcp
        .ok("memory_get", json!({"type": "fact", "id": fact["id"]}))
        .await;
    assert_eq!(got["reference_count"], 3);
    app.stop().await;
}

#[tokio::test]
async fn stats_count_by_state_and_show_the_backlog() {
    let app = spawn_app().await;
    let admin = app.client(TENANT_A_ADMIN).await;
    for i in 0..3 {
        admin
            .ok(
                "memory_store_episode",
                json!({"content": format!("episode {i}"), "butler": "health"}),
            )
            .await;
    }
    admin
        .ok(
            "memory_store_episode",
            json!({"content": "other butler", "butler": "general"}),
        )
        .await;
    admin
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "city", "content": "Oslo"}),
        )
        .await;
    admin
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "city", "content": "Bergen"}),
        )
        .await;
    admin
        .ok("memory_store_rule", json!({"content": "Be brief"}))
        .await;

    let all = admin.ok("memory_stats", json!({})).await;
    assert_eq!(all["episodes"]["total"], 4);
    assert_eq!(
        all["episodes"]["breakdown"]["consolidation_status"]["pending"],
        4
    );
    assert_eq!(all["consolidation_backlog"]["size"], 4);
    assert!(
        all["consolidation_backlog"]["oldest_age_seconds"]
            .as_f64()
            .unwrap()
            >= 0.0
    );
    assert_eq!(all["facts"]["total"], 2);
    assert_eq!(
        all["facts"]["breakdown"]["validity"],
        json!({"active": 1, "superseded": 1})
    );
    assert_eq!(
        all["facts"]["breakdown"]["effective_confidence"]["0.8_and_above"],
        1
    );
    assert_eq!(all["rules"]["breakdown"]["maturity"]["candidate"], 1);
    assert_eq!(all["rules"]["breakdown"]["effectiveness"]["unrated"], 1);
    assert_eq!(all["last_runs"]["decay_sweep"], json!(null));

    let health = admin.ok("memory_stats", json!({"butler": "health"})).await;
    assert_eq!(health["episodes"]["total"], 3);

    // A butler key counts only what it can see: its own episodes and global + own scope.
    let butler = app.client(TENANT_A_GENERAL).await;
    let mine = butler.ok("memory_stats", json!({})).await;
    assert_eq!(mine["episodes"]["total"], 1);
    assert_eq!(mine["scopes"], json!(["global", "general"]));
    let err = butler.err("memory_stats", json!({"scope": "health"})).await;
    assert_eq!(err["class"], "forbidden");
    app.stop().await;
}

#[tokio::test]
async fn committed_rows_are_embedded_and_record_their_model() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let episode = mcp
        .ok(
            "memory_store_episode",
            json!({"content": "Booked a dentist appointment", "butler": "health"}),
        )
        .await;
    let fact = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "dentist", "content": "Dr. Berg"}),
        )
        .await;
    app.engine().flush().await.unwrap();
    for (ty, id) in [("episode", &episode["id"]), ("fact", &fact["id"])] {
        let got = mcp.ok("memory_get", json!({"type": ty, "id": id})).await;
        assert_eq!(
            got["embedding_model"], "all-MiniLM-L6-v2-int8-compact",
            "{ty}"
        );
    }
    let mut sql = app.sql().await;
    let (model, sha, dims): (String, String, i32) = sqlx::query_as(
        "SELECT v.model, v.model_sha256, v.dimensions FROM episodes e JOIN embedding_versions v
         ON v.id = e.embedding_version_id WHERE e.id = $1::uuid",
    )
    .bind(episode["id"].as_str().unwrap())
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(model, "all-MiniLM-L6-v2-int8-compact");
    assert_eq!(
        sha,
        base_config("").engine.embedder.model_sha256,
        "the model's pin"
    );
    assert_eq!(dims, 384);
    app.stop().await;
}
