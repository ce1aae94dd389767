//! `memory_stats` from its projections equals the scan of the tables it replaced, after
//! every kind of write the service makes (stores, supersession, forget and restore,
//! consolidation, embedding, decay, feedback, governance, purges of a record, a butler and a
//! tenant), for every filter a key can ask; the deltas fold without changing a count; and the
//! time-dependent confidence bands are recounted once they are older than their bound.

use std::sync::Arc;

use butler_memory_actors::{Clock, ManualClock, StatsFilter};
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};

use crate::helpers::*;
use crate::rest::get;

/// The stats a key is answered, and the same counted by scanning the tables.
pub(crate) async fn answered_and_scanned(app: &TestApp, key: &str, query: &str) -> (Value, Value) {
    let (status, answered) = get(app, Some(key), &format!("/api/memory/stats{query}")).await;
    assert_eq!(status, 200, "{answered}");
    let list = |v: &Value| {
        v.as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect())
    };
    let filter = StatsFilter {
        tenant_id: answered["tenant_id"].as_str().unwrap().to_owned(),
        scopes: list(&answered["scopes"]),
        butlers: list(&answered["butlers"]),
    };
    let now: DateTime<Utc> = answered["computed_at"].as_str().unwrap().parse().unwrap();
    let mut sql = app.sql().await;
    let version: i16 = sqlx::query_scalar("SELECT max(id) FROM embedding_versions")
        .fetch_one(&mut sql)
        .await
        .unwrap();
    let store = app.engine().store();
    let scanned = json!({
        "episodes": store.episode_stats(&filter, now, version).await.unwrap(),
        "facts": store.fact_stats(&filter, now, version).await.unwrap(),
        "rules": store.rule_stats(&filter, now, version).await.unwrap(),
    });
    let answered = json!({
        "episodes": answered["episodes"],
        "facts": answered["facts"],
        "rules": answered["rules"],
    });
    (answered, scanned)
}

async fn assert_projection_holds(app: &TestApp, clock: &ManualClock, moment: &str) {
    // The indexer embeds in the background: let it finish, so the answer and the scan see
    // the same rows.
    app.engine().flush().await.unwrap();
    // The bands follow the clock: counted now, they are exact now.
    app.engine()
        .store()
        .recount_bands("tenant-a", clock.now())
        .await
        .unwrap();
    for (key, query) in [
        (TENANT_A_ADMIN, ""),
        (TENANT_A_ADMIN, "?scope=global"),
        (TENANT_A_ADMIN, "?butler=health"),
        (TENANT_A_ADMIN, "?scope=general&butler=general"),
        (TENANT_A_HEALTH, ""),
        (TENANT_A_GENERAL, ""),
        (TENANT_B_HEALTH, ""),
    ] {
        let (answered, scanned) = answered_and_scanned(app, key, query).await;
        assert_eq!(answered, scanned, "{moment}: {key}{query}");
    }
    // The lists' totals and the timeline's episodes per day come from the projections too.
    let mut sql = app.sql().await;
    for (key, list, condition) in [
        (
            TENANT_A_ADMIN,
            "/api/memory/facts",
            "SELECT count(*) FROM facts WHERE tenant_id = 'tenant-a'",
        ),
        (
            TENANT_A_ADMIN,
            "/api/memory/facts?validity=active",
            "SELECT count(*) FROM facts WHERE tenant_id = 'tenant-a' AND validity = 'active'",
        ),
        (
            TENANT_A_HEALTH,
            "/api/memory/facts",
            "SELECT count(*) FROM facts WHERE tenant_id = 'tenant-a' AND scope IN ('global', 'health')",
        ),
        (
            TENANT_A_ADMIN,
            "/api/memory/rules?validity=active",
            "SELECT count(*) FROM rules WHERE tenant_id = 'tenant-a' AND validity = 'active'",
        ),
        (
            TENANT_A_ADMIN,
            "/api/memory/episodes?consolidation_status=pending",
            "SELECT count(*) FROM episodes WHERE tenant_id = 'tenant-a' AND consolidation_status = 'pending'",
        ),
        (
            TENANT_A_HEALTH,
            "/api/memory/episodes",
            "SELECT count(*) FROM episodes WHERE tenant_id = 'tenant-a' AND butler = 'health'",
        ),
    ] {
        let (_, page) = get(app, Some(key), list).await;
        let counted: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(condition))
            .fetch_one(&mut sql)
            .await
            .unwrap();
        assert_eq!(page["total"], counted, "{moment}: {list} as {key}");
    }
    let (_, timeline) = get(app, Some(TENANT_A_ADMIN), "/api/memory/timeline?days=90").await;
    let mut answered = std::collections::BTreeMap::new();
    for day in timeline["days"].as_array().unwrap() {
        for (status, n) in day["episodes"].as_object().unwrap() {
            answered.insert(
                (day["day"].as_str().unwrap().to_owned(), status.clone()),
                n.as_i64().unwrap(),
            );
        }
    }
    let scanned: std::collections::BTreeMap<(String, String), i64> = sqlx::query_as(
        "SELECT to_char((created_at AT TIME ZONE 'UTC')::date, 'YYYY-MM-DD'), consolidation_status, count(*)
         FROM episodes WHERE tenant_id = 'tenant-a' AND forgotten_at IS NULL GROUP BY 1, 2",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap()
    .into_iter()
    .map(|(day, status, n): (String, String, i64)| ((day, status), n))
    .collect();
    assert_eq!(answered, scanned, "{moment}: episodes per day");
}

#[tokio::test]
async fn stats_from_projections_equal_the_scan_after_every_kind_of_write() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("", clock.clone()).await;
    let health = app.client(TENANT_A_HEALTH).await;
    let general = app.client(TENANT_A_GENERAL).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let other = app.client(TENANT_B_HEALTH).await;

    let mut episodes = Vec::new();
    for content in [
        "Hi, my name is Ada. I'm allergic to peanuts.",
        "Always check labels before suggesting snacks.",
        "We chatted about the weather.",
    ] {
        let e = health
            .ok(
                "memory_store_episode",
                json!({"content": content, "butler": "health"}),
            )
            .await;
        episodes.push(e["id"].as_str().unwrap().to_owned());
    }
    general
        .ok(
            "memory_store_episode",
            json!({"content": "The bill was paid.", "butler": "general"}),
        )
        .await;
    other
        .ok(
            "memory_store_episode",
            json!({"content": "Another tenant's day.", "butler": "health"}),
        )
        .await;
    let diet = health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "diet", "content": "vegetarian", "permanence": "stable"}),
        )
        .await;
    health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "diet", "content": "vegan", "permanence": "stable"}),
        )
        .await;
    health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "mood", "content": "tired", "permanence": "ephemeral"}),
        )
        .await;
    let job = health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "job", "content": "nurse", "permanence": "volatile", "scope": "health"}),
        )
        .await;
    general
        .ok(
            "memory_store_fact",
            json!({"subject": "house", "predicate": "rent", "content": "due on the 1st", "scope": "general", "confidence": 0.6}),
        )
        .await;
    let rule = health
        .ok(
            "memory_store_rule",
            json!({"content": "Offer vegan recipes first"}),
        )
        .await;
    let rule_id = rule["id"].as_str().unwrap();
    health
        .ok(
            "memory_store_rule",
            json!({"content": "Keep answers short", "scope": "health"}),
        )
        .await;
    assert_projection_holds(&app, &clock, "after stores and a supersession").await;

    health
        .ok("memory_mark_helpful", json!({"rule_id": rule_id}))
        .await;
    admin
        .ok(
            "memory_forget",
            json!({"type": "fact", "id": job["id"], "reason": "wrong"}),
        )
        .await;
    admin
        .ok(
            "memory_forget",
            json!({"type": "episode", "id": episodes[2], "reason": "noise"}),
        )
        .await;
    admin
        .ok("memory_restore", json!({"type": "fact", "id": job["id"]}))
        .await;
    admin
        .ok("memory_run_sweep", json!({"kinds": ["consolidation"]}))
        .await;
    app.engine().flush().await.unwrap();
    assert_projection_holds(
        &app,
        &clock,
        "after feedback, forget, restore, consolidation, embedding",
    )
    .await;

    // A month on: the decay sweep fades and expires; the bands move with the clock alone.
    clock.advance(Duration::days(30));
    admin
        .ok("memory_run_sweep", json!({"kinds": ["decay_sweep"]}))
        .await;
    assert_projection_holds(&app, &clock, "after a month and a decay sweep").await;

    // Purges delete rows: a record, a butler's memory, another tenant.
    admin
        .ok(
            "memory_purge",
            json!({"type": "fact", "id": diet["id"], "reason": "asked to"}),
        )
        .await;
    admin
        .ok(
            "memory_purge",
            json!({"butler": "general", "reason": "retired"}),
        )
        .await;
    assert_projection_holds(&app, &clock, "after purges").await;

    // Folding the deltas changes no count, and leaves one row per key.
    let mut sql = app.sql().await;
    let before = answered_and_scanned(&app, TENANT_A_ADMIN, "").await.0;
    sqlx::query("UPDATE memory_counts SET compacted = false")
        .execute(&mut sql)
        .await
        .unwrap();
    assert!(app.engine().store().compact_counts().await.unwrap() >= 1);
    let after = answered_and_scanned(&app, TENANT_A_ADMIN, "").await.0;
    assert_eq!(before, after);
    let deltas: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM memory_counts WHERE tenant_id = 'tenant-a' AND NOT compacted",
    )
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(deltas, 0);
    let duplicates: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT 1 FROM memory_counts WHERE tenant_id = 'tenant-a'
         GROUP BY kind, part, dim, key HAVING count(*) > 1) d",
    )
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(duplicates, 0);

    // A tenant's purge takes its counts with it.
    let (status, _) = get(&app, Some(TENANT_B_HEALTH), "/api/memory/stats").await;
    assert_eq!(status, 200);
    let (_, purge) = crate::rest_writes::send(
        &app,
        TENANT_A_ADMIN,
        "POST",
        "/api/memory/purge",
        Some(json!({"tenant": "tenant-a", "reason": "leaving"})),
    )
    .await;
    assert!(purge.get("purge_id").is_some(), "{purge}");
    let left: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM memory_counts WHERE tenant_id = 'tenant-a')
              + (SELECT count(*) FROM memory_bands WHERE tenant_id = 'tenant-a')",
    )
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(left, 0);
    assert_projection_holds(&app, &clock, "after the tenant's purge").await;
    app.stop().await;
}

#[tokio::test]
async fn confidence_bands_are_recounted_once_older_than_their_bound() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at(
        "[retrieval]\nstats_bands_max_age_secs = 3600\n",
        clock.clone(),
    )
    .await;
    let health = app.client(TENANT_A_HEALTH).await;
    health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "mood", "content": "tired", "permanence": "ephemeral"}),
        )
        .await;
    let band = |stats: &Value| stats["facts"]["breakdown"]["effective_confidence"].clone();
    let (_, first) = get(&app, Some(TENANT_A_ADMIN), "/api/memory/stats").await;
    assert_eq!(
        band(&first),
        json!({"0.8_and_above": 1}),
        "counted at the first read"
    );
    assert_eq!(first["confidence_bands_counted_at"], first["computed_at"]);

    // Ten days on, an ephemeral fact is far below 0.8: within the bound the read answers the
    // bands it has and says when they were counted...
    clock.advance(Duration::minutes(30));
    let (_, fresh) = get(&app, Some(TENANT_A_ADMIN), "/api/memory/stats").await;
    assert_eq!(fresh["confidence_bands_counted_at"], first["computed_at"]);
    // ...past it, a read has them recounted, and a later read sees the recount.
    clock.advance(Duration::days(10));
    get(&app, Some(TENANT_A_ADMIN), "/api/memory/stats").await;
    let recounted = eventually(std::time::Duration::from_secs(10), || async {
        let (_, stats) = get(&app, Some(TENANT_A_ADMIN), "/api/memory/stats").await;
        if stats["confidence_bands_counted_at"] != first["computed_at"] {
            Ok(stats)
        } else {
            Err(stats.to_string())
        }
    })
    .await
    .unwrap();
    assert_ne!(band(&recounted), json!({"0.8_and_above": 1}), "{recounted}");
    app.stop().await;
}
