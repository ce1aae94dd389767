//! Every HTTP request has an id: the client's `X-Request-Id`, or one the service makes. It
//! is echoed on the response (with a valid `traceparent`), and a tool call that names no
//! `request_context` of its own is answered and audited under it, refusals included.

use serde_json::{Value, json};

use crate::helpers::*;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

async fn call(
    app: &TestApp,
    headers: &[(&str, &str)],
    tool: &str,
    args: Value,
) -> (reqwest::header::HeaderMap, Value) {
    let mut request = reqwest::Client::new()
        .post(app.url("/mcp"))
        .header("Accept", "application/json, text/event-stream")
        .header("Authorization", format!("Bearer {TENANT_A_HEALTH}"))
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": tool, "arguments": args}}));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let headers = response.headers().clone();
    let body: Value = response.json().await.unwrap();
    (headers, body["result"]["structuredContent"].clone())
}

#[tokio::test]
async fn a_clients_request_id_names_the_call_its_answer_and_its_audit_event() {
    let app = spawn_app().await;
    let (headers, stored) = call(
        &app,
        &[
            ("X-Request-Id", "butler-run-42"),
            ("traceparent", TRACEPARENT),
        ],
        "memory_store_episode",
        json!({"content": "Walked the dog.", "butler": "health"}),
    )
    .await;
    assert_eq!(headers["x-request-id"], "butler-run-42");
    assert_eq!(headers["traceparent"], TRACEPARENT);
    assert_eq!(
        stored["request_context"]["request_id"], "butler-run-42",
        "{stored}"
    );
    assert!(
        stored["request_context"].get("generated").is_none(),
        "{stored}"
    );
    let mut db = app.sql().await;
    let audited: String =
        sqlx::query_scalar("SELECT request_id FROM memory_events WHERE entity_id = $1::uuid")
            .bind(stored["id"].as_str().unwrap())
            .fetch_one(&mut db)
            .await
            .unwrap();
    assert_eq!(audited, "butler-run-42");

    // The call's own request_context wins over the header.
    let (_, own) = call(
        &app,
        &[("X-Request-Id", "butler-run-43")],
        "memory_store_episode",
        json!({"content": "Fed the cat.", "butler": "health",
               "request_context": {"request_id": "own-1"}}),
    )
    .await;
    assert_eq!(own["request_context"]["request_id"], "own-1");
    app.stop().await;
}

#[tokio::test]
async fn arguments_that_do_not_parse_are_refused_under_the_requests_id() {
    let app = spawn_app().await;
    let (headers, refused) = call(
        &app,
        &[("X-Request-Id", "bad-args-1")],
        "memory_store_episode",
        json!({"content": 42}),
    )
    .await;
    assert_eq!(headers["x-request-id"], "bad-args-1");
    assert_eq!(refused["code"], "invalid_arguments", "{refused}");
    assert_eq!(
        refused["request_context"]["request_id"], "bad-args-1",
        "{refused}"
    );
    app.stop().await;
}

#[tokio::test]
async fn without_ids_the_service_makes_one_and_drops_a_malformed_traceparent() {
    let app = spawn_app().await;
    let (headers, answer) = call(
        &app,
        &[
            ("traceparent", "00-xyz"),
            ("X-Request-Id", "has spaces in it"),
        ],
        "memory_stats",
        json!({}),
    )
    .await;
    let id = headers["x-request-id"].to_str().unwrap().to_owned();
    assert!(id.starts_with("req-"), "{id}");
    assert!(headers.get("traceparent").is_none());
    assert_eq!(
        answer["request_context"]["request_id"],
        id.as_str(),
        "{answer}"
    );
    assert_eq!(answer["request_context"]["generated"], true, "{answer}");
    // Refusals before any tool have an id too.
    let unauthorised = reqwest::Client::new()
        .post(app.url("/mcp"))
        .header("X-Request-Id", "no-key-1")
        .send()
        .await
        .unwrap();
    assert_eq!(unauthorised.status(), 401);
    assert_eq!(unauthorised.headers()["x-request-id"], "no-key-1");
    app.stop().await;
}
