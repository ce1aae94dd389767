//! Storage: every SQL statement of the engine lives under this module. PostgreSQL with
//! pgvector is the system of record; the pool is the only way in.

pub mod activity;
pub mod anti_patterns;
pub mod audit_reads;
pub mod bundle;
pub mod columns;
pub mod consolidation;
pub mod consolidation_queue;
pub mod dashboard_sessions;
pub mod data_keys;
pub mod decay_sweep;
pub mod embedded_postgres;
pub mod embedding_backlog;
pub mod embedding_claims;
pub mod embedding_versions;
pub mod episode_cleanup;
pub mod episode_partitions;
pub mod episodes;
pub mod event_partitions;
pub mod events;
pub mod facts;
pub mod feedback;
pub mod forgetting;
pub mod governance;
mod import_events;
pub mod key_rotation;
pub mod keyword_counts;
pub mod lifecycle_claims;
pub mod lifecycle_lease;
pub mod lifecycle_locks;
pub mod lifecycle_runs;
pub mod links;
pub mod listing;
pub mod month_partitions;
mod orchestrator_bundle;
mod orchestrator_counts;
mod orchestrator_embedding;
pub mod orchestrator_graph;
mod orchestrator_listing;
mod orchestrator_purge;
pub mod orchestrator_recall;
mod orchestrator_standing;
pub mod process_locks;
pub mod projections;
pub mod purging;
pub mod query_words;
pub mod read_replicas;
pub mod records;
pub mod references;
pub mod relation_sizes;
pub mod rules;
pub mod sealing;
pub mod search;
pub mod shard_heads;
pub mod stats;
mod token_sketches;
pub mod vocabulary;

use std::sync::Arc;
use std::time::Duration;

use futures::future::try_join_all;
use serde::Deserialize;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::error::{MemoryError, MemoryResult};
use crate::vault::Vault;

/// The migrations under `migrations/`, compiled into the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// Connections that may hold advisory locks at once (`Store::locks`).
const LOCK_CONNECTIONS: u32 = 4;

/// Oldest pgvector with everything the schema uses (HNSW, iterative index scans).
pub const MIN_PGVECTOR: (u32, u32, u32) = (0, 8, 0);

/// `[database]` configuration: how the service uses its connection pool.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatabaseConfig {
    /// Upper bound on open connections for reads, per read pool (the retrieval actors' and
    /// the rest of the engine's).
    pub max_connections: u32,
    /// Connections reserved for writes (shards, the indexer, sweeps), apart from the read
    /// connections, so that a write burst cannot take the connections reads need. All are
    /// opened at start and stay open.
    pub write_connections: u32,
    /// Read connections per read pool opened at start and kept open while idle.
    pub min_connections: u32,
    /// How long a request waits for a free connection before failing as `unavailable`.
    pub acquire_timeout_ms: std::num::NonZeroU64,
    /// Server-side limit on any one statement.
    pub statement_timeout_ms: u64,
    /// How long start-up keeps trying a database that does not answer yet (a server still
    /// starting, a slow host) before giving up; 0 tries once.
    pub startup_wait_secs: u64,
    /// Whether other service instances may write to this database, so that reads must
    /// look for their writes before answering from a cache (docs/scaling.md).
    pub shared: DatabaseSharing,
    /// Streaming replicas that serve reads (`read_replicas.rs`): PostgreSQL URLs, as a list
    /// or one string separated by commas (for the environment).
    pub read_urls: ReadUrls,
    /// A replica whose replay is further behind the primary than this is taken out of
    /// rotation until it catches up.
    pub max_replica_lag_ms: u64,
    /// How long a read waits for a replica to replay the tenant's last commit before it goes
    /// to the primary.
    pub replica_wait_ms: u64,
}

impl DatabaseConfig {
    /// The most connections this configuration opens to its database at once: both read
    /// pools at their size (the retrieval actors' is `retrieval_connections`), the write
    /// pool, the health connection and the lock pool.
    pub fn most_connections(&self, retrieval_connections: u32) -> u32 {
        self.max_connections + retrieval_connections + self.write_connections + 1 + LOCK_CONNECTIONS
    }
}

/// `database.read_urls`: a list of URLs, or one string of them separated by commas (for
/// the environment). They may carry passwords: debug output shows how many, not what.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ReadUrls(pub Vec<String>);

impl std::fmt::Debug for ReadUrls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{} redacted]", self.0.len())
    }
}

impl<'de> Deserialize<'de> for ReadUrls {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Urls {
            One(String),
            Many(Vec<String>),
        }
        let list = match Urls::deserialize(d)? {
            Urls::One(text) => text.split(',').map(str::to_owned).collect(),
            Urls::Many(list) => list,
        };
        Ok(ReadUrls(
            list.into_iter()
                .map(|u| u.trim().to_owned())
                .filter(|u| !u.is_empty())
                .collect(),
        ))
    }
}

/// `database.shared`: whether other instances may write to the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DatabaseSharing {
    /// Shared when `database_url` names the database; the embedded PostgreSQL is one
    /// process's alone.
    Auto,
    Always,
    /// One instance only, on any database: reads skip the look for other instances' writes.
    Never,
}

impl DatabaseSharing {
    /// Whether the database is shared, given whether `database_url` names it.
    pub fn shared(self, external: bool) -> bool {
        match self {
            DatabaseSharing::Auto => external,
            DatabaseSharing::Always => true,
            DatabaseSharing::Never => false,
        }
    }
}

/// A migration `prepare` applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedMigration {
    pub version: i64,
    pub description: String,
}

/// Why the database cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreStartError {
    #[error("cannot connect to the database: {0}")]
    Connect(#[source] sqlx::Error),
    #[error(
        "pgvector is not installed on this PostgreSQL server (needs {}.{}.{} or newer: https://github.com/pgvector/pgvector)",
        MIN_PGVECTOR.0, MIN_PGVECTOR.1, MIN_PGVECTOR.2
    )]
    PgvectorMissing,
    #[error(
        "pgvector {found} is too old (needs {}.{}.{} or newer)",
        MIN_PGVECTOR.0, MIN_PGVECTOR.1, MIN_PGVECTOR.2
    )]
    PgvectorTooOld { found: String },
    #[error("migrations failed: {0}")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    #[error("checking the database failed: {0}")]
    Check(#[source] sqlx::Error),
}

impl StoreStartError {
    /// Whether trying again may succeed: the database did not answer, or not in time.
    /// A refusal (authentication, a missing pgvector, a failed migration) is final.
    pub fn is_transient(&self) -> bool {
        let unanswered =
            |e: &sqlx::Error| matches!(e, sqlx::Error::PoolTimedOut | sqlx::Error::Io(_));
        match self {
            StoreStartError::Connect(e) => unanswered(e),
            StoreStartError::Migrate(sqlx::migrate::MigrateError::Execute(e)) => unanswered(e),
            _ => false,
        }
    }
}

/// The system of record: a pool for reads and a smaller one for writes.
#[derive(Debug, Clone)]
pub struct Store {
    pool: PgPool,
    writer: PgPool,
    /// One connection for the health checks (`ping`, `migrations_applied`), apart from the
    /// read pools: every read connection busy is a full pool, not a database that does not
    /// answer, and the watch's pings four times a second should not keep every idle read
    /// connection in use.
    health: PgPool,
    /// Connections that hold session-level advisory locks for as long as the work they
    /// guard (lifecycle leases, embedding claims), opened when needed: taken from the read
    /// pool, a few holders left none for the reads their own work makes, which then waited
    /// out the acquire timeout (a read pool of two did, in tests/api/process.rs).
    locks: PgPool,
    /// Set when no other instance shares the database: claims and leases are then held in
    /// this process (`process_locks.rs`) and `locks` never opens a connection.
    process_locks: Option<Arc<process_locks::ProcessLocks>>,
    /// How `pool` connects, for a read pool of another runtime (`with_reads_here`).
    read_options: PgPoolOptions,
    connect: PgConnectOptions,
    /// Seals high-risk facts on their way in and opens them on their way out.
    vault: Arc<Vault>,
    /// The statement limit every connection is opened with, the replicas' too.
    statement_timeout_ms: u64,
    /// Streaming replicas that serve reads, with pools on this store's runtime
    /// (`read_replicas.rs`); empty without replicas.
    replicas: Arc<[read_replicas::ReplicaPool]>,
}

impl Store {
    /// Opens a pool on `options` (lazily: the first connection is made by the first query).
    pub fn open(options: PgConnectOptions, config: &DatabaseConfig) -> Store {
        let options = session_settings(options, config.statement_timeout_ms);
        // Named per pool, so that pg_stat_activity (and whoever watches it) tells the read
        // connections from the write connections.
        let read_options = PgPoolOptions::new()
            .max_connections(config.max_connections)
            .min_connections(config.min_connections)
            .acquire_timeout(Duration::from_millis(config.acquire_timeout_ms.get()));
        let pool = read_options
            .clone()
            .connect_lazy_with(options.clone().application_name("butler-memory reads"));
        // Every write connection stays open, the episode insert prepared on it: a burst
        // after a quiet spell should not wait for a backend to start, load its catalogue
        // and plan the insert (by default sqlx closes a connection idle for 10 minutes).
        // There are few of them; one past its lifetime is replaced in the background.
        let writer = PgPoolOptions::new()
            .max_connections(config.write_connections)
            .min_connections(config.write_connections)
            .idle_timeout(None)
            .after_connect(|conn, _| Box::pin(episodes::prepare_insert(conn)))
            .acquire_timeout(Duration::from_millis(config.acquire_timeout_ms.get()))
            .connect_lazy_with(options.clone().application_name("butler-memory writes"));
        let health = PgPoolOptions::new()
            .max_connections(1)
            .idle_timeout(None)
            .acquire_timeout(Duration::from_millis(config.acquire_timeout_ms.get()))
            .connect_lazy_with(options.clone().application_name("butler-memory health"));
        // The holders at once: the scheduler's lease (one shard at a time), an admin's sweep's,
        // the indexer's claim, and one to spare; a holder past them waits like any acquire.
        let locks = PgPoolOptions::new()
            .max_connections(LOCK_CONNECTIONS)
            .acquire_timeout(Duration::from_millis(config.acquire_timeout_ms.get()))
            .connect_lazy_with(options.clone().application_name("butler-memory locks"));
        Store {
            pool,
            writer,
            health,
            locks,
            process_locks: None,
            read_options,
            connect: options,
            vault: Arc::new(Vault::none()),
            statement_timeout_ms: config.statement_timeout_ms,
            replicas: Arc::new([]),
        }
    }

    /// This store with a read pool of its own of up to `max_connections`, named `name`,
    /// opened on the current tokio runtime: a connection's socket is driven by the runtime
    /// that opened it, so readers on another runtime (`reader/runtime.rs`) need connections
    /// opened there. The write pool is shared.
    pub fn with_reads_here(&self, name: &str, max_connections: u32) -> Store {
        let read_options = self
            .read_options
            .clone()
            .max_connections(max_connections)
            .min_connections(self.read_options.get_min_connections().min(max_connections));
        Store {
            pool: read_options
                .clone()
                .connect_lazy_with(self.connect.clone().application_name(name)),
            writer: self.writer.clone(),
            health: self.health.clone(),
            locks: self.locks.clone(),
            process_locks: self.process_locks.clone(),
            read_options,
            connect: self.connect.clone(),
            vault: self.vault.clone(),
            statement_timeout_ms: self.statement_timeout_ms,
            replicas: self
                .replicas
                .iter()
                .map(|r| r.reopened_here(name, max_connections))
                .collect(),
        }
    }

    /// This store, sealing and opening high-risk facts with `vault` (its clones too).
    pub fn with_vault(mut self, vault: Arc<Vault>) -> Store {
        self.vault = vault;
        self
    }

    /// This store, holding claims and leases in this process rather than on lock
    /// connections (its clones too): for a database no other instance writes to.
    pub fn with_process_locks(mut self) -> Store {
        self.process_locks = Some(Arc::default());
        self
    }

    /// The vault of high-risk facts.
    pub fn vault(&self) -> &Vault {
        &self.vault
    }

    /// Opens the write pool's connections and the read pool's `min_connections` now, for
    /// start-up: the pools open lazily, and otherwise the first burst would open them.
    pub async fn open_connections(&self) -> MemoryResult<()> {
        tokio::try_join!(open_standing(&self.writer), open_standing(&self.pool))?;
        Ok(())
    }

    /// Opens the read pool's `min_connections` now (for a read pool of another runtime,
    /// whose connections must be opened there).
    pub async fn open_read_connections(&self) -> MemoryResult<()> {
        Ok(open_standing(&self.pool).await?)
    }

    /// The read pool (and for start-up work).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// This store's pools by the names an operator sees them under (`/metrics`' `pool`
    /// label; their connections' `application_name` is `butler-memory <name>`).
    pub fn pools(&self) -> [(&'static str, &PgPool); 4] {
        [
            ("reads", &self.pool),
            ("writes", &self.writer),
            ("health", &self.health),
            ("locks", &self.locks),
        ]
    }

    /// The write pool.
    pub fn writer(&self) -> &PgPool {
        &self.writer
    }

    /// Checks pgvector, then applies pending migrations (forward-only); answers those it
    /// applied, oldest first.
    pub async fn prepare(&self) -> Result<Vec<AppliedMigration>, StoreStartError> {
        self.check_pgvector().await?;
        let before = self.applied_versions().await?;
        MIGRATOR
            .run(&self.pool)
            .await
            .map_err(StoreStartError::Migrate)?;
        Ok(MIGRATOR
            .iter()
            .filter(|m| m.migration_type.is_up_migration() && !before.contains(&m.version))
            .map(|m| AppliedMigration {
                version: m.version,
                description: m.description.to_string(),
            })
            .collect())
    }

    /// The versions of the migrations applied so far (none on a new database).
    async fn applied_versions(&self) -> Result<Vec<i64>, StoreStartError> {
        sqlx::query_scalar(
            "SELECT COALESCE(array_agg(version), '{}')::int8[] FROM _sqlx_migrations WHERE success",
        )
        .fetch_one(&self.pool)
        .await
        .or_else(|e| match e {
            // No table yet: nothing was ever applied.
            sqlx::Error::Database(ref db) if db.code().as_deref() == Some("42P01") => Ok(vec![]),
            sqlx::Error::Database(_) => Err(StoreStartError::Check(e)),
            other => Err(StoreStartError::Connect(other)),
        })
    }

    /// Fails with one clear line unless pgvector is installed (or installable) and recent.
    async fn check_pgvector(&self) -> Result<(), StoreStartError> {
        let version: Option<String> = sqlx::query_scalar(
            "SELECT COALESCE(
                 (SELECT extversion FROM pg_extension WHERE extname = 'vector'),
                 (SELECT default_version FROM pg_available_extensions WHERE name = 'vector'))",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(|e| match e {
            sqlx::Error::Database(_) => StoreStartError::Check(e),
            other => StoreStartError::Connect(other),
        })?;
        let found = version.ok_or(StoreStartError::PgvectorMissing)?;
        if parse_version(&found) < MIN_PGVECTOR {
            return Err(StoreStartError::PgvectorTooOld { found });
        }
        Ok(())
    }

    /// A cheap round trip on the health connection, for the database watch and readiness.
    pub async fn ping(&self) -> MemoryResult<()> {
        sqlx::query_scalar::<_, i32>("SELECT 1")
            .fetch_one(&self.health)
            .await?;
        Ok(())
    }

    /// Whether every migration compiled into this binary has been applied.
    pub async fn migrations_applied(&self) -> MemoryResult<bool> {
        let applied: i64 =
            sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
                .fetch_one(&self.health)
                .await?;
        Ok(applied as usize >= MIGRATOR.iter().count())
    }

    /// Begins a write transaction.
    pub async fn begin(&self) -> MemoryResult<sqlx::Transaction<'static, sqlx::Postgres>> {
        self.writer.begin().await.map_err(MemoryError::from)
    }

    pub async fn close(&self) {
        self.writer.close().await;
        self.pool.close().await;
        self.health.close().await;
        self.locks.close().await;
        for replica in self.replicas.iter() {
            replica.pool.close().await;
        }
    }
}

/// The server settings every connection of the service is opened with.
fn session_settings(options: PgConnectOptions, statement_timeout_ms: u64) -> PgConnectOptions {
    options.options([
        ("statement_timeout", format!("{statement_timeout_ms}ms")),
        // Filtered vector searches (tenant, scope, validity) must keep scanning the HNSW
        // graph until they have enough rows, not stop at ef_search candidates and return
        // a short list; candidate lists are re-sorted afterwards, so relaxed order is fine.
        ("hnsw.iterative_scan", "relaxed_order".to_owned()),
        ("hnsw.ef_search", "100".to_owned()),
        // Memory tables are small and hot: random reads cost about as much as
        // sequential ones (the default of 4 assumes spinning disks and keeps the planner
        // away from the HNSW index for tables of a few thousand rows).
        ("random_page_cost", "1.1".to_owned()),
    ])
}

/// Opens a pool's `min_connections`: held together, so that each is a connection of its
/// own, then given back.
async fn open_standing(pool: &PgPool) -> sqlx::Result<()> {
    let standing = pool.options().get_min_connections();
    try_join_all((0..standing).map(|_| pool.acquire()))
        .await
        .map(drop)
}

fn parse_version(text: &str) -> (u32, u32, u32) {
    let mut parts = text
        .split(|c: char| !c.is_ascii_digit())
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_numerically() {
        assert_eq!(parse_version("0.8.6"), (0, 8, 6));
        assert!(parse_version("0.10.0") > MIN_PGVECTOR);
        assert!(parse_version("0.7.4") < MIN_PGVECTOR);
    }
}
