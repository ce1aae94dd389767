//! `butler-memory purge`: `memory_purge` from the command line, straight against the
//! database, for an operator acting on a request to be forgotten without an admin key at
//! hand. The service must be stopped (a running one would keep cached answers holding what
//! was erased): purge a running service through `memory_purge` or `POST /api/memory/purge`.

use butler_memory_actors::{Author, Lineage, Purge, PurgeTarget, Store, check_name, purge_reason};

use crate::config::Config;
use crate::database_target::{CLI_ACTOR, CommandError, DatabaseTarget};

/// Purges `target` in `tenant` (or lists what it would, with `dry_run`).
pub async fn purge(
    config: &Config,
    tenant: &str,
    target: PurgeTarget,
    reason: String,
    dry_run: bool,
) -> Result<Purge, CommandError> {
    check_name("tenant", tenant)?;
    let reason = purge_reason(reason, &config.engine.limits)?;
    let audit_key = config.audit_key().map_err(|source| CommandError::File {
        path: config.edge.data_dir.join("audit.key").display().to_string(),
        source,
    })?;
    let target_db = DatabaseTarget::open(config, false).await?;
    let store = Store::open(target_db.options.clone(), &config.edge.database);
    let author = Author::new(
        CLI_ACTOR,
        Lineage {
            request_id: format!("cli-purge-{}", uuid::Uuid::now_v7()),
            subrequest_id: None,
            segment_id: None,
            generated: true,
        },
    );
    let purged = store
        .purge(
            tenant,
            &target,
            &reason,
            dry_run,
            audit_key.as_bytes(),
            &author,
            chrono::Utc::now(),
        )
        .await;
    if matches!(&purged, Ok(p) if !p.dry_run) {
        store.vacuum_after_purge().await;
    }
    store.close().await;
    target_db.close().await?;
    Ok(purged?)
}
