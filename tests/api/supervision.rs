//! A failing shard is restarted by its supervisor; other shards never notice. A failing
//! reader is restarted where readers run, and reads go on.

use std::time::Duration;

use butler_memory_actors::{ActorSnapshot, ShardKey};
use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn a_failed_shard_is_restarted_while_other_shards_keep_serving() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let general = app.client(TENANT_A_GENERAL).await;
    health
        .ok(
            "memory_store_episode",
            json!({"content": "before", "butler": "health"}),
        )
        .await;
    general
        .ok(
            "memory_store_episode",
            json!({"content": "before", "butler": "general"}),
        )
        .await;

    let key = ShardKey::new("tenant-a", "health");
    // A panic, the worst kind of failure, stays inside its shard.
    app.engine().inject_shard_failure(&key, true).await.unwrap();
    // The other shard serves straight through the failure.
    for i in 0..5 {
        general
            .ok(
                "memory_store_episode",
                json!({"content": format!("during {i}"), "butler": "general"}),
            )
            .await;
    }
    // The failed shard comes back (restarted by the supervisor) and serves again.
    // The shard was restarted.
    wait_for(&app, |actors| {
        actors.iter().any(|a| {
            a.key == "tenant-a/health"
                && a.restarts == 1
                && a.status == butler_memory_actors::ActorStatus::Running
        })
    })
    .await;
    let after = health
        .ok(
            "memory_store_episode",
            json!({"content": "after", "butler": "health"}),
        )
        .await;
    assert_eq!(after["butler"], "health");
    let snapshot = app
        .engine()
        .actors()
        .into_iter()
        .find(|a| a.key == "tenant-a/health")
        .unwrap();
    assert!(
        snapshot.last_error.unwrap().contains("injected failure"),
        "the panic message is kept"
    );
    let general_shard = app
        .engine()
        .actors()
        .into_iter()
        .find(|a| a.key == "tenant-a/general")
        .unwrap();
    assert_eq!(general_shard.restarts, 0);

    let mut sql = app.sql().await;
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM episodes")
        .fetch_one(&mut sql)
        .await
        .unwrap();
    assert_eq!(count, 8, "every acknowledged write is there");
    app.stop().await;
}

#[tokio::test]
async fn a_failed_reader_is_restarted_on_the_read_runtime_and_serves_again() {
    // One reader, so every read after the failure goes through the restarted one, which
    // must run on the readers' runtime and read through their connections.
    let app = spawn_app_with("[retrieval]\nworkers = 1\n").await;
    let health = app.client(TENANT_A_HEALTH).await;
    let stored = health
        .ok(
            "memory_store_episode",
            json!({"content": "The dentist moved the appointment to Friday", "butler": "health"}),
        )
        .await;
    let found = |result: &serde_json::Value| {
        result["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == stored["id"])
    };
    let search = json!({"query": "dentist appointment", "mode": "keyword"});
    assert!(found(&health.ok("memory_search", search.clone()).await));

    app.engine().inject_reader_failure(0, true).unwrap();
    // The reader was restarted.
    wait_for(&app, |actors| {
        actors.iter().any(|a| {
            a.kind == butler_memory_actors::ActorKind::Reader
                && a.restarts == 1
                && a.status == butler_memory_actors::ActorStatus::Running
        })
    })
    .await;
    assert!(found(&health.ok("memory_search", search).await));
    let context = health
        .ok(
            "memory_context",
            json!({"trigger_prompt": "When is the dentist?", "butler": "health"}),
        )
        .await;
    assert!(context["text"].as_str().unwrap().contains("dentist moved"));
    app.stop().await;
}

/// Waits until the actor directory shows what `condition` looks for (on the supervisor's
/// own timeline: no fixed sleep decides the outcome); fails with the directory as it was.
async fn wait_for(app: &TestApp, condition: impl Fn(&[ActorSnapshot]) -> bool) {
    eventually(Duration::from_secs(10), || async {
        let actors = app.engine().actors();
        if condition(&actors) {
            Ok(())
        } else {
            Err(format!("{actors:?}"))
        }
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn a_shard_failing_past_its_restart_limit_is_left_down_and_fails_fast() {
    let app = spawn_app_with("[shards]\nmax_restarts = 1\nrestart_window_secs = 600").await;
    let health = app.client(TENANT_A_HEALTH).await;
    let general = app.client(TENANT_A_GENERAL).await;
    health
        .ok(
            "memory_store_episode",
            json!({"content": "before", "butler": "health"}),
        )
        .await;
    let key = ShardKey::new("tenant-a", "health");
    let shard_is = |status: butler_memory_actors::ActorStatus, restarts: u32| {
        move |actors: &[ActorSnapshot]| {
            actors
                .iter()
                .any(|a| a.key == "tenant-a/health" && a.status == status && a.restarts == restarts)
        }
    };
    app.engine()
        .inject_shard_failure(&key, false)
        .await
        .unwrap();
    wait_for(
        &app,
        shard_is(butler_memory_actors::ActorStatus::Running, 1),
    )
    .await;
    app.engine()
        .inject_shard_failure(&key, false)
        .await
        .unwrap();
    wait_for(&app, shard_is(butler_memory_actors::ActorStatus::Failed, 1)).await;
    let err = health
        .err(
            "memory_store_episode",
            json!({"content": "refused", "butler": "health"}),
        )
        .await;
    assert_eq!(err["class"], "unavailable");
    assert_eq!(err["code"], "shard_failing");
    general
        .ok(
            "memory_store_episode",
            json!({"content": "fine", "butler": "general"}),
        )
        .await;
    app.stop().await;
}

#[tokio::test]
async fn an_idle_shard_stops_and_starts_again_on_the_next_write() {
    let app = spawn_app_with("[shards]\nidle_stop_secs = 1\ntouch_flush_ms = 50").await;
    let health = app.client(TENANT_A_HEALTH).await;
    health
        .ok(
            "memory_store_episode",
            json!({"content": "one", "butler": "health"}),
        )
        .await;
    let has_shard = || {
        app.engine()
            .actors()
            .into_iter()
            .any(|a| a.key == "tenant-a/health")
    };
    assert!(has_shard());
    // The idle shard stops.
    wait_for(&app, |actors| {
        !actors.iter().any(|a| a.key == "tenant-a/health")
    })
    .await;
    assert_eq!(app.engine().shard_count(), 0);
    health
        .ok(
            "memory_store_episode",
            json!({"content": "two", "butler": "health"}),
        )
        .await;
    assert!(has_shard(), "started again on demand");
    let mut sql = app.sql().await;
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM episodes")
        .fetch_one(&mut sql)
        .await
        .unwrap();
    assert_eq!(count, 2);
    app.stop().await;
}
