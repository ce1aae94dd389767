//! `butler-memory replica --data-dir DIR`: a streaming read replica of the configured
//! database, run from the embedded PostgreSQL binaries until the command is stopped. The
//! first start copies the primary with `pg_basebackup -R` (a base backup with its WAL, the
//! standby signal and the connection to the primary); later starts resume replaying. The
//! primary is `database_url`, or the running service's embedded PostgreSQL (reached over
//! its socket, so that service must be running). The command prints the URL to list in
//! `database.read_urls`.

use std::path::Path;

use butler_memory_actors::{EmbeddedPostgres, EmbeddedPostgresError};

use crate::config::Config;
use crate::database_target::embedded_conninfo;

/// Runs a replica in `data_dir` until `stop` resolves.
pub async fn run(
    config: &Config,
    data_dir: &Path,
    stop: impl Future<Output = ()>,
) -> Result<(), EmbeddedPostgresError> {
    let edge = &config.edge;
    let pg = &edge.embedded_postgres;
    let primary = if edge.database_url.is_empty() {
        let socket = std::path::absolute(edge.data_dir.join("postgres")).map_err(|source| {
            EmbeddedPostgresError::Io {
                context: "resolving data_dir".into(),
                source,
            }
        })?;
        embedded_conninfo(&socket, pg)
    } else {
        edge.database_url.expose().to_owned()
    };
    let replica = EmbeddedPostgres::start_replica(data_dir, pg, &primary).await?;
    println!(
        "A streaming replica runs in {}. Reads may use it with\n  \
         database.read_urls = [\"postgres://postgres@localhost/{}?host={}&port={}\"]\n\
         Stop it with Ctrl-C.",
        data_dir.display(),
        pg.database,
        replica.cluster_dir().display(),
        pg.port
    );
    stop.await;
    replica.stop().await
}
