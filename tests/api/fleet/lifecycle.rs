//! Lifecycle work across instances: a scheduled sweep of a shard runs once per scheduled
//! time however many instances' schedulers fire, a sweep claimed by an instance that died
//! before finishing it is taken over by another, and a shard's lifecycle work runs on one
//! instance at a time (its lease, a session lock that dies with its holder).

use std::sync::Arc;
use std::time::Duration as StdDuration;

use butler_memory_actors::ManualClock;
use chrono::{DateTime, Duration, Utc};
use serde_json::json;

use super::count;
use crate::helpers::*;

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-05-01T02:59:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn instance(name: &str) -> String {
    format!(
        "[lifecycle]\ninstance_id = \"{name}\"\nscheduler_tick_ms = 50\ncatch_up_missed_runs = false\n\
         decay_sweep_cron = \"0 3 * * *\"\nlease_secs = 60\n"
    )
}

#[tokio::test]
async fn a_scheduled_sweep_runs_once_per_shard_across_instances() {
    let clock = Arc::new(ManualClock::new(t0()));
    let a = spawn_app_at(&instance("a"), clock.clone()).await;
    let b = spawn_beside(&a, &instance("b"), clock.clone()).await;
    let c = spawn_beside(&a, &instance("c"), clock.clone()).await;
    for (key, butler) in [(TENANT_A_HEALTH, "health"), (TENANT_A_GENERAL, "general")] {
        a.client(key)
            .await
            .ok(
                "memory_store_fact",
                json!({"subject": "user", "predicate": butler, "content": "a fact", "butler": butler}),
            )
            .await;
    }
    let runs = "SELECT count(*) FROM lifecycle_runs WHERE kind = 'decay_sweep'";
    assert_eq!(count(&a, runs).await, 0);

    // 03:00 passes on every instance's clock: three schedulers fire.
    clock.advance(Duration::minutes(2));
    eventually(StdDuration::from_secs(20), || async {
        let finished = count(
            &a,
            "SELECT count(*) FROM lifecycle_claims WHERE kind = 'decay_sweep' AND finished_at IS NOT NULL",
        )
        .await;
        if finished == 2 { Ok(()) } else { Err(format!("{finished} claims finished")) }
    })
    .await
    .unwrap();
    // Every scheduler has had many ticks since: still one run per shard.
    tokio::time::sleep(StdDuration::from_millis(500)).await;
    assert_eq!(count(&a, runs).await, 2, "one decay sweep per shard");
    let holders = count(
        &a,
        "SELECT count(*) FROM lifecycle_claims WHERE holders <> 1 OR instance_id NOT IN ('a', 'b', 'c')",
    )
    .await;
    assert_eq!(holders, 0);
    for app in [c, b, a] {
        app.stop().await;
    }
}

#[tokio::test]
async fn a_sweep_claimed_by_a_dead_instance_is_taken_over_after_its_lease() {
    let clock = Arc::new(ManualClock::new(t0()));
    let a = spawn_app_at(&instance("a"), clock.clone()).await;
    a.client(TENANT_A_HEALTH)
        .await
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "diet", "content": "vegan", "butler": "health"}),
        )
        .await;
    // Instance "dead" claimed yesterday's sweep of the shard and stopped beating a minute
    // ago (within the lease): nobody runs it yet.
    let mut conn = a.sql().await;
    let fire = t0() - Duration::minutes(59);
    sqlx::query(
        "INSERT INTO lifecycle_claims (tenant_id, butler, kind, fire_at, instance_id, claimed_at, heartbeat_at)
         VALUES ('tenant-a', 'health', 'decay_sweep', $1, 'dead', $1, $2)",
    )
    .bind(fire)
    .bind(t0() - Duration::seconds(30))
    .execute(&mut conn)
    .await
    .unwrap();
    let runs = "SELECT count(*) FROM lifecycle_runs WHERE kind = 'decay_sweep'";
    tokio::time::sleep(StdDuration::from_millis(300)).await;
    assert_eq!(
        count(&a, runs).await,
        0,
        "a live claim is left to its holder"
    );

    // Past the lease the claim is abandoned: the next tick takes it over, runs it, and marks
    // it finished (after the run is recorded).
    clock.advance(Duration::seconds(45));
    let claim = "SELECT instance_id, holders, finished_at IS NOT NULL FROM lifecycle_claims WHERE fire_at = $1";
    let (holder, holders, finished) = eventually(StdDuration::from_secs(20), || async {
        let mut conn = a.sql().await;
        let row: (String, i32, bool) = sqlx::query_as(claim)
            .bind(fire)
            .fetch_one(&mut conn)
            .await
            .unwrap();
        if row.2 {
            Ok(row)
        } else {
            Err(format!("{row:?}"))
        }
    })
    .await
    .unwrap();
    assert_eq!(count(&a, runs).await, 1);
    assert_eq!((holder.as_str(), holders, finished), ("a", 2, true));
    a.stop().await;
}

#[tokio::test]
async fn a_shards_lifecycle_work_waits_while_another_instance_holds_its_lease() {
    let app = spawn_app_with(
        "[lifecycle]\nscheduler_tick_ms = 50\ncatch_up_missed_runs = false\n\
         [consolidation]\ntrigger_backlog_size = 1\n",
    )
    .await;
    // Another instance's session holds the health shard's lease (as it would while it
    // consolidates the shard).
    let mut other = app.sql().await;
    let held: bool = sqlx::query_scalar(
        "SELECT pg_try_advisory_lock(hashtextextended('lifecycle:' || 'tenant-a' || '/' || 'health', 0))",
    )
    .fetch_one(&mut other)
    .await
    .unwrap();
    assert!(held);
    let health = app.client(TENANT_A_HEALTH).await;
    let episode = health
        .ok(
            "memory_store_episode",
            json!({"butler": "health", "content": "Hi, my name is Ada. I'm allergic to peanuts."}),
        )
        .await;
    let status = "SELECT consolidation_status FROM episodes WHERE butler = 'health'";
    let mut conn = app.sql().await;
    let pending = || async {
        let mut conn = app.sql().await;
        sqlx::query_scalar::<_, String>(status)
            .fetch_one(&mut conn)
            .await
            .unwrap()
    };
    // Many ticks over the trigger: the shard is left to the lease's holder.
    tokio::time::sleep(StdDuration::from_millis(600)).await;
    assert_eq!(pending().await, "pending", "{episode}");
    let runs: i64 =
        sqlx::query_scalar("SELECT count(*) FROM lifecycle_runs WHERE kind = 'consolidation'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(runs, 0);

    // The holder goes away (its session ends, as when its instance dies): the next tick
    // consolidates the shard here.
    drop(other);
    eventually(StdDuration::from_secs(20), || async {
        let now = pending().await;
        if now == "consolidated" {
            Ok(())
        } else {
            Err(now)
        }
    })
    .await
    .unwrap();
    app.stop().await;
}

#[tokio::test]
async fn actors_name_the_instance_and_the_sweeps_it_holds() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at(&instance("a"), clock.clone()).await;
    let mut conn = app.sql().await;
    sqlx::query(
        "INSERT INTO lifecycle_claims (tenant_id, butler, kind, fire_at, instance_id, claimed_at, heartbeat_at)
         VALUES ('tenant-a', 'health', 'decay_sweep', $1, 'a', $1, $1),
                ('tenant-b', 'health', 'decay_sweep', $1, 'a', $1, $1),
                ('tenant-a', 'general', 'decay_sweep', $1, 'b', $1, $1)",
    )
    .bind(t0())
    .execute(&mut conn)
    .await
    .unwrap();
    let (status, operator) = crate::rest::get(&app, Some(OPERATOR), "/actors").await;
    assert_eq!(status, 200);
    assert_eq!(operator["instance_id"], "a");
    let shards = |v: &serde_json::Value| -> Vec<String> {
        v["leases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                format!(
                    "{}/{}",
                    l["shard"]["tenant_id"].as_str().unwrap(),
                    l["shard"]["butler"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(
        shards(&operator),
        ["tenant-a/health", "tenant-b/health"],
        "{operator}"
    );
    let (_, admin) = crate::rest::get(&app, Some(TENANT_A_ADMIN), "/actors").await;
    assert_eq!(
        shards(&admin),
        ["tenant-a/health"],
        "its own tenant's only: {admin}"
    );
    let (status, _) = crate::rest::get(&app, Some(TENANT_A_HEALTH), "/actors").await;
    assert_eq!(status, 403);
    app.stop().await;
}

#[tokio::test]
async fn a_sweep_asked_for_now_waits_for_a_lease_held_elsewhere_then_fails_fast() {
    let app = spawn_app().await;
    let admin = app.client(TENANT_A_ADMIN).await;
    app.client(TENANT_A_HEALTH)
        .await
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "diet", "content": "vegan", "butler": "health"}),
        )
        .await;
    let lock = "SELECT pg_try_advisory_lock(hashtextextended('lifecycle:' || 'tenant-a' || '/' || 'health', 0))";
    let mut other = app.sql().await;
    assert!(
        sqlx::query_scalar::<_, bool>(lock)
            .fetch_one(&mut other)
            .await
            .unwrap()
    );

    // Held for longer than the call waits: a clear conflict after 10 s, nothing run.
    let started = std::time::Instant::now();
    let refused = admin
        .err(
            "memory_run_sweep",
            json!({"kinds": ["decay_sweep"], "butler": "health"}),
        )
        .await;
    assert_eq!(refused["code"], "lifecycle_busy", "{refused}");
    assert_eq!(refused["class"], "conflict");
    assert!(started.elapsed() < StdDuration::from_secs(20));
    assert_eq!(count(&app, "SELECT count(*) FROM lifecycle_runs").await, 0);

    // Released while the call waits: it runs then.
    let sweeping = tokio::spawn(async move {
        admin
            .ok(
                "memory_run_sweep",
                json!({"kinds": ["decay_sweep"], "butler": "health"}),
            )
            .await
    });
    tokio::time::sleep(StdDuration::from_millis(500)).await;
    assert!(!sweeping.is_finished(), "it waits for the lease");
    drop(other);
    let report = sweeping.await.unwrap();
    assert_eq!(report["count"], 1, "{report}");
    assert_eq!(count(&app, "SELECT count(*) FROM lifecycle_runs").await, 1);
    app.stop().await;
}
