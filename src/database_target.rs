//! The database a command outside `serve` works on (`backup`, `restore`, `export`,
//! `import`): the configured `database_url`, or the embedded PostgreSQL in `data_dir`,
//! started for the command when the service is not running, or reached over the running
//! service's socket when the command may run beside it.

use std::path::PathBuf;
use std::str::FromStr;

use butler_memory_actors::{EmbeddedPostgres, EmbeddedPostgresConfig, EmbeddedPostgresError};
use sqlx::postgres::PgConnectOptions;

use crate::config::Config;

/// The actor a change made from the command line is recorded as.
pub const CLI_ACTOR: &str = "operator:cli";

/// Why a command on the database (export, import, purge) did not complete.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("{0}")]
    Memory(#[from] butler_memory_actors::MemoryError),
    #[error("{0}")]
    Config(String),
    #[error("{path}: {source}")]
    File {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// Why the database cannot be reached.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("starting the embedded PostgreSQL: {0}")]
    EmbeddedPostgres(#[source] EmbeddedPostgresError),
    #[error(
        "the service is running on data directory {0}: stop it first (a backup or an export may run beside it)"
    )]
    ServiceRunning(PathBuf),
    #[error("database_url is not a valid PostgreSQL URL: {0}")]
    DatabaseUrl(#[source] sqlx::Error),
}

/// The database a command works on, and the embedded PostgreSQL it started for it, if it
/// did.
pub struct DatabaseTarget {
    /// libpq connection string, for pg_dump and pg_restore.
    pub conninfo: String,
    pub options: PgConnectOptions,
    started: Option<EmbeddedPostgres>,
}

impl DatabaseTarget {
    /// The configured database. The embedded one is started when the service is not
    /// running; when it is, a command that may run beside it (`running_allowed`) reaches it
    /// over the running service's socket, and any other is refused.
    pub async fn open(
        config: &Config,
        running_allowed: bool,
    ) -> Result<DatabaseTarget, TargetError> {
        let edge = &config.edge;
        if !edge.database_url.is_empty() {
            let url = edge.database_url.expose().to_owned();
            let options = PgConnectOptions::from_str(&url).map_err(TargetError::DatabaseUrl)?;
            return Ok(DatabaseTarget {
                conninfo: url,
                options,
                started: None,
            });
        }
        let pg = &edge.embedded_postgres;
        let (socket_dir, started) = match EmbeddedPostgres::start(&edge.data_dir, pg).await {
            Ok(started) => (started.cluster_dir().to_owned(), Some(started)),
            Err(EmbeddedPostgresError::DataDirInUse(_)) if running_allowed => {
                (edge.data_dir.join("postgres"), None)
            }
            Err(EmbeddedPostgresError::DataDirInUse(dir)) => {
                return Err(TargetError::ServiceRunning(dir));
            }
            Err(e) => return Err(TargetError::EmbeddedPostgres(e)),
        };
        let options = PgConnectOptions::new_without_pgpass()
            .socket(&socket_dir)
            .port(pg.port)
            .username("postgres")
            .database(&pg.database);
        let conninfo = embedded_conninfo(&socket_dir, pg);
        Ok(DatabaseTarget {
            conninfo,
            options,
            started,
        })
    }

    /// Stops the embedded PostgreSQL this command started.
    pub async fn close(self) -> Result<(), TargetError> {
        if let Some(pg) = self.started {
            pg.stop().await.map_err(TargetError::EmbeddedPostgres)?;
        }
        Ok(())
    }
}

/// The libpq connection string of the embedded PostgreSQL whose socket is in `socket_dir`.
pub fn embedded_conninfo(socket_dir: &std::path::Path, pg: &EmbeddedPostgresConfig) -> String {
    format!(
        "host={} port={} user=postgres dbname={}",
        quoted(&socket_dir.to_string_lossy()),
        pg.port,
        quoted(&pg.database)
    )
}

/// A libpq connection-string value in single quotes.
fn quoted(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}
