//! Test harness: the real service from the test kit (`butler_memory::testkit`) on a fresh
//! database of the process's test PostgreSQL, on port 0, with the real embedding model, and
//! the keys and settings every test starts from.

use std::path::PathBuf;
use std::sync::Arc;

use butler_memory::config::Config;
use butler_memory::testkit::{HEURISTIC_EXTRACTOR_TOML, TestDatabase, TestService, assets_toml};
pub use butler_memory::testkit::{McpClient, TestCluster, eventually};
use butler_memory_actors::{Engine, ManualClock};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

/// Keys every test app accepts.
pub const TENANT_A_HEALTH: &str = "key-tenant-a-health-butler";
pub const TENANT_A_GENERAL: &str = "key-tenant-a-general-butler";
pub const TENANT_A_UNBOUND: &str = "key-tenant-a-unbound-butler";
pub const TENANT_A_ADMIN: &str = "key-tenant-a-admin-000000";
pub const TENANT_B_HEALTH: &str = "key-tenant-b-health-butler";
pub const OPERATOR: &str = "key-operator-000000000000";
pub const AUDITOR: &str = "key-auditor-0000000000000";
pub const ORCHESTRATOR_ONE: &str = "key-orchestrator-one-00000";
pub const ORCHESTRATOR_TWO: &str = "key-orchestrator-two-00000";
pub const ORCHESTRATOR_ONE_ADMIN: &str = "key-orchestrator-one-admin";

const KEYS: &str = r#"
[auth]
bootstrap_admin_key = false
[[auth.keys]]
name = "a-health"
key = "key-tenant-a-health-butler"
tenant = "tenant-a"
role = "butler"
butler = "health"
[[auth.keys]]
name = "a-general"
key = "key-tenant-a-general-butler"
tenant = "tenant-a"
role = "butler"
butler = "general"
[[auth.keys]]
name = "a-unbound"
key = "key-tenant-a-unbound-butler"
tenant = "tenant-a"
role = "butler"
[[auth.keys]]
name = "a-admin"
key = "key-tenant-a-admin-000000"
tenant = "tenant-a"
role = "admin"
[[auth.keys]]
name = "b-health"
key = "key-tenant-b-health-butler"
tenant = "tenant-b"
role = "butler"
butler = "health"
[[auth.keys]]
name = "ops"
key = "key-operator-000000000000"
role = "operator"
[[auth.keys]]
name = "investigator"
key = "key-auditor-0000000000000"
role = "auditor"
[[auth.keys]]
name = "orch-one"
key = "key-orchestrator-one-00000"
tenant = "orch-one"
role = "orchestrator"
[[auth.keys]]
name = "orch-one-admin"
key = "key-orchestrator-one-admin"
tenant = "orch-one"
role = "admin"
[[auth.keys]]
name = "orch-two"
key = "key-orchestrator-two-00000"
tenant = "orch-two"
role = "orchestrator"
"#;

/// Where the tests' pinned clocks start.
pub fn t0() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339("2026-05-01T09:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc)
}

/// Base configuration for tests (the assets of this checkout, whatever the cwd), with `extra`
/// layered on top.
pub fn base_config(extra: &str) -> Config {
    // Sweeps run when a test asks for them, not on their own in the middle of it.
    let lifecycle = if extra.contains("[lifecycle]") {
        ""
    } else {
        "[lifecycle]\ncatch_up_missed_runs = false\nscheduler_tick_ms = 3600000\n"
    };
    // Two readers are plenty; a test with a `[retrieval]` table of its own sets what it needs.
    // Query embeddings get 5 s, not 250 ms: tests run in parallel on a shared embedder, and
    // a read that degraded to keyword search because the host was slow is not what they test.
    let retrieval = if extra.contains("[retrieval]") {
        ""
    } else {
        "[retrieval]\nworkers = 2\nembed_timeout_ms = 5000\n"
    };
    // Episodes stored seconds apart without a session would be one conversation, and
    // searches would bring their neighbours along; a test of something else sees only what
    // it searched for, and tests/api/retrieval/conversations.rs turns the gap on.
    let episodes = if extra.contains("[episodes]") {
        ""
    } else {
        "[episodes]\nconversation_gap_secs = 0.0\n"
    };
    // The second stage (on in the shipped configuration) counts its work in the process's
    // metrics, which retrieval/second_stage.rs reads exactly: a test of something else
    // searches with the first stage alone, as the suite did before it was on by default; a
    // test with a `[retrieval.rerank]` table of its own turns it on.
    let rerank = if extra.contains("[retrieval.rerank]") {
        ""
    } else {
        "[retrieval.rerank]\nenabled = false\n"
    };
    // Widening (on in the shipped configuration) lets a keyword search find words the query
    // does not use; a test of something else finds what it searched for, and one with a
    // `[retrieval.widening]` table of its own turns it on (retrieval/widening.rs).
    let widening = if extra.contains("[retrieval.widening]") {
        ""
    } else {
        "[retrieval.widening]\nenabled = false\n"
    };
    let toml = format!(
        r#"
listen = "127.0.0.1:0"
[embedded_postgres]
startup_timeout_secs = 60
[embedder]
workers = 1
intra_threads = 1
{retrieval}
{rerank}
{widening}
[database]
max_connections = 6
write_connections = 3
min_connections = 0
[log]
level = "warn"
{lifecycle}
{episodes}
{KEYS}
{extra}
"#
    );
    Config::from_toml_layers(&[&assets_toml(), HEURISTIC_EXTRACTOR_TOML, &toml])
        .expect("test configuration is valid")
}

/// The process's test PostgreSQL (in `target/tmp`).
pub fn cluster() -> &'static TestCluster {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("test-postgres");
    TestCluster::get(&dir, &base_config("").edge.embedded_postgres)
}

/// Where the test cluster listens: its socket directory and port.
pub fn cluster_socket() -> (PathBuf, u16) {
    cluster().socket()
}

/// A fresh database for one test, cloned from a migrated template: its URL and options.
pub async fn fresh_database() -> (String, PgConnectOptions) {
    let TestDatabase { url, options } = cluster().fresh_database().await;
    (url, options)
}

/// A database of its own with the migrations up to `version` applied and no rows, for a
/// test of a later migration on data of the older schema; and a pool on it.
pub async fn database_at(version: i64) -> (TestDatabase, sqlx::PgPool) {
    let database = cluster().empty_database().await;
    let pool = sqlx::PgPool::connect_with(database.options.clone())
        .await
        .unwrap();
    butler_memory_actors::MIGRATOR
        .run_to(version, &pool)
        .await
        .unwrap();
    (database, pool)
}

/// A model registered in `embedding_versions`, for rows a migration test stores embedded;
/// its id.
pub async fn registered_model(pool: &sqlx::PgPool) -> i16 {
    sqlx::query_scalar(
        "INSERT INTO embedding_versions (model, model_sha256, dimensions, pooling)
         VALUES ('a-model', 'abc', 384, 'mean') RETURNING id",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// The partitions of the partitioned `table`, by name.
pub async fn partitions_of(app: &TestApp, table: &str) -> Vec<String> {
    let mut conn = app.sql().await;
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = $1::regclass ORDER BY 1",
    )
    .bind(table)
    .fetch_all(&mut conn)
    .await
    .unwrap()
}

/// How many rows of the partitioned `table` each partition holds (those holding none are
/// not listed).
pub async fn rows_per_partition<'e>(
    db: impl sqlx::PgExecutor<'e>,
    table: &str,
) -> Vec<(String, i64)> {
    let sql =
        format!("SELECT tableoid::regclass::text, count(*) FROM {table} GROUP BY 1 ORDER BY 1");
    sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .fetch_all(db)
        .await
        .unwrap()
}

/// A running service for one test, and its database.
pub struct TestApp {
    pub service: TestService,
    /// Direct access to the test's database, for checks behind the API.
    pub db: PgConnectOptions,
    /// The database's URL, for a second service on the same data.
    pub db_url: String,
}

impl TestApp {
    pub fn engine(&self) -> &Engine {
        self.service.engine()
    }

    pub fn url(&self, path: &str) -> String {
        self.service.url(path)
    }

    /// An MCP client authenticated with `key`.
    pub async fn client(&self, key: &str) -> McpClient {
        self.service.client(key).await
    }

    /// The database's URL and options, to start another service on it.
    pub fn database(&self) -> (String, PgConnectOptions) {
        (self.db_url.clone(), self.db.clone())
    }

    /// The service's `/metrics` text.
    pub async fn metrics(&self) -> String {
        reqwest::get(self.url("/metrics"))
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("the /metrics body")
    }

    /// A direct database connection.
    pub async fn sql(&self) -> PgConnection {
        PgConnection::connect_with(&self.db)
            .await
            .expect("connect to the test database")
    }

    /// Stops the service the way a signal would, and waits for it.
    pub async fn stop(self) {
        self.service.stop().await.expect("clean shutdown");
    }
}

/// The ids of a search's results, in their order.
pub fn result_ids(result: &serde_json::Value) -> Vec<String> {
    result["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|r| r["id"].as_str().expect("an id").to_owned())
        .collect()
}

/// The ids of a REST list page's `items`, in page order.
pub fn page_ids(page: &serde_json::Value) -> Vec<String> {
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|r| r["id"].as_str().expect("an id").to_owned())
        .collect()
}

/// The caller's tenant's whole audit stream, oldest first, read `page` events at a time.
pub async fn activity(admin: &McpClient, page: u32) -> Vec<serde_json::Value> {
    let mut events = Vec::new();
    let mut since = "0".to_owned();
    loop {
        let answer = admin
            .ok(
                "memory_activity_stream",
                serde_json::json!({"since": since, "limit": page}),
            )
            .await;
        let got = answer["events"].as_array().unwrap().clone();
        if got.is_empty() {
            return events;
        }
        since = answer["next_cursor"].as_str().unwrap().to_owned();
        events.extend(got);
    }
}

/// The answer without what differs from call to call: its request id, what is computed at
/// the time of the call (effective confidence, scores, which decay with age), and what reads
/// move as they happen (a search's references are counted after it answers, so a later
/// call may or may not see an earlier one's).
pub fn time_free(mut answer: serde_json::Value) -> serde_json::Value {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                for key in [
                    "request_context",
                    "effective_confidence",
                    "score",
                    "scores",
                    "last_referenced_at",
                    "reference_count",
                ] {
                    map.remove(key);
                }
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    strip(&mut answer);
    answer
}

/// A full dump of `database` (a URL) as SQL text, by the pg_dump the service ships.
pub fn pg_dump(database: &str) -> String {
    let pg_dump =
        butler_memory::testkit::deps_dir().join("postgres/embedded_postgres/pginstall/bin/pg_dump");
    let dump = std::process::Command::new(&pg_dump)
        .arg("--dbname")
        .arg(database)
        .output()
        .expect("pg_dump runs");
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    String::from_utf8(dump.stdout).expect("the dump is UTF-8")
}

/// Starts the service on a fresh database with the given configuration overrides.
pub async fn spawn_app_with(extra: &str) -> TestApp {
    spawn(extra, None).await
}

/// Starts the service with its clock pinned: time moves only when the test moves it.
pub async fn spawn_app_at(extra: &str, clock: Arc<ManualClock>) -> TestApp {
    spawn(extra, Some(clock)).await
}

async fn spawn(extra: &str, clock: Option<Arc<ManualClock>>) -> TestApp {
    let (url, db) = fresh_database().await;
    spawn_on(url, db, extra, clock).await
}

/// Starts another service on `app`'s database: the same data, none of `app`'s state.
pub async fn spawn_beside(app: &TestApp, extra: &str, clock: Arc<ManualClock>) -> TestApp {
    spawn_on(app.db_url.clone(), app.db.clone(), extra, Some(clock)).await
}

/// Starts a service on a database an earlier service used (stopped or not), with the
/// system clock and the test configuration changed by `adjust`: a restart with another
/// configuration.
pub async fn spawn_on_database(
    database: (String, PgConnectOptions),
    adjust: impl FnOnce(&mut Config),
) -> TestApp {
    let (url, db) = database;
    let mut config = base_config("");
    adjust(&mut config);
    config.edge.database_url = butler_memory::config::Secret::new(url.clone());
    TestApp {
        service: TestService::start(config, None).await,
        db,
        db_url: url,
    }
}

async fn spawn_on(
    url: String,
    db: PgConnectOptions,
    extra: &str,
    clock: Option<Arc<ManualClock>>,
) -> TestApp {
    let mut config = base_config(extra);
    config.edge.database_url = butler_memory::config::Secret::new(url.clone());
    let clock = clock.map(|c| c as butler_memory_actors::SharedClock);
    TestApp {
        service: TestService::start(config, clock).await,
        db,
        db_url: url,
    }
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with("").await
}

/// One REST call as a client makes it: `method` on `path` with `key`, a JSON body if any,
/// and `request_id` as its `X-Request-Id`; the status and the JSON answer (`null` when the
/// answer is not JSON).
pub async fn rest(
    app: &TestApp,
    key: &str,
    method: &str,
    path: &str,
    body: Option<serde_json::Value>,
    request_id: &str,
) -> (u16, serde_json::Value) {
    let mut request = reqwest::Client::new()
        .request(method.parse().expect("an HTTP method"), app.url(path))
        .header("Authorization", format!("Bearer {key}"))
        .header("X-Request-Id", request_id);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("the service answers");
    let status = response.status().as_u16();
    (
        status,
        response.json().await.unwrap_or(serde_json::Value::Null),
    )
}

/// Waits (up to a minute) until every fact, episode and rule of `tenant` has its embedding:
/// the embedder writes it behind the acknowledged write, so a test that compares rows
/// before and after something else waits for it first.
pub async fn embedded(app: &TestApp, tenant: &str) {
    eventually(std::time::Duration::from_secs(60), || {
        let options = app.db.clone();
        async move {
            let mut sql = PgConnection::connect_with(&options)
                .await
                .map_err(|e| e.to_string())?;
            let waiting: i64 = sqlx::query_scalar(
                "SELECT (SELECT count(*) FROM facts WHERE tenant_id = $1 AND embedding IS NULL)
                      + (SELECT count(*) FROM episodes WHERE tenant_id = $1 AND embedding IS NULL)
                      + (SELECT count(*) FROM rules WHERE tenant_id = $1 AND embedding IS NULL)",
            )
            .bind(tenant)
            .fetch_one(&mut sql)
            .await
            .map_err(|e| e.to_string())?;
            if waiting == 0 {
                Ok(())
            } else {
                Err(format!("{waiting} rows to embed"))
            }
        }
    })
    .await
    .unwrap();
}

/// The audit events of one record, oldest first: `(event_type, actor, request_id, payload)`.
pub async fn events_of(
    app: &TestApp,
    id: &str,
) -> Vec<(String, String, Option<String>, serde_json::Value)> {
    sqlx::query_as(
        "SELECT event_type, actor, request_id, payload FROM memory_events
         WHERE entity_id = $1::uuid ORDER BY id",
    )
    .bind(id)
    .fetch_all(&mut app.sql().await)
    .await
    .expect("the record's events")
}
