//! Read replicas (`database.read_urls`): a real primary and a streaming replica made from
//! it with `pg_basebackup -R`, both from the embedded binaries. Reads go to the replica when
//! it has replayed the tenant's last commit and never miss a committed write: with replay
//! paused they are served by the primary. A replica that lags, stops, or is not a replica
//! at all is taken out of rotation and `/readyz` says degraded; it rejoins once it is back.

use std::path::PathBuf;
use std::time::Duration;

use butler_memory::config::Secret;
use butler_memory::testkit::TestService;
use butler_memory_actors::{DatabaseConfig, EmbeddedPostgres, EmbeddedPostgresConfig, ReadUrls};
use serde_json::{Value, json};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use crate::helpers::result_ids as ids;
use crate::helpers::*;

/// A primary and its streaming replica, each in a directory of its own.
struct Replicated {
    primary: EmbeddedPostgres,
    replica: EmbeddedPostgres,
    config: EmbeddedPostgresConfig,
    primary_url: String,
    replica_url: String,
    replica_options: PgConnectOptions,
    _dir: tempfile::TempDir,
}

impl Replicated {
    async fn start() -> Replicated {
        // Under target/tmp: short enough for a Unix socket path.
        let root = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(&root).unwrap();
        let dir = tempfile::Builder::new()
            .prefix("rep")
            .tempdir_in(&root)
            .unwrap();
        let config = EmbeddedPostgresConfig {
            database: "butler_memory".into(),
            ..base_config("").edge.embedded_postgres
        };
        // The primary allows more connections than the replica's configuration says, as an
        // operator's primary may: the replica keeps the primary's (a standby allowing fewer
        // does not serve reads).
        let mut primary_config = config.clone();
        primary_config
            .settings
            .insert("max_connections".into(), "60".into());
        let primary = EmbeddedPostgres::start(&dir.path().join("p"), &primary_config)
            .await
            .expect("the primary starts");
        let conninfo = format!(
            "host={} port={} user=postgres",
            primary.cluster_dir().display(),
            config.port
        );
        let replica = EmbeddedPostgres::start_replica(&dir.path().join("r"), &config, &conninfo)
            .await
            .expect("the replica is copied and starts");
        let url = |pg: &EmbeddedPostgres| {
            format!(
                "postgres://postgres@localhost/butler_memory?host={}&port={}",
                pg.cluster_dir().display(),
                config.port
            )
        };
        Replicated {
            primary_url: url(&primary),
            replica_url: url(&replica),
            replica_options: replica.connect_options(),
            primary,
            replica,
            config,
            _dir: dir,
        }
    }

    /// A service on the primary with the replica for reads, `adjust`ed.
    async fn service(&self, adjust: impl FnOnce(&mut DatabaseConfig)) -> TestApp {
        let mut config = base_config("");
        config.edge.database_url = Secret::new(self.primary_url.clone());
        config.edge.database.read_urls = ReadUrls(vec![self.replica_url.clone()]);
        adjust(&mut config.edge.database);
        TestApp {
            service: TestService::start(config, None).await,
            db: self.primary.connect_options(),
            db_url: self.primary_url.clone(),
        }
    }

    async fn on_replica(&self, sql: &str) {
        let mut conn = PgConnection::connect_with(&self.replica_options)
            .await
            .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut conn)
            .await
            .unwrap();
    }

    /// Whether the replica holds a fact with this content (encrypted or not, it is not).
    async fn replica_has(&self, content: &str) -> bool {
        let mut conn = PgConnection::connect_with(&self.replica_options)
            .await
            .unwrap();
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM facts WHERE content = $1)")
            .bind(content)
            .fetch_one(&mut conn)
            .await
            .unwrap()
    }
}

async fn readyz(app: &TestApp) -> (u16, Value) {
    let response = reqwest::get(app.url("/readyz")).await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// The value of the `/metrics` series whose line starts with `series` (0 when absent).
async fn metric(app: &TestApp, series: &str) -> f64 {
    let text = app.metrics().await;
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits (30 s at most) until `/readyz` satisfies `wanted`; fails with the last answer.
async fn until_readyz(app: &TestApp, what: &str, wanted: impl Fn(u16, &Value) -> bool) {
    eventually(Duration::from_secs(30), || async {
        let (status, body) = readyz(app).await;
        if wanted(status, &body) {
            Ok(())
        } else {
            Err(format!("{status} {body}"))
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{what}: {e:?}"));
}

fn replica_error(body: &Value, part: &str) -> bool {
    body["replicas"][0]["error"]
        .as_str()
        .is_some_and(|e| e.contains(part))
}

/// Stores a fact and reads it back at once through search, recall, context and the
/// dashboard's list: every read must see it.
async fn write_then_read(app: &TestApp, client: &McpClient, n: usize) -> String {
    let content = format!("replica probe {n} kohlrabi");
    let fact = client
        .ok(
            "memory_store_fact",
            json!({"subject": "garden", "predicate": format!("probe_{n}"), "content": content,
                   "butler": "health"}),
        )
        .await;
    let id = fact["id"].as_str().unwrap().to_owned();
    let query = format!("probe {n} kohlrabi");
    let found = client
        .ok(
            "memory_search",
            json!({"query": query, "mode": "keyword", "limit": 5}),
        )
        .await;
    assert!(ids(&found).contains(&id), "search missed {id}: {found}");
    let recalled = client
        .ok("memory_recall", json!({"topic": query, "butler": "health"}))
        .await;
    assert!(
        ids(&recalled).contains(&id),
        "recall missed {id}: {recalled}"
    );
    let got = client
        .ok("memory_get", json!({"type": "fact", "id": id}))
        .await;
    assert_eq!(got["content"], content.as_str(), "{got}");
    let (status, page) = crate::rest::get(
        app,
        Some(TENANT_A_ADMIN),
        "/api/memory/facts?subject=garden&limit=100",
    )
    .await;
    assert_eq!(status, 200, "{page}");
    assert!(page.to_string().contains(&id), "the list missed {id}");
    content
}

#[tokio::test]
async fn reads_go_to_a_replica_that_has_the_write_and_never_miss_one() {
    let pair = Replicated::start().await;
    let app = pair
        .service(|db| {
            db.max_replica_lag_ms = 1500;
            db.replica_wait_ms = 100;
        })
        .await;
    until_readyz(&app, "the replica comes into rotation", |_, body| {
        body["status"] == "ready"
    })
    .await;
    let label = format!(
        "{}:{}",
        pair.replica.cluster_dir().display(),
        pair.config.port
    );
    let on_replica_series = format!("butler_memory_reads_by_target_total{{target=\"{label}\"}}");
    let client = app.client(TENANT_A_HEALTH).await;

    // Replay running: every read sees the write just made, most of them from the replica.
    let before = metric(&app, &on_replica_series).await;
    for n in 0..10 {
        write_then_read(&app, &client, n).await;
    }
    let served = metric(&app, &on_replica_series).await - before;
    assert!(served >= 10.0, "{served} reads on the replica");

    // Replay paused: the replica cannot have the write, and no read may miss it.
    pair.on_replica("SELECT pg_wal_replay_pause()").await;
    let timed_out = "butler_memory_replica_waits_total{outcome=\"timed_out\"}";
    let waits_before = metric(&app, timed_out).await;
    let content = write_then_read(&app, &client, 100).await;
    assert!(
        !pair.replica_has(&content).await,
        "the paused replica has the write"
    );
    assert!(metric(&app, timed_out).await > waits_before);

    // Behind for longer than max_replica_lag_ms: out of rotation, the service degraded.
    until_readyz(
        &app,
        "the lagging replica is out of rotation",
        |status, body| {
            status == 200
                && body["status"] == "degraded"
                && replica_error(body, "behind the primary")
        },
    )
    .await;
    write_then_read(&app, &client, 101).await;

    // Replay resumed: it catches up and rejoins.
    pair.on_replica("SELECT pg_wal_replay_resume()").await;
    until_readyz(&app, "the replica rejoins", |_, body| {
        body["status"] == "ready"
    })
    .await;
    assert!(pair.replica_has(&content).await);
    let before = metric(&app, &on_replica_series).await;
    write_then_read(&app, &client, 102).await;
    assert!(metric(&app, &on_replica_series).await > before);
    app.stop().await;
}

#[tokio::test]
async fn a_stopped_replica_leaves_reads_to_the_primary_until_it_is_back() {
    let mut pair = Replicated::start().await;
    let app = pair.service(|_| {}).await;
    until_readyz(&app, "the replica comes into rotation", |_, body| {
        body["status"] == "ready"
    })
    .await;
    let client = app.client(TENANT_A_HEALTH).await;
    write_then_read(&app, &client, 0).await;

    pair.replica.pause().await.expect("the replica stops");
    // Reads go on at once, whether or not the watch has looked yet.
    for n in 1..4 {
        write_then_read(&app, &client, n).await;
    }
    until_readyz(
        &app,
        "the stopped replica is out of rotation",
        |status, body| {
            status == 200
                && body["status"] == "degraded"
                && body["replicas"][0]["in_rotation"] == false
                && replica_error(body, "does not answer")
        },
    )
    .await;

    pair.replica
        .restart(&pair.config)
        .await
        .expect("the replica starts again");
    until_readyz(&app, "the replica rejoins", |_, body| {
        body["status"] == "ready"
    })
    .await;
    write_then_read(&app, &client, 10).await;
    app.stop().await;
}

#[tokio::test]
async fn a_server_that_is_not_a_replica_never_serves_reads() {
    let app = spawn_app_with("").await;
    let (primary_url, _) = app.database();
    let (not_a_replica, _) = fresh_database().await;
    let other = spawn_on_database((primary_url, app.db.clone()), |config| {
        config.edge.database.read_urls = ReadUrls(vec![not_a_replica]);
    })
    .await;
    until_readyz(
        &other,
        "the server is kept out of rotation",
        |status, body| {
            status == 200 && body["status"] == "degraded" && replica_error(body, "not a replica")
        },
    )
    .await;
    let client = other.client(TENANT_A_HEALTH).await;
    write_then_read(&other, &client, 0).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(readyz(&other).await.1["status"], "degraded");
    other.stop().await;
    app.stop().await;
}
