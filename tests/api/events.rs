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
        "INSERT INTO facts (id, tenant_id, subject, predicate, content, scope, created_at, last_confirmed_at, last_referenced_at, valid_from)
         VALUES (gen_random_uuid(), 'tenant-a', 's', 'p', 'other', 'global', now(), now(), now(), now())",
    )
    .execute(&mut sql)
    .await
    .unwrap_err();
    assert!(err.to_string().contains("facts_one_live"), "{err}");
    app.stop().await;
}

/// Folds an entity's events: each `after` is the state after the change (whole, or the
/// fields that changed); `null` means the entity is gone.
pub(crate) fn replay(events: &[Value]) -> Option<serde_json::Map<String, Value>> {
    let mut state: Option<serde_json::Map<String, Value>> = None;
    for event in events {
        match &event["payload"]["after"] {
            Value::Object(after) => {
                let current = state.get_or_insert_with(Default::default);
                for (k, v) in after {
                    current.insert(k.clone(), v.clone());
                }
            }
            Value::Null => state = None,
            other => panic!("unexpected after: {other}"),
        }
    }
    state
}

/// Every field the replayed state has must equal the record's, except those that are
/// bookkeeping of reads or computed at response time.
fn assert_replays_to(state: &serde_json::Map<String, Value>, record: &Value) {
    let skip = [
        "effective_confidence",
        "reference_count",
        "last_referenced_at",
        "embedding_model",
        "type",
    ];
    let mut compared = 0;
    for (k, v) in state {
        if skip.contains(&k.as_str()) || record.get(k).is_none() {
            continue;
        }
        assert_eq!(
            &record[k], v,
            "field {k}: record {record} vs replay {state:?}"
        );
        compared += 1;
    }
    assert!(compared >= 10, "too little compared: {state:?}");
}

#[tokio::test]
async fn the_events_of_an_entity_replay_to_its_current_state() {
    let clock = std::sync::Arc::new(butler_memory_actors::ManualClock::new(
        chrono::DateTime::parse_from_rfc3339("2026-05-01T09:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc),
    ));
    let app = spawn_app_at("", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let fact = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "tea", "content": "Drinks oolong", "permanence": "volatile"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let rule = mcp
        .ok(
            "memory_store_rule",
            json!({"content": "Offer tea after dinner"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // A life: fades, is confirmed, fades again, is forgotten, restored; the rule is rated,
    // promoted, demoted and forgotten.
    clock.advance(chrono::Duration::days(60));
    admin
        .ok("memory_run_sweep", json!({"kinds": ["decay_sweep"]}))
        .await;
    mcp.ok("memory_confirm", json!({"type": "fact", "id": fact}))
        .await;
    clock.advance(chrono::Duration::days(60));
    admin
        .ok("memory_run_sweep", json!({"kinds": ["decay_sweep"]}))
        .await;
    mcp.ok(
        "memory_forget",
        json!({"type": "fact", "id": fact, "reason": "stale"}),
    )
    .await;
    admin
        .ok("memory_restore", json!({"type": "fact", "id": fact}))
        .await;
    for _ in 0..5 {
        mcp.ok("memory_mark_helpful", json!({"rule_id": rule}))
            .await;
    }
    mcp.ok(
        "memory_mark_harmful",
        json!({"rule_id": rule, "reason": "too late"}),
    )
    .await;
    mcp.ok("memory_confirm", json!({"type": "rule", "id": rule}))
        .await;
    mcp.ok("memory_forget", json!({"type": "rule", "id": rule}))
        .await;

    for (memory_type, id, expected_events) in [("fact", &fact, 6), ("rule", &rule, 10)] {
        // Paged two at a time, to exercise the cursor.
        let events: Vec<Value> = activity(&admin, 2)
            .await
            .into_iter()
            .filter(|e| e["entity_id"] == json!(id))
            .collect();
        assert_eq!(events.len(), expected_events, "{memory_type}: {events:?}");
        let ids: Vec<i64> = events.iter().map(|e| e["id"].as_i64().unwrap()).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "stable order");
        let record = mcp
            .ok("memory_get", json!({"type": memory_type, "id": id}))
            .await;
        assert_replays_to(&replay(&events).expect("exists"), &record);
    }
    app.stop().await;
}

#[tokio::test]
async fn the_activity_stream_filters_by_scope_and_butler_and_starts_at_a_time() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let general = app.client(TENANT_A_GENERAL).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "pulse", "content": "Resting pulse 58", "scope": "health"}),
        )
        .await;
    general
        .ok(
            "memory_store_episode",
            json!({"content": "Planned a trip", "butler": "general"}),
        )
        .await;
    let scoped = admin
        .ok("memory_activity_stream", json!({"scope": "health"}))
        .await;
    assert_eq!(scoped["count"], 1, "{scoped}");
    assert_eq!(scoped["events"][0]["event_type"], "fact_created");
    let by_butler = admin
        .ok("memory_activity_stream", json!({"butler": "general"}))
        .await;
    assert_eq!(by_butler["count"], 1, "{by_butler}");
    assert_eq!(by_butler["events"][0]["event_type"], "episode_stored");
    let future = admin
        .ok(
            "memory_activity_stream",
            json!({"since": "2999-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(future["count"], 0);
    let err = admin
        .err("memory_activity_stream", json!({"since": "yesterday"}))
        .await;
    assert_eq!(err["class"], "invalid_input");
    // Butlers do not read the audit stream.
    let err = health.err("memory_activity_stream", json!({})).await;
    assert_eq!(err["class"], "forbidden");
    app.stop().await;
}

#[tokio::test]
async fn a_stored_episode_its_event_and_memory_get_agree_to_the_microsecond() {
    // The record of a new episode is built before the insert (one statement for the group
    // and its events); on the system clock (nanoseconds) and with metadata PostgreSQL
    // normalises, what the caller is told, the event and a later read must still agree.
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let stored = mcp
        .ok(
            "memory_store_episode",
            json!({"content": "Walked 5 km", "butler": "health", "session_id": "s1",
                   "metadata": {"zeta": 1.5, "a": [1, 2.0, "x"], "nested": {"b": true, "a": null}},
                   "idempotency_key": "walk-1"}),
        )
        .await;
    let id = stored["id"].as_str().unwrap();
    let got = mcp
        .ok("memory_get", json!({"type": "episode", "id": id}))
        .await;
    let mut sql = app.sql().await;
    let after: Value =
        sqlx::query_scalar("SELECT payload->'after' FROM memory_events WHERE entity_id = $1::uuid")
            .bind(id)
            .fetch_one(&mut sql)
            .await
            .unwrap();
    for field in [
        "id",
        "content",
        "session_id",
        "created_at",
        "expires_at",
        "metadata",
        "importance",
        "consolidation_status",
        "idempotency_key",
        "request_id",
    ] {
        assert_eq!(
            got[field], after[field],
            "{field}: get {got} vs event {after}"
        );
        if !stored[field].is_null() {
            assert_eq!(
                stored[field], got[field],
                "{field}: stored {stored} vs get {got}"
            );
        }
    }
    // The same key again is the same episode, and no second event.
    let again = mcp
        .ok(
            "memory_store_episode",
            json!({"content": "Walked 5 km", "butler": "health", "idempotency_key": "walk-1"}),
        )
        .await;
    assert_eq!(again["id"], stored["id"]);
    let events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM memory_events WHERE entity_id = $1::uuid")
            .bind(id)
            .fetch_one(&mut sql)
            .await
            .unwrap();
    assert_eq!(events, 1);
    app.stop().await;
}
