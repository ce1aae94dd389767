//! Streaming replicas that serve reads (issue 21, `database.read_urls`): a pool per replica
//! beside the primary's, and the statements that tell whether a replica may serve a read —
//! whether it is a replica at all, of this primary, and how far it has replayed the
//! primary's WAL. Which replica a read goes to is the engine's choice
//! (`read_path/replica_set.rs`); writes, leases and sweeps never come here.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use super::{Store, session_settings};
use crate::error::MemoryResult;

/// The longest a read waits for a connection to a replica. A replica that went away since
/// the watch last looked should cost a read a moment before it goes to the primary, not the
/// whole `acquire_timeout_ms` the primary's pools are allowed.
const REPLICA_ACQUIRE_TIMEOUT: Duration = Duration::from_millis(500);

/// One replica's pool on one runtime.
#[derive(Debug, Clone)]
pub struct ReplicaPool {
    /// How logs, `/readyz` and `/metrics` name the replica: host (or socket directory) and
    /// port, never credentials.
    pub label: String,
    connect: PgConnectOptions,
    options: PgPoolOptions,
    pub(super) pool: PgPool,
}

impl ReplicaPool {
    /// The same replica with a pool of up to `max_connections` opened on the current
    /// runtime, named `name`.
    pub(super) fn reopened_here(&self, name: &str, max_connections: u32) -> ReplicaPool {
        let options = self.options.clone().max_connections(max_connections);
        ReplicaPool {
            pool: options
                .clone()
                .connect_lazy_with(self.connect.clone().application_name(name)),
            options,
            ..self.clone()
        }
    }
}

/// What a replica says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaStatus {
    /// Whether the server is in recovery (a standby); a primary is not a read replica.
    pub in_recovery: bool,
    /// The end of the WAL it has replayed, in bytes from 0/0 (none before the first replay).
    pub replayed: Option<i64>,
    /// Its cluster's identifier: a replica of this primary has the primary's.
    pub system_identifier: i64,
}

impl Store {
    /// This store with read replicas, opened lazily with the primary's session settings.
    pub fn with_replicas(mut self, replicas: Vec<PgConnectOptions>) -> Store {
        let options = self
            .read_options
            .clone()
            .min_connections(0)
            .acquire_timeout(REPLICA_ACQUIRE_TIMEOUT.min(self.read_options.get_acquire_timeout()));
        self.replicas = replicas
            .into_iter()
            .map(|connect| {
                let label = label(&connect);
                let connect = session_settings(connect, self.statement_timeout_ms);
                ReplicaPool {
                    pool: options
                        .clone()
                        .connect_lazy_with(connect.clone().application_name("butler-memory reads")),
                    label,
                    connect,
                    options: options.clone(),
                }
            })
            .collect();
        self
    }

    /// The replicas' names, in configuration order (a replica's index is its place here).
    pub fn replica_labels(&self) -> Vec<String> {
        self.replicas.iter().map(|r| r.label.clone()).collect()
    }

    /// This store reading from replica `index`: every read of the returned store goes to
    /// the replica, its writes still to the primary.
    pub fn on_replica(&self, index: usize) -> Store {
        let mut store = self.clone();
        store.pool = self.replicas[index].pool.clone();
        store
    }

    /// The primary's WAL position now: the end of what it has written, in bytes from 0/0.
    /// Every transaction whose commit was visible before this call is at or below it.
    #[tracing::instrument(target = "otel", name = "db.wal_position", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn wal_position(&self) -> MemoryResult<i64> {
        Ok(
            sqlx::query_scalar("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// The cluster's system identifier, the same on a primary and every replica of it.
    pub async fn system_identifier(&self) -> MemoryResult<i64> {
        Ok(
            sqlx::query_scalar("SELECT system_identifier FROM pg_control_system()")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// What replica `index` says about itself.
    pub async fn replica_status(&self, index: usize) -> MemoryResult<ReplicaStatus> {
        let (in_recovery, replayed, system_identifier): (bool, Option<i64>, i64) = sqlx::query_as(
            "SELECT pg_is_in_recovery(),
                        (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint,
                        (SELECT system_identifier FROM pg_control_system())",
        )
        .fetch_one(&self.replicas[index].pool)
        .await?;
        Ok(ReplicaStatus {
            in_recovery,
            replayed,
            system_identifier,
        })
    }
}

/// `host:port`, or `socket-directory:port` for a Unix socket.
fn label(options: &PgConnectOptions) -> String {
    let host = match options.get_socket() {
        Some(dir) => dir.display().to_string(),
        None => options.get_host().to_owned(),
    };
    format!("{host}:{}", options.get_port())
}
