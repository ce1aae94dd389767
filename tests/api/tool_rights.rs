//! A key is listed the tools it may call, each with a title and MCP's annotations, and the
//! engine enforces the same rights: every tool, called by every role with valid arguments,
//! is refused as `forbidden` exactly when `tools/list` does not show it to that role.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::helpers::*;

/// Valid arguments for each tool (random ids: an admitted caller gets `not_found`).
pub(crate) fn arguments(tool: &str) -> Value {
    let id = "00000000-0000-7000-8000-000000000001";
    match tool {
        "memory_store_episode" => json!({"content": "Rights check.", "butler": "health"}),
        "memory_ingest_batch" => {
            json!({"episodes": [{"content": "Rights check.", "butler": "health"}]})
        }
        "memory_store_fact" => {
            json!({"subject": "user", "predicate": "rights", "content": "Checked."})
        }
        "memory_store_rule" => json!({"content": "Check rights before acting."}),
        "memory_get" | "memory_forget" | "memory_restore" => json!({"type": "fact", "id": id}),
        "memory_confirm" => json!({"type": "fact", "id": id}),
        "memory_search" => json!({"query": "rights"}),
        "memory_recall" => json!({"topic": "rights"}),
        "memory_context" => json!({"trigger_prompt": "rights", "butler": "health"}),
        "memory_context_batch" => {
            json!({"requests": [{"trigger_prompt": "rights", "butler": "health"}]})
        }
        "memory_mark_helpful" => json!({"rule_id": id}),
        "memory_mark_harmful" => json!({"rule_id": id, "reason": "it hurt"}),
        "memory_run_sweep" => json!({"kinds": ["decay_sweep"]}),
        "memory_purge" => json!({"type": "fact", "id": id, "reason": "rights check"}),
        "memory_activity_stream"
        | "memory_audit_reads"
        | "memory_dead_letters"
        | "memory_requeue_dead_letters"
        | "memory_stats" => json!({}),
        "orchestrator_remember" => json!({
            "source": {"sourceType": "manual", "capturedBy": "user"},
            "memories": [{"type": "Todo", "content": "Check rights."}],
        }),
        "orchestrator_capture" => json!({
            "source": {"sourceType": "diagnostics", "capturedBy": "system"},
            "text": "TODO: check rights",
        }),
        "orchestrator_set_status" => {
            json!({"memoryId": id, "status": "retracted", "reason": "rights check"})
        }
        "orchestrator_get" => json!({"memoryId": id}),
        "orchestrator_recall" => json!({"query": "rights"}),
        "orchestrator_bulletin" => json!({"message": "rights"}),
        "orchestrator_status" => json!({}),
        other => panic!("no arguments for {other}: add them here"),
    }
}

async fn listed(app: &TestApp, key: &str) -> Vec<rmcp::model::Tool> {
    app.client(key)
        .await
        .service
        .list_all_tools()
        .await
        .unwrap()
}

#[tokio::test]
async fn each_key_is_listed_what_it_may_call_and_refused_the_rest() {
    let app = spawn_app().await;
    let every: Vec<rmcp::model::Tool> = listed(&app, TENANT_A_ADMIN).await;
    assert_eq!(every.len(), butler_memory::mcp::tool_names().count());
    for (key, role) in [
        (TENANT_A_HEALTH, "butler"),
        (OPERATOR, "operator"),
        (TENANT_A_ADMIN, "admin"),
        (ORCHESTRATOR_ONE, "orchestrator"),
    ] {
        let shown: BTreeSet<String> = listed(&app, key)
            .await
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        let client = app.client(key).await;
        for tool in &every {
            let name = tool.name.as_ref();
            let result = client.call(name, arguments(name)).await;
            let body = result.structured_content.clone().unwrap_or(Value::Null);
            let refused = result.is_error == Some(true) && body["class"] == "forbidden";
            assert_eq!(
                refused,
                !shown.contains(name),
                "{role} calling {name}: listed {}, answered {body}",
                shown.contains(name)
            );
        }
        match role {
            "butler" => assert!(
                !shown.contains("memory_activity_stream") && shown.contains("memory_context")
            ),
            "operator" => assert_eq!(shown, BTreeSet::from(["memory_run_sweep".to_owned()])),
            "orchestrator" => assert!(
                !shown.is_empty() && shown.iter().all(|t| t.starts_with("orchestrator_")),
                "{shown:?}"
            ),
            _ => assert_eq!(shown.len(), every.len()),
        }
    }
    app.stop().await;
}

#[test]
fn every_tool_has_a_title_and_annotations() {
    for tool in
        butler_memory::mcp::tool_definitions(&butler_memory::config::Config::from_toml("").unwrap())
    {
        let title = tool.title.as_deref().unwrap_or_default();
        assert!(!title.is_empty(), "{}", tool.name);
        let a = tool
            .annotations
            .as_ref()
            .unwrap_or_else(|| panic!("{}", tool.name));
        assert_eq!(a.open_world_hint, Some(false), "{}", tool.name);
        let reads = a.read_only_hint == Some(true);
        assert_eq!(
            reads,
            matches!(
                tool.name.as_ref(),
                "memory_get"
                    | "memory_search"
                    | "memory_recall"
                    | "memory_context"
                    | "memory_context_batch"
                    | "memory_stats"
                    | "memory_activity_stream"
                    | "memory_audit_reads"
                    | "memory_dead_letters"
                    | "orchestrator_get"
                    | "orchestrator_recall"
                    | "orchestrator_bulletin"
                    | "orchestrator_status"
            ),
            "{}",
            tool.name
        );
        if tool.name == "memory_forget" || tool.name == "memory_purge" {
            assert_eq!(a.destructive_hint, Some(true));
        }
        if reads {
            assert_eq!(a.destructive_hint, Some(false), "{}", tool.name);
        }
    }
}

/// The limits a schema states are the service's: at the bound a call passes, past it the
/// call is refused as `invalid_input`.
#[tokio::test]
async fn the_limits_a_schema_states_are_the_services() {
    let app = spawn_app().await;
    let tools = listed(&app, TENANT_A_ADMIN).await;
    let property = |tool: &str, name: &str| -> Value {
        let tool = tools.iter().find(|t| t.name == tool).unwrap();
        Value::Object((*tool.input_schema).clone())["properties"][name].clone()
    };
    let client = app.client(TENANT_A_HEALTH).await;
    let max_limit = property("memory_search", "limit")["maximum"]
        .as_u64()
        .unwrap();
    for (limit, passes) in [(max_limit, true), (max_limit + 1, false)] {
        let result = client
            .call("memory_search", json!({"query": "tea", "limit": limit}))
            .await;
        assert_eq!(result.is_error != Some(true), passes, "limit {limit}");
    }
    let max_chars = property("memory_store_fact", "subject")["maxLength"]
        .as_u64()
        .unwrap();
    for (chars, passes) in [(max_chars, true), (max_chars + 1, false)] {
        let subject = "s".repeat(chars as usize);
        let result = client
            .call(
                "memory_store_fact",
                json!({"subject": subject, "predicate": "p", "content": "c"}),
            )
            .await;
        assert_eq!(result.is_error != Some(true), passes, "{chars} characters");
    }
    app.stop().await;
}
