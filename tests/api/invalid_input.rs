//! Bad input gets a classified tool error, never a crash, and changes nothing.

use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test]
async fn every_kind_of_bad_input_is_a_classified_error() {
    let app = spawn_app_with("[limits]\nmax_content_bytes = 64").await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        (
            "missing required field",
            "memory_store_episode",
            json!({"butler": "health"}),
            "invalid_arguments",
        ),
        (
            "missing predicate",
            "memory_store_fact",
            json!({"subject": "u", "content": "c"}),
            "invalid_arguments",
        ),
        (
            "unknown enum value",
            "memory_store_fact",
            json!({"subject": "u", "predicate": "p", "content": "c", "permanence": "forever"}),
            "invalid_arguments",
        ),
        (
            "unknown memory type",
            "memory_get",
            json!({"type": "thought", "id": uuid::Uuid::new_v4()}),
            "invalid_arguments",
        ),
        (
            "not a uuid",
            "memory_get",
            json!({"type": "fact", "id": "42"}),
            "invalid_arguments",
        ),
        (
            "unknown field",
            "memory_store_rule",
            json!({"content": "c", "colour": "red"}),
            "invalid_arguments",
        ),
        (
            "wrong type",
            "memory_store_episode",
            json!({"content": 5, "butler": "health"}),
            "invalid_arguments",
        ),
        (
            "metadata not an object",
            "memory_store_episode",
            json!({"content": "c", "butler": "health", "metadata": [1]}),
            "invalid_arguments",
        ),
        (
            "oversized content",
            "memory_store_episode",
            json!({"content": "x".repeat(65), "butler": "health"}),
            "content_too_large",
        ),
        (
            "blank content",
            "memory_store_rule",
            json!({"content": "   "}),
            "empty_content",
        ),
        (
            "NUL in content",
            "memory_store_rule",
            json!({"content": "a\u{0}b"}),
            "invalid_characters",
        ),
        (
            "NUL in metadata",
            "memory_store_episode",
            json!({"content": "c", "butler": "health", "metadata": {"k": "a\u{0}"}}),
            "invalid_characters",
        ),
        (
            "importance out of range",
            "memory_store_fact",
            json!({"subject": "u", "predicate": "p", "content": "c", "importance": 11}),
            "invalid_importance",
        ),
        (
            "confidence out of range",
            "memory_store_fact",
            json!({"subject": "u", "predicate": "p", "content": "c", "confidence": 0}),
            "invalid_confidence",
        ),
        (
            "bad butler name",
            "memory_store_episode",
            json!({"content": "c", "butler": "no spaces"}),
            "invalid_name",
        ),
        (
            "bad scope name",
            "memory_store_rule",
            json!({"content": "c", "scope": "_private"}),
            "invalid_name",
        ),
        (
            "negative ttl",
            "memory_store_episode",
            json!({"content": "c", "butler": "health", "ttl_days": -1}),
            "invalid_ttl",
        ),
        (
            "ttl so short the episode would expire as it is stored",
            "memory_store_episode",
            json!({"content": "c", "butler": "health", "ttl_days": 1e-9}),
            "invalid_ttl",
        ),
        (
            "too many tags",
            "memory_store_rule",
            json!({"content": "c", "tags": (0..33).map(|i| i.to_string()).collect::<Vec<_>>()}),
            "too_many_tags",
        ),
        (
            "blank subject",
            "memory_store_fact",
            json!({"subject": " ", "predicate": "p", "content": "c"}),
            "empty_value",
        ),
        (
            "empty request id",
            "memory_store_rule",
            json!({"content": "c", "request_context": {"request_id": ""}}),
            "empty_value",
        ),
        (
            "unknown link relation",
            "memory_store_fact",
            json!({"subject": "u", "predicate": "p", "content": "c",
                   "links": [{"target_type": "fact", "target_id": uuid::Uuid::new_v4(), "relation": "loves"}]}),
            "invalid_arguments",
        ),
    ];
    for (what, tool, args, code) in cases {
        let err = mcp.err(tool, args).await;
        assert_eq!(err["class"], "invalid_input", "{what}: {err}");
        assert_eq!(err["code"], code, "{what}: {err}");
        assert!(
            err["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{what}"
        );
    }
    // Nothing was written, and the service is still serving.
    let mut sql = app.sql().await;
    let rows: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM episodes) + (SELECT count(*) FROM facts) + (SELECT count(*) FROM rules)
              + (SELECT count(*) FROM memory_events)",
    )
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(rows, 0);
    mcp.ok("memory_store_rule", json!({"content": "still here"}))
        .await;
    app.stop().await;
}

/// Reasons (a harmful mark's, a forget's) are free text from the caller: bounded, and
/// refused as `invalid_input` when PostgreSQL could not store them, before anything runs.
#[tokio::test]
async fn reasons_have_a_limit_and_are_checked_like_content() {
    let app = spawn_app_with("[limits]\nmax_reason_bytes = 100").await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let rule = mcp
        .ok("memory_store_rule", json!({"content": "Offer tea"}))
        .await["id"]
        .clone();
    let fact = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "drink", "content": "tea"}),
        )
        .await["id"]
        .clone();
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        (
            "NUL in a harmful mark's reason",
            "memory_mark_harmful",
            json!({"rule_id": rule, "reason": "bad\u{0}advice"}),
            "invalid_characters",
        ),
        (
            "oversized harmful reason",
            "memory_mark_harmful",
            json!({"rule_id": rule, "reason": "x".repeat(101)}),
            "content_too_large",
        ),
        (
            "NUL in a forget's reason",
            "memory_forget",
            json!({"type": "fact", "id": fact, "reason": "gone\u{0}"}),
            "invalid_characters",
        ),
        (
            "oversized forget reason",
            "memory_forget",
            json!({"type": "fact", "id": fact, "reason": "y".repeat(101)}),
            "content_too_large",
        ),
    ];
    for (what, tool, args, code) in cases {
        let err = mcp.err(tool, args).await;
        assert_eq!(err["class"], "invalid_input", "{what}: {err}");
        assert_eq!(err["code"], code, "{what}: {err}");
    }
    // Nothing changed: the rule has no mark, the fact is still active.
    let rule = mcp
        .ok("memory_get", json!({"type": "rule", "id": rule}))
        .await;
    assert_eq!(rule["harmful_count"], 0, "{rule}");
    let fact = mcp
        .ok("memory_get", json!({"type": "fact", "id": fact}))
        .await;
    assert_eq!(fact["validity"], "active", "{fact}");
    // A reason within the limit is fine.
    mcp.ok(
        "memory_mark_harmful",
        json!({"rule_id": rule["id"], "reason": "x".repeat(100)}),
    )
    .await;
    app.stop().await;
}

#[tokio::test]
async fn unknown_ids_are_not_found_and_unknown_tools_are_protocol_errors() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_ADMIN).await;
    let err = mcp
        .err("memory_get", json!({"type": "rule", "id": uuid::Uuid::new_v4(), "request_context": {"request_id": "r-9"}}))
        .await;
    assert_eq!(err["class"], "not_found");
    assert_eq!(
        err["request_context"]["request_id"], "r-9",
        "errors echo the request id too"
    );
    let args = serde_json::Map::new();
    let result = mcp
        .service
        .call_tool(rmcp::model::CallToolRequestParams::new("memory_teleport").with_arguments(args))
        .await;
    assert!(result.is_err(), "an unknown tool is a JSON-RPC error");
    app.stop().await;
}
