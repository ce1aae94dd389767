//! The local model: a llama.cpp server the service runs as a child process, the way it runs
//! its own PostgreSQL, so that consolidation learns without an endpoint someone operates.
//!
//! A keeper task owns the process:
//! - it starts it when consolidation first asks for it (`start = "on_demand"`) or with the
//!   service, on a free loopback port, at a low scheduling priority (`nice`) with bounded
//!   threads, and waits for its `/health`;
//! - while it runs, it watches the process and its `/health`: a process that died or stopped
//!   answering is started again after a backoff (one second, doubling);
//! - it stops the process after `idle_stop_secs` without an extraction, and with the service;
//! - a runtime that cannot start (a missing file; SIGILL on a CPU without the instructions
//!   the build uses; a model that does not load) gives way to the next one: `llama-server`,
//!   then the portable runtime (xllamacpp, AVX2 only); when none starts the model is
//!   `unavailable` and consolidation uses the heuristic extractor, which the log,
//!   `/readyz` and `memory_stats` say.
//!
//! The process runs under a small `sh` guard whose stdin is a pipe from the service: when the
//! service exits for any reason, even SIGKILL, the pipe closes and the guard stops the model,
//! so no orphan keeps its two gigabytes.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{Notify, watch};

use crate::config::{LocalModelConfig, LocalModelStart};
use crate::domain::extractor_status::{LocalModelState, LocalModelStatus};

/// The guard the model runs under: it starts the command in the background and exits with
/// its status; EOF on stdin (the service is gone or stopping it) or a TERM asks the model to
/// stop. A background job's stdin is /dev/null, so the watcher reads the service's pipe as
/// fd 3, copied before. `wait` returns early when a trapped signal arrives, hence the loop.
const GUARD: &str = r#"
exec 3<&0
"$@" 3<&- &
model=$!
trap 'kill -TERM "$model" 2>/dev/null' TERM INT HUP
{ read -r _ <&3 || true; kill -TERM "$model" 2>/dev/null; } &
watcher=$!
while :; do
  wait "$model"
  status=$?
  kill -0 "$model" 2>/dev/null || break
done
kill "$watcher" 2>/dev/null
exit "$status"
"#;

/// How often a running model's `/health` is asked, and how many misses in a row mean it hangs.
const HEALTH_EVERY: Duration = Duration::from_secs(5);
const HEALTH_MISSES: u32 = 3;
/// Starts of one runtime that may fail before the next runtime is tried.
const START_ATTEMPTS: u32 = 2;
/// How long a model asked to stop gets before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Log lines of the model kept for an error message.
const LOG_TAIL: usize = 12;
/// Exit status of the guard when the model died of SIGILL (128 + 4): an instruction this CPU
/// does not have.
const SIGILL_STATUS: i32 = 132;

/// A way to run the model.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Runtime {
    /// llama.cpp's prebuilt `llama-server`.
    Server { binary: PathBuf },
    /// The same server through Python's xllamacpp: slower, but built for AVX2 only.
    Portable { python: PathBuf, script: PathBuf },
}

impl Runtime {
    fn name(&self) -> &'static str {
        match self {
            Runtime::Server { .. } => "llama-server",
            Runtime::Portable { .. } => "portable",
        }
    }

    /// The command, before the guard and `nice`.
    fn command(&self, config: &LocalModelConfig, port: u16) -> Vec<String> {
        let mut argv: Vec<String> = match self {
            Runtime::Server { binary } => vec![binary.display().to_string()],
            Runtime::Portable { python, script } => {
                vec![python.display().to_string(), script.display().to_string()]
            }
        };
        argv.extend(
            [
                "-m",
                &config.model_path.display().to_string(),
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "-t",
                &config.threads.to_string(),
                "-c",
                &config.context_tokens.to_string(),
                // One slot: extractions take turns, and the prompt prefix they share stays
                // cached between them.
                "-np",
                "1",
            ]
            .map(str::to_owned),
        );
        if let Runtime::Server { .. } = self {
            argv.push("--no-webui".to_owned());
        }
        argv
    }
}

/// Why the model cannot answer an extraction now.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ModelUnavailable {
    /// No runtime can run it: consolidation falls back to the heuristic extractor.
    #[error("the local model cannot run: {0}")]
    Never(String),
    /// It is starting or restarting and was not ready in time: try again later.
    #[error("the local model is not ready yet: {0}")]
    NotYet(String),
}

/// The keeper's view, shared with callers.
#[derive(Debug, Clone)]
struct Shared {
    status: LocalModelStatus,
    /// Where it answers, while it is ready.
    base_url: Option<String>,
}

/// The local model's keeper: ask it for an endpoint, it starts what is needed.
pub struct LocalModel {
    config: LocalModelConfig,
    shared: watch::Sender<Shared>,
    /// Consolidation wants the model.
    demand: Notify,
    stop: watch::Sender<bool>,
    /// Extractions holding the endpoint now; the model is not stopped idle under them.
    in_use: AtomicUsize,
    /// The model's one slot: calls take turns here rather than in the server's queue, where
    /// their time would count against their timeout.
    slot: tokio::sync::Semaphore,
    last_use: Mutex<Instant>,
    keeper: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// An extraction's hold on the running model: the model is not stopped idle while one is
/// held.
pub struct ModelLease {
    model: Arc<LocalModel>,
    pub base_url: String,
}

impl ModelLease {
    /// Waits for the model's slot: one call at a time, whichever shard asks.
    pub async fn turn(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.model
            .slot
            .acquire()
            .await
            .expect("the slot's semaphore is never closed")
    }
}

impl Drop for ModelLease {
    fn drop(&mut self) {
        self.model.in_use.fetch_sub(1, Ordering::SeqCst);
        *self
            .model
            .last_use
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }
}

impl LocalModel {
    /// The keeper of `config`'s model; its task starts with it (and the model too, when
    /// `start = "at_start"`). Must be called within a tokio runtime.
    pub fn start(config: LocalModelConfig) -> Arc<LocalModel> {
        let (shared, _) = watch::channel(Shared {
            status: LocalModelStatus {
                state: LocalModelState::Stopped,
                runtime: None,
                pid: None,
                restarts: 0,
                last_error: None,
                since: Utc::now(),
            },
            base_url: None,
        });
        let model = Arc::new(LocalModel {
            config,
            shared,
            demand: Notify::new(),
            stop: watch::channel(false).0,
            in_use: AtomicUsize::new(0),
            slot: tokio::sync::Semaphore::new(1),
            last_use: Mutex::new(Instant::now()),
            keeper: Mutex::new(None),
        });
        if model.config.start == LocalModelStart::AtStart {
            model.demand.notify_one();
        }
        let task = tokio::spawn(model.clone().keep());
        *model.keeper.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        model
    }

    /// The model's state now.
    pub fn status(&self) -> LocalModelStatus {
        self.shared.borrow().status.clone()
    }

    /// The running model's endpoint (`http://127.0.0.1:<port>/v1`), starting it when it is
    /// not running and waiting for it to be ready (at most its start-up time and a restart's
    /// backoff).
    pub async fn lease(self: &Arc<Self>) -> Result<ModelLease, ModelUnavailable> {
        self.in_use.fetch_add(1, Ordering::SeqCst);
        *self.last_use.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        let lease = |base_url: String| ModelLease {
            model: self.clone(),
            base_url,
        };
        // Released on every path below that does not hand the lease out.
        let release = || {
            self.in_use.fetch_sub(1, Ordering::SeqCst);
        };
        self.demand.notify_one();
        let patience = Duration::from_secs(
            self.config.startup_timeout_secs.get() + self.config.restart_max_backoff_secs.get(),
        );
        let mut watch = self.shared.subscribe();
        let settled = tokio::time::timeout(
            patience,
            watch.wait_for(|s| {
                matches!(
                    s.status.state,
                    LocalModelState::Ready | LocalModelState::Unavailable
                )
            }),
        )
        .await;
        let shared = match settled {
            Ok(Ok(shared)) => shared.clone(),
            Ok(Err(_)) => {
                release();
                return Err(ModelUnavailable::NotYet("the service is stopping".into()));
            }
            Err(_) => {
                release();
                let status = self.status();
                return Err(ModelUnavailable::NotYet(format!(
                    "{} for over {} s{}",
                    status.state.as_str(),
                    patience.as_secs(),
                    status
                        .last_error
                        .map(|e| format!(" (last error: {e})"))
                        .unwrap_or_default()
                )));
            }
        };
        match (shared.status.state, shared.base_url) {
            (LocalModelState::Ready, Some(url)) => Ok(lease(url)),
            _ => {
                release();
                Err(ModelUnavailable::Never(
                    shared
                        .status
                        .last_error
                        .unwrap_or_else(|| "no runtime could start it".into()),
                ))
            }
        }
    }

    /// Stops the model (and its keeper) and waits for it, at most a few seconds.
    pub async fn shutdown(&self) {
        self.stop.send_replace(true);
        let task = self.keeper.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(task) = task {
            let _ = tokio::time::timeout(STOP_GRACE * 2, task).await;
        }
    }

    fn set(&self, state: LocalModelState, runtime: Option<&Runtime>, base_url: Option<String>) {
        self.set_with_pid(state, runtime, base_url, None);
    }

    fn set_with_pid(
        &self,
        state: LocalModelState,
        runtime: Option<&Runtime>,
        base_url: Option<String>,
        pid: Option<u32>,
    ) {
        self.shared.send_modify(|s| {
            s.status.pid = pid;
            if s.status.state != state {
                s.status.since = Utc::now();
            }
            s.status.state = state;
            if let Some(runtime) = runtime {
                s.status.runtime = Some(runtime.name().to_owned());
            }
            s.base_url = base_url;
        });
        metrics::gauge!("butler_memory_local_model_ready").set(
            if state == LocalModelState::Ready {
                1.0
            } else {
                0.0
            },
        );
    }

    fn fail(&self, error: &str) {
        self.shared
            .send_modify(|s| s.status.last_error = Some(error.to_owned()));
    }

    /// The runtimes to try, in order, with why each missing one is missing.
    fn runtimes(&self) -> (VecDeque<Runtime>, Vec<String>) {
        let c = &self.config;
        let mut runtimes = VecDeque::new();
        let mut missing = Vec::new();
        if !c.model_path.is_file() {
            missing.push(format!(
                "the model {} is missing (run scripts/setup)",
                c.model_path.display()
            ));
            return (runtimes, missing);
        }
        if c.server_path.is_file() {
            runtimes.push_back(Runtime::Server {
                binary: c.server_path.clone(),
            });
        } else {
            missing.push(format!(
                "llama-server {} is missing",
                c.server_path.display()
            ));
        }
        let portable_set =
            !c.portable_python.as_os_str().is_empty() && !c.portable_script.as_os_str().is_empty();
        if portable_set && c.portable_python.is_file() && c.portable_script.is_file() {
            runtimes.push_back(Runtime::Portable {
                python: c.portable_python.clone(),
                script: c.portable_script.clone(),
            });
        } else if portable_set {
            missing.push(format!(
                "the portable runtime ({}, {}) is missing",
                c.portable_python.display(),
                c.portable_script.display()
            ));
        }
        (runtimes, missing)
    }

    /// The keeper: start on demand, watch, restart, give way to the next runtime, stop.
    async fn keep(self: Arc<Self>) {
        let mut stop = self.stop.subscribe();
        let (mut runtimes, mut reasons) = self.runtimes();
        let mut backoff = Duration::from_secs(1);
        let mut failed_starts = 0;
        let max_backoff = Duration::from_secs(self.config.restart_max_backoff_secs.get());
        'idle: loop {
            tokio::select! {
                _ = self.demand.notified() => {}
                _ = stopped(&mut stop) => return,
            }
            loop {
                let Some(runtime) = runtimes.front().cloned() else {
                    let why = reasons.join("; ");
                    tracing::error!(reason = %why, "the local model cannot run; consolidation uses the heuristic extractor");
                    self.fail(&why);
                    self.set(LocalModelState::Unavailable, None, None);
                    stopped(&mut stop).await;
                    return;
                };
                self.set(LocalModelState::Starting, Some(&runtime), None);
                tracing::info!(runtime = runtime.name(), model = %self.config.model_path.display(), "starting the local model");
                let started = Instant::now();
                let mut process = match self.launch(&runtime, &mut stop).await {
                    Ok(process) => process,
                    Err(Launch::Stopped) => return,
                    Err(Launch::Failed(why)) => {
                        let why = format!("{}: {why}", runtime.name());
                        self.fail(&why);
                        // A start can fail by chance (its port taken meanwhile): once more,
                        // unless the CPU cannot run it at all.
                        failed_starts += 1;
                        if failed_starts < START_ATTEMPTS && !why.contains("SIGILL") {
                            tracing::warn!(reason = %why, "the local model did not start; trying again");
                            continue;
                        }
                        tracing::warn!(reason = %why, "the local model's runtime did not start; trying the next one");
                        reasons.push(why);
                        runtimes.pop_front();
                        failed_starts = 0;
                        continue;
                    }
                };
                failed_starts = 0;
                tracing::info!(
                    runtime = runtime.name(),
                    port = process.port,
                    secs = started.elapsed().as_secs_f64(),
                    "the local model is ready"
                );
                self.set_with_pid(
                    LocalModelState::Ready,
                    Some(&runtime),
                    Some(format!("http://127.0.0.1:{}/v1", process.port)),
                    process.model_pid(),
                );
                let ended = self.watch(&mut process, &mut stop).await;
                match ended {
                    Ended::Stop => {
                        process.stop().await;
                        self.set(LocalModelState::Stopped, None, None);
                        return;
                    }
                    Ended::Idle => {
                        tracing::info!("the local model is idle; stopping it until it is needed");
                        process.stop().await;
                        self.set(LocalModelState::Stopped, None, None);
                        backoff = Duration::from_secs(1);
                        continue 'idle;
                    }
                    Ended::Crashed(why) => {
                        process.stop().await;
                        let why = format!("{}: {why}", runtime.name());
                        tracing::warn!(reason = %why, backoff_secs = backoff.as_secs(), "the local model stopped; restarting it");
                        metrics::counter!("butler_memory_local_model_restarts_total").increment(1);
                        self.fail(&why);
                        self.shared.send_modify(|s| s.status.restarts += 1);
                        self.set(LocalModelState::Restarting, Some(&runtime), None);
                        // A model that served a while before it died starts over from the
                        // shortest wait.
                        if started.elapsed() > max_backoff * 2 {
                            backoff = Duration::from_secs(1);
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => {}
                            _ = stopped(&mut stop) => return,
                        }
                        backoff = (backoff * 2).min(max_backoff);
                    }
                }
            }
        }
    }

    /// Starts `runtime` and waits for its `/health`.
    async fn launch(
        &self,
        runtime: &Runtime,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Process, Launch> {
        let port = free_port().map_err(|e| Launch::Failed(format!("no free port: {e}")))?;
        let mut process = Process::spawn(runtime, &self.config, port).map_err(Launch::Failed)?;
        let deadline = Instant::now() + Duration::from_secs(self.config.startup_timeout_secs.get());
        let health = process.health_url();
        let http = health_client();
        loop {
            if let Some(status) = process.exited() {
                let why = exit_reason(status);
                return Err(Launch::Failed(format!("{why}{}", process.log_tail())));
            }
            if http
                .get(&health)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                return Ok(process);
            }
            if Instant::now() >= deadline {
                process.stop().await;
                return Err(Launch::Failed(format!(
                    "not ready within {} s{}",
                    self.config.startup_timeout_secs,
                    process.log_tail()
                )));
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = stopped(stop) => {
                    process.stop().await;
                    return Err(Launch::Stopped);
                }
            }
        }
    }

    /// Watches a ready model until it dies, hangs, idles or the service stops.
    async fn watch(&self, process: &mut Process, stop: &mut watch::Receiver<bool>) -> Ended {
        let http = health_client();
        let health = process.health_url();
        let mut misses = 0;
        let idle_after = Duration::from_secs(self.config.idle_stop_secs);
        let mut ticks = tokio::time::interval(HEALTH_EVERY);
        ticks.tick().await;
        loop {
            tokio::select! {
                status = process.child.wait() => {
                    let why = match status {
                        Ok(status) => exit_reason(status),
                        Err(e) => format!("lost its process: {e}"),
                    };
                    return Ended::Crashed(format!("{why}{}", process.log_tail()));
                }
                _ = stopped(stop) => return Ended::Stop,
                _ = ticks.tick() => {
                    let idle = self.in_use.load(Ordering::SeqCst) == 0
                        && !idle_after.is_zero()
                        && self.last_use.lock().unwrap_or_else(|p| p.into_inner()).elapsed() >= idle_after;
                    if idle {
                        return Ended::Idle;
                    }
                    let answered = http
                        .get(&health)
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success());
                    misses = if answered { 0 } else { misses + 1 };
                    if misses >= HEALTH_MISSES {
                        return Ended::Crashed(format!(
                            "did not answer /health {HEALTH_MISSES} times in a row"
                        ));
                    }
                }
            }
        }
    }
}

enum Launch {
    Failed(String),
    Stopped,
}

enum Ended {
    Crashed(String),
    Idle,
    Stop,
}

/// The guard and the model under it.
struct Process {
    child: Child,
    /// Closing it tells the guard to stop the model.
    stdin: Option<ChildStdin>,
    port: u16,
    log: Arc<Mutex<VecDeque<String>>>,
}

impl Process {
    fn spawn(runtime: &Runtime, config: &LocalModelConfig, port: u16) -> Result<Process, String> {
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(GUARD)
            .arg("butler-memory-local-model");
        if let Some(nice) = which("nice") {
            command
                .arg(nice)
                .arg("-n")
                .arg(config.nice.min(19).to_string());
        }
        command
            .args(runtime.command(config, port))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            // A Ctrl-C aimed at the service's terminal is the service's to handle.
            .process_group(0);
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot run /bin/sh: {e}"))?;
        let log = Arc::new(Mutex::new(VecDeque::with_capacity(LOG_TAIL)));
        if let Some(out) = child.stdout.take() {
            tokio::spawn(forward_log(BufReader::new(out), log.clone()));
        }
        if let Some(err) = child.stderr.take() {
            tokio::spawn(forward_log(BufReader::new(err), log.clone()));
        }
        Ok(Process {
            stdin: child.stdin.take(),
            child,
            port,
            log,
        })
    }

    fn health_url(&self) -> String {
        format!("http://127.0.0.1:{}/health", self.port)
    }

    /// The model's own process: the guard's child (`nice` runs it in its place).
    fn model_pid(&self) -> Option<u32> {
        let guard = self.child.id()?;
        let children =
            std::fs::read_to_string(format!("/proc/{guard}/task/{guard}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }

    fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The model's last log lines, for an error message.
    fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        if log.is_empty() {
            return String::new();
        }
        let lines: Vec<&str> = log.iter().map(String::as_str).collect();
        format!("; its last lines: {}", lines.join(" | "))
    }

    /// Asks the model to stop (the guard's stdin closes), then kills what is left: the
    /// guard's process group, the model in it (a server asked to stop in the middle of an
    /// answer finishes the answer first, which can take minutes).
    async fn stop(&mut self) {
        drop(self.stdin.take());
        if tokio::time::timeout(STOP_GRACE, self.child.wait())
            .await
            .is_err()
        {
            if let Some(guard) = self.child.id() {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(guard as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            let _ = self.child.kill().await;
        }
    }
}

/// Forwards the model's output to the log (debug) and keeps its last lines.
async fn forward_log<R: tokio::io::AsyncRead + Unpin>(
    reader: BufReader<R>,
    tail: Arc<Mutex<VecDeque<String>>>,
) {
    let mut lines = reader.lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(target: "butler_memory::local_model", "{line}");
        let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
        if tail.len() == LOG_TAIL {
            tail.pop_front();
        }
        tail.push_back(line.chars().take(300).collect());
    }
}

/// Why the model's process ended, in words.
fn exit_reason(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(SIGILL_STATUS), _) => {
            "died of SIGILL: this CPU lacks an instruction the build uses".to_owned()
        }
        (Some(code), _) if code > 128 => format!("killed by signal {}", code - 128),
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("its guard was killed by signal {signal}"),
        (None, None) => "ended".to_owned(),
    }
}

/// Resolves once the service stops (the guard the channel hands out is not held across an
/// await).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// A loopback port free now (the model binds it a moment later).
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn health_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap_or_default()
}

/// `program` on the usual paths.
fn which(program: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin", "/usr/local/bin"]
        .iter()
        .map(|dir| Path::new(dir).join(program))
        .find(|path| path.is_file())
}
