//! The private service a bench runs against: the test kit's launcher with the bench's API
//! keys, the default configuration, the `.deps/` installs of this checkout and the bench's
//! `--config` TOML on top, so that every bench measures the same service the same way.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use butler_memory::app_state::AppState;
use butler_memory::config::Config;
pub use butler_memory::testkit::McpClient;
use butler_memory::testkit::{HEURISTIC_EXTRACTOR_TOML, TestService, assets_toml};

/// One `[[auth.keys]]` entry.
pub struct Key {
    pub key: String,
    pub tenant: String,
    /// `admin`, `butler` or `orchestrator`.
    pub role: &'static str,
    /// The butler a butler key is bound to.
    pub butler: Option<String>,
}

impl Key {
    pub fn admin(key: impl Into<String>, tenant: impl Into<String>) -> Key {
        Key {
            key: key.into(),
            tenant: tenant.into(),
            role: "admin",
            butler: None,
        }
    }

    /// An orchestrator's key: `tenant` is the orchestrator (its drop-zone is made).
    pub fn orchestrator(key: impl Into<String>, tenant: impl Into<String>) -> Key {
        Key {
            key: key.into(),
            tenant: tenant.into(),
            role: "orchestrator",
            butler: None,
        }
    }

    pub fn butler(
        key: impl Into<String>,
        tenant: impl Into<String>,
        butler: impl Into<String>,
    ) -> Key {
        Key {
            key: key.into(),
            tenant: tenant.into(),
            role: "butler",
            butler: Some(butler.into()),
        }
    }

    fn toml(&self) -> String {
        let role = match &self.butler {
            None => format!("role = \"{}\"", self.role),
            Some(b) => format!("role = \"{}\"\nbutler = \"{b}\"", self.role),
        };
        format!(
            "[[auth.keys]]\nkey = \"{}\"\ntenant = \"{}\"\n{role}\n",
            self.key, self.tenant
        )
    }
}

/// A private service for a bench: the test kit's launcher, on a runtime of its own, with
/// the bench's keys and the `.deps/` installs of this checkout.
pub struct Service {
    pub address: SocketAddr,
    pub state: Arc<AppState>,
    service: TestService,
    /// The trace exporter, when `--config` sets `traces.endpoint`.
    _traces: Option<butler_memory::telemetry::traces::Exporter>,
}

impl Service {
    /// Starts the service with `keys`, the default configuration, the `.deps/` installs of
    /// this checkout, and `extra` TOML (from `--config`) layered on top of all that.
    pub async fn start(keys: &[Key], extra: &str) -> anyhow::Result<Service> {
        let keys: String = keys.iter().map(Key::toml).collect();
        let toml = format!(
            r#"
listen = "127.0.0.1:0"
[log]
# rmcp's client logs every tool error it receives as a warning; the benches count them.
level = "warn,rmcp=error"
[auth]
bootstrap_admin_key = false
{keys}
"#
        );
        let config =
            Config::from_toml_layers(&[&assets_toml(), HEURISTIC_EXTRACTOR_TOML, &toml, extra])
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        let traces = butler_memory::telemetry::init(&config.edge.log, &config.edge.traces)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let service = TestService::start_apart(config).await?;
        Ok(Service {
            address: service.address,
            state: service.state.clone(),
            service,
            _traces: traces,
        })
    }

    /// Barrier: every committed row is embedded.
    pub async fn flush(&self) -> anyhow::Result<()> {
        self.state
            .engine
            .flush()
            .await
            .map_err(|e| anyhow::anyhow!("flush: {e}"))
    }

    /// Refreshes the planner's statistics, as autovacuum does within a minute of a bulk
    /// load: measurements of a steady state should not depend on the daemon's timing.
    pub async fn analyze(&self) -> anyhow::Result<()> {
        sqlx::raw_sql("ANALYZE episodes, facts, rules")
            .execute(self.state.engine.store().pool())
            .await
            .context("ANALYZE")?;
        Ok(())
    }

    /// The service's data directory (its embedded PostgreSQL is in `postgres/` there).
    pub fn data_dir(&self) -> &std::path::Path {
        self.service.data_dir()
    }

    pub async fn client(&self, key: &str) -> anyhow::Result<McpClient> {
        McpClient::connect(&self.service.url("/mcp"), key).await
    }

    /// Clean stop, the way a signal would do it (stops the embedded PostgreSQL too).
    pub async fn stop(self) -> anyhow::Result<()> {
        Ok(self.service.stop().await?)
    }
}

/// Reads `--config FILE` (extra TOML for [`Service::start`]), or nothing.
pub fn extra_toml(path: Option<&PathBuf>) -> anyhow::Result<String> {
    match path {
        None => Ok(String::new()),
        Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display())),
    }
}
