//! The operator endpoints and the published tool contract.

use serde_json::{Value, json};

use crate::helpers::*;

#[tokio::test]
async fn health_and_readiness_need_no_key() {
    let app = spawn_app().await;
    let http = reqwest::Client::new();
    let health = http.get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let ready = http.get(app.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    let body: Value = ready.json().await.unwrap();
    assert_eq!(body["status"], "ready");
    for part in ["database", "migrations", "embedder"] {
        assert_eq!(body["checks"][part]["ok"], true, "{part}");
    }
    app.stop().await;
}

#[tokio::test]
async fn the_actor_tree_is_visible_to_operators_and_admins_only() {
    let app = spawn_app().await;
    let a = app.client(TENANT_A_HEALTH).await;
    let b = app.client(TENANT_B_HEALTH).await;
    a.ok(
        "memory_store_episode",
        json!({"content": "x", "butler": "health"}),
    )
    .await;
    b.ok(
        "memory_store_episode",
        json!({"content": "y", "butler": "health"}),
    )
    .await;
    let http = reqwest::Client::new();
    let get = |key: Option<&'static str>| {
        let mut request = http.get(app.url("/actors"));
        if let Some(key) = key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        request.send()
    };
    assert_eq!(get(None).await.unwrap().status(), 401);
    assert_eq!(get(Some(TENANT_A_HEALTH)).await.unwrap().status(), 403);

    let all: Value = get(Some(OPERATOR)).await.unwrap().json().await.unwrap();
    let keys: Vec<(String, String)> = all["actors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["kind"].as_str().unwrap().to_owned(),
                a["key"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for expected in [
        ("supervisor", "root"),
        ("embedder_pool", "pool"),
        ("indexer", "embeddings"),
        ("retrieval", "0"),
        ("retrieval", "1"),
        ("shard", "tenant-a/health"),
        ("shard", "tenant-b/health"),
    ] {
        assert!(
            keys.contains(&(expected.0.to_owned(), expected.1.to_owned())),
            "{expected:?} missing from {keys:?}"
        );
    }
    let shard = all["actors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "tenant-a/health")
        .unwrap();
    assert_eq!(shard["status"], "running");
    assert!(shard["messages_handled"].as_u64().unwrap() >= 1);
    for field in ["queue_depth", "restarts", "last_error", "started_at"] {
        assert!(shard.get(field).is_some(), "{field}");
    }

    let own: Value = get(Some(TENANT_A_ADMIN))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let shard_keys: Vec<&str> = own["actors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "shard")
        .map(|a| a["key"].as_str().unwrap())
        .collect();
    assert_eq!(
        shard_keys,
        vec!["tenant-a/health"],
        "an admin sees only its tenant's shards"
    );
    app.stop().await;
}

#[tokio::test]
async fn metrics_show_requests_latency_embedder_shards_and_pool() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    mcp.ok(
        "memory_store_episode",
        json!({"content": "x", "butler": "health"}),
    )
    .await;
    mcp.err("memory_store_episode", json!({"butler": "health"}))
        .await;
    app.engine().flush().await.unwrap();
    let text = app.metrics().await;
    for needle in [
        r#"butler_memory_requests_total{tool="memory_store_episode",class="ok"}"#,
        r#"butler_memory_requests_total{tool="memory_store_episode",class="invalid_input"}"#,
        r#"butler_memory_request_duration_seconds_bucket{tool="memory_store_episode",class="ok",le="0.005"}"#,
        "butler_memory_embedder_batch_size_bucket",
        "butler_memory_embedder_queue_depth",
        "butler_memory_shards",
        r#"butler_memory_db_pool_connections{pool="reads",state="in_use"}"#,
        r#"butler_memory_db_pool_max_connections{pool="retrieval"}"#,
    ] {
        assert!(
            text.contains(needle),
            "{needle} missing from /metrics:\n{text}"
        );
    }
    app.stop().await;
}

/// Every pool is on `/metrics` under its name, with its own size, and the connections it
/// counts are the ones the server has open under that name: an operator whose searches wait
/// sees which pool is full, not only the engine's read pool.
#[tokio::test]
async fn metrics_show_every_pool_with_its_size_and_open_connections() {
    let app = spawn_on_database(fresh_database().await, |config| {
        config.edge.database.max_connections = 3;
        config.edge.database.write_connections = 2;
        config.engine.retrieval.connections = std::num::NonZeroU32::new(5).unwrap();
    })
    .await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    mcp.ok(
        "memory_store_episode",
        json!({"content": "The boiler was serviced", "butler": "health"}),
    )
    .await;
    mcp.ok(
        "memory_search",
        json!({"query": "boiler", "mode": "hybrid"}),
    )
    .await;
    let pools = ["reads", "retrieval", "writes", "health", "locks"];
    let text = app.metrics().await;
    let maxima: Vec<f64> = pools
        .iter()
        .map(|p| {
            gauge(
                &text,
                &format!(r#"butler_memory_db_pool_max_connections{{pool="{p}"}}"#),
            )
        })
        .collect();
    assert_eq!(maxima, [3.0, 5.0, 2.0, 1.0, 4.0], "{text}");

    // Open = idle + in use, per pool, against the server's own count of the service's
    // connections by name (the lock pool opens and closes with the indexer's claims: the two
    // are read until they agree).
    let mut sql = app.sql().await;
    let mut seen = (Vec::new(), Vec::new());
    let mut agreed = None;
    for _ in 0..50 {
        let text = app.metrics().await;
        let scraped: Vec<f64> = pools
            .iter()
            .map(|p| {
                ["idle", "in_use"]
                    .iter()
                    .map(|s| {
                        gauge(
                            &text,
                            &format!(
                                r#"butler_memory_db_pool_connections{{pool="{p}",state="{s}"}}"#
                            ),
                        )
                    })
                    .sum()
            })
            .collect();
        let mut server = Vec::new();
        for p in pools {
            let open: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND application_name = $1",
            )
            .bind(format!("butler-memory {p}"))
            .fetch_one(&mut sql)
            .await
            .unwrap();
            server.push(open as f64);
        }
        if scraped == server {
            agreed = Some(scraped);
            break;
        }
        seen = (scraped, server);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let open = agreed.unwrap_or_else(|| panic!("scraped {:?}, server {:?}", seen.0, seen.1));
    assert_eq!(open[2], 2.0, "every write connection stays open: {open:?}");
    assert!(
        open[1] >= 1.0,
        "the search opened a retrieval connection: {open:?}"
    );
    app.stop().await;
}

/// The value of the series `series` (name and labels, as rendered) in Prometheus text.
fn gauge(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{series} missing from /metrics:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

/// The embedding backlog on `/metrics` is the real one whenever it is scraped, not the value
/// of the indexer's last quiet moment: rows waiting while the embedder is down (as during a
/// long drain) show at once.
#[tokio::test]
async fn the_embedding_backlog_gauge_follows_the_rows_waiting() {
    let app = spawn_app().await;
    app.engine().set_embedder_running(false).await.unwrap();
    let mcp = app.client(TENANT_A_HEALTH).await;
    for i in 0..25 {
        mcp.ok(
            "memory_store_episode",
            json!({"content": format!("waiting {i}"), "butler": "health"}),
        )
        .await;
    }
    let waiting = mcp.ok("memory_stats", json!({})).await["episodes"]["unembedded"].clone();
    assert_eq!(waiting, 25);
    let text = app.metrics().await;
    let gauge = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"))
    };
    assert_eq!(gauge("butler_memory_embedding_backlog"), 25.0);
    assert!(gauge("butler_memory_embedding_backlog_age_seconds") >= 0.0);
    app.engine().set_embedder_running(true).await.unwrap();
    app.stop().await;
}

/// The tool list is the service's contract with butlers: a change to it must show up in
/// review. Regenerate with `UPDATE_SNAPSHOTS=1 cargo test`.
#[test]
fn tool_schemas_match_the_snapshot() {
    let tools = serde_json::to_string_pretty(&butler_memory::mcp::tool_definitions(
        &butler_memory::config::Config::from_toml("").unwrap(),
    ))
    .unwrap()
        + "\n";
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/tools.json");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &tools).unwrap();
    }
    let expected =
        std::fs::read_to_string(&path).expect("snapshot exists (UPDATE_SNAPSHOTS=1 to create)");
    assert_eq!(
        tools, expected,
        "tool schemas changed; review and UPDATE_SNAPSHOTS=1"
    );
}
