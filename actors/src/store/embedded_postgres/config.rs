//! `[embedded_postgres]`: where the PostgreSQL installation is, how the cluster is reached
//! and restarted, and the server settings it is started with.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// `[embedded_postgres]` configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddedPostgresConfig {
    /// The PostgreSQL installation (with `bin/initdb`, `bin/postgres`, `bin/pg_ctl`).
    pub install_dir: PathBuf,
    /// The system user that runs PostgreSQL when the service runs as root.
    pub system_user: String,
    /// The port number; it only names the Unix socket (`.s.PGSQL.<port>`), no TCP is opened.
    pub port: u16,
    /// The database the service uses inside the cluster.
    pub database: String,
    /// How long to wait for PostgreSQL to accept connections.
    pub startup_timeout_secs: u64,
    /// Restarts of a PostgreSQL that died allowed within `restart_window_secs`; beyond, the
    /// service stops restarting it and says so (readiness, logs) until it is restarted.
    pub max_restarts: u32,
    pub restart_window_secs: u64,
    /// glibc's malloc settings for the server's processes (`GLIBC_TUNABLES`); empty for
    /// glibc's defaults.
    pub malloc_tunables: String,
    /// Extra server settings (`-c name=value`). A value may be written as a number or a
    /// boolean as well as a string (`max_connections = 200`, or `…__MAX_CONNECTIONS=200` in
    /// the environment, which reads as a number); PostgreSQL parses it either way.
    #[serde(deserialize_with = "setting_values")]
    pub settings: BTreeMap<String, String>,
}

/// `embedded_postgres.settings`: each value as the text PostgreSQL is given.
fn setting_values<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<BTreeMap<String, String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Value {
        Text(String),
        Integer(i64),
        Real(f64),
        Flag(bool),
    }
    let values = BTreeMap::<String, Value>::deserialize(d)?;
    Ok(values
        .into_iter()
        .map(|(name, value)| {
            let text = match value {
                Value::Text(text) => text,
                Value::Integer(n) => n.to_string(),
                Value::Real(x) => x.to_string(),
                Value::Flag(flag) => if flag { "on" } else { "off" }.to_owned(),
            };
            (name, text)
        })
        .collect())
}
