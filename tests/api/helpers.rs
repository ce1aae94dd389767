//! Test harness: one embedded PostgreSQL for the whole test binary (in `target/tmp`), a
//! fresh database per test cloned from a migrated template, and `spawn_app` to run the real
//! service on port 0 against it, with the real embedding model.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use butler_memory::config::Config;
use butler_memory::startup::{AppState, Application};
use butler_memory_actors::Engine;
use butler_memory_actors::clock::ManualClock;
use butler_memory_actors::store::embedded_postgres::{EmbeddedPostgres, EmbeddedPostgresConfig};
use butler_memory_actors::store::{DatabaseConfig, Store};
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use tokio::sync::oneshot;

/// Keys every test app accepts.
pub const TENANT_A_HEALTH: &str = "key-tenant-a-health-butler";
pub const TENANT_A_GENERAL: &str = "key-tenant-a-general-butler";
pub const TENANT_A_UNBOUND: &str = "key-tenant-a-unbound-butler";
pub const TENANT_A_ADMIN: &str = "key-tenant-a-admin-000000";
pub const TENANT_B_HEALTH: &str = "key-tenant-b-health-butler";
pub const OPERATOR: &str = "key-operator-000000000000";

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
"#;

/// The shared cluster and the template database every test database is cloned from.
struct Cluster {
    socket_dir: PathBuf,
    port: u16,
    // Kept for the life of the test process; PostgreSQL stops when the process exits.
    _pg: EmbeddedPostgres,
}

const TEMPLATE: &str = "bm_template";

fn repo_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Base configuration for tests (paths made absolute so tests do not depend on the cwd).
pub fn base_config(extra: &str) -> Config {
    let deps = repo_path(".deps");
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
    let toml = format!(
        r#"
listen = "127.0.0.1:0"
[embedded_postgres]
install_dir = "{deps}/postgres/embedded_postgres/pginstall"
startup_timeout_secs = 60
[embedder]
onnxruntime_path = "{deps}/onnxruntime/libonnxruntime.so.1.31.1"
model_path = "{deps}/model/model.onnx"
tokenizer_path = "{deps}/model/tokenizer.json"
workers = 1
intra_threads = 1
{retrieval}
[database]
max_connections = 6
write_connections = 3
min_connections = 0
[log]
level = "warn"
{lifecycle}
{KEYS}
{extra}
"#,
        deps = deps.display()
    );
    Config::from_toml(&toml).expect("test configuration is valid")
}

fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        // Started on a runtime of its own: each test has its own runtime, and this one
        // outlives any of them.
        std::thread::spawn(|| {
            let runtime = tokio::runtime::Runtime::new().expect("runtime");
            runtime.block_on(async {
                let config = base_config("");
                let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("test-postgres");
                let pg_config = EmbeddedPostgresConfig {
                    database: "postgres".into(),
                    ..config.embedded_postgres.clone()
                };
                let pg = EmbeddedPostgres::start(&dir, &pg_config)
                    .await
                    .expect("the test PostgreSQL starts (run scripts/setup first)");
                let socket_dir = pg.cluster_dir().to_owned();
                let port = pg_config.port;
                let admin = PgConnectOptions::new_without_pgpass()
                    .socket(&socket_dir)
                    .port(port)
                    .username("postgres")
                    .database("postgres");
                let mut conn = PgConnection::connect_with(&admin).await.expect("connect");
                // Databases of earlier runs and the old template go; the template is rebuilt
                // so it always has the current migrations.
                let stale: Vec<String> = sqlx::query_scalar(
                    "SELECT datname FROM pg_database WHERE datname LIKE 't\\_%' OR datname = $1",
                )
                .bind(TEMPLATE)
                .fetch_all(&mut conn)
                .await
                .expect("list databases");
                for db in stale {
                    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS \"{db}\" WITH (FORCE)"
                    )))
                    .execute(&mut conn)
                    .await
                    .expect("drop stale database");
                }
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {TEMPLATE}")))
                    .execute(&mut conn)
                    .await
                    .expect("create template");
                let store = Store::open(admin.clone().database(TEMPLATE), &db_config());
                store.prepare().await.expect("migrate template");
                store.close().await;
                Cluster {
                    socket_dir,
                    port,
                    _pg: pg,
                }
            })
        })
        .join()
        .expect("cluster start-up thread")
    })
}

fn db_config() -> DatabaseConfig {
    DatabaseConfig {
        max_connections: 4,
        write_connections: 2,
        min_connections: 0,
        acquire_timeout_ms: 5000,
        statement_timeout_ms: 10000,
        startup_wait_secs: 0,
    }
}

/// Where the test cluster listens: its socket directory and port.
pub fn cluster_socket() -> (PathBuf, u16) {
    let cluster = cluster();
    (cluster.socket_dir.clone(), cluster.port)
}

/// A fresh database for one test, cloned from the migrated template. Returns its URL.
pub async fn fresh_database() -> (String, PgConnectOptions) {
    let cluster = cluster();
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let admin = PgConnectOptions::new_without_pgpass()
        .socket(&cluster.socket_dir)
        .port(cluster.port)
        .username("postgres")
        .database("postgres");
    let mut conn = PgConnection::connect_with(&admin).await.expect("connect");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE {name} TEMPLATE {TEMPLATE}"
    )))
    .execute(&mut conn)
    .await
    .expect("create test database");
    let _ = conn.close().await;
    let url = format!(
        "postgres://postgres@localhost/{name}?host={}&port={}",
        cluster.socket_dir.display(),
        cluster.port
    );
    (url, admin.database(&name))
}

/// A running service for one test.
pub struct TestApp {
    pub address: std::net::SocketAddr,
    pub state: Arc<AppState>,
    /// Direct access to the test's database, for checks behind the API.
    pub db: PgConnectOptions,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _data_dir: tempfile::TempDir,
}

impl TestApp {
    pub fn engine(&self) -> &Engine {
        &self.state.engine
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// An MCP client authenticated with `key`.
    pub async fn client(&self, key: &str) -> Mcp {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(self.url("/mcp")).auth_header(key),
        );
        let service = ClientConfig::default()
            .serve(transport)
            .await
            .expect("MCP client connects");
        Mcp { service }
    }

    /// A direct database connection.
    pub async fn sql(&self) -> PgConnection {
        PgConnection::connect_with(&self.db)
            .await
            .expect("connect to the test database")
    }

    /// Stops the service the way a signal would, and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("server task").expect("clean shutdown");
        }
    }
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
    let data_dir = tempfile::tempdir().expect("temp dir");
    let mut config = base_config(extra);
    config.database_url = butler_memory::config::Secret::new(url);
    config.data_dir = data_dir.path().to_owned();
    let app = match clock {
        None => Application::build(config).await,
        Some(clock) => {
            let factory = Engine::minilm_factory(&config.embedder).expect("model assets");
            Application::build_with(config, clock, factory).await
        }
    }
    .expect("the service builds");
    let address = app.address();
    let state = app.state();
    let (tx, rx) = oneshot::channel();
    let task = tokio::spawn(app.run_until_stopped(async move {
        let _ = rx.await;
    }));
    TestApp {
        address,
        state,
        db,
        stop: Some(tx),
        task: Some(task),
        _data_dir: data_dir,
    }
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with("").await
}

/// An MCP client.
pub struct Mcp {
    pub service: RunningService<RoleClient, ClientConfig>,
}

impl Mcp {
    pub async fn call(&self, tool: &str, args: Value) -> CallToolResult {
        let args = match args {
            Value::Object(map) => map,
            other => panic!("tool arguments must be an object, got {other}"),
        };
        tokio::time::timeout(
            Duration::from_secs(30),
            self.service
                .call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args)),
        )
        .await
        .expect("tool call answers in time")
        .expect("tool call gets a result")
    }

    /// Calls a tool that must succeed; returns its structured content.
    pub async fn ok(&self, tool: &str, args: Value) -> Value {
        let result = self.call(tool, args).await;
        let body = structured(&result);
        assert_ne!(result.is_error, Some(true), "{tool} failed: {body}");
        body
    }

    /// Calls a tool that must fail; returns its structured error.
    pub async fn err(&self, tool: &str, args: Value) -> Value {
        let result = self.call(tool, args).await;
        let body = structured(&result);
        assert_eq!(
            result.is_error,
            Some(true),
            "{tool} should have failed: {body}"
        );
        body
    }
}

/// The structured content of a result, checked against its text content (the same JSON).
pub fn structured(result: &CallToolResult) -> Value {
    let body = result
        .structured_content
        .clone()
        .expect("results carry structured content");
    let text = result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .expect("results carry text content");
    let parsed: Value = serde_json::from_str(&text).expect("text content is JSON");
    assert_eq!(
        parsed, body,
        "text and structured content must be the same JSON"
    );
    body
}
