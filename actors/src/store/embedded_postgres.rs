//! The embedded default: a private PostgreSQL with pgvector, run by the service as a child
//! process in `<data_dir>/postgres`, reached over a Unix socket in that directory.
//!
//! Lifecycle:
//! - `start` takes an exclusive lock on `<data_dir>/butler-memory.lock`, so two services
//!   never share a data directory. Holding the lock proves that any PostgreSQL still running
//!   on this data directory is an orphan of a crashed earlier run: it is stopped first.
//! - First start runs `initdb`. PostgreSQL refuses to run as root, so when the service runs
//!   as root it runs PostgreSQL as an unprivileged system user (`system_user`, created with
//!   `useradd` when missing) that owns the cluster directory.
//! - PostgreSQL runs under a small `sh` guard whose stdin is a pipe from the service. When
//!   the service exits for any reason, even SIGKILL, the pipe closes and the guard asks
//!   PostgreSQL for a fast shutdown: the database stops with the service.
//! - While the service runs, it watches the postmaster (`postmaster_alive`) and starts a
//!   PostgreSQL that died again (`recover`): crash recovery replays the WAL, so what was
//!   committed is there when it answers again.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use nix::unistd::{Gid, Uid, User};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

/// Why the embedded database could not be started.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedPostgresError {
    #[error(
        "PostgreSQL is not installed at {0} (run scripts/setup, or set embedded_postgres.install_dir)"
    )]
    NotInstalled(PathBuf),
    #[error("data directory {0} is in use by another butler-memory process")]
    DataDirInUse(PathBuf),
    #[error("the Unix socket path {0} is too long (over 107 bytes); use a shorter data_dir")]
    SocketPathTooLong(PathBuf),
    #[error("{step} failed: {detail}")]
    Command { step: &'static str, detail: String },
    #[error("PostgreSQL did not become ready within {secs} s; last log lines:\n{log}")]
    NotReady { secs: u64, log: String },
    #[error("PostgreSQL exited during start-up; last log lines:\n{log}")]
    Exited { log: String },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

mod config;
mod replica;

pub use config::EmbeddedPostgresConfig;

type Result<T> = std::result::Result<T, EmbeddedPostgresError>;

/// Where a new cluster comes from.
enum Origin {
    /// A new, empty cluster.
    Initdb,
    /// A copy of the primary at this libpq connection string, kept as its replica.
    ReplicaOf(String),
}

fn io_err(context: impl Into<String>) -> impl FnOnce(io::Error) -> EmbeddedPostgresError {
    let context = context.into();
    move |source| EmbeddedPostgresError::Io { context, source }
}

/// A running embedded PostgreSQL, stopped by [`EmbeddedPostgres::stop`] or when the service exits.
#[derive(Debug)]
pub struct EmbeddedPostgres {
    cluster_dir: PathBuf,
    port: u16,
    database: String,
    bin_dir: PathBuf,
    run_as: Option<(Uid, Gid)>,
    log_path: PathBuf,
    // The guard process; its stdin is the pipe whose closing stops PostgreSQL.
    guard: Option<Child>,
    // Held for the life of the service: proves exclusive use of the data directory.
    _lock: Flock<File>,
}

impl EmbeddedPostgres {
    /// Starts (initialising on first use) the cluster in `<data_dir>/postgres`.
    pub async fn start(data_dir: &Path, config: &EmbeddedPostgresConfig) -> Result<Self> {
        Self::start_as(data_dir, config, Origin::Initdb).await
    }

    /// Starts a streaming replica of the PostgreSQL at `primary` (a libpq connection
    /// string) in `<data_dir>/postgres`, copied from it with `pg_basebackup -R` on first use:
    /// a read replica for `database.read_urls`, made from the embedded binaries. It runs
    /// with `hot_standby_feedback`, so that the primary's vacuum does not cancel reads.
    pub async fn start_replica(
        data_dir: &Path,
        config: &EmbeddedPostgresConfig,
        primary: &str,
    ) -> Result<Self> {
        Self::start_as(data_dir, config, Origin::ReplicaOf(primary.to_owned())).await
    }

    async fn start_as(
        data_dir: &Path,
        config: &EmbeddedPostgresConfig,
        origin: Origin,
    ) -> Result<Self> {
        let data_dir = data_dir.to_owned();
        let config = config.clone();
        let timeout = Duration::from_secs(config.startup_timeout_secs);
        tokio::task::spawn_blocking(move || Self::prepare(&data_dir, &config, &origin))
            .await
            .map_err(|e| EmbeddedPostgresError::Command {
                step: "start-up",
                detail: e.to_string(),
            })??
            .wait_ready_and_create_database(timeout)
            .await
    }

    /// Options to connect to the service's database over the Unix socket.
    pub fn connect_options(&self) -> PgConnectOptions {
        self.connect_options_for(&self.database)
    }

    /// The directory holding the cluster (and its socket).
    pub fn cluster_dir(&self) -> &Path {
        &self.cluster_dir
    }

    /// Whether the PostgreSQL process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.guard.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// Whether the postmaster is alive. The guard stays up when PostgreSQL dies (it waits on
    /// its stdin), so this looks at the postmaster itself: the pid in `postmaster.pid`, and
    /// that process not being a zombie the guard has not reaped.
    pub fn postmaster_alive(&self) -> bool {
        let Ok(text) = fs::read_to_string(self.cluster_dir.join("postmaster.pid")) else {
            return false;
        };
        let Some(pid) = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<u32>().ok())
        else {
            return false;
        };
        match fs::read_to_string(format!("/proc/{pid}/status")) {
            Ok(status) => !status
                .lines()
                .any(|l| l.starts_with("State:") && l.contains('Z')),
            Err(_) => false,
        }
    }

    /// Starts PostgreSQL again after it died: the old guard is told to go (it reaps the
    /// dead postmaster), a new one starts PostgreSQL, which recovers from its WAL, and this
    /// answers once it accepts connections.
    pub async fn recover(&mut self, config: &EmbeddedPostgresConfig) -> Result<()> {
        if let Some(mut guard) = self.guard.take() {
            drop(guard.stdin.take());
            let started = Instant::now();
            while matches!(guard.try_wait(), Ok(None)) {
                if started.elapsed() > Duration::from_secs(5) {
                    let _ = guard.kill();
                    let _ = guard.wait();
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        self.guard = Some(self.spawn_guard(config)?);
        self.wait_ready(Duration::from_secs(config.startup_timeout_secs))
            .await
    }

    /// Stops PostgreSQL (fast shutdown: active transactions roll back, committed data is
    /// durable) and waits for it to exit.
    pub async fn stop(mut self) -> Result<()> {
        if let Some(mut guard) = self.guard.take() {
            drop(guard.stdin.take());
            tokio::task::spawn_blocking(move || guard.wait())
                .await
                .map_err(|e| EmbeddedPostgresError::Command {
                    step: "stop",
                    detail: e.to_string(),
                })?
                .map_err(io_err("waiting for PostgreSQL to stop"))?;
        }
        Ok(())
    }

    /// Stops PostgreSQL with `pg_ctl stop` without giving up the data directory, so that it
    /// can be started again by [`EmbeddedPostgres::restart`]. Used to take the database away
    /// from a running service (tests of `/readyz`).
    pub async fn pause(&mut self) -> Result<()> {
        let bin = self.bin_dir.join("pg_ctl");
        let mut cmd = Command::new(bin);
        cmd.arg("stop")
            .arg("-D")
            .arg(&self.cluster_dir)
            .args(["-m", "fast", "-w", "-t", "30"]);
        run(&mut cmd, self.run_as, "pg_ctl stop")?;
        if let Some(mut guard) = self.guard.take() {
            drop(guard.stdin.take());
            let _ = tokio::task::spawn_blocking(move || guard.wait()).await;
        }
        Ok(())
    }

    /// Starts PostgreSQL again after [`EmbeddedPostgres::pause`].
    pub async fn restart(&mut self, config: &EmbeddedPostgresConfig) -> Result<()> {
        self.guard = Some(self.spawn_guard(config)?);
        self.wait_ready(Duration::from_secs(config.startup_timeout_secs))
            .await
    }

    fn prepare(data_dir: &Path, config: &EmbeddedPostgresConfig, origin: &Origin) -> Result<Self> {
        let bin_dir = config.install_dir.join("bin");
        for exe in ["initdb", "postgres", "pg_ctl"] {
            if !bin_dir.join(exe).is_file() {
                return Err(EmbeddedPostgresError::NotInstalled(
                    config.install_dir.clone(),
                ));
            }
        }
        fs::create_dir_all(data_dir)
            .map_err(io_err(format!("creating data_dir {}", data_dir.display())))?;
        let data_dir = data_dir
            .canonicalize()
            .map_err(io_err(format!("resolving data_dir {}", data_dir.display())))?;
        let bin_dir = bin_dir
            .canonicalize()
            .map_err(io_err("resolving the PostgreSQL install"))?;
        let lock = lock_data_dir(&data_dir)?;

        let cluster_dir = data_dir.join("postgres");
        let socket = cluster_dir.join(format!(".s.PGSQL.{}", config.port));
        if socket.as_os_str().len() > 107 {
            return Err(EmbeddedPostgresError::SocketPathTooLong(socket));
        }

        let run_as = if Uid::effective().is_root() {
            let (uid, gid) = ensure_system_user(&config.system_user)?;
            // The unprivileged user must be able to reach its cluster and the binaries.
            allow_traverse(&data_dir)?;
            allow_traverse(&bin_dir)?;
            Some((uid, gid))
        } else {
            None
        };

        let mut pg = EmbeddedPostgres {
            log_path: data_dir.join("postgres.log"),
            cluster_dir,
            port: config.port,
            database: config.database.clone(),
            bin_dir,
            run_as,
            guard: None,
            _lock: lock,
        };
        pg.stop_orphan();
        pg.init_cluster_if_needed(origin)?;
        pg.guard = Some(pg.spawn_guard(config)?);
        Ok(pg)
    }

    /// Stops a PostgreSQL left running on this cluster by a crashed earlier run. We hold the
    /// data directory lock, so no live service owns it.
    fn stop_orphan(&self) {
        let pid_file = self.cluster_dir.join("postmaster.pid");
        let Ok(text) = fs::read_to_string(&pid_file) else {
            return;
        };
        let Some(pid) = text
            .lines()
            .next()
            .and_then(|l| l.trim().parse::<i32>().ok())
        else {
            return;
        };
        let alive = fs::read(format!("/proc/{pid}/cmdline"))
            .map(|cmd| String::from_utf8_lossy(&cmd).contains("postgres"))
            .unwrap_or(false);
        if !alive {
            return;
        }
        tracing::warn!(
            pid,
            "stopping an orphaned PostgreSQL left by an earlier run"
        );
        let mut cmd = Command::new(self.bin_dir.join("pg_ctl"));
        cmd.arg("stop")
            .arg("-D")
            .arg(&self.cluster_dir)
            .args(["-m", "fast", "-w", "-t", "30"]);
        if let Err(e) = run(&mut cmd, self.run_as, "pg_ctl stop") {
            tracing::warn!(error = %e, "pg_ctl could not stop the orphan; sending SIGKILL");
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    fn init_cluster_if_needed(&self, origin: &Origin) -> Result<()> {
        if self.cluster_dir.join("PG_VERSION").is_file() {
            return Ok(());
        }
        // A half-initialised directory from an interrupted initdb is not usable: start over.
        if self.cluster_dir.exists() {
            fs::remove_dir_all(&self.cluster_dir)
                .map_err(io_err("removing a half-initialised cluster"))?;
        }
        fs::create_dir_all(&self.cluster_dir).map_err(io_err("creating the cluster directory"))?;
        fs::set_permissions(&self.cluster_dir, fs::Permissions::from_mode(0o700))
            .map_err(io_err("restricting the cluster directory"))?;
        if let Some((uid, gid)) = self.run_as {
            nix::unistd::chown(&self.cluster_dir, Some(uid), Some(gid)).map_err(|e| {
                EmbeddedPostgresError::Io {
                    context: "handing the cluster directory to the PostgreSQL user".into(),
                    source: e.into(),
                }
            })?;
        }
        if let Origin::ReplicaOf(primary) = origin {
            return self.copy_primary(primary);
        }
        tracing::info!(dir = %self.cluster_dir.display(), "initialising the embedded PostgreSQL cluster");
        let mut cmd = Command::new(self.bin_dir.join("initdb"));
        cmd.arg("-D").arg(&self.cluster_dir).args([
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
        ]);
        run(&mut cmd, self.run_as, "initdb")
    }

    fn spawn_guard(&self, config: &EmbeddedPostgresConfig) -> Result<Child> {
        // The guard starts PostgreSQL, then blocks reading stdin. EOF means the service is
        // gone (or is stopping us): ask PostgreSQL for a fast shutdown and wait for it.
        const GUARD: &str = r#"
bin=$1; shift
"$bin" "$@" &
pg=$!
trap 'kill -INT "$pg" 2>/dev/null' TERM INT HUP
read -r _ || true
kill -INT "$pg" 2>/dev/null
wait "$pg"
"#;
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(io_err("opening postgres.log"))?;
        let log_err = log.try_clone().map_err(io_err("opening postgres.log"))?;
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(GUARD)
            .arg("butler-memory-postgres")
            .arg(self.bin_dir.join("postgres"))
            .arg("-D")
            .arg(&self.cluster_dir)
            .arg("-k")
            .arg(&self.cluster_dir)
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-c", "listen_addresses="]);
        // A standby must allow at least the primary's connections (PostgreSQL will not serve
        // reads from it otherwise), and the primary may allow more than this configuration
        // says: a standby keeps the value of the configuration it copied from its primary.
        let standby = self.cluster_dir.join("standby.signal").exists();
        for (name, value) in &config.settings {
            if standby && name == "max_connections" {
                continue;
            }
            cmd.arg("-c").arg(format!("{name}={value}"));
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("LC_ALL", "C");
        if !config.malloc_tunables.is_empty() {
            cmd.env("GLIBC_TUNABLES", &config.malloc_tunables);
        }
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        // A process group of its own: a Ctrl-C aimed at the service's terminal must not hit
        // PostgreSQL before the service has drained its writes.
        cmd.process_group(0);
        cmd.spawn().map_err(io_err("starting PostgreSQL"))
    }

    async fn wait_ready_and_create_database(mut self, timeout: Duration) -> Result<Self> {
        self.wait_ready(timeout).await?;
        let mut conn = PgConnection::connect_with(&self.connect_options_for("postgres"))
            .await
            .map_err(|e| EmbeddedPostgresError::Command {
                step: "connecting to PostgreSQL",
                detail: e.to_string(),
            })?;
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
                .bind(&self.database)
                .fetch_one(&mut conn)
                .await
                .map_err(|e| EmbeddedPostgresError::Command {
                    step: "looking up the database",
                    detail: e.to_string(),
                })?;
        if !exists {
            let quoted = format!("\"{}\"", self.database.replace('"', "\"\""));
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {quoted}")))
                .execute(&mut conn)
                .await
                .map_err(|e| EmbeddedPostgresError::Command {
                    step: "creating the database",
                    detail: e.to_string(),
                })?;
        }
        let _ = conn.close().await;
        Ok(self)
    }

    async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        let options = self.connect_options_for("postgres");
        loop {
            if let Some(guard) = self.guard.as_mut()
                && let Ok(Some(_)) = guard.try_wait()
            {
                return Err(EmbeddedPostgresError::Exited {
                    log: log_tail(&self.log_path),
                });
            }
            if let Ok(conn) = PgConnection::connect_with(&options).await {
                let _ = conn.close().await;
                return Ok(());
            }
            if started.elapsed() > timeout {
                return Err(EmbeddedPostgresError::NotReady {
                    secs: timeout.as_secs(),
                    log: log_tail(&self.log_path),
                });
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn connect_options_for(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new_without_pgpass()
            .socket(&self.cluster_dir)
            .port(self.port)
            .username("postgres")
            .database(database)
            .application_name("butler-memory")
    }
}

impl Drop for EmbeddedPostgres {
    fn drop(&mut self) {
        // Closing the guard's stdin starts PostgreSQL's fast shutdown; `stop` waits for it,
        // a plain drop does not block.
        if let Some(guard) = self.guard.as_mut() {
            drop(guard.stdin.take());
        }
    }
}

fn lock_data_dir(data_dir: &Path) -> Result<Flock<File>> {
    let path = data_dir.join("butler-memory.lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_err(format!("opening {}", path.display())))?;
    Flock::lock(file, FlockArg::LockExclusiveNonblock)
        .map_err(|_| EmbeddedPostgresError::DataDirInUse(data_dir.to_owned()))
}

/// Finds the system user that runs PostgreSQL, creating it when missing.
fn ensure_system_user(name: &str) -> Result<(Uid, Gid)> {
    let lookup = || User::from_name(name).ok().flatten();
    if lookup().is_none() {
        tracing::info!(user = name, "creating the system user that runs PostgreSQL");
        let mut cmd = Command::new("useradd");
        cmd.args([
            "--system",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            name,
        ]);
        run(&mut cmd, None, "useradd")?;
    }
    let user = lookup().ok_or_else(|| EmbeddedPostgresError::Command {
        step: "useradd",
        detail: format!("user {name} still does not exist"),
    })?;
    Ok((user.uid, user.gid))
}

/// Adds the search (`x`) bit for others to every ancestor of `path` that lacks it, so an
/// unprivileged user can reach `path`. Listing rights are not granted.
fn allow_traverse(path: &Path) -> Result<()> {
    for dir in path.ancestors() {
        let meta = fs::metadata(dir).map_err(io_err(format!("inspecting {}", dir.display())))?;
        let mode = meta.permissions().mode();
        if mode & 0o001 == 0 {
            tracing::info!(dir = %dir.display(), "allowing other users to traverse this directory");
            fs::set_permissions(dir, fs::Permissions::from_mode(mode | 0o001))
                .map_err(io_err(format!("changing permissions of {}", dir.display())))?;
        }
    }
    Ok(())
}

/// Runs a PostgreSQL tool to completion (as `run_as` when set) and reports its output on failure.
fn run(cmd: &mut Command, run_as: Option<(Uid, Gid)>, step: &'static str) -> Result<()> {
    if let Some((uid, gid)) = run_as {
        cmd.uid(uid.as_raw()).gid(gid.as_raw());
    }
    cmd.env("LC_ALL", "C").stdin(Stdio::null());
    let out = cmd.output().map_err(|e| EmbeddedPostgresError::Command {
        step,
        detail: e.to_string(),
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(EmbeddedPostgresError::Command {
            step,
            detail: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        })
    }
}

fn log_tail(path: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = File::open(path) {
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = file.seek(SeekFrom::Start(len.saturating_sub(4096)));
        let _ = file.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}
