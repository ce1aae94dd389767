//! memory_forget and memory_restore through MCP, the legacy `forgotten` alias, episode
//! cleanup, and every integrity refusal of the lifecycle: refused changes change nothing.

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::Duration;
use serde_json::{Value, json};

use crate::helpers::*;

fn id(v: &Value) -> String {
    v["id"].as_str().unwrap().to_owned()
}

async fn search_ids(mcp: &McpClient, query: &str) -> Vec<String> {
    mcp.ok(
        "memory_search",
        json!({"query": query, "mode": "keyword", "min_confidence": 0}),
    )
    .await["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(id)
        .collect()
}

#[tokio::test]
async fn forgotten_memories_leave_retrieval_and_an_admin_can_restore_them() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let fact = id(&mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "gym", "content": "Trains at Zephyr gym"}),
        )
        .await);
    let rule = id(&mcp
        .ok(
            "memory_store_rule",
            json!({"content": "Book Zephyr gym classes early"}),
        )
        .await);
    let episode = id(&mcp
        .ok(
            "memory_store_episode",
            json!({"content": "Talked about Zephyr gym prices", "butler": "health"}),
        )
        .await);
    assert_eq!(search_ids(&mcp, "Zephyr").await.len(), 3);

    let f = mcp
        .ok(
            "memory_forget",
            json!({"type": "fact", "id": fact, "reason": "user asked"}),
        )
        .await;
    assert_eq!(f["validity"], "retracted");
    assert_eq!(f["retracted_from"], "active");
    assert_eq!(f["changed"], true);
    let r = mcp
        .ok("memory_forget", json!({"type": "rule", "id": rule}))
        .await;
    assert_eq!(r["validity"], "retracted");
    let e = mcp
        .ok("memory_forget", json!({"type": "episode", "id": episode}))
        .await;
    assert!(e["forgotten_at"].is_string(), "{e}");
    assert!(search_ids(&mcp, "Zephyr").await.is_empty());
    // Forgetting again changes nothing.
    let again = mcp
        .ok("memory_forget", json!({"type": "fact", "id": fact}))
        .await;
    assert_eq!(again["changed"], false);

    // Restoring is for admins.
    let err = mcp
        .err("memory_restore", json!({"type": "fact", "id": fact}))
        .await;
    assert_eq!(err["class"], "forbidden");
    for (t, i) in [("fact", &fact), ("rule", &rule), ("episode", &episode)] {
        admin
            .ok("memory_restore", json!({"type": t, "id": i}))
            .await;
    }
    let f = mcp
        .ok("memory_get", json!({"type": "fact", "id": fact}))
        .await;
    assert_eq!(f["validity"], "active");
    assert!(f["retracted_at"].is_null() && f["retracted_from"].is_null());
    assert_eq!(search_ids(&mcp, "Zephyr").await.len(), 3);
    // Restoring what is not forgotten is refused.
    let err = admin
        .err("memory_restore", json!({"type": "rule", "id": rule}))
        .await;
    assert_eq!(err["class"], "integrity");
    assert_eq!(err["code"], "not_forgotten");
    app.stop().await;
}

#[tokio::test]
async fn a_fact_cannot_be_restored_over_a_newer_one_and_forgotten_means_retracted() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let old = id(&mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "city", "content": "Lives in Lyon"}),
        )
        .await);
    // The legacy alias is accepted and normalised.
    let f = mcp
        .ok(
            "memory_forget",
            json!({"type": "fact", "id": old, "validity": "forgotten"}),
        )
        .await;
    assert_eq!(f["validity"], "retracted");
    let err = mcp
        .err(
            "memory_forget",
            json!({"type": "fact", "id": old, "validity": "expired"}),
        )
        .await;
    assert_eq!(err["class"], "invalid_input");
    let newer = id(&mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "city", "content": "Lives in Nantes"}),
        )
        .await);
    let err = admin
        .err("memory_restore", json!({"type": "fact", "id": old}))
        .await;
    assert_eq!(err["class"], "integrity", "{err}");
    assert_eq!(err["code"], "newer_fact");
    assert!(err["message"].as_str().unwrap().contains(&newer));
    // Refused means unchanged.
    let f = mcp
        .ok("memory_get", json!({"type": "fact", "id": old}))
        .await;
    assert_eq!(f["validity"], "retracted");
    let n = mcp
        .ok("memory_get", json!({"type": "fact", "id": newer}))
        .await;
    assert_eq!(n["validity"], "active");
    app.stop().await;
}

async fn event_count(db: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM memory_events")
        .fetch_one(db)
        .await
        .unwrap()
}

#[tokio::test]
async fn invalid_transitions_are_refused_as_integrity_and_change_nothing() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let first = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "car", "content": "Drives a Clio"}),
        )
        .await;
    mcp.ok(
        "memory_store_fact",
        json!({"subject": "user", "predicate": "car", "content": "Drives a Zoe"}),
    )
    .await;
    let superseded = id(&first);
    let mut db = app.sql().await;
    let before = event_count(&mut db).await;

    // Confirming a superseded fact.
    let err = mcp
        .err("memory_confirm", json!({"type": "fact", "id": superseded}))
        .await;
    assert_eq!(
        (err["class"].as_str(), err["code"].as_str()),
        (Some("integrity"), Some("not_live"))
    );
    // Confirming a retracted one.
    let retracted = id(&mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "bike", "content": "Rides a Brompton"}),
        )
        .await);
    mcp.ok("memory_forget", json!({"type": "fact", "id": retracted}))
        .await;
    let before = before + 2;
    let err = mcp
        .err("memory_confirm", json!({"type": "fact", "id": retracted}))
        .await;
    assert_eq!(err["class"], "integrity");
    // Feedback on something that is not a rule.
    let err = mcp
        .err("memory_mark_helpful", json!({"rule_id": superseded}))
        .await;
    assert_eq!(
        (err["class"].as_str(), err["code"].as_str()),
        (Some("integrity"), Some("not_a_rule"))
    );
    // Feedback on a retracted rule.
    let rule = id(&mcp
        .ok(
            "memory_store_rule",
            json!({"content": "Check tyre pressure monthly"}),
        )
        .await);
    mcp.ok("memory_forget", json!({"type": "rule", "id": rule}))
        .await;
    let before = before + 2;
    let err = mcp
        .err(
            "memory_mark_harmful",
            json!({"rule_id": rule, "reason": "x"}),
        )
        .await;
    assert_eq!(err["class"], "integrity");
    // Episodes have nothing to confirm.
    let episode = id(&mcp
        .ok(
            "memory_store_episode",
            json!({"content": "Looked at bikes", "butler": "health"}),
        )
        .await);
    let before = before + 1;
    let err = mcp
        .err("memory_confirm", json!({"type": "episode", "id": episode}))
        .await;
    assert_eq!(err["class"], "invalid_input");
    // An unknown id is not_found, another tenant's likewise.
    let other = app.client(TENANT_B_HEALTH).await;
    let err = other
        .err("memory_forget", json!({"type": "fact", "id": superseded}))
        .await;
    assert_eq!(err["class"], "not_found");
    // Keys without memory rights are refused fast.
    let ops = app.client(OPERATOR).await;
    let err = ops
        .err("memory_confirm", json!({"type": "fact", "id": superseded}))
        .await;
    assert_eq!(err["class"], "forbidden");
    let err = ops.err("memory_activity_stream", json!({})).await;
    assert_eq!(err["class"], "forbidden");

    // Nothing above wrote an event or changed a row.
    assert_eq!(event_count(&mut db).await, before);
    let r = mcp
        .ok("memory_get", json!({"type": "rule", "id": rule}))
        .await;
    assert_eq!(r["harmful_count"], 0);
    let applications: i64 = sqlx::query_scalar("SELECT count(*) FROM rule_applications")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(applications, 0);
    // The database itself refuses non-canonical states.
    for sql in [
        "UPDATE facts SET validity = 'forgotten'",
        "UPDATE rules SET maturity = 'trusted'",
        "UPDATE facts SET validity = 'retracted', retracted_at = now()",
    ] {
        let refused = sqlx::query(sql).execute(&mut db).await;
        assert!(refused.is_err(), "{sql} was accepted");
    }
    app.stop().await;
}

async fn episodes_left(db: &mut sqlx::PgConnection) -> Vec<String> {
    sqlx::query_scalar("SELECT id::text FROM episodes ORDER BY created_at")
        .fetch_all(db)
        .await
        .unwrap()
}

fn pick(ids: &[String], which: &[usize]) -> Vec<String> {
    which.iter().map(|i| ids[*i].clone()).collect()
}

#[tokio::test]
async fn cleanup_deletes_expired_then_the_oldest_consolidated_and_never_pending() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("[episodes]\nmax_entries = 5\n", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let mut ids = Vec::new();
    let store = |i: usize| {
        let ttl = if i == 0 { 1.0 } else { 30.0 };
        json!({"content": format!("episode {i}"), "butler": "health", "ttl_days": ttl})
    };
    for i in 0..8 {
        clock.advance(Duration::minutes(1));
        ids.push(id(&mcp.ok("memory_store_episode", store(i)).await));
    }
    // Consolidation is another issue's work: set the states it would leave behind.
    let mut db = app.sql().await;
    for (i, status) in [
        (1, "failed"),
        (2, "consolidated"),
        (3, "pending"),
        (4, "consolidated"),
        (5, "dead_letter"),
    ] {
        sqlx::query("UPDATE episodes SET consolidation_status = $2 WHERE id = $1::uuid")
            .bind(&ids[i])
            .bind(status)
            .execute(&mut db)
            .await
            .unwrap();
    }
    let cleanup = json!({"kinds": ["episode_cleanup"]});
    clock.advance(Duration::days(2));
    let report = admin.ok("memory_run_sweep", cleanup.clone()).await;
    // Episode 0 expired. 7 remain for 5 places: the consolidated ones go, oldest first,
    // before the older failed one.
    assert_eq!(
        report["reports"][0]["changes"]["expired_deleted"], 1,
        "{report}"
    );
    assert_eq!(
        report["reports"][0]["changes"]["capacity_deleted"], 2,
        "{report}"
    );
    assert_eq!(episodes_left(&mut db).await, pick(&ids, &[1, 3, 5, 6, 7]));
    // One more: then the failed one goes.
    clock.advance(Duration::minutes(1));
    ids.push(id(&mcp.ok("memory_store_episode", store(8)).await));
    admin.ok("memory_run_sweep", cleanup.clone()).await;
    assert_eq!(episodes_left(&mut db).await, pick(&ids, &[3, 5, 6, 7, 8]));
    // Over capacity with only protected episodes left (pending, a dead letter within its
    // retention): nothing more goes, and the report says so.
    clock.advance(Duration::minutes(1));
    ids.push(id(&mcp.ok("memory_store_episode", store(9)).await));
    let report = admin.ok("memory_run_sweep", cleanup.clone()).await;
    assert_eq!(
        report["reports"][0]["over_capacity_protected"], 1,
        "{report}"
    );
    assert_eq!(episodes_left(&mut db).await.len(), 6);
    // Each deletion is on record with its reason.
    let deleted: Vec<(String, String)> = sqlx::query_as(
        "SELECT payload->>'reason', entity_id::text FROM memory_events
         WHERE event_type = 'episode_deleted' ORDER BY 1, 2",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    let mut expected = vec![
        ("capacity".to_owned(), ids[1].clone()),
        ("capacity".to_owned(), ids[2].clone()),
        ("capacity".to_owned(), ids[4].clone()),
        ("expired".to_owned(), ids[0].clone()),
    ];
    expected.sort();
    assert_eq!(deleted, expected);
    app.stop().await;
}
