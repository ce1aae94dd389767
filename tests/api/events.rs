//! The audit stream: every mutation writes an event in its transaction, carrying the
//! request id; the database refuses to change or delete events.

use serde_json::{Value, json};
use sqlx::Row;

use crate::helpers::*;

#[tokio::test]
async fn every_write_appends_one_event_with_its_request_id_and_state() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let ctx = |id: &str| json!({"request_id": id, "subrequest_id": "sub", "segment_id": "seg"});
    let episode = mcp
        .ok(
            "memory_store_episode",
            json!({"content": "e", "butler": "health", "request_context": ctx("r-episode")}),
        )
        .await;
    let fact = mcp
        .ok("memory_store_fact", json!({"subject": "s", "predicate": "p", "content": "c", "request_context": ctx("r-fact")}))
        .await;
    let rule = mcp
        .ok(
            "memory_store_rule",
            json!({"content": "r", "request_context": ctx("r-rule")}),
        )
        .await;
    let mut sql = app.sql().await;
    let rows = sqlx::query(
        "SELECT event_type, entity_type, entity_id::text AS entity_id, actor, request_id, subrequest_id,
                segment_id, tenant_id, payload
         FROM memory_events ORDER BY id",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    assert_eq!(rows.len(), 3);
    for (row, (event_type, entity_type, record, request)) in rows.iter().zip([
        ("episode_stored", "episode", &episode, "r-episode"),
        ("fact_created", "fact", &fact, "r-fact"),
        ("rule_created", "rule", &rule, "r-rule"),
    ]) {
        assert_eq!(row.get::<String, _>("event_type"), event_type);
        assert_eq!(row.get::<String, _>("entity_type"), entity_type);
        assert_eq!(
            row.get::<String, _>("entity_id"),
            record["id"].as_str().unwrap()
        );
        assert_eq!(row.get::<String, _>("actor"), "butler:a-health");
        assert_eq!(row.get::<String, _>("tenant_id"), "tenant-a");
        assert_eq!(row.get::<String, _>("request_id"), request);
        assert_eq!(row.get::<String, _>("subrequest_id"), "sub");
        assert_eq!(row.get::<String, _>("segment_id"), "seg");
        let payload: Value = row.get("payload");
        assert_eq!(payload["before"], Value::Null);
        assert_eq!(payload["after"]["id"], record["id"]);
        assert_eq!(payload["after"]["content"], record["content"]);
    }
    app.stop().await;
}

#[tokio::test]
async fn the_database_refuses_to_change_or_delete_events() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    mcp.ok("memory_store_rule", json!({"content": "audited"}))
        .await;
    let mut sql = app.sql().await;
    for statement in [
        "UPDATE memory_events SET actor = 'someone else'",
        "DELETE FROM memory_events",
        "TRUNCATE memory_events",
    ] {
        let err = sqlx::query(statement).execute(&mut sql).await.unwrap_err();
        assert!(
            err.to_string().contains("append-only"),
            "{statement}: {err}"
        );
    }
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM memory_events")
        .fetch_one(&mut sql)
        .await
        .unwrap();
    assert_eq!(count, 1);
    app.stop().await;
}

#[tokio::test]
async fn the_database_refuses_states_outside_the_canonical_sets() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let fact = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "s", "predicate": "p", "content": "c"}),
        )
        .await;
    let rule = mcp.ok("memory_store_rule", json!({"content": "r"})).await;
    let mut sql = app.sql().await;
    for (statement, id) in [
        (
            "UPDATE facts SET validity = 'forgotten' WHERE id = $1::uuid",
            &fact["id"],
        ),
        (
            "UPDATE facts SET permanence = 'eternal' WHERE id = $1::uuid",
            &fact["id"],
        ),
        (
            "UPDATE rules SET maturity = 'legendary' WHERE id = $1::uuid",
            &rule["id"],
        ),
        (
            "UPDATE rules SET validity = 'superseded' WHERE id = $1::uuid",
            &rule["id"],
        ),
        // An anti-pattern must keep the original rule.
        (
            "UPDATE rules SET maturity = 'anti_pattern' WHERE id = $1::uuid",
            &rule["id"],
        ),
    ] {
        let err = sqlx::query(statement)
            .bind(id.as_str().unwrap())
            .execute(&mut sql)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("check constraint"),
            "{statement}: {err}"
        );
    }
    // A second live fact for the same key is refused by the partial unique index.
    let err = sqlx::query(
        "INSERT INTO facts (id, tenant_id, subject, predicate, content, scope, created_at, last_confirmed_at, last_referenced_at)
         VALUES (gen_random_uuid(), 'tenant-a', 's', 'p', 'other', 'global', now(), now(), now())",
    )
    .execute(&mut sql)
    .await
    .unwrap_err();
    assert!(err.to_string().contains("facts_one_live"), "{err}");
    app.stop().await;
}
