//! Pooled connections the server closed while they sat idle (a restarted server, a proxy's
//! idle timeout, an operator's `pg_terminate_backend`) are found out before they are used and
//! replaced, without the request noticing: the pools check a connection before handing it
//! out (sqlx's default, kept on purpose: skipping the check for connections used within the
//! last second saved nothing measurable, docs/benchmarks.md).

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
