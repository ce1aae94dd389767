//! The real service, started in-process for a test or a bench: the configured database
//! (embedded in a temporary data directory unless `database_url` says otherwise), the real
//! model, and the HTTP server on the configured address (port 0 for a free one).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use butler_memory_actors::{Engine, SharedClock};
use tokio::sync::oneshot;

use super::mcp_client::McpClient;
use crate::app_state::AppState;
use crate::config::Config;
use crate::startup::{Application, StartupError};

/// Where the service runs.
enum Running {
    /// On the caller's runtime (tests).
    Task(tokio::task::JoinHandle<Result<(), StartupError>>),
    /// On a runtime and threads of its own (benches).
    Thread(std::thread::JoinHandle<Result<(), StartupError>>),
}

/// A running service. Stop it with [`TestService::stop`]; dropped without it, its tasks
/// end with the runtime and an embedded PostgreSQL with its guard.
pub struct TestService {
    pub address: SocketAddr,
    pub state: Arc<AppState>,
    stop: Option<oneshot::Sender<()>>,
    running: Option<Running>,
    _data_dir: tempfile::TempDir,
}

impl TestService {
    /// Starts the service on the current runtime, with `clock` if given (tests pin it) and
    /// a temporary data directory.
    pub async fn start(mut config: Config, clock: Option<SharedClock>) -> TestService {
        let data_dir = tempfile::tempdir().expect("a temporary data directory");
        config.edge.data_dir = data_dir.path().to_owned();
        let app = match clock {
            None => Application::build(config).await,
            Some(clock) => {
                let factory =
                    Engine::minilm_factory(&config.engine.embedder).expect("the model assets");
                Application::build_with(config, clock, factory).await
            }
        }
        .expect("the service builds");
        let (address, state) = (app.address(), app.state());
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(app.run_until_stopped(async move {
            let _ = stopped.await;
        }));
        TestService {
            address,
            state,
            stop: Some(stop),
            running: Some(Running::Task(task)),
            _data_dir: data_dir,
        }
    }

    /// Starts the service on a runtime (and threads) of its own, as it runs in its own
    /// process: on a shared runtime a load generator's tasks would queue behind the
    /// service's and the other way round, and latencies would measure that queue.
    pub async fn start_apart(mut config: Config) -> anyhow::Result<TestService> {
        let data_dir = tempfile::tempdir().context("creating a temporary data directory")?;
        config.edge.data_dir = data_dir.path().to_owned();
        let (ready, started) = oneshot::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("service".into())
            .spawn(move || -> Result<(), StartupError> {
                let runtime = match tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .thread_name("service-worker")
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready.send(Err(anyhow::anyhow!("the service runtime: {e}")));
                        return Ok(());
                    }
                };
                runtime.block_on(async move {
                    let app = match Application::build(config).await {
                        Ok(app) => app,
                        Err(e) => {
                            let _ = ready.send(Err(anyhow::Error::new(e).context(
                                "starting the service (run scripts/setup first if .deps/ is missing)",
                            )));
                            return Ok(());
                        }
                    };
                    let _ = ready.send(Ok((app.address(), app.state())));
                    app.run_until_stopped(async move {
                        let _ = stopped.await;
                    })
                    .await
                })
            })
            .context("starting the service thread")?;
        let (address, state) = started.await.context("the service thread ended")??;
        Ok(TestService {
            address,
            state,
            stop: Some(stop),
            running: Some(Running::Thread(thread)),
            _data_dir: data_dir,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.state.engine
    }

    /// The service's `data_dir` (a temporary directory, removed with the service).
    pub fn data_dir(&self) -> &std::path::Path {
        self._data_dir.path()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.address)
    }

    /// An MCP client authenticated with `key`.
    pub async fn client(&self, key: &str) -> McpClient {
        McpClient::connect(&self.url("/mcp"), key)
            .await
            .expect("the MCP client connects")
    }

    /// Stops the service the way a signal would, and waits until it has stopped.
    pub async fn stop(mut self) -> Result<(), StartupError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.running.take() {
            Some(Running::Task(task)) => task.await.expect("the service task"),
            Some(Running::Thread(thread)) => tokio::task::spawn_blocking(move || thread.join())
                .await
                .expect("joining the service thread")
                .expect("the service thread"),
            None => Ok(()),
        }
    }
}
