//! `butler-memory backup` and `restore`: a consistent copy of the service's whole database
//! (every tenant's memories, the audit stream, the migration history) in PostgreSQL's
//! custom archive format, made and read back by the `pg_dump` and `pg_restore` the service
//! already ships with its embedded PostgreSQL.
//!
//! - The embedded default: a backup of a running service reads its database over the
//!   socket in `data_dir` (pg_dump takes one snapshot, so writes may go on); with the
//!   service stopped, the command starts the database itself for the copy. A restore needs
//!   the service stopped (the data directory is locked while it runs).
//! - An external PostgreSQL (`database_url`): the same, against that URL; stop every
//!   instance before a restore.
//!
//! A restore refuses a database that holds memories unless told to replace them (`force`),
//! replaces everything in one transaction, then applies any migration newer than the
//! backup.

use std::path::{Path, PathBuf};
use std::process::Command;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use crate::config::Config;
use crate::database_target::{DatabaseTarget, TargetError};
use crate::startup::{StartupError, migrate};

/// Why a backup or restore did not complete.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("connecting to the database: {0}")]
    Connect(#[source] sqlx::Error),
    #[error("{tool} failed ({status}): {stderr}")]
    Tool {
        tool: &'static str,
        status: String,
        stderr: String,
    },
    #[error("running {tool}: {source}")]
    Spawn {
        tool: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} is not a backup pg_restore can read: {1}")]
    NotABackup(PathBuf, String),
    #[error(
        "the database already holds {0} memories and events; restore with --force to replace them"
    )]
    NotEmpty(i64),
    #[error("applying migrations after the restore: {0}")]
    Migrate(#[source] Box<StartupError>),
}

/// Where one of the PostgreSQL client tools shipped with the embedded PostgreSQL is.
fn tool_path(config: &Config, tool: &str) -> PathBuf {
    config
        .edge
        .embedded_postgres
        .install_dir
        .join("bin")
        .join(tool)
}

/// Runs one of the shipped PostgreSQL client tools, answering its standard output.
fn run(config: &Config, tool: &'static str, args: &[&str]) -> Result<String, BackupError> {
    let output = Command::new(tool_path(config, tool))
        .args(args)
        .output()
        .map_err(|source| BackupError::Spawn { tool, source })?;
    if !output.status.success() {
        return Err(BackupError::Tool {
            tool,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Replays the archive `input` (its table of contents `listing`) into the database at
/// `conninfo` in one transaction, what
/// was there dropped first: `pg_restore --clean` as a script, fed to `psql`.
///
/// Not `pg_restore --clean --single-transaction` itself: its clean phase drops the key of a
/// partition (the audit stream's monthly ones) before the partitioned table's, which
/// PostgreSQL refuses (the key is inherited). Those drops are left out of the script; the
/// partitions' `DROP TABLE` that follows takes their keys with them. Only the clean phase
/// is filtered (the lines before the first `COPY`), never the data.
fn replay(config: &Config, input: &Path, listing: &str, conninfo: &str) -> Result<(), BackupError> {
    use std::io::{BufRead, BufReader, BufWriter, Read, Write};
    use std::process::Stdio;

    let partitions: Vec<String> = listing
        .lines()
        .filter_map(|l| l.split(" TABLE ATTACH ").nth(1))
        .filter_map(|rest| rest.split_whitespace().nth(1).map(str::to_owned))
        .collect();
    let mut script = Command::new(tool_path(config, "pg_restore"))
        .args(["--clean", "--if-exists", "--no-owner", "--file", "-"])
        .arg(input)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| BackupError::Spawn {
            tool: "pg_restore",
            source,
        })?;
    let mut psql = Command::new(tool_path(config, "psql"))
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1"])
        .args(["--dbname", conninfo])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| BackupError::Spawn {
            tool: "psql",
            source,
        })?;
    let inherited_key_drop = |line: &[u8]| {
        let line = String::from_utf8_lossy(line);
        partitions.iter().any(|p| {
            line.starts_with(&format!(
                "ALTER TABLE IF EXISTS ONLY public.{p} DROP CONSTRAINT"
            ))
        })
    };
    let fed = {
        let from = BufReader::new(script.stdout.take().expect("piped"));
        let mut to = BufWriter::new(psql.stdin.take().expect("piped"));
        let mut cleaning = true;
        let mut fed = to.write_all(b"BEGIN;\n");
        for line in from.split(b'\n') {
            let line = match line {
                Ok(line) => line,
                Err(e) => {
                    fed = Err(e);
                    break;
                }
            };
            cleaning = cleaning && !line.starts_with(b"COPY ");
            if cleaning && inherited_key_drop(&line) {
                continue;
            }
            // psql stopped reading (it failed): its own error says why.
            if let Err(e) = to.write_all(&line).and_then(|()| to.write_all(b"\n")) {
                fed = Err(e);
                break;
            }
        }
        // Committed only when the whole script came: a pg_restore that failed half-way
        // leaves psql's session to end without a COMMIT, and the transaction rolls back.
        let whole = matches!(script.wait(), Ok(status) if status.success());
        if fed.is_ok() && whole {
            fed = to.write_all(b"COMMIT;\n").and_then(|()| to.flush());
        }
        fed
    };
    let stderr = |child: &mut std::process::Child| {
        let mut text = String::new();
        if let Some(mut err) = child.stderr.take() {
            let _ = err.read_to_string(&mut text);
        }
        text.trim().to_owned()
    };
    let script_status = script.wait();
    let script_err = stderr(&mut script);
    let psql_err = stderr(&mut psql);
    let psql_status = psql.wait().map_err(|source| BackupError::Spawn {
        tool: "psql",
        source,
    })?;
    if !psql_status.success() {
        return Err(BackupError::Tool {
            tool: "psql",
            status: psql_status.to_string(),
            stderr: psql_err,
        });
    }
    match script_status {
        Ok(status) if status.success() && fed.is_ok() => Ok(()),
        Ok(status) if status.success() => Err(BackupError::Tool {
            tool: "psql",
            status: "stopped reading the script".into(),
            stderr: fed.err().map(|e| e.to_string()).unwrap_or_default(),
        }),
        Ok(status) => Err(BackupError::Tool {
            tool: "pg_restore",
            status: status.to_string(),
            stderr: script_err,
        }),
        Err(source) => Err(BackupError::Spawn {
            tool: "pg_restore",
            source,
        }),
    }
}

/// The table of contents of an archive (`pg_restore --list`), or why it is not one.
fn archive_listing(config: &Config, archive: &Path) -> Result<String, BackupError> {
    run(
        config,
        "pg_restore",
        &["--list", &archive.to_string_lossy()],
    )
    .map_err(|e| BackupError::NotABackup(archive.to_owned(), e.to_string()))
}

/// How many entries a table of contents lists.
fn entries(listing: &str) -> usize {
    listing
        .lines()
        .filter(|l| !l.starts_with(';') && !l.trim().is_empty())
        .count()
}

/// Writes a backup of the database to `output`; answers a one-line summary.
pub async fn backup(config: &Config, output: &Path) -> Result<String, BackupError> {
    let target = DatabaseTarget::open(config, true).await?;
    let dumped = run(
        config,
        "pg_dump",
        &[
            "--format=custom",
            "--no-owner",
            "--file",
            &output.to_string_lossy(),
            "--dbname",
            &target.conninfo,
        ],
    );
    target.close().await?;
    dumped?;
    // Read it back: a backup nobody can restore is found out now, not on the bad day.
    let entries = entries(&archive_listing(config, output)?);
    let bytes = std::fs::metadata(output).map(|m| m.len()).unwrap_or(0);
    Ok(format!(
        "Backed up the database to {} ({bytes} bytes, {entries} archive entries).",
        output.display()
    ))
}

/// Memories and events in the target database (0 when it has no schema yet).
async fn held(options: &PgConnectOptions) -> Result<i64, BackupError> {
    let mut conn = PgConnection::connect_with(options)
        .await
        .map_err(BackupError::Connect)?;
    let schema: bool = sqlx::query_scalar("SELECT to_regclass('memory_events') IS NOT NULL")
        .fetch_one(&mut conn)
        .await
        .map_err(BackupError::Connect)?;
    if !schema {
        return Ok(0);
    }
    sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM episodes) + (SELECT count(*) FROM facts)
              + (SELECT count(*) FROM rules) + (SELECT count(*) FROM memory_events)",
    )
    .fetch_one(&mut conn)
    .await
    .map_err(BackupError::Connect)
}

/// Replaces the database with the backup in `input`; answers a one-line summary.
pub async fn restore(config: &Config, input: &Path, force: bool) -> Result<String, BackupError> {
    let listing = archive_listing(config, input)?;
    let target = DatabaseTarget::open(config, false).await?;
    let restored = async {
        let held = held(&target.options).await?;
        if held > 0 && !force {
            return Err(BackupError::NotEmpty(held));
        }
        replay(config, input, &listing, &target.conninfo)
    }
    .await;
    target.close().await?;
    restored?;
    let applied = migrate(config)
        .await
        .map_err(|e| BackupError::Migrate(Box::new(e)))?;
    Ok(format!(
        "Restored {} ({} archive entries); {} newer migration(s) applied.",
        input.display(),
        entries(&listing),
        applied.len()
    ))
}
