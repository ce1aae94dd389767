//! Building and running the application: database (embedded or external), migrations,
//! the engine, then the HTTP server. `Application::build` then `run_until_stopped`; what
//! can stop either is a [`StartupError`].
//!
//! Shutdown order: stop accepting requests, drain the shards (every accepted write is
//! committed), stop the actor tree, close the pool, stop the embedded PostgreSQL.

use std::future::Future;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::path::PathBuf;

use axum::Router;
use axum::routing::{any, get, post};
use backon::{ExponentialBuilder, Retryable};
use butler_memory_actors::{
    AppliedMigration, EmbedError, EmbeddedPostgres, EmbeddedPostgresError, EmbedderFactory, Engine,
    EngineConfig, EngineStartError, ReplicaRouting, Role, SharedClock, Store, StoreStartError,
    SystemClock,
};
use sqlx::postgres::PgConnectOptions;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::app_state::AppState;
use crate::auth::{Authenticator, effective_keys, require_key};
use crate::config::{Config, EdgeConfig};
use crate::dashboard::session::Sessions;
use crate::database_watch::DatabaseWatch;
use crate::replica_watch::ReplicaWatch;
use crate::{http, mcp, telemetry};

/// Why the service did not start, or did not stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    /// The embedder's own message says what could not be loaded and what to run.
    #[error(transparent)]
    Model(EmbedError),
    #[error("creating data_dir {path}: {source}")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("starting the embedded PostgreSQL: {0}")]
    EmbeddedPostgres(#[source] EmbeddedPostgresError),
    #[error("database_url is not a valid PostgreSQL URL: {0}")]
    DatabaseUrl(#[source] sqlx::Error),
    #[error("database.read_urls: a URL is not a valid PostgreSQL URL: {0}")]
    ReadUrl(#[source] sqlx::Error),
    /// The database refused, or did not answer within `database.startup_wait_secs`.
    #[error(transparent)]
    Database(#[from] StoreStartError),
    #[error("starting the engine: {0}")]
    Engine(#[from] EngineStartError),
    #[error("creating the bootstrap key in {path}: {source}")]
    BootstrapKey {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("encryption: reading or creating the master key: {source}")]
    MasterKey {
        #[source]
        source: std::io::Error,
    },
    #[error("creating the audit key in {path}: {source}")]
    AuditKey {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("listening on {address}: {source}")]
    Listen {
        address: String,
        #[source]
        source: std::io::Error,
    },
    #[error("stopping the embedded PostgreSQL: {0}")]
    StopPostgres(#[source] EmbeddedPostgresError),
    #[error(
        "the key given for stdio (--key or BUTLER_MEMORY_KEY) is not one of the configured keys"
    )]
    UnknownKey,
}

/// The service without its listeners: the database (watched), the engine and the keys.
/// The HTTP [`Application`] and `butler-memory stdio` both run on one.
pub struct Core {
    state: Arc<AppState>,
    /// Watches the database (and holds the embedded PostgreSQL) while the service runs.
    watch: DatabaseWatch,
    /// Watches the read replicas, if any.
    replica_watch: ReplicaWatch,
}

/// A built application, listening but not yet serving.
pub struct Application {
    core: Core,
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    cancel: CancellationToken,
}

/// The longest the engine may take to stop: drained shards, the indexer, the tree. It
/// stops within seconds when the database answers, and sooner when it is known down.
const ENGINE_STOP: Duration = Duration::from_secs(40);

/// The longest closing the connection pools may take.
const POOLS_CLOSE: Duration = Duration::from_secs(5);

/// The engine's configuration, with the audit key from `data_dir` when none is configured.
fn engine_config(config: &Config) -> Result<EngineConfig, StartupError> {
    let mut engine = config.engine.clone();
    engine.privacy.audit_key = config
        .audit_key()
        .map_err(|source| StartupError::AuditKey {
            path: config.edge.data_dir.join("audit.key"),
            source,
        })?;
    if engine.memory.root.as_os_str().is_empty() {
        engine.memory.root = config.edge.data_dir.join("orchestrators");
    }
    let mut orchestrators: Vec<String> = config
        .edge
        .auth
        .keys
        .iter()
        .filter(|k| k.role == Role::Orchestrator)
        .filter_map(|k| k.tenant.clone())
        .collect();
    orchestrators.sort();
    orchestrators.dedup();
    engine.memory.orchestrators = orchestrators;
    engine.encryption = config
        .encryption()
        .map_err(|source| StartupError::MasterKey { source })?;
    engine.shared_database = config
        .edge
        .database
        .shared
        .shared(!config.edge.database_url.is_empty());
    let database = &config.edge.database;
    engine.replica_routing = ReplicaRouting {
        wait: Duration::from_millis(database.replica_wait_ms),
        max_lag: Duration::from_millis(database.max_replica_lag_ms),
    };
    Ok(engine)
}

impl Core {
    /// Opens the database (starting the embedded one unless `database_url` names another),
    /// applies migrations, and starts the engine with `clock` and `factory`'s embedder.
    pub async fn build(
        config: Config,
        clock: SharedClock,
        factory: EmbedderFactory,
    ) -> Result<Core, StartupError> {
        butler_memory_actors::install_tls_provider();
        let metrics = telemetry::metrics();
        let edge = &config.edge;
        create_data_dir(&edge.data_dir)?;
        let (store, embedded) = open_store(&config).await?;
        for migration in prepare(&store, &config).await? {
            tracing::info!(
                version = migration.version,
                description = %migration.description,
                "migration applied"
            );
        }
        let engine = Engine::start(store, engine_config(&config)?, clock, factory).await?;
        // The load tester's lost-write drill, in test kit builds only.
        #[cfg(feature = "testkit")]
        if let Some(every) = std::env::var("TESTKIT_LOSE_ACKNOWLEDGED_EVERY")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            engine.lose_acknowledged_episodes(every);
        }
        let watch = DatabaseWatch::start(
            engine.store().clone(),
            engine.database_health(),
            embedded,
            edge.embedded_postgres.clone(),
        );
        let replica_watch = ReplicaWatch::start(engine.store().clone(), engine.replicas());
        let keys = effective_keys(&edge.auth, &edge.data_dir).map_err(|source| {
            StartupError::BootstrapKey {
                path: edge.data_dir.clone(),
                source,
            }
        })?;
        let sessions = Sessions::new(
            engine.store().clone(),
            Duration::from_secs(config.edge.dashboard.session_idle_minutes.get() * 60),
        );
        let state = Arc::new(AppState {
            engine,
            auth: Authenticator::new(&keys),
            config,
            metrics,
            sessions,
        });
        Ok(Core {
            state,
            watch,
            replica_watch,
        })
    }

    pub fn state(&self) -> Arc<AppState> {
        self.state.clone()
    }

    /// Stops everything in order, each step bounded: the watch, the engine (its shards
    /// drained), the pools, the embedded PostgreSQL.
    pub async fn stop(self) -> Result<(), StartupError> {
        let Core {
            state,
            watch,
            replica_watch,
        } = self;
        tracing::info!("stopping: draining shards");
        replica_watch.stop().await;
        let embedded = watch.stop().await;
        if tokio::time::timeout(ENGINE_STOP, state.engine.shutdown())
            .await
            .is_err()
        {
            tracing::error!("the engine did not stop within {ENGINE_STOP:?}; stopping anyway");
        }
        // With the database known down, a busy connection (the lifecycle lease's, one
        // waiting for a dead server) will not finish: closing waits for nothing.
        let close_within = match state.engine.database_health().down() {
            Some(_) => Duration::ZERO,
            None => POOLS_CLOSE,
        };
        if tokio::time::timeout(close_within, state.engine.store().close())
            .await
            .is_err()
        {
            tracing::warn!("database connections still busy after {close_within:?}; leaving them");
        }
        if let Some(pg) = embedded {
            pg.stop().await.map_err(StartupError::StopPostgres)?;
        }
        tracing::info!("stopped");
        Ok(())
    }
}

impl Application {
    /// Builds with the real clock and the configured MiniLM embedder.
    pub async fn build(config: Config) -> Result<Application, StartupError> {
        let factory =
            Engine::minilm_factory(&config.engine.embedder).map_err(StartupError::Model)?;
        Self::build_with(config, Arc::new(SystemClock), factory).await
    }

    /// Builds with a given clock and embedder (tests pin the clock).
    pub async fn build_with(
        config: Config,
        clock: SharedClock,
        factory: EmbedderFactory,
    ) -> Result<Application, StartupError> {
        let started = Instant::now();
        let listen_on = config.edge.listen.to_string();
        let metrics_on = config.edge.metrics.listen.clone();
        let embedded_postgres = config.edge.database_url.is_empty();
        let core = Core::build(config, clock, factory).await?;
        let listener = listen(&listen_on).await?;
        let metrics_listener = match metrics_on.as_str() {
            "" => None,
            address => Some(listen(address).await?),
        };
        let address = listener
            .local_addr()
            .map_err(|source| StartupError::Listen {
                address: listen_on,
                source,
            })?;
        tracing::info!(
            %address,
            embedded_postgres = embedded_postgres,
            ms = started.elapsed().as_millis() as u64,
            "butler-memory ready"
        );
        Ok(Application {
            core,
            listener,
            metrics_listener,
            cancel: CancellationToken::new(),
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn state(&self) -> Arc<AppState> {
        self.core.state()
    }

    /// Serves until `shutdown` completes, then stops everything in order.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), StartupError> {
        let Application {
            core,
            listener,
            metrics_listener,
            cancel,
        } = self;
        let state = core.state();
        let router = router(state.clone(), cancel.clone());
        if let Some(listener) = metrics_listener {
            let metrics_only = Router::new()
                .route("/metrics", get(http::metrics::metrics))
                .with_state(state.clone());
            let cancel = cancel.clone();
            let http = state.config.edge.http.clone();
            tokio::spawn(async move {
                http::server::serve(listener, metrics_only, &http, cancel).await
            });
        }
        let stop = cancel.clone();
        tokio::spawn(async move {
            shutdown.await;
            // At once, before the drain: an operator sees the stop was heard.
            tracing::info!("stop requested: no new connections; finishing requests in flight");
            stop.cancel();
        });
        http::server::serve(listener, router, &state.config.edge.http, cancel.clone()).await;
        drop(state);
        core.stop().await
    }
}

/// The routes: `/mcp`, `/api/*` and `/admin/*` behind the key check, operator endpoints
/// beside them.
pub fn router(state: Arc<AppState>, cancel: CancellationToken) -> Router {
    let mcp = Router::new()
        .route("/mcp", any(mcp::direct::handle))
        .with_state(Arc::new(mcp::endpoint(
            state.clone(),
            &state.config.edge.mcp,
            cancel,
        )))
        // Matched routes only: an unknown path is 404 whether or not it carries a key.
        .route_layer(axum::middleware::from_fn_with_state(
            state.auth.clone(),
            require_key,
        ));
    let admin = crate::api::routes()
        .route("/admin/export", get(http::bundle::export))
        .route(
            "/admin/import",
            post(http::bundle::import).layer(http::bundle::import_body_limit()),
        )
        .with_state(state.clone())
        .route_layer(axum::middleware::from_fn_with_state(
            state.auth.clone(),
            require_key,
        ))
        // Outside the key check, so that its refusals are not kept either.
        .layer(axum::middleware::from_fn(crate::api::no_store));
    let access_log = state.config.edge.log.access;
    Router::new()
        .route("/healthz", get(http::health::healthz))
        .route("/readyz", get(http::health::readyz))
        .route("/actors", get(http::actors::actors))
        .route("/metrics", get(http::metrics::metrics))
        .route(
            http::resource_metadata::PATH,
            get(http::resource_metadata::document),
        )
        .route(
            http::resource_metadata::PATH_FOR_MCP,
            get(http::resource_metadata::document),
        )
        .with_state(state.clone())
        .merge(mcp)
        .merge(admin)
        .merge(crate::dashboard::routes(state))
        // Outermost, so that refusals (401, 413) have an id and a log line too.
        .layer(axum::middleware::from_fn_with_state(
            access_log,
            http::request_meta::track,
        ))
}

/// Checks the database and applies migrations, retrying for `database.startup_wait_secs`
/// while the database does not answer (a server still starting, a slow host): a service
/// started beside its database should not exit because it came up first.
async fn prepare(store: &Store, config: &Config) -> Result<Vec<AppliedMigration>, StoreStartError> {
    let wait = Duration::from_secs(config.edge.database.startup_wait_secs);
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

/// The store on the configured database: the embedded PostgreSQL (started here) unless
/// `database_url` names one.
async fn open_store(config: &Config) -> Result<(Store, Option<EmbeddedPostgres>), StartupError> {
    let edge = &config.edge;
    if edge.database_url.is_empty() {
        let pg = EmbeddedPostgres::start(&edge.data_dir, &edge.embedded_postgres)
            .await
            .map_err(StartupError::EmbeddedPostgres)?;
        let store = Store::open(pg.connect_options(), &edge.database);
        Ok((store.with_replicas(read_replicas(edge)?), Some(pg)))
    } else {
        let options = PgConnectOptions::from_str(edge.database_url.expose())
            .map_err(StartupError::DatabaseUrl)?
            .application_name("butler-memory");
        let store = Store::open(options, &edge.database);
        Ok((store.with_replicas(read_replicas(edge)?), None))
    }
}

/// How to reach each of `database.read_urls`.
fn read_replicas(edge: &EdgeConfig) -> Result<Vec<PgConnectOptions>, StartupError> {
    edge.database
        .read_urls
        .0
        .iter()
        .map(|url| PgConnectOptions::from_str(url).map_err(StartupError::ReadUrl))
        .collect()
}

fn create_data_dir(path: &std::path::Path) -> Result<(), StartupError> {
    std::fs::create_dir_all(path).map_err(|source| StartupError::DataDir {
        path: path.to_owned(),
        source,
    })
}

async fn listen(address: &str) -> Result<TcpListener, StartupError> {
    TcpListener::bind(address)
        .await
        .map_err(|source| StartupError::Listen {
            address: address.to_owned(),
            source,
        })
}

/// Applies migrations and answers those applied: `butler-memory migrate`.
pub async fn migrate(config: &Config) -> Result<Vec<AppliedMigration>, StartupError> {
    create_data_dir(&config.edge.data_dir)?;
    let (store, embedded) = open_store(config).await?;
    let applied = prepare(&store, config).await?;
    store.close().await;
    if let Some(pg) = embedded {
        pg.stop().await.map_err(StartupError::StopPostgres)?;
    }
    Ok(applied)
}
