//! Configuration: `config/default.toml` (compiled in, documents every key), layered under an
//! optional file and `BUTLER_MEMORY_*` environment variables, with figment. Unknown keys
//! and invalid values stop the start with a message that names them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use butler_memory_actors::config::{
    ConsolidationConfig, EngineConfig, EpisodesConfig, FactsConfig, IndexerConfig, LifecycleConfig,
    RetrievalConfig, RulesConfig, ShardsConfig, WritesConfig,
};
use butler_memory_actors::domain::text::Limits;
use butler_memory_actors::embedder::EmbedderConfig;
use butler_memory_actors::store::DatabaseConfig;
use butler_memory_actors::store::embedded_postgres::EmbeddedPostgresConfig;
use figment::Figment;
use figment::providers::{Env, Format, Toml};
use serde::Deserialize;

use crate::auth::AuthConfig;

/// The documented defaults.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// Prefix of environment overrides.
pub const ENV_PREFIX: &str = "BUTLER_MEMORY_";

/// The whole configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub database_url: Secret,
    pub database: DatabaseConfig,
    pub embedded_postgres: EmbeddedPostgresConfig,
    pub embedder: EmbedderConfig,
    pub indexer: IndexerConfig,
    pub lifecycle: LifecycleConfig,
    pub writes: WritesConfig,
    pub consolidation: ConsolidationConfig,
    pub shards: ShardsConfig,
    pub retrieval: RetrievalConfig,
    pub episodes: EpisodesConfig,
    pub facts: FactsConfig,
    pub rules: RulesConfig,
    pub limits: Limits,
    pub mcp: McpConfig,
    pub auth: AuthConfig,
    pub metrics: MetricsConfig,
    pub log: LogConfig,
}

/// `[mcp]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    pub allowed_hosts: Vec<String>,
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// A string that must not show up in logs or debug output.
#[derive(Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() {
            "\"\""
        } else {
            "\"<redacted>\""
        })
    }
}

/// Why the configuration cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("configuration: {0}")]
    Parse(String),
    #[error("configuration: invalid values:\n  {}", .0.join("\n  "))]
    Invalid(Vec<String>),
}

impl Config {
    /// Defaults, then `file`, then the environment.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
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
        figment = figment.merge(Env::prefixed(ENV_PREFIX).split("__"));
        Self::from_figment(figment)
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

    fn from_figment(figment: Figment) -> Result<Config, ConfigError> {
        let config: Config = figment.extract().map_err(|e| {
            ConfigError::Parse(
                e.into_iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })?;
        let problems = config.problems();
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    /// The engine's part of the configuration.
    pub fn engine(&self) -> EngineConfig {
        EngineConfig {
            limits: self.limits.clone(),
            episodes: self.episodes.clone(),
            facts: self.facts.clone(),
            rules: self.rules.clone(),
            retrieval: self.retrieval.clone(),
            shards: self.shards.clone(),
            embedder: self.embedder.clone(),
            indexer: self.indexer.clone(),
            lifecycle: self.lifecycle.clone(),
            writes: self.writes.clone(),
            consolidation: self.consolidation.clone(),
        }
    }

    /// Every invalid value, as `key: problem`.
    pub fn problems(&self) -> Vec<String> {
        let mut out = self.engine().problems();
        let db = &self.database;
        if db.max_connections == 0 || db.min_connections > db.max_connections {
            out.push("database.max_connections: must be at least 1 and at least database.min_connections".into());
        }
        if db.acquire_timeout_ms == 0 {
            out.push("database.acquire_timeout_ms: must be at least 1".into());
        }
        let url = self.database_url.expose();
        let postgres_url = url.starts_with("postgres://") || url.starts_with("postgresql://");
        if !url.is_empty() && !postgres_url {
            out.push("database_url: must start with postgres:// or postgresql://".into());
        }
        if self.mcp.max_request_bytes < 1024 {
            out.push("mcp.max_request_bytes: must be at least 1024".into());
        }
        if !self.metrics.listen.is_empty() && self.metrics.listen.parse::<SocketAddr>().is_err() {
            out.push("metrics.listen: must be empty or an address like 127.0.0.1:9150".into());
        }
        if tracing_subscriber::EnvFilter::try_new(&self.log.level).is_err() {
            out.push(format!(
                "log.level: `{}` is not a valid filter",
                self.log.level
            ));
        }
        out.extend(self.auth.problems());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_match_the_contract() {
        let config = Config::from_toml("").unwrap();
        assert_eq!(config.listen, "127.0.0.1:8150".parse().unwrap());
        assert_eq!(config.retrieval.context_token_budget, 3000);
        assert_eq!(config.retrieval.score_weights.relevance, 0.4);
        assert_eq!(config.facts.retrieval_confidence_threshold, 0.2);
        assert_eq!(config.episodes.default_ttl_days, 7.0);
        assert!(config.database_url.is_empty());
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let err = Config::from_toml("[retrieval]\ndefault_limt = 3").unwrap_err();
        assert!(err.to_string().contains("default_limt"), "{err}");
        let err = Config::from_toml("colour = 'blue'").unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
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
        let err = Config::from_toml("listen = 'nowhere'").unwrap_err();
        assert!(err.to_string().contains("listen"), "{err}");
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
            let config = Config::load(Some(Path::new("override.toml"))).unwrap();
            assert_eq!(config.listen, "127.0.0.1:9001".parse().unwrap());
            assert_eq!(config.retrieval.default_limit, 7);
            assert_eq!(config.retrieval.max_limit, 50);
            Ok(())
        });
    }

    #[test]
    fn secrets_do_not_print() {
        let config = Config::from_toml("database_url = 'postgres://u:hunter2@h/db'").unwrap();
        assert!(!format!("{config:?}").contains("hunter2"));
    }
}
