//! `butler-memory rotate-keys`: after a master key change, re-wraps every tenant's data keys
//! under the new master key; then (unless `--rewrap-only`) gives each tenant a new data key
//! and re-seals its encrypted facts under it, in small transactions. It may run beside the
//! service: a fact being re-sealed is locked for its batch only, and the service opens a
//! fact under whichever key version it names.

use butler_memory_actors::{RotationReport, Store};

use crate::config::Config;
use crate::database_target::{CLI_ACTOR, CommandError, DatabaseTarget};

/// Rotates the keys of the configured database with the configured master keys.
pub async fn rotate_keys(
    config: &Config,
    rewrap_only: bool,
) -> Result<RotationReport, CommandError> {
    let vault = config.vault().map_err(CommandError::Config)?;
    let target = DatabaseTarget::open(config, true).await?;
    let store = Store::open(target.options.clone(), &config.edge.database).with_vault(vault);
    let report = store
        .rotate_keys(rewrap_only, CLI_ACTOR, chrono::Utc::now())
        .await;
    store.close().await;
    target.close().await?;
    Ok(report?)
}
