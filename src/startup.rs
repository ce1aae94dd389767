//! Building and running the application: database (embedded or external), migrations,
//! the engine, then the HTTP server. `Application::build` then `run_until_stopped`.
//!
//! Shutdown order: stop accepting requests, drain the shards (every accepted write is
//! committed), stop the actor tree, close the pool, stop the embedded PostgreSQL.

use std::future::Future;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use axum::routing::{any, get};
use backon::{ExponentialBuilder, Retryable};
use butler_memory_actors::Engine;
use butler_memory_actors::clock::{SharedClock, SystemClock};
use butler_memory_actors::embedder_pool::EmbedderFactory;
use butler_memory_actors::store::embedded_postgres::EmbeddedPostgres;
use butler_memory_actors::store::{Store, StoreStartError};
use metrics_exporter_prometheus::PrometheusHandle;
use sqlx::postgres::PgConnectOptions;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::auth::{Authenticator, effective_keys, require_key};
use crate::config::Config;
use crate::{http, mcp, telemetry};

/// What request handlers share.
pub struct AppState {
    pub engine: Engine,
    pub auth: Authenticator,
    pub config: Config,
    pub metrics: PrometheusHandle,
}

/// A built application, listening but not yet serving.
pub struct Application {
    state: Arc<AppState>,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    embedded: Option<EmbeddedPostgres>,
    cancel: CancellationToken,
}

/// Where the database comes from.
enum Database {
    Embedded(EmbeddedPostgres),
    External(PgConnectOptions),
}

impl Application {
    /// Builds with the real clock and the configured MiniLM embedder.
    pub async fn build(config: Config) -> anyhow::Result<Application> {
        let factory =
            Engine::minilm_factory(&config.embedder).map_err(|e| anyhow::anyhow!("{e}"))?;
        Self::build_with(config, Arc::new(SystemClock), factory).await
    }

    /// Builds with a given clock and embedder (tests pin the clock).
    pub async fn build_with(
        config: Config,
        clock: SharedClock,
        factory: EmbedderFactory,
    ) -> anyhow::Result<Application> {
        let started = Instant::now();
        let metrics = telemetry::metrics();
        std::fs::create_dir_all(&config.data_dir)
            .with_context(|| format!("creating data_dir {}", config.data_dir.display()))?;
        let (store, embedded) = match open_database(&config).await? {
            Database::Embedded(pg) => (
                Store::open(pg.connect_options(), &config.database),
                Some(pg),
            ),
            Database::External(options) => (Store::open(options, &config.database), None),
        };
        prepare(&store, &config).await?;
        let engine = Engine::start(store, config.engine(), clock, factory)
            .await
            .map_err(|e| anyhow::anyhow!("starting the actor tree: {e}"))?;
        let keys = effective_keys(&config.auth, &config.data_dir).with_context(|| {
            format!(
                "creating the bootstrap key in {}",
                config.data_dir.display()
            )
        })?;
        let listener = TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("listening on {}", config.listen))?;
        let metrics_listener = match config.metrics.listen.as_str() {
            "" => None,
            addr => Some(
                TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("listening on {addr} for metrics"))?,
            ),
        };
        let state = Arc::new(AppState {
            engine,
            auth: Authenticator::new(&keys),
            config,
            metrics,
        });
        tracing::info!(
            address = %listener.local_addr()?,
            embedded_postgres = embedded.is_some(),
            ms = started.elapsed().as_millis() as u64,
            "butler-memory ready"
        );
        Ok(Application {
            state,
            listener,
            metrics_listener,
            embedded,
            cancel: CancellationToken::new(),
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn state(&self) -> Arc<AppState> {
        self.state.clone()
    }

    /// Serves until `shutdown` completes, then stops everything in order.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let Application {
            state,
            listener,
            metrics_listener,
            embedded,
            cancel,
        } = self;
        let router = router(state.clone(), cancel.clone());
        if let Some(listener) = metrics_listener {
            let metrics_only = Router::new()
                .route("/metrics", get(http::metrics::metrics))
                .with_state(state.clone());
            let cancel = cancel.clone();
            tokio::spawn(async move {
                let _ = axum::serve(listener, metrics_only)
                    .with_graceful_shutdown(cancel.cancelled_owned())
                    .await;
            });
        }
        let stop = cancel.clone();
        tokio::spawn(async move {
            shutdown.await;
            stop.cancel();
        });
        axum::serve(listener, router)
            .with_graceful_shutdown(cancel.clone().cancelled_owned())
            .await
            .context("serving HTTP")?;
        tracing::info!("stopping: draining shards");
        state.engine.shutdown().await;
        state.engine.store().close().await;
        if let Some(pg) = embedded {
            pg.stop()
                .await
                .context("stopping the embedded PostgreSQL")?;
        }
        tracing::info!("stopped");
        Ok(())
    }
}

/// The routes: `/mcp` behind the key check, operator endpoints beside it.
pub fn router(state: Arc<AppState>, cancel: CancellationToken) -> Router {
    let mcp = Router::new()
        .route("/mcp", any(mcp::direct::handle))
        .with_state(Arc::new(mcp::endpoint(
            state.clone(),
            &state.config.mcp,
            cancel,
        )))
        .layer(axum::middleware::from_fn_with_state(
            state.auth.clone(),
            require_key,
        ));
    Router::new()
        .route("/healthz", get(http::health::healthz))
        .route("/readyz", get(http::health::readyz))
        .route("/actors", get(http::actors::actors))
        .route("/metrics", get(http::metrics::metrics))
        .with_state(state)
        .merge(mcp)
}

/// Checks the database and applies migrations, retrying for `database.startup_wait_secs`
/// while the database does not answer (a server still starting, a slow host): a service
/// started beside its database should not exit because it came up first.
async fn prepare(store: &Store, config: &Config) -> Result<(), StoreStartError> {
    let wait = Duration::from_secs(config.database.startup_wait_secs);
    let started = Instant::now();
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(2))
        .without_max_times();
    (|| store.prepare())
        .retry(backoff)
        .sleep(tokio::time::sleep)
        .when(|e| e.is_transient() && started.elapsed() < wait)
        .notify(|error, after| {
            tracing::warn!(%error, retry_in = ?after, "the database is not answering yet");
        })
        .await
}

async fn open_database(config: &Config) -> anyhow::Result<Database> {
    if config.database_url.is_empty() {
        let pg = EmbeddedPostgres::start(&config.data_dir, &config.embedded_postgres)
            .await
            .context("starting the embedded PostgreSQL")?;
        Ok(Database::Embedded(pg))
    } else {
        let options = PgConnectOptions::from_str(config.database_url.expose())
            .context("database_url is not a valid PostgreSQL URL")?
            .application_name("butler-memory");
        Ok(Database::External(options))
    }
}

/// Applies migrations and exits: `butler-memory migrate`.
pub async fn migrate(config: &Config) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.data_dir)?;
    let database = open_database(config).await?;
    let (store, embedded) = match database {
        Database::Embedded(pg) => (
            Store::open(pg.connect_options(), &config.database),
            Some(pg),
        ),
        Database::External(options) => (Store::open(options, &config.database), None),
    };
    prepare(&store, config).await?;
    store.close().await;
    if let Some(pg) = embedded {
        pg.stop().await?;
    }
    Ok(())
}
