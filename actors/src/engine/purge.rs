//! `memory_purge` (admin): erasure by record, by subject (candidates first, then the
//! confirmed ones), of a butler or of the whole tenant (`domain/purge.rs`,
//! `store/purging.rs`). A purge spans shards, so it runs as one transaction of its own
//! rather than in a shard actor: row locks order it against the shards' writes to the same
//! rows, and every cached read of the tenant is invalidated once it commits.

use super::Engine;
use crate::domain::author::Author;
use crate::domain::caller::Caller;
use crate::domain::purge::{Purge, PurgeTarget, purge_reason};
use crate::domain::request_context::Lineage;
use crate::error::MemoryResult;

impl Engine {
    /// Purges `target` for good (or, with `dry_run`, lists what it would purge). `reason`
    /// is required: it is recorded with every `*_purged` event.
    pub async fn purge(
        &self,
        caller: &Caller,
        target: PurgeTarget,
        reason: String,
        dry_run: bool,
        lineage: Lineage,
    ) -> MemoryResult<Purge> {
        self.services.database.check()?;
        caller.require_admin()?;
        let reason = purge_reason(reason, &self.services.config.limits)?;
        let author = Author::new(caller.actor(), lineage);
        let now = self.services.clock.now();
        let tenant = caller.tenant_id.as_str();
        let store = &self.services.store;
        let audit_key = self.services.config.privacy.audit_key.as_bytes();
        let purge = store
            .purge(tenant, &target, &reason, dry_run, audit_key, &author, now)
            .await?;
        if !purge.dry_run {
            self.services.generations.bump(tenant);
            for (name, n) in [
                ("episode", purge.counts.episodes),
                ("fact", purge.counts.facts),
                ("rule", purge.counts.rules),
            ] {
                metrics::counter!("butler_memory_purged_total", "type" => name).increment(n);
            }
            let store = store.clone();
            tokio::spawn(async move { store.vacuum_after_purge().await });
        }
        Ok(purge)
    }
}
