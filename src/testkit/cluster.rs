//! One embedded PostgreSQL for a whole test process, and a fresh database per test cloned
//! from a migrated template: a test gets an empty, current schema in milliseconds, and
//! tests running in parallel never see each other's rows.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use butler_memory_actors::{DatabaseConfig, EmbeddedPostgres, EmbeddedPostgresConfig, Store};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

/// The database every test database is cloned from.
const TEMPLATE: &str = "bm_template";

/// The shared cluster, started by the first test that asks.
pub struct TestCluster {
    socket_dir: PathBuf,
    port: u16,
    // Kept for the life of the test process; PostgreSQL stops when the process exits.
    _pg: EmbeddedPostgres,
}

/// A test's own database.
pub struct TestDatabase {
    /// Its URL, for `database_url`.
    pub url: String,
    /// How to connect to it directly, for checks behind the API.
    pub options: PgConnectOptions,
}

impl TestCluster {
    /// The process's cluster, started in `dir` with `config` on first use. Databases of
    /// earlier runs are dropped and the template is rebuilt, so it has the current
    /// migrations.
    pub fn get(dir: &Path, config: &EmbeddedPostgresConfig) -> &'static TestCluster {
        static CLUSTER: OnceLock<TestCluster> = OnceLock::new();
        CLUSTER.get_or_init(|| {
            let dir = dir.to_owned();
            // Tests run side by side, each with its service's pools (some with a fleet's):
            // more connections than one service's embedded cluster is given.
            let mut settings = config.settings.clone();
            settings.insert("max_connections".into(), "200".into());
            let config = EmbeddedPostgresConfig {
                database: "postgres".into(),
                settings,
                ..config.clone()
            };
            // Started on a runtime of its own: each test has its own runtime, and this one
            // outlives any of them.
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Runtime::new().expect("a runtime");
                runtime.block_on(TestCluster::start(&dir, &config))
            })
            .join()
            .expect("the cluster start-up thread")
        })
    }

    async fn start(dir: &Path, config: &EmbeddedPostgresConfig) -> TestCluster {
        let pg = EmbeddedPostgres::start(dir, config)
            .await
            .expect("the test PostgreSQL starts (run scripts/setup first)");
        let cluster = TestCluster {
            socket_dir: pg.cluster_dir().to_owned(),
            port: config.port,
            _pg: pg,
        };
        let mut conn = cluster.admin().await;
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
            .expect("drop a stale database");
        }
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {TEMPLATE}")))
            .execute(&mut conn)
            .await
            .expect("create the template");
        let database = DatabaseConfig {
            max_connections: 4,
            write_connections: 2,
            min_connections: 0,
            acquire_timeout_ms: std::num::NonZeroU64::new(5000).expect("not zero"),
            statement_timeout_ms: 10000,
            startup_wait_secs: 0,
            shared: butler_memory_actors::DatabaseSharing::Auto,
            read_urls: Default::default(),
            max_replica_lag_ms: 5000,
            replica_wait_ms: 50,
        };
        let store = Store::open(cluster.options(TEMPLATE), &database);
        store.prepare().await.expect("migrate the template");
        store.close().await;
        cluster
    }

    /// Where the cluster listens: its socket directory and port.
    pub fn socket(&self) -> (PathBuf, u16) {
        (self.socket_dir.clone(), self.port)
    }

    /// A fresh database, cloned from the migrated template.
    pub async fn fresh_database(&self) -> TestDatabase {
        self.create_database(&format!("TEMPLATE {TEMPLATE}")).await
    }

    /// A fresh database with no schema at all, for a test that applies the migrations
    /// itself (one at a time, on data of an older schema).
    pub async fn empty_database(&self) -> TestDatabase {
        self.create_database("").await
    }

    /// A database of a new name, made with `CREATE DATABASE` and `clauses`.
    async fn create_database(&self, clauses: &str) -> TestDatabase {
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        let mut conn = self.admin().await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE DATABASE {name} {clauses}"
        )))
        .execute(&mut conn)
        .await
        .expect("create a test database");
        let _ = conn.close().await;
        TestDatabase {
            url: format!(
                "postgres://postgres@localhost/{name}?host={}&port={}",
                self.socket_dir.display(),
                self.port
            ),
            options: self.options(&name),
        }
    }

    fn options(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new_without_pgpass()
            .socket(&self.socket_dir)
            .port(self.port)
            .username("postgres")
            .database(database)
    }

    async fn admin(&self) -> PgConnection {
        PgConnection::connect_with(&self.options("postgres"))
            .await
            .expect("connect to the test cluster")
    }
}
