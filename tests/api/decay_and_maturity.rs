//! Lifecycle through MCP with a pinned clock: facts fade and expire on the contract's
//! schedule, confirmation brings them back, rules earn maturity at the exact thresholds,
//! harm demotes and inverts them, and sweeps are idempotent and scheduled by cron.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use butler_memory_actors::ManualClock;
use chrono::Duration;
use serde_json::{Value, json};
use sqlx::Row;

use crate::helpers::*;

async fn fact(mcp: &McpClient, predicate: &str, permanence: &str) -> String {
    mcp.ok(
        "memory_store_fact",
        json!({"subject": "user", "predicate": predicate, "content": format!("{predicate} value"),
               "permanence": permanence}),
    )
    .await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn validity(mcp: &McpClient, memory_type: &str, id: &str) -> String {
    mcp.ok("memory_get", json!({"type": memory_type, "id": id}))
        .await["validity"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn sweep(admin: &McpClient, kind: &str) -> Value {
    admin.ok("memory_run_sweep", json!({"kinds": [kind]})).await
}

/// The sum of one change over every shard's report.
fn changes(report: &Value, change: &str) -> u64 {
    report["reports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["changes"][change].as_u64().unwrap_or(0))
        .sum()
}

#[tokio::test]
async fn facts_fade_then_expire_on_schedule_and_confirmation_revives_them() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let permanent = fact(&mcp, "name", "permanent").await;
    let standard = fact(&mcp, "hobby", "standard").await;
    let revived = fact(&mcp, "project", "standard").await;

    // A standard fact (decay 0.008/day, confidence 1) drops below 0.2 after ln(5)/0.008 =
    // 201.2 days, and below 0.05 after ln(20)/0.008 = 374.5 days.
    clock.set(t0() + Duration::days(201));
    let report = sweep(&admin, "decay_sweep").await;
    assert_eq!(changes(&report, "fact_fading"), 0, "{report}");
    assert_eq!(validity(&mcp, "fact", &standard).await, "active");

    clock.set(t0() + Duration::days(202));
    let report = sweep(&admin, "decay_sweep").await;
    assert_eq!(changes(&report, "fact_fading"), 2, "{report}");
    assert_eq!(validity(&mcp, "fact", &standard).await, "fading");
    assert_eq!(validity(&mcp, "fact", &permanent).await, "active");
    // Fading facts are out of agent retrieval unless asked for.
    let found = mcp
        .ok(
            "memory_search",
            json!({"query": "hobby", "mode": "keyword"}),
        )
        .await;
    assert_eq!(found["count"], 0, "{found}");
    let found = mcp
        .ok(
            "memory_search",
            json!({"query": "hobby", "mode": "keyword", "min_confidence": 0}),
        )
        .await;
    assert_eq!(found["count"], 1, "{found}");

    // Confirmation brings one back at once, and the sweep leaves it active.
    let confirmed = mcp
        .ok("memory_confirm", json!({"type": "fact", "id": revived}))
        .await;
    assert_eq!(confirmed["validity"], "active");
    assert_eq!(confirmed["effective_confidence"], 1.0);

    clock.set(t0() + Duration::days(374));
    let report = sweep(&admin, "decay_sweep").await;
    assert_eq!(changes(&report, "fact_expired"), 0, "{report}");
    clock.set(t0() + Duration::days(375));
    let report = sweep(&admin, "decay_sweep").await;
    assert_eq!(changes(&report, "fact_expired"), 1, "{report}");
    assert_eq!(validity(&mcp, "fact", &standard).await, "expired");
    assert_eq!(validity(&mcp, "fact", &revived).await, "active");
    // Permanent never decays, however long.
    clock.set(t0() + Duration::days(100_000));
    sweep(&admin, "decay_sweep").await;
    assert_eq!(validity(&mcp, "fact", &permanent).await, "active");
    // An expired fact is history: it cannot be confirmed.
    let err = mcp
        .err("memory_confirm", json!({"type": "fact", "id": standard}))
        .await;
    assert_eq!(err["class"], "integrity", "{err}");
    app.stop().await;
}

#[tokio::test]
async fn a_sweep_run_twice_changes_nothing_the_second_time() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    for (i, permanence) in ["volatile", "ephemeral", "standard", "stable"]
        .iter()
        .enumerate()
    {
        fact(&mcp, &format!("p{i}"), permanence).await;
    }
    mcp.ok(
        "memory_store_episode",
        json!({"content": "short-lived", "butler": "health", "ttl_days": 1}),
    )
    .await;
    clock.advance(Duration::days(60));
    let first = admin.ok("memory_run_sweep", json!({})).await;
    let mut db = app.sql().await;
    let events_after_first: i64 = sqlx::query_scalar("SELECT count(*) FROM memory_events")
        .fetch_one(&mut db)
        .await
        .unwrap();
    let second = admin.ok("memory_run_sweep", json!({})).await;
    let events_after_second: i64 = sqlx::query_scalar("SELECT count(*) FROM memory_events")
        .fetch_one(&mut db)
        .await
        .unwrap();
    let total = |r: &Value| -> u64 {
        r["reports"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|x| x["changes"].as_object().unwrap().values())
            .map(|n| n.as_u64().unwrap())
            .sum()
    };
    // volatile (0.03/day) and ephemeral (0.1/day) moved; the episode expired.
    assert!(total(&first) >= 3, "{first}");
    assert_eq!(changes(&first, "expired_deleted"), 1, "{first}");
    assert_eq!(total(&second), 0, "{second}");
    assert_eq!(events_after_first, events_after_second);
    // Both runs are on record for memory_stats.
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM lifecycle_runs")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(runs, 6, "three kinds, two runs, one shard");
    let stats = admin.ok("memory_stats", json!({})).await;
    assert!(stats["last_runs"]["decay_sweep"].is_string(), "{stats}");
    app.stop().await;
}

async fn rule(mcp: &McpClient, content: &str) -> String {
    mcp.ok("memory_store_rule", json!({"content": content}))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test]
async fn rules_are_promoted_and_demoted_at_the_exact_thresholds() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let id = rule(&mcp, "Summarise long emails before reading them out").await;
    let helpful = json!({"rule_id": id});
    for n in 1..=4 {
        let r = mcp.ok("memory_mark_helpful", helpful.clone()).await;
        assert_eq!(r["maturity"], "candidate", "after {n}");
        assert_eq!(r["success_count"], n);
    }
    // The fifth success with effectiveness 5/5.01 >= 0.6: established.
    let r = mcp.ok("memory_mark_helpful", helpful.clone()).await;
    assert_eq!(r["maturity"], "established", "{r}");
    assert_eq!(r["maturity_before"], "candidate");
    for _ in 6..=15 {
        mcp.ok("memory_mark_helpful", helpful.clone()).await;
    }
    // Fifteen successes, but proven also needs 30 days of age.
    let r = mcp
        .ok("memory_get", json!({"type": "rule", "id": id}))
        .await;
    assert_eq!(r["maturity"], "established");
    clock.advance(Duration::days(30));
    let report = sweep(&admin, "decay_sweep").await;
    assert_eq!(changes(&report, "rule_promoted"), 1, "{report}");
    let r = mcp
        .ok("memory_get", json!({"type": "rule", "id": id}))
        .await;
    assert_eq!(r["maturity"], "proven");

    // One harm: 15 / (15 + 4 + 0.01) = 0.789 < 0.8: back to established.
    let r = mcp
        .ok(
            "memory_mark_harmful",
            json!({"rule_id": id, "reason": "read a private email aloud"}),
        )
        .await;
    assert_eq!(r["maturity"], "established", "{r}");
    assert_eq!(r["harmful_count"], 1);
    assert!((r["effectiveness_score"].as_f64().unwrap() - 15.0 / 19.01).abs() < 1e-9);
    // A second: 15 / 23.01 = 0.652, still established; a third: 15 / 27.01 = 0.555 < 0.6.
    let r = mcp.ok("memory_mark_harmful", json!({"rule_id": id})).await;
    assert_eq!(r["maturity"], "established", "{r}");
    let r = mcp.ok("memory_mark_harmful", json!({"rule_id": id})).await;
    assert_eq!(r["maturity"], "candidate", "{r}");
    // Three harms, but effectiveness 0.555 >= 0.3: demoted, not inverted.
    assert!(!r["content"].as_str().unwrap().starts_with("ANTI-PATTERN"));

    // Every application is on record with its outcome and lineage.
    let mut db = app.sql().await;
    let rows = sqlx::query(
        "SELECT outcome, count(*) AS n FROM rule_applications WHERE rule_id = $1::uuid GROUP BY 1 ORDER BY 1",
    )
    .bind(&id)
    .fetch_all(&mut db)
    .await
    .unwrap();
    let counts: Vec<(String, i64)> = rows
        .iter()
        .map(|r| (r.get("outcome"), r.get("n")))
        .collect();
    assert_eq!(
        counts,
        vec![("harmful".to_owned(), 3), ("helpful".to_owned(), 15)]
    );
    app.stop().await;
}

/// The warning a rule becomes is derived text: whatever the reasons given, it stays within
/// a bound (five reasons at most, each cut to 256 characters), so one butler's marks cannot
/// swell what every other butler's context carries.
#[tokio::test]
async fn an_anti_patterns_warning_is_bounded_however_long_the_reasons() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let original = "Suggest peanut snacks";
    let id = rule(&mcp, original).await;
    for i in 0..3 {
        // As long as a reason may be (`limits.max_reason_bytes`, 1024), and each distinct.
        let reason = format!("{i}{}", "z".repeat(1023));
        mcp.ok(
            "memory_mark_harmful",
            json!({"rule_id": id, "reason": reason}),
        )
        .await;
    }
    let r = mcp
        .ok("memory_get", json!({"type": "rule", "id": id}))
        .await;
    assert_eq!(r["maturity"], "anti_pattern", "{r}");
    let warning = r["content"].as_str().unwrap();
    let bound = "ANTI-PATTERN: Do NOT . This caused problems because: ".len()
        + original.len()
        + 3 * 256
        + 2 * "; ".len();
    assert!(
        warning.chars().count() <= bound,
        "{} characters, bound {bound}",
        warning.chars().count()
    );
    app.stop().await;
}

#[tokio::test]
async fn repeated_harm_inverts_a_rule_into_an_anti_pattern_warning() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let original = "Suggest peanut snacks for afternoon energy.";
    let id = rule(&mcp, original).await;
    app.engine().flush().await.unwrap();
    for reason in [
        "the user is allergic",
        "caused a reaction",
        "the user is allergic",
    ] {
        mcp.ok(
            "memory_mark_harmful",
            json!({"rule_id": id, "reason": reason}),
        )
        .await;
    }
    let r = mcp
        .ok("memory_get", json!({"type": "rule", "id": id}))
        .await;
    assert_eq!(r["maturity"], "anti_pattern", "{r}");
    assert_eq!(
        r["content"],
        "ANTI-PATTERN: Do NOT Suggest peanut snacks for afternoon energy. This caused problems \
         because: the user is allergic; caused a reaction"
    );
    assert_eq!(r["original_content"], original);

    // Retrieval returns it as a warning, in the context block as an "Avoid" line, and the
    // warning is what gets embedded now.
    app.engine().flush().await.unwrap();
    let found = mcp
        .ok(
            "memory_search",
            json!({"query": "peanut snacks", "types": ["rule"]}),
        )
        .await;
    assert_eq!(found["results"][0]["warning"], true, "{found}");
    let ctx = mcp
        .ok(
            "memory_context",
            json!({"trigger_prompt": "What snack should I have?", "butler": "health"}),
        )
        .await;
    let text = ctx["text"].as_str().unwrap();
    assert!(
        text.contains("Avoid: ANTI-PATTERN: Do NOT Suggest peanut snacks"),
        "{text}"
    );
    // A warning does not fade away: a year on, with no confirmation, it still surfaces.
    clock.advance(Duration::days(400));
    let found = mcp
        .ok(
            "memory_search",
            json!({"query": "peanut snacks", "types": ["rule"]}),
        )
        .await;
    assert_eq!(found["results"][0]["warning"], true, "{found}");
    // Inversion is final: help does not turn it back into guidance.
    let r = mcp.ok("memory_mark_helpful", json!({"rule_id": id})).await;
    assert_eq!(r["maturity"], "anti_pattern");
    app.stop().await;
}

#[tokio::test]
async fn the_decay_sweep_runs_on_its_cron_schedule() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at(
        "[lifecycle]\ndecay_sweep_cron = \"0 3 * * *\"\nepisode_cleanup_cron = \"0 4 * * *\"\n\
         scheduler_tick_ms = 20\ncatch_up_missed_runs = false\n",
        clock.clone(),
    )
    .await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let id = fact(&mcp, "mood", "ephemeral").await;
    let mut db = app.sql().await;
    let runs = |kind: &'static str| {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM lifecycle_runs WHERE kind = $1")
            .bind(kind)
    };
    // Nothing is due before 03:00 the next day, however many ticks pass.
    tokio::time::sleep(StdDuration::from_millis(200)).await;
    assert_eq!(runs("decay_sweep").fetch_one(&mut db).await.unwrap(), 0);
    // Past 03:00 (and 30 days on, so the ephemeral fact has expired): the sweep runs.
    clock.set(t0() + Duration::days(30));
    // The scheduled sweep runs.
    eventually(StdDuration::from_secs(10), || async {
        match runs("decay_sweep")
            .fetch_one(&mut app.sql().await)
            .await
            .unwrap()
        {
            0 => Err("no decay sweep recorded".to_owned()),
            n => Ok(n),
        }
    })
    .await
    .unwrap();
    assert_eq!(validity(&mcp, "fact", &id).await, "expired");
    // It ran once for that time; the next is a day later.
    tokio::time::sleep(StdDuration::from_millis(200)).await;
    assert_eq!(runs("decay_sweep").fetch_one(&mut db).await.unwrap(), 1);
    app.stop().await;
}
