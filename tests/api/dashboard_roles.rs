//! The dashboard by role: a butler key reads its own scopes and has no change forms, every
//! change it sends refused; another tenant's ids are not found, bad ids, filters and oversized
//! forms are clear errors. An admin governs from the pages: promotes a rule (a decision its
//! state does not allow is a conflict), forgets and restores a fact (each an event), requeues
//! a dead letter.

use serde_json::json;

use crate::dashboard::{csrf, http, page, post, read, seed, sign_in};
use crate::helpers::*;

#[tokio::test]
async fn a_butler_key_reads_its_scopes_and_changes_nothing() {
    let app = spawn_app().await;
    let (fact, rule) = seed(&app).await;
    let other = app.client(TENANT_B_HEALTH).await;
    let foreign = other
        .ok(
            "memory_store_fact",
            json!({"subject": "bob", "predicate": "diet", "content": "Bob eats fish"}),
        )
        .await;
    let general = app.client(TENANT_A_GENERAL).await;
    general
        .ok(
            "memory_store_fact",
            json!({"subject": "cal", "predicate": "job", "content": "Cal is a pilot", "scope": "general"}),
        )
        .await;

    let butler = sign_in(&app, TENANT_A_HEALTH).await;
    let facts = page(&app, Some(&butler), "/memory/facts").await.body;
    assert!(facts.contains("Ann is vegetarian"));
    assert!(!facts.contains("Cal is a pilot"), "another butler's scope");
    assert!(!facts.contains("Bob eats fish"), "another tenant");
    let drawer = page(&app, Some(&butler), &format!("/memory/facts/{fact}"))
        .await
        .body;
    assert!(drawer.contains("Events") && !drawer.contains("Correct this fact"));
    let token = csrf(&drawer);
    let refused = post(
        &app,
        &butler,
        &format!("/memory/facts/{fact}/edit"),
        &[("csrf", &token), ("content", "Ann eats meat")],
        None,
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("admin_only"));
    let refused = post(
        &app,
        &butler,
        &format!("/memory/rules/{rule}/govern"),
        &[("csrf", &token), ("decision", "disable"), ("reason", "no")],
        None,
    )
    .await;
    assert_eq!(refused.status, 403);

    // Another tenant's id is not found (for the admin too), a malformed one a 400.
    let admin = sign_in(&app, TENANT_A_ADMIN).await;
    let foreign_id = foreign["id"].as_str().unwrap();
    for cookie in [&butler, &admin] {
        let missing = page(&app, Some(cookie), &format!("/memory/facts/{foreign_id}")).await;
        assert_eq!(missing.status, 404, "{}", missing.body);
        assert!(!missing.body.contains("Bob eats fish"));
    }
    // In the drawer (htmx), the error alone, with its status.
    let drawer = read(
        http()
            .get(app.url(&format!("/memory/facts/{foreign_id}")))
            .header("Cookie", &admin)
            .header("HX-Request", "true")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(drawer.status, 404);
    assert!(
        drawer.body.contains("not_found") && !drawer.body.contains("<html"),
        "{}",
        drawer.body
    );
    let bad = page(&app, Some(&admin), "/memory/facts/not-a-uuid").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("invalid_arguments"));
    let filter = page(&app, Some(&admin), "/memory/facts?permanence=forever").await;
    assert_eq!(filter.status, 400, "{}", filter.body);
    let unknown = page(&app, Some(&admin), "/memory/facts?colour=red").await;
    assert_eq!(unknown.status, 400);
    let days = page(&app, Some(&admin), "/memory/episodes?from=yesterday").await;
    assert_eq!(days.status, 400);

    // An oversized form is refused before it is read, with a status, not a crash.
    let token = csrf(&page(&app, Some(&admin), "/memory/facts").await.body);
    let huge = "x".repeat(3 * 1024 * 1024);
    let oversized = post(
        &app,
        &admin,
        &format!("/memory/facts/{fact}/edit"),
        &[("csrf", &token), ("content", &huge)],
        None,
    )
    .await;
    assert!(
        [400, 413].contains(&oversized.status),
        "{}",
        oversized.status
    );
    assert_eq!(page(&app, Some(&admin), "/memory").await.status, 200);
    app.stop().await;
}

#[tokio::test]
async fn an_admin_governs_forgets_restores_and_requeues_from_the_pages() {
    let app = spawn_app().await;
    let (fact, rule) = seed(&app).await;
    let health = app.client(TENANT_A_HEALTH).await;
    health
        .ok("memory_mark_helpful", json!({"rule_id": rule}))
        .await;
    let episode = health
        .ok(
            "memory_store_episode",
            json!({"butler": "health", "content": "A turn that failed to consolidate."}),
        )
        .await;
    let episode = episode["id"].as_str().unwrap().to_owned();
    let mut sql = app.sql().await;
    sqlx::query("UPDATE episodes SET consolidation_status = 'dead_letter', consolidation_attempts = 5 WHERE id = $1::uuid")
        .bind(&episode)
        .execute(&mut sql)
        .await
        .unwrap();
    let admin = sign_in(&app, TENANT_A_ADMIN).await;

    // The rule's drawer shows its application history; promoting it is an audited decision.
    let drawer = page(&app, Some(&admin), &format!("/memory/rules/{rule}"))
        .await
        .body;
    assert!(
        drawer.contains("Applications") && drawer.contains("helpful"),
        "{drawer}"
    );
    let token = csrf(&drawer);
    let promoted = post(
        &app,
        &admin,
        &format!("/memory/rules/{rule}/govern"),
        &[
            ("csrf", &token),
            ("decision", "promote"),
            ("reason", "proved itself"),
        ],
        None,
    )
    .await;
    assert_eq!(promoted.status, 303, "{}", promoted.body);
    let playbook = page(&app, Some(&admin), "/memory/playbook").await.body;
    assert!(
        playbook.contains(r#"data-maturity="established""#),
        "{playbook}"
    );
    let (reason, actor): (String, String) = sqlx::query_as(
        "SELECT payload->>'reason', actor FROM memory_events
         WHERE event_type = 'rule_promoted' AND entity_id = $1::uuid",
    )
    .bind(&rule)
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(
        (reason.as_str(), actor.as_str()),
        ("proved itself", "admin:a-admin")
    );
    // A decision its state does not allow is refused, not a 500.
    let again = post(
        &app,
        &admin,
        &format!("/memory/rules/{rule}/govern"),
        &[("csrf", &token), ("decision", "enable"), ("reason", "x")],
        None,
    )
    .await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("no_such_transition"));

    // Forget a fact from its drawer, then restore it.
    let forgotten = post(
        &app,
        &admin,
        &format!("/memory/fact/{fact}/forget"),
        &[("csrf", &token), ("reason", "not true any more")],
        None,
    )
    .await;
    assert_eq!(forgotten.status, 303);
    assert_eq!(
        forgotten.location,
        Some(format!("/memory/facts/{fact}?done=forgotten"))
    );
    let drawer = page(&app, Some(&admin), &format!("/memory/facts/{fact}"))
        .await
        .body;
    assert!(
        drawer.contains("retracted") && drawer.contains("Restore"),
        "{drawer}"
    );
    let restored = post(
        &app,
        &admin,
        &format!("/memory/fact/{fact}/restore"),
        &[("csrf", &token)],
        None,
    )
    .await;
    assert_eq!(restored.status, 303);
    let drawer = page(&app, Some(&admin), &format!("/memory/facts/{fact}"))
        .await
        .body;
    assert!(drawer.contains("Correct this fact"), "live again: {drawer}");
    let kinds: Vec<String> = sqlx::query_scalar(
        "SELECT event_type FROM memory_events WHERE entity_id = $1::uuid ORDER BY id",
    )
    .bind(&fact)
    .fetch_all(&mut sql)
    .await
    .unwrap();
    assert_eq!(kinds, ["fact_created", "fact_retracted", "fact_restored"]);
    let bogus = post(
        &app,
        &admin,
        "/memory/widget/123/forget",
        &[("csrf", &token)],
        None,
    )
    .await;
    assert_eq!(bogus.status, 400, "{}", bogus.body);

    // A dead letter is listed with its button; requeued, it waits for consolidation again.
    let episodes = page(
        &app,
        Some(&admin),
        "/memory/episodes?consolidation_status=dead_letter",
    )
    .await
    .body;
    assert!(
        episodes.contains("failed to consolidate") && episodes.contains("Requeue"),
        "{episodes}"
    );
    let requeued = post(
        &app,
        &admin,
        "/memory/episodes/requeue",
        &[("csrf", &token), ("id", &episode)],
        None,
    )
    .await;
    assert_eq!(requeued.status, 303, "{}", requeued.body);
    let status: String =
        sqlx::query_scalar("SELECT consolidation_status FROM episodes WHERE id = $1::uuid")
            .bind(&episode)
            .fetch_one(&mut sql)
            .await
            .unwrap();
    assert_eq!(status, "pending");
    app.stop().await;
}
