//! Configuration: `config/default.toml` (compiled in, documents every key), layered under an
//! optional file and `BUTLER_MEMORY_*` environment variables, with figment. Unknown keys
//! and invalid values stop the start with a message that names them.
//!
//! One file, two owners: the engine's sections are the engine's own types
//! ([`EngineConfig`]), read from the same layers as the edge's ([`EdgeConfig`]); neither is
//! copied into the other. A top-level key is known when the documented defaults have it.

mod diagnosis;
mod effective;
mod embedded_cluster;
mod key_file;
mod keys;
mod secret;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use butler_memory_actors::{
    DatabaseConfig, EmbeddedPostgresConfig, EncryptionConfig, EngineConfig, MIN_SECRET_CHARS, Vault,
};
use figment::Figment;
use figment::providers::{Env, Format, Toml};
use figment::value::Dict;
use serde::Deserialize;

pub use crate::dashboard::DashboardConfig;
pub use crate::http::server::HttpConfig;
pub use key_file::key_in_file;
pub use keys::{AuthConfig, KeyConfig, MIN_KEY_CHARS};
pub use secret::Secret;

/// The documented defaults.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// Prefix of environment overrides.
pub const ENV_PREFIX: &str = "BUTLER_MEMORY_";

/// The whole configuration: the edge's sections and the engine's.
#[derive(Debug, Clone)]
pub struct Config {
    pub edge: EdgeConfig,
    pub engine: EngineConfig,
}

/// The edge's sections: where it listens, the database, the endpoints, keys, logs.
#[derive(Debug, Clone, Deserialize)]
pub struct EdgeConfig {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub database_url: Secret,
    pub database: DatabaseConfig,
    pub embedded_postgres: EmbeddedPostgresConfig,
    pub mcp: McpConfig,
    pub http: HttpConfig,
    pub auth: AuthConfig,
    pub metrics: MetricsConfig,
    pub log: LogConfig,
    pub traces: TracesConfig,
    pub dashboard: DashboardConfig,
}

/// `[traces]`: OpenTelemetry trace export over OTLP/HTTP, off unless `endpoint` is set.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracesConfig {
    /// The collector's traces URL, e.g. `http://127.0.0.1:4318/v1/traces`; empty: no export.
    pub endpoint: String,
    /// `service.name` of the exported resource.
    pub service_name: String,
    /// Share of traces kept when the caller's `traceparent` does not decide (0 to 1).
    pub sample_ratio: f64,
    /// How long spans wait to be sent in one batch, in milliseconds.
    pub batch_delay_ms: u64,
    /// How long one export may take, in milliseconds.
    pub timeout_ms: u64,
    /// Headers sent with every export (a hosted collector's API key); redacted in output.
    pub headers: std::collections::BTreeMap<String, Secret>,
}

/// `[mcp]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed besides those on an allowed host (`*` for any).
    pub allowed_origins: Vec<String>,
    pub max_request_bytes: usize,
}

/// `[metrics]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// A second listener for `/metrics` only; empty for none.
    pub listen: String,
}

/// `[log]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    pub level: String,
    pub format: LogFormat,
    /// One access log line per HTTP request.
    pub access: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Parse(String),
    #[error("configuration: {} {}:\n  {}", .0.len(), if .0.len() == 1 { "problem" } else { "problems" }, .0.join("\n  "))]
    Invalid(Vec<String>),
}

impl Config {
    /// The key of the hashes a purge records (`privacy.audit_key`), or when none is
    /// configured the one kept in `data_dir/audit.key` (created on first use).
    pub fn audit_key(&self) -> std::io::Result<String> {
        match &self.engine.privacy.audit_key {
            key if !key.is_empty() => Ok(key.clone()),
            _ => key_in_file(&self.edge.data_dir.join("audit.key"), "", MIN_KEY_CHARS),
        }
    }

    /// `[encryption]` with the master key's secret in place: configured, or read from
    /// `master_key_file`, or from `data_dir/master.key` — made there once, when a predicate or
    /// scope is named and no key is given (an existing key file is never overwritten).
    pub fn encryption(&self) -> std::io::Result<EncryptionConfig> {
        let mut encryption = self.engine.encryption.clone();
        if !encryption.master_key.is_empty() {
            return Ok(encryption);
        }
        let generated = self.edge.data_dir.join("master.key");
        let file = match &encryption.master_key_file {
            named if !named.as_os_str().is_empty() => named.clone(),
            _ if generated.exists() || encryption.seals_any() => generated,
            _ => return Ok(encryption),
        };
        if !file.exists() {
            tracing::warn!(path = %file.display(), "no master key is configured: one was generated; keep a copy apart from the database");
            encryption.master_key = key_in_file(&file, "", MIN_SECRET_CHARS)?;
            return Ok(encryption);
        }
        let secret = std::fs::read_to_string(&file)?.trim().to_owned();
        if secret.chars().count() < MIN_SECRET_CHARS {
            return Err(std::io::Error::other(format!(
                "{} holds fewer than {MIN_SECRET_CHARS} characters",
                file.display()
            )));
        }
        encryption.master_key = secret;
        Ok(encryption)
    }

    /// The vault of `[encryption]` (master key in place), for commands that read or write
    /// facts straight in the database.
    pub fn vault(&self) -> Result<std::sync::Arc<Vault>, String> {
        let encryption = self
            .encryption()
            .map_err(|e| format!("encryption: reading the master key: {e}"))?;
        encryption.vault().map(std::sync::Arc::new)
    }

    /// Defaults, then `file`, then the environment.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        Self::from_figment(layered(file)?)
    }

    /// The configuration `load` reads, as TOML: every key with the value it has after the
    /// layers, secrets redacted. For `check-config`.
    pub fn effective_toml(file: Option<&Path>) -> Result<String, ConfigError> {
        let given: Dict = layered(file)?
            .extract()
            .map_err(|e| ConfigError::Invalid(diagnosis::describe(e)))?;
        effective::render(given)
    }

    /// Defaults with a TOML fragment on top (no environment): for tests and tools.
    pub fn from_toml(overrides: &str) -> Result<Config, ConfigError> {
        Self::from_toml_layers(&[overrides])
    }

    /// Defaults with TOML fragments on top, later ones winning (no environment).
    pub fn from_toml_layers(layers: &[&str]) -> Result<Config, ConfigError> {
        let figment = layers
            .iter()
            .fold(Figment::from(Toml::string(DEFAULT_TOML)), |f, layer| {
                f.merge(Toml::string(layer))
            });
        Self::from_figment(figment)
    }

    /// The configuration, or every problem found in it: unknown keys, values of the wrong
    /// type, values out of their range.
    fn from_figment(figment: Figment) -> Result<Config, ConfigError> {
        let documented = documented();
        let given: Dict = figment
            .extract()
            .map_err(|e| ConfigError::Invalid(diagnosis::describe(e)))?;
        let mut problems: Vec<String> = given
            .iter()
            .filter(|(key, _)| !documented.contains_key(*key))
            .map(|(key, value)| {
                format!(
                    "{key}: unknown key{}",
                    diagnosis::origin(&figment, &[key], value)
                )
            })
            .collect();
        match Self::extract(&figment) {
            Ok(config) => {
                problems.extend(config.problems());
                if problems.is_empty() {
                    return Ok(config);
                }
            }
            Err(error) => {
                // serde stopped at the first error: look at each section alone for the rest.
                let by_key =
                    diagnosis::per_key(&figment, &documented, &given, |alone| match Self::extract(
                        &alone,
                    ) {
                        Ok(config) => config.problems(),
                        Err(error) => diagnosis::describe(*error),
                    });
                if by_key.is_empty() {
                    problems.extend(diagnosis::describe(*error));
                } else {
                    problems.extend(by_key);
                }
            }
        }
        Err(ConfigError::Invalid(problems))
    }

    fn extract(figment: &Figment) -> Result<Config, Box<figment::Error>> {
        Ok(Config {
            edge: figment.extract().map_err(Box::new)?,
            engine: figment.extract().map_err(Box::new)?,
        })
    }

    /// Every invalid value, as `key: problem`.
    pub fn problems(&self) -> Vec<String> {
        let mut out = self.engine.problems();
        let edge = &self.edge;
        let db = &edge.database;
        if db.max_connections == 0 || db.min_connections > db.max_connections {
            out.push("database.max_connections: must be at least 1 and at least database.min_connections".into());
        }
        let url = edge.database_url.expose();
        if url.is_empty() {
            out.extend(embedded_cluster::problems(
                &edge.embedded_postgres,
                db.most_connections(self.engine.retrieval.connections.get()),
            ));
        }
        let postgres_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
        if !url.is_empty() && !postgres_url {
            out.push("database_url: must start with postgres:// or postgresql://".into());
        }
        for read_url in &db.read_urls.0 {
            if !(read_url.starts_with("postgres://") || read_url.starts_with("postgresql://")) {
                out.push(format!(
                    "database.read_urls: `{}` must start with postgres:// or postgresql://",
                    effective::without_password(read_url)
                ));
            }
        }
        if edge.mcp.max_request_bytes < 1024 {
            out.push("mcp.max_request_bytes: must be at least 1024".into());
        }
        if !edge.metrics.listen.is_empty() && edge.metrics.listen.parse::<SocketAddr>().is_err() {
            out.push("metrics.listen: must be empty or an address like 127.0.0.1:9150".into());
        }
        if tracing_subscriber::EnvFilter::try_new(&edge.log.level).is_err() {
            out.push(format!(
                "log.level: `{}` is not a valid filter",
                edge.log.level
            ));
        }
        let traces = &edge.traces;
        let endpoint = &traces.endpoint;
        let http = endpoint.starts_with("http://") || endpoint.starts_with("https://");
        if !(endpoint.is_empty() || http) {
            out.push("traces.endpoint: must be empty or an http:// or https:// URL".into());
        }
        if !(0.0..=1.0).contains(&traces.sample_ratio) {
            out.push("traces.sample_ratio: must be between 0 and 1".into());
        }
        if traces.timeout_ms == 0 || traces.batch_delay_ms == 0 {
            out.push("traces.timeout_ms and traces.batch_delay_ms: must be at least 1".into());
        }
        out.extend(edge.auth.problems());
        out
    }
}

/// Defaults, then `file`, then the environment.
fn layered(file: Option<&Path>) -> Result<Figment, ConfigError> {
    let mut figment = Figment::from(Toml::string(DEFAULT_TOML));
    if let Some(file) = file {
        if !file.is_file() {
            return Err(ConfigError::Parse(format!(
                "config file {} does not exist",
                file.display()
            )));
        }
        figment = figment.merge(Toml::file_exact(file));
    }
    // BUTLER_MEMORY_KEY is the stdio caller's key (src/stdio.rs), not a configuration key.
    Ok(figment.merge(Env::prefixed(ENV_PREFIX).ignore(&["key"]).split("__")))
}

/// The documented defaults' keys and values. A top-level key they do not have is unknown:
/// nobody reads it, so a typo (`colour`, `retreival`) would otherwise be silently ignored.
/// Keys inside a section are checked by the section's own type.
fn documented() -> Dict {
    Figment::from(Toml::string(DEFAULT_TOML))
        .extract()
        .expect("the compiled-in defaults parse (tested)")
}

#[cfg(test)]
mod tests {
    use butler_memory_actors::SearchMode;

    use super::*;

    #[test]
    fn defaults_are_valid_and_match_the_contract() {
        let config = Config::from_toml("").unwrap();
        assert_eq!(config.edge.listen, "127.0.0.1:8150".parse().unwrap());
        assert_eq!(config.engine.retrieval.context_token_budget.get(), 3000);
        assert_eq!(config.engine.retrieval.score_weights.relevance, 0.4);
        assert_eq!(config.engine.retrieval.default_mode, SearchMode::Hybrid);
        assert_eq!(config.engine.facts.retrieval_confidence_threshold, 0.2);
        assert_eq!(config.engine.episodes.default_ttl_days, 7.0);
        assert!(config.edge.database_url.is_empty());
        // The second stage is on for searches that embed their query, not keyword ones
        // (docs/benchmarks.md, "The second stage on by default").
        assert!(config.engine.retrieval.rerank.enabled);
        assert!(!config.engine.retrieval.rerank.keyword_searches);
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let err = Config::from_toml("[retrieval]\ndefault_limt = 3").unwrap_err();
        assert!(err.to_string().contains("default_limt"), "{err}");
        let err = Config::from_toml("colour = 'blue'").unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
        let err = Config::from_toml("[mcp]\nmax_requests = 3").unwrap_err();
        assert!(err.to_string().contains("max_requests"), "{err}");
    }

    #[test]
    fn invalid_values_are_refused_by_name() {
        let err = Config::from_toml("[facts]\nexpiry_confidence_threshold = 0.5").unwrap_err();
        assert!(
            err.to_string()
                .contains("facts.expiry_confidence_threshold"),
            "{err}"
        );
        let err = Config::from_toml("[retrieval]\ndefault_mode = 'fuzzy'").unwrap_err();
        assert!(err.to_string().contains("retrieval.default_mode"), "{err}");
        for (toml, key) in [
            (
                "[retrieval]\nsession_neighbour_reach = 0",
                "retrieval.session_neighbour_reach",
            ),
            (
                "[retrieval]\nsession_neighbour_reach = 6",
                "retrieval.session_neighbour_reach",
            ),
            (
                "[retrieval]\nsession_neighbour_decay = 1.5",
                "retrieval.session_neighbour_decay",
            ),
            (
                "[indexer]\nwalk_rows_per_sec = -1.0",
                "indexer.walk_rows_per_sec",
            ),
            (
                "[embedder]\nbackground_batch = 64",
                "embedder.background_batch",
            ),
        ] {
            let err = Config::from_toml(toml).unwrap_err();
            assert!(err.to_string().contains(key), "{toml}: {err}");
        }
        let err = Config::from_toml("listen = 'nowhere'").unwrap_err();
        assert!(err.to_string().contains("listen"), "{err}");
        let err = Config::from_toml(
            "[retrieval.intent_routing.temporal]\nsemantic_weight = 1.5\n\
             type_weights = { fact = 1.0, rule = 1.0, episode = -1.0 }",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("retrieval.intent_routing.temporal: semantic_weight")
                && err.contains("retrieval.intent_routing.temporal: type_weights"),
            "{err}"
        );
    }

    /// Values that must be at least 1, an extractor or a schedule are refused when they are
    /// loaded, by their types, naming the key: no silent fallback to a default.
    #[test]
    fn typed_values_are_checked_when_loaded() {
        for (toml, key) in [
            ("[retrieval]\nworkers = 0", "retrieval.workers"),
            ("[writes]\ngroup_commit_max = 0", "writes.group_commit_max"),
            (
                "[consolidation]\nextractor = 'gpt'",
                "consolidation.extractor",
            ),
            (
                "[lifecycle]\ndecay_sweep_cron = 'every day'",
                "lifecycle.decay_sweep_cron",
            ),
        ] {
            let err = Config::from_toml(toml).unwrap_err();
            assert!(err.to_string().contains(key), "{toml}: {err}");
        }
        let err = Config::from_toml("[consolidation]\nextractor = 'llm'").unwrap_err();
        assert!(err.to_string().contains("consolidation.llm"), "{err}");
    }

    #[test]
    #[expect(
        clippy::result_large_err,
        reason = "figment's Jail decides the closure's error type"
    )]
    fn environment_overrides_the_file() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "override.toml",
                "listen = '127.0.0.1:9000'\n[retrieval]\ndefault_limit = 7",
            )?;
            jail.set_env("BUTLER_MEMORY_LISTEN", "127.0.0.1:9001");
            jail.set_env("BUTLER_MEMORY_RETRIEVAL__MAX_LIMIT", "50");
            jail.set_env(
                "BUTLER_MEMORY_DATABASE__READ_URLS",
                "postgres://r1/db,postgres://r2/db",
            );
            // A server setting's value reads as a number from the environment.
            jail.set_env(
                "BUTLER_MEMORY_EMBEDDED_POSTGRES__SETTINGS__MAX_LOGICAL_REPLICATION_WORKERS",
                "0",
            );
            jail.set_env("BUTLER_MEMORY_EMBEDDED_POSTGRES__SETTINGS__FSYNC", "true");
            let config = Config::load(Some(Path::new("override.toml"))).unwrap();
            let settings = &config.edge.embedded_postgres.settings;
            assert_eq!(settings["max_logical_replication_workers"], "0");
            assert_eq!(settings["fsync"], "on");
            assert_eq!(settings["shared_buffers"], "128MB", "the file's are kept");
            assert_eq!(config.edge.database.read_urls.0.len(), 2);
            assert_eq!(config.edge.listen, "127.0.0.1:9001".parse().unwrap());
            assert_eq!(config.engine.retrieval.default_limit, 7);
            assert_eq!(config.engine.retrieval.max_limit, 50);
            Ok(())
        });
    }

    #[test]
    fn secrets_do_not_print() {
        let config = Config::from_toml(
            "database_url = 'postgres://u:hunter2@h/db'\n\
             [database]\nread_urls = ['postgres://u:hunter3@r/db']",
        )
        .unwrap();
        assert!(!format!("{config:?}").contains("hunter"));
    }

    #[test]
    fn read_urls_are_a_list_or_one_string_separated_by_commas() {
        let config =
            Config::from_toml("[database]\nread_urls = 'postgres://r1/db, postgres://r2/db,'")
                .unwrap();
        assert_eq!(
            config.edge.database.read_urls.0,
            vec!["postgres://r1/db", "postgres://r2/db"]
        );
        let Err(ConfigError::Invalid(problems)) =
            Config::from_toml("[database]\nread_urls = ['mysql://u:pw@r1/db']")
        else {
            panic!("a URL of another database is accepted");
        };
        assert_eq!(
            problems,
            vec![
                "database.read_urls: `mysql://u:<redacted>@r1/db` must start with postgres:// or postgresql://"
            ]
        );
    }
}
