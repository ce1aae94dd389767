//! `butler-memory`: long-term memory for LLM agents. Thin: parse the command line, load the
//! configuration, hand over to `startup`.

use std::path::PathBuf;
use std::process::ExitCode;

use butler_memory::config::Config;
use butler_memory::startup::{Application, migrate};
use butler_memory::telemetry;
use butler_memory::{backup, bundle_files, purge_command, rotate_keys};
use butler_memory_actors::{MemoryType, PurgeTarget};
use clap::{Parser, Subcommand};

/// mimalloc instead of the system allocator: a request allocates and frees many small
/// buffers across worker threads, and glibc malloc spent ~11% of all CPU on it under a
/// write burst (docs/benchmarks.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "butler-memory",
    version,
    about = "Long-term memory for LLM agents over MCP"
)]
struct Cli {
    /// Configuration file layered over config/default.toml (environment variables
    /// BUTLER_MEMORY_* override both).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the service (embedded PostgreSQL unless database_url is set).
    Serve,
    /// Apply database migrations and exit.
    Migrate,
    /// Check the configuration: every problem at once (exit 2), or the effective
    /// configuration as TOML, secrets redacted.
    CheckConfig,
    /// Serve MCP on stdin and stdout, for a client that starts the service as its child
    /// (logs on stderr; data in the user's data directory unless data_dir is set).
    Stdio {
        /// Act as this configured key (default: BUTLER_MEMORY_KEY, else the local user, an
        /// admin of the bootstrap tenant).
        #[arg(long)]
        key: Option<String>,
    },
    /// Write a consistent backup of the whole database (pg_dump's custom format); the
    /// service may keep running.
    Backup {
        /// The archive to write.
        #[arg(long, short)]
        output: PathBuf,
    },
    /// Write one tenant's memories (or one butler's) as a bundle (JSON Lines); the service
    /// may keep running.
    Export {
        /// The tenant to export.
        #[arg(long)]
        tenant: String,
        /// Only this butler's records.
        #[arg(long)]
        butler: Option<String>,
        /// With the audit stream's events.
        #[arg(long)]
        events: bool,
        /// With each record's embedding (kept on import when the model is the same).
        #[arg(long)]
        embeddings: bool,
        /// The bundle to write.
        #[arg(long, short)]
        output: PathBuf,
    },
    /// Import a bundle into a tenant (ids remapped when it is another tenant's; rows
    /// already there skipped). The service must be stopped; a running service imports
    /// through POST /admin/import.
    Import {
        /// The tenant to import into.
        #[arg(long)]
        tenant: String,
        /// The bundle to read.
        #[arg(long, short)]
        input: PathBuf,
    },
    /// Erase memories of a tenant for good (as memory_purge): one record, the confirmed
    /// candidates about a subject (without --confirm: list them), a butler's, or all. The
    /// service must be stopped.
    Purge {
        /// The tenant.
        #[arg(long)]
        tenant: String,
        /// One record: its type (episode, fact or rule), with --id.
        #[arg(long = "type", requires = "id")]
        memory_type: Option<MemoryType>,
        /// One record: its id, with --type.
        #[arg(long, requires = "memory_type")]
        id: Option<uuid::Uuid>,
        /// The records about a subject.
        #[arg(long)]
        subject: Option<String>,
        /// With --subject: a candidate to purge (repeat for several).
        #[arg(long, requires = "subject")]
        confirm: Vec<uuid::Uuid>,
        /// Every record of this butler.
        #[arg(long)]
        butler: Option<String>,
        /// Every record of the tenant.
        #[arg(long)]
        all: bool,
        /// Why (recorded with every purged record's event).
        #[arg(long)]
        reason: String,
        /// List what would be purged, and purge nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Drive a deployment (or a private service it starts) with a load scenario and report
    /// latency, errors, lost writes and the server's counters; exits 99 when a threshold of
    /// the scenario is breached. See docs/load.md.
    Load {
        /// The scenario (TOML; examples in config/scenarios/).
        #[arg(long)]
        scenario: PathBuf,
        /// A running service's base URL (with --keys), or the base URLs of a fleet's
        /// instances separated by commas (calls go to each in turn). Without it, a private
        /// service is started with --config and stopped at the end.
        #[arg(long, requires = "keys")]
        url: Option<String>,
        /// The keys file (TOML) for --url.
        #[arg(long, requires = "url")]
        keys: Option<PathBuf>,
        /// Start a private service (the default when --url is not given).
        #[arg(long, conflicts_with = "url")]
        spawn: bool,
        /// Write the whole report as JSON here.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Write the report with its plots as one HTML file here.
        #[arg(long)]
        html: Option<PathBuf>,
        /// Override the scenario's duration (seconds).
        #[arg(long)]
        duration: Option<f64>,
        /// How calls are spread over several --url instances: each in turn (a round-robin
        /// balancer) or by key (a balancer with affinity: a key's shards on one instance).
        #[arg(long, value_enum, default_value_t)]
        route: butler_memory::load::Route,
    },
    /// Rotate the encryption keys: re-wrap every data key under the current master key
    /// (set encryption.master_key to the new one and list the old one in
    /// encryption.previous_master_keys), then give each tenant a new data key and re-seal its
    /// encrypted facts under it. May run beside the service.
    RotateKeys {
        /// Only re-wrap the data keys (no new data keys, no fact re-sealed).
        #[arg(long)]
        rewrap_only: bool,
    },
    /// Run a streaming read replica of the configured database (database_url, or the running
    /// service's embedded PostgreSQL) in its own data directory, from the embedded
    /// PostgreSQL binaries, until stopped; prints the URL for database.read_urls.
    Replica {
        /// Where the replica keeps its copy (made with pg_basebackup on first start).
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Replace the database with a backup, then apply newer migrations. The service must
    /// be stopped; a database holding memories is refused without --force.
    Restore {
        /// The archive to read.
        #[arg(long, short)]
        input: PathBuf,
        /// Replace a database that holds memories.
        #[arg(long)]
        force: bool,
    },
}

fn main() -> ExitCode {
    butler_memory_actors::install_tls_provider();
    let cli = Cli::parse();
    let config = match Config::load(cli.config.as_deref()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("butler-memory: {e}");
            return ExitCode::from(2);
        }
    };
    if let Command::CheckConfig = cli.command {
        // Valid (it loaded above): show what the service would run with.
        return match Config::effective_toml(cli.config.as_deref()) {
            Ok(toml) => {
                // A closed pipe (`| head`) is not an error of the configuration.
                let _ = std::io::Write::write_all(&mut std::io::stdout(), toml.as_bytes());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("butler-memory: {e}");
                ExitCode::from(2)
            }
        };
    }
    let exporter = match telemetry::init(&config.edge.log, &config.edge.traces) {
        Ok(exporter) => exporter,
        Err(e) => {
            eprintln!("butler-memory: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("butler-memory: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result: anyhow::Result<()> = runtime.block_on(async move {
        match cli.command {
            Command::Serve => {
                let app = Application::build(config).await?;
                app.run_until_stopped(shutdown_signal()).await?;
            }
            Command::Stdio { key } => {
                let key = key.or_else(|| std::env::var("BUTLER_MEMORY_KEY").ok());
                butler_memory::stdio::serve(config, key, shutdown_signal()).await?;
            }
            Command::Migrate => {
                let applied = migrate(&config).await?;
                if applied.is_empty() {
                    println!("The database is up to date: no migration to apply.");
                } else {
                    println!("Applied {} migration(s):", applied.len());
                    for m in &applied {
                        println!("  {} {}", m.version, m.description);
                    }
                }
            }
            Command::Backup { output } => {
                println!("{}", backup::backup(&config, &output).await?);
            }
            Command::Export {
                tenant,
                butler,
                events,
                embeddings,
                output,
            } => {
                let options = bundle_files::ExportOptions {
                    tenant: &tenant,
                    butler: butler.as_deref(),
                    events,
                    embeddings,
                };
                println!(
                    "{}",
                    bundle_files::export(&config, &options, &output).await?
                );
            }
            Command::Import { tenant, input } => {
                let report = bundle_files::import(&config, &tenant, &input).await?;
                println!("{}", serde_json::to_string_pretty(&report)?);
            }
            Command::Purge {
                tenant,
                memory_type,
                id,
                subject,
                confirm,
                butler,
                all,
                reason,
                dry_run,
            } => {
                let target = match (memory_type.zip(id), subject, butler, all) {
                    (Some((memory_type, id)), None, None, false) => {
                        PurgeTarget::Record { memory_type, id }
                    }
                    (None, Some(subject), None, false) => PurgeTarget::Subject {
                        subject,
                        confirm: (!confirm.is_empty()).then_some(confirm),
                    },
                    (None, None, Some(butler), false) => PurgeTarget::Butler(butler),
                    (None, None, None, true) => PurgeTarget::Tenant(tenant.clone()),
                    _ => anyhow::bail!(
                        "name one target: --type and --id, --subject, --butler or --all"
                    ),
                };
                let purged =
                    purge_command::purge(&config, &tenant, target, reason, dry_run).await?;
                println!("{}", serde_json::to_string_pretty(&purged)?);
            }
            Command::Load {
                scenario,
                url,
                keys,
                spawn: _,
                json,
                html,
                duration,
                route,
            } => {
                let report = butler_memory::load::run(butler_memory::load::LoadOptions {
                    scenario,
                    url,
                    keys,
                    config: cli.config.clone(),
                    json,
                    html,
                    duration,
                    route,
                })
                .await?;
                print!("{}", report.table());
                let breached = report.breached().len();
                if breached > 0 {
                    return Err(butler_memory::load::Breached(breached).into());
                }
            }
            Command::RotateKeys { rewrap_only } => {
                let report = rotate_keys::rotate_keys(&config, rewrap_only).await?;
                println!("{}", serde_json::to_string_pretty(&report)?);
            }
            Command::Restore { input, force } => {
                println!("{}", backup::restore(&config, &input, force).await?);
            }
            Command::Replica { data_dir } => {
                butler_memory::replica_command::run(&config, &data_dir, shutdown_signal()).await?;
            }
            // Answered above, without a runtime.
            Command::CheckConfig => {}
        }
        Ok(())
    });
    // After the runtime: the exporter's blocking client must not be dropped inside it.
    drop(runtime);
    if let Some(exporter) = exporter {
        exporter.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<butler_memory::load::Breached>() => {
            eprintln!("butler-memory: {e}");
            ExitCode::from(99)
        }
        Err(e) => {
            // One clear line with its causes, each said once, not a backtrace.
            eprintln!(
                "butler-memory: {}",
                butler_memory_actors::with_causes(e.as_ref())
            );
            ExitCode::FAILURE
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
}
