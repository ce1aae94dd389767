//! `butler-memory stdio`: MCP over stdin and stdout, for a runtime that starts the service
//! as its child (Claude Desktop, Cursor, an agent framework, a butler's spawner). The
//! protocol owns stdout; logs go to stderr. Unless `data_dir` is configured, the embedded
//! database lives in the user's data directory (`$XDG_DATA_HOME/butler-memory`, else
//! `~/.local/share/butler-memory`), not in whatever directory the runtime started it in.
//!
//! A pipe carries no key. The caller is the key given with `--key` (or `BUTLER_MEMORY_KEY`),
//! checked against the configured keys; without one, the local user, an admin of the
//! bootstrap tenant: whoever can start the process can read its data directory anyway.

use std::path::PathBuf;

use butler_memory_actors::{Caller, Engine, Role, SystemClock};
use rmcp::ServiceExt;

use crate::auth::BOOTSTRAP_TENANT;
use crate::config::Config;
use crate::mcp::MemoryServer;
use crate::startup::{Core, StartupError};

/// The data directory when none is configured: the default `./data` would follow the
/// runtime's working directory, which a desktop client does not choose with care.
pub fn user_data_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    Some(base.join("butler-memory"))
}

/// Serves MCP on stdin and stdout until the client closes the pipe or a signal comes.
pub async fn serve(
    mut config: Config,
    key: Option<String>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartupError> {
    if config.edge.data_dir == std::path::Path::new("./data")
        && let Some(dir) = user_data_dir()
    {
        config.edge.data_dir = dir;
    }
    // Keys on a pipe are named (--key), never bootstrapped: no admin key file to create.
    config.edge.auth.bootstrap_admin_key = false;
    let data_dir = config.edge.data_dir.clone();
    let factory = Engine::minilm_factory(&config.engine.embedder).map_err(StartupError::Model)?;
    let core = Core::build(config, std::sync::Arc::new(SystemClock), factory).await?;
    let state = core.state();
    let caller = match key.filter(|k| !k.is_empty()) {
        Some(key) => match state.auth.caller(Some(&format!("Bearer {key}"))) {
            Some(caller) => caller,
            None => {
                drop(state);
                core.stop().await?;
                return Err(StartupError::UnknownKey);
            }
        },
        None => Caller {
            tenant_id: BOOTSTRAP_TENANT.into(),
            role: Role::Admin,
            butler: None,
            key_name: "stdio".into(),
            audit_reason: None,
        },
    };
    tracing::info!(
        data_dir = %data_dir.display(),
        tenant = %caller.tenant_id,
        role = caller.role.as_str(),
        "butler-memory ready on stdio"
    );
    let served = MemoryServer::local(state, caller)
        .serve(rmcp::transport::io::stdio())
        .await;
    match served {
        Ok(running) => {
            let cancel = running.cancellation_token();
            tokio::select! {
                ended = running.waiting() => {
                    if let Err(e) = ended {
                        tracing::warn!(error = %e, "the stdio session ended abnormally");
                    }
                }
                () = shutdown => {
                    tracing::info!("stop requested");
                    cancel.cancel();
                }
            }
        }
        Err(e) => tracing::warn!(error = %e, "the client closed before the session began"),
    }
    core.stop().await
}
