//! Elevated access: an auditor key reads any one tenant it names, with a reason, per
//! request; it is listed and allowed exactly the tools that only read, leaves no trace in
//! what it reads (reference counts), and every call it makes is recorded before it runs,
//! for the tenant's admins to see. No other key crosses tenants, whatever headers it sends.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::helpers::*;
use crate::tool_rights::arguments;

const REASON: &str = "case 42: reported leak of a pet's name";

/// One JSON-RPC request to `/mcp` as `key`, with `headers`: the HTTP status and the body.
async fn rpc(
    app: &TestApp,
    key: &str,
    headers: &[(&str, &str)],
    method: &str,
    params: Value,
) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(app.url("/mcp"))
        .header("Authorization", format!("Bearer {key}"))
        .header("Accept", "application/json, text/event-stream");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// A tool call: whether it failed, and its structured answer.
pub(crate) async fn call(
    app: &TestApp,
    key: &str,
    headers: &[(&str, &str)],
    tool: &str,
    args: Value,
) -> (bool, Value) {
    let (_, body) = rpc(
        app,
        key,
        headers,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    )
    .await;
    let result = &body["result"];
    (
        result["isError"] == true,
        result["structuredContent"].clone(),
    )
}

#[tokio::test]
async fn an_auditor_reads_one_named_tenant_for_a_reason_and_every_read_is_recorded() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let fact = health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "pet", "content": "Has a cat named Miso"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let references = || async {
        let mut sql = app.sql().await;
        sqlx::query_scalar::<_, i32>("SELECT reference_count FROM facts WHERE id = $1::uuid")
            .bind(&fact)
            .fetch_one(&mut sql)
            .await
            .unwrap()
    };
    let before = references().await;

    // Without naming the tenant and the reason, nothing.
    let (status, body) = rpc(&app, AUDITOR, &[], "tools/list", json!({})).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["code"], "audit_context_missing");
    let (status, _) = rpc(
        &app,
        AUDITOR,
        &[("X-Audit-Tenant", "tenant-a")],
        "tools/list",
        json!({}),
    )
    .await;
    assert_eq!(status, 403);

    let investigation = [
        ("X-Audit-Tenant", "tenant-a"),
        ("X-Audit-Reason", REASON),
        ("X-Request-Id", "case-42-read"),
    ];
    // Listed exactly the tools that only read; every other tool is refused.
    let (_, listed) = rpc(&app, AUDITOR, &investigation, "tools/list", json!({})).await;
    let shown: BTreeSet<String> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    let every = butler_memory::mcp::tool_definitions(
        &butler_memory::config::Config::from_toml("").unwrap(),
    );
    let reads: BTreeSet<String> = every
        .iter()
        .filter(|t| t.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(true))
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(shown, reads);
    for tool in &every {
        let name = tool.name.as_ref();
        let (error, body) = call(&app, AUDITOR, &investigation, name, arguments(name)).await;
        let refused = error && body["class"] == "forbidden";
        assert_eq!(
            refused,
            !shown.contains(name),
            "auditor calling {name}: {body}"
        );
    }

    // It reads the tenant it named, and leaves no trace in it.
    let (error, got) = call(
        &app,
        AUDITOR,
        &investigation,
        "memory_get",
        json!({"type": "fact", "id": fact}),
    )
    .await;
    assert!(!error, "{got}");
    assert_eq!(got["content"], "Has a cat named Miso");
    let (_, found) = call(
        &app,
        AUDITOR,
        &investigation,
        "memory_search",
        json!({"query": "cat Miso"}),
    )
    .await;
    assert!(found.to_string().contains("Miso"), "{found}");
    assert_eq!(
        references().await,
        before,
        "an auditor's reads move no reference count"
    );

    // Every call is on record for the tenant's admins, in order, with the reason.
    let record = admin.ok("memory_audit_reads", json!({"limit": 1000})).await;
    let reads_recorded = record["reads"].as_array().unwrap();
    assert_eq!(reads_recorded.len(), every.len() + 2, "{record}");
    let last = reads_recorded.last().unwrap();
    assert_eq!(last["tool"], "memory_search");
    assert_eq!(last["arguments"]["query"], "cat Miso");
    assert_eq!(last["reason"], REASON);
    assert_eq!(last["auditor"], "investigator");
    assert_eq!(last["request_id"], "case-42-read");
    assert!(reads_recorded.iter().all(|r| r["tenant_id"] == "tenant-a"));

    // Another tenant's investigation is not this tenant's record.
    let elsewhere = [("X-Audit-Tenant", "tenant-b"), ("X-Audit-Reason", REASON)];
    let (error, other) = call(
        &app,
        AUDITOR,
        &elsewhere,
        "memory_get",
        json!({"type": "fact", "id": fact}),
    )
    .await;
    assert!(error && other["code"] == "not_found", "{other}");
    assert_eq!(
        admin.ok("memory_audit_reads", json!({"limit": 1000})).await["count"],
        record["count"]
    );

    // No other key crosses tenants, whatever it sends.
    let headers = [("X-Audit-Tenant", "tenant-a"), ("X-Audit-Reason", REASON)];
    let (error, body) = call(
        &app,
        TENANT_B_HEALTH,
        &headers,
        "memory_get",
        json!({"type": "fact", "id": fact}),
    )
    .await;
    assert!(error && body["code"] == "not_found", "{body}");

    // Investigations go over /mcp only, where every call is recorded.
    let response = reqwest::Client::new()
        .get(app.url("/api/memory/facts"))
        .header("Authorization", format!("Bearer {AUDITOR}"))
        .header("X-Audit-Tenant", "tenant-a")
        .header("X-Audit-Reason", REASON)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "auditor_reads_only", "{body}");

    // The record is append-only.
    let mut sql = app.sql().await;
    let err = sqlx::query("UPDATE audit_reads SET reason = 'nothing to see'")
        .execute(&mut sql)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");
    app.stop().await;
}
