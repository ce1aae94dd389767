//! The `/mcp` endpoint answers plain stateless tool calls itself (src/mcp/direct.rs) and
//! hands everything else to rmcp: both must give a butler the same bytes.

use serde_json::{Value, json};

use crate::helpers::*;

/// The headers of a plain call (the load generator's), and a variant rmcp must serve: an
/// `Accept` with a weight, which the direct path leaves to rmcp to interpret.
const PLAIN_ACCEPT: &str = "application/json, text/event-stream";
const WEIGHTED_ACCEPT: &str = "application/json, text/event-stream;q=1";

async fn post(app: &TestApp, accept: &str, body: &Value) -> (u16, String, Vec<u8>) {
    let response = reqwest::Client::new()
        .post(app.url("/mcp"))
        .header("Accept", accept)
        .header("Authorization", format!("Bearer {TENANT_A_HEALTH}"))
        // One id for both paths: a refusal without request_context is answered under it.
        .header("X-Request-Id", "mcp-endpoint-test")
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (
        status,
        content_type,
        response.bytes().await.unwrap().to_vec(),
    )
}

fn tool_call(id: i64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": args}})
}

#[tokio::test]
async fn direct_answers_are_the_bytes_rmcp_sends() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let episode = mcp
        .ok(
            "memory_store_episode",
            json!({"content": "the boiler was serviced", "butler": "health"}),
        )
        .await;
    // Embedded first, so the record does not change between the two answers.
    app.engine().flush().await.unwrap();
    let context = json!({"request_id": "req-direct-1"});
    let calls = [
        // A record, an error of each kind the tools return, and a rule the tool enforces.
        tool_call(
            1,
            "memory_get",
            json!({"type": "episode", "id": episode["id"], "request_context": context}),
        ),
        tool_call(
            2,
            "memory_get",
            json!({"type": "episode", "id": "00000000-0000-7000-8000-000000000000",
                   "request_context": context}),
        ),
        tool_call(3, "memory_get", json!({"type": "episode"})),
        tool_call(
            4,
            "memory_search",
            json!({"query": "boiler", "limit": 1000, "request_context": context}),
        ),
    ];
    for call in &calls {
        let direct = post(&app, PLAIN_ACCEPT, call).await;
        let through_rmcp = post(&app, WEIGHTED_ACCEPT, call).await;
        assert_eq!(direct.0, 200, "{call}");
        assert_eq!(direct.1, "application/json", "{call}");
        assert_eq!(
            String::from_utf8_lossy(&direct.2),
            String::from_utf8_lossy(&through_rmcp.2),
            "{call}"
        );
        assert_eq!((direct.0, &direct.1), (through_rmcp.0, &through_rmcp.1));
    }
    // The record came back, and the errors are tool errors with their classes.
    let bodies: Vec<Value> =
        futures::future::join_all(calls.iter().map(|c| post(&app, PLAIN_ACCEPT, c)))
            .await
            .into_iter()
            .map(|(_, _, body)| serde_json::from_slice(&body).unwrap())
            .collect();
    assert_eq!(
        bodies[0]["result"]["structuredContent"]["id"],
        episode["id"]
    );
    assert_eq!(
        bodies[0]["result"]["structuredContent"]["request_context"]["request_id"],
        "req-direct-1"
    );
    assert_eq!(
        bodies[1]["result"]["structuredContent"]["class"],
        "not_found"
    );
    assert_eq!(
        bodies[2]["result"]["structuredContent"]["class"],
        "invalid_input"
    );
    assert_eq!(
        bodies[3]["result"]["structuredContent"]["class"],
        "invalid_input"
    );
    assert!(
        bodies
            .iter()
            .all(|b| b["result"].get("resultType").is_none())
    );
    app.stop().await;
}

#[tokio::test]
async fn calls_the_direct_path_declines_still_reach_rmcp_with_their_body() {
    let app = spawn_app().await;
    // An unknown tool is read by the direct path, then handed on: rmcp must get the body
    // intact to answer with its protocol error.
    let (status, _, body) = post(&app, PLAIN_ACCEPT, &tool_call(9, "memory_nope", json!({}))).await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 200);
    assert_eq!(body["id"], 9);
    assert_eq!(body["error"]["code"], -32602, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("memory_nope")
    );
    // Other methods go to rmcp unread.
    let (status, _, body) = post(
        &app,
        PLAIN_ACCEPT,
        &json!({"jsonrpc": "2.0", "id": 10, "method": "tools/list"}),
    )
    .await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 200);
    assert!(body["result"]["tools"].as_array().unwrap().len() > 10);
    // rmcp keeps refusing what it refuses: a client that cannot take an event stream.
    let (status, _, _) = post(
        &app,
        "application/json",
        &tool_call(11, "memory_stats", json!({})),
    )
    .await;
    assert_eq!(status, 406);
    app.stop().await;
}

/// Posts `body` as it is (not necessarily JSON) with `version` as the protocol version.
async fn post_raw(app: &TestApp, version: Option<&str>, body: &str) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(app.url("/mcp"))
        .header("Accept", PLAIN_ACCEPT)
        .header("Content-Type", "application/json")
        .header("Authorization", format!("Bearer {TENANT_A_HEALTH}"))
        .body(body.to_owned());
    if let Some(version) = version {
        request = request.header("MCP-Protocol-Version", version);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: not JSON: {text}"))
    };
    (status, value)
}

/// Malformed messages get the JSON-RPC errors the specification names, as JSON.
#[tokio::test]
async fn malformed_messages_are_json_rpc_errors() {
    let app = spawn_app().await;
    let (status, body) = post_raw(&app, None, "{bad json").await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!(-32700)),
        "{body}"
    );
    assert_eq!(body["id"], Value::Null);

    let (status, body) = post_raw(&app, None, r#"{"id":1,"method":"tools/list"}"#).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!(-32600)),
        "{body}"
    );

    let (status, body) = post_raw(
        &app,
        Some("2025-06-18"),
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"memory_stats","arguments":"notanobject"}}"#,
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"], &body["id"]),
        (200, &json!(-32602), &json!(5)),
        "{body}"
    );

    let (status, body) = post_raw(
        &app,
        Some("2025-06-18"),
        r#"{"jsonrpc":"2.0","id":6,"method":"nope/nothing"}"#,
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (200, &json!(-32601)),
        "{body}"
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Method not found: `nope/nothing`"),
        "{message}"
    );
    app.stop().await;
}

/// A batch is answered message by message under 2025-03-26 (the version a request without
/// the header speaks), and refused under versions that removed batches.
#[tokio::test]
async fn batches_are_answered_where_the_protocol_has_them() {
    let app = spawn_app().await;
    let batch = r#"[
        {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory_stats","arguments":{}}},
        {"jsonrpc":"2.0","method":"notifications/initialized"},
        {"jsonrpc":"2.0","id":"two","method":"tools/list"},
        {"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"memory_stats","arguments":7}}
    ]"#;
    for version in [None, Some("2025-03-26")] {
        let (status, body) = post_raw(&app, version, batch).await;
        assert_eq!(status, 200, "{body}");
        let answers = body
            .as_array()
            .unwrap_or_else(|| panic!("not an array: {body}"));
        assert_eq!(answers.len(), 3, "the notification has no answer: {body}");
        assert_eq!(answers[0]["id"], 1);
        assert!(
            answers[0]["result"]["structuredContent"].is_object(),
            "{body}"
        );
        assert_eq!(answers[1]["id"], "two");
        assert!(answers[1]["result"]["tools"].is_array(), "{body}");
        assert_eq!(
            (&answers[2]["id"], &answers[2]["error"]["code"]),
            (&json!(3), &json!(-32602))
        );
    }
    let (status, body) = post_raw(&app, Some("2025-06-18"), batch).await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!(-32600)),
        "{body}"
    );
    let (status, body) = post_raw(
        &app,
        None,
        r#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#,
    )
    .await;
    assert_eq!((status, body), (202, Value::Null));
    app.stop().await;
}

/// What a client that probes sees: unknown paths are 404 with or without a key, a 401 on
/// `/mcp` points to the resource's metadata (RFC 9728), which says to send a bearer token
/// and names no authorization server; a page from an origin that is not allowed is refused.
#[tokio::test]
async fn probes_get_404s_a_metadata_document_and_origins_are_checked() {
    let app = spawn_app().await;
    let client = reqwest::Client::new();
    for path in ["/nowhere", "/mcp/extra"] {
        let response = client.get(app.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 404, "{path}");
    }
    let unauthorised = client.post(app.url("/mcp")).send().await.unwrap();
    assert_eq!(unauthorised.status(), 401);
    let challenge = unauthorised.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    let host = app.url("").trim_end_matches('/').to_owned();
    let metadata_url = format!("{host}/.well-known/oauth-protected-resource");
    assert_eq!(
        challenge,
        format!("Bearer realm=\"butler-memory\", resource_metadata=\"{metadata_url}\"")
    );
    let document: Value = client
        .get(&metadata_url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(document["resource"], format!("{host}/mcp"));
    assert_eq!(document["bearer_methods_supported"], json!(["header"]));
    assert_eq!(document["authorization_servers"], json!([]));

    let call = tool_call(1, "memory_stats", json!({}));
    let from = |origin: &'static str| {
        client
            .post(app.url("/mcp"))
            .header("Accept", PLAIN_ACCEPT)
            .header("Authorization", format!("Bearer {TENANT_A_HEALTH}"))
            .header("Origin", origin)
            .json(&call)
            .send()
    };
    let refused = from("https://evil.example").await.unwrap();
    assert_eq!(refused.status(), 403);
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("evil.example"),
        "{body}"
    );
    let allowed = from("http://localhost:6274").await.unwrap();
    assert_eq!(allowed.status(), 200);
    app.stop().await;
}
