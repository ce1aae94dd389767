//! Pooled connections the server closed while they sat idle (a restarted server, a proxy's
//! idle timeout, an operator's `pg_terminate_backend`) are found out before they are used and
//! replaced, without the request noticing: the pools check a connection before handing it
//! out (sqlx's default, kept on purpose: skipping the check for connections used within the
//! last second saved nothing measurable, docs/benchmarks.md).

use butler_memory_actors::DatabaseSharing;
use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn connections_the_server_closed_while_idle_are_replaced_before_use() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let stored = health
        .ok(
            "memory_store_episode",
            json!({"content": "The plumber comes on Tuesday to fix the boiler", "butler": "health"}),
        )
        .await;
    health
        .ok(
            "memory_search",
            json!({"query": "plumber boiler", "mode": "keyword"}),
        )
        .await;

    // Every connection of the service (read pools, write pool), as a restarted server or a
    // proxy's idle timeout would leave them.
    let mut sql = app.sql().await;
    let closed: Vec<i32> = sqlx::query_scalar(
        // The service's own first (other tests' services share the cluster), then each told.
        "WITH mine AS MATERIALIZED (
             SELECT pid FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
               AND application_name LIKE 'butler-memory%')
         SELECT pid FROM mine WHERE pg_terminate_backend(pid)",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    assert!(
        closed.len() >= 2,
        "the read and write pools' connections: {closed:?}"
    );
    // Gone, not only told to go.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)")
                .bind(&closed)
                .fetch_one(&mut sql)
                .await
                .unwrap();
        if left == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{left} backends still there"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    // A search the result cache has not seen, so that it reads the database.
    let found = health
        .ok(
            "memory_search",
            json!({"query": "who fixes the boiler", "mode": "keyword"}),
        )
        .await;
    assert_eq!(result_ids(&found), vec![stored["id"].as_str().unwrap()]);
    let written = health
        .ok(
            "memory_store_episode",
            json!({"content": "The boiler was fixed", "butler": "health"}),
        )
        .await;
    let read_back = health
        .ok(
            "memory_get",
            json!({"id": written["id"], "type": "episode"}),
        )
        .await;
    assert_eq!(read_back["content"], "The boiler was fixed");
    app.stop().await;
}

/// Every read connection busy (a burst of slow reads, an export) is a full pool, not an
/// outage: the database watch and readiness ask on a connection of their own, so the service
/// stays ready and writes go on while the reads wait their turn.
#[tokio::test]
async fn a_full_read_pool_is_not_taken_for_a_database_that_does_not_answer() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let pool = app.engine().store().pool().clone();
    let mut held = Vec::new();
    for _ in 0..pool.options().get_max_connections() {
        held.push(pool.acquire().await.unwrap());
    }
    // Longer than the watch needs to call a database down (two pings of up to a second
    // each, a quarter of a second apart).
    tokio::time::sleep(std::time::Duration::from_millis(3_000)).await;
    let http = reqwest::Client::new();
    let ready = http.get(app.url("/readyz")).send().await.unwrap();
    let status = ready.status().as_u16();
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    health
        .ok(
            "memory_store_episode",
            json!({"content": "Stored while every read connection was busy", "butler": "health"}),
        )
        .await;
    drop(held);
    app.stop().await;
}

/// The retrieval actors' read pool is sized apart from the engine's (`retrieval.connections`
/// against `database.max_connections`): start-up opens each pool's standing connections,
/// capped by its own size, and reads many at once take turns on the retrieval pool instead
/// of opening more.
#[tokio::test]
async fn the_retrieval_pool_is_sized_apart_from_the_engines() {
    let app = spawn_on_database(fresh_database().await, |config| {
        config.edge.database.min_connections = 2;
        config.edge.database.max_connections = 2;
        config.engine.retrieval.connections = std::num::NonZeroU32::MIN;
    })
    .await;
    let mut sql = app.sql().await;
    let count = |name: &'static str| {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = $1",
        )
        .bind(name)
    };
    let standing = count("butler-memory retrieval")
        .fetch_one(&mut sql)
        .await
        .unwrap();
    assert_eq!(
        standing, 1,
        "min_connections capped by retrieval.connections"
    );
    let engine = count("butler-memory reads")
        .fetch_one(&mut sql)
        .await
        .unwrap();
    assert_eq!(engine, 2, "the engine's pool keeps min_connections");

    let health = app.client(TENANT_A_HEALTH).await;
    let stored = health
        .ok(
            "memory_store_episode",
            json!({"content": "The piano tuner visits every spring", "butler": "health"}),
        )
        .await;
    // Distinct hybrid searches at once, each of them several candidate lists side by side.
    let searches = (0..8).map(|i| {
        let health = &health;
        async move {
            health
                .ok(
                    "memory_search",
                    json!({"query": format!("when does the piano tuner come {i}")}),
                )
                .await
        }
    });
    for found in futures::future::join_all(searches).await {
        assert_eq!(result_ids(&found), vec![stored["id"].as_str().unwrap()]);
    }
    let after = count("butler-memory retrieval")
        .fetch_one(&mut sql)
        .await
        .unwrap();
    assert_eq!(after, 1, "the retrieval pool never opens past its size");
    app.stop().await;
}

/// Advisory locks held for as long as the work they guard (a sweep's lifecycle lease, the
/// indexer's claim on rows to embed) live on connections of their own: with a read pool of
/// one connection the indexer and a consolidation sweep still make the reads their work
/// needs, instead of waiting out the acquire timeout behind their own lock.
#[tokio::test]
async fn locks_held_through_a_sweep_or_an_embedding_leave_the_read_pool_to_the_work() {
    let app = spawn_on_database(fresh_database().await, |config| {
        config.edge.database.max_connections = 1;
        config.edge.database.shared = DatabaseSharing::Always;
    })
    .await;
    embed_and_consolidate(&app).await;
    assert!(
        lock_connections(&app).await >= 1,
        "with other instances possible, claims and leases are PostgreSQL's advisory locks"
    );
    app.stop().await;
}

/// Alone on its database (`database.shared = "never"`, as the embedded PostgreSQL is),
/// an instance holds its claims and leases in its own memory: the same work runs and no
/// connection is opened to hold a lock.
#[tokio::test]
async fn an_instance_alone_on_its_database_holds_its_locks_without_connections() {
    let app = spawn_on_database(fresh_database().await, |config| {
        config.edge.database.max_connections = 1;
        config.edge.database.shared = DatabaseSharing::Never;
    })
    .await;
    embed_and_consolidate(&app).await;
    assert_eq!(lock_connections(&app).await, 0);
    app.stop().await;
}

/// Stores an episode, waits until it is embedded (under the indexer's claim), and
/// consolidates it (under the shard's lifecycle lease).
async fn embed_and_consolidate(app: &TestApp) {
    let health = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    health
        .ok(
            "memory_store_episode",
            json!({"content": "Hi, my name is Ada. I'm allergic to peanuts.", "butler": "health"}),
        )
        .await;
    tokio::time::timeout(std::time::Duration::from_secs(60), app.engine().flush())
        .await
        .expect("embedded within a minute")
        .unwrap();
    let stats = health.ok("memory_stats", json!({})).await;
    assert_eq!(stats["episodes"]["unembedded"], 0, "{stats}");
    let report = admin
        .ok("memory_run_sweep", json!({"kinds": ["consolidation"]}))
        .await;
    assert_eq!(
        report["reports"][0]["changes"]["episodes_consolidated"], 1,
        "{report}"
    );
}

/// The service's connections that hold (or held, and stay open idle) advisory locks.
async fn lock_connections(app: &TestApp) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND application_name = 'butler-memory locks'",
    )
    .fetch_one(&mut app.sql().await)
    .await
    .unwrap()
}
