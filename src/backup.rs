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

/// Runs one of the shipped PostgreSQL client tools, answering its standard output.
fn run(config: &Config, tool: &'static str, args: &[&str]) -> Result<String, BackupError> {
    let path = config
        .edge
        .embedded_postgres
        .install_dir
        .join("bin")
        .join(tool);
    let output = Command::new(&path)
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

/// Entries of an archive, or why it is not one.
fn archive_entries(config: &Config, archive: &Path) -> Result<usize, BackupError> {
    let listing = run(
        config,
        "pg_restore",
        &["--list", &archive.to_string_lossy()],
    )
    .map_err(|e| BackupError::NotABackup(archive.to_owned(), e.to_string()))?;
    Ok(listing
        .lines()
        .filter(|l| !l.starts_with(';') && !l.trim().is_empty())
        .count())
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
    let entries = archive_entries(config, output)?;
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
    let entries = archive_entries(config, input)?;
    let target = DatabaseTarget::open(config, false).await?;
    let restored = async {
        let held = held(&target.options).await?;
        if held > 0 && !force {
            return Err(BackupError::NotEmpty(held));
        }
        run(
            config,
            "pg_restore",
            &[
                "--clean",
                "--if-exists",
                "--no-owner",
                "--single-transaction",
                "--exit-on-error",
                "--dbname",
                &target.conninfo,
                &input.to_string_lossy(),
            ],
        )
    }
    .await;
    target.close().await?;
    restored?;
    let applied = migrate(config)
        .await
        .map_err(|e| BackupError::Migrate(Box::new(e)))?;
    Ok(format!(
        "Restored {} ({entries} archive entries); {} newer migration(s) applied.",
        input.display(),
        applied.len()
    ))
}
