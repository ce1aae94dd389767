//! `memory_purge` (admin): erasure by record, by subject (candidates first, then the
//! confirmed ones), of a butler or of the whole tenant (`domain/purge.rs`). A purge spans
//! shards, so it runs as one transaction of its own rather than in a shard actor: row locks
//! order it against the shards' writes to the same rows, and every cached read of the
//! tenant is invalidated once it commits.

use uuid::Uuid;

use super::Engine;
use crate::domain::author::Author;
use crate::domain::caller::Caller;
use crate::domain::purge::{
    MAX_LISTED, Purge, PurgeRecord, PurgeScope, PurgeSet, PurgeTarget, confirmed_set,
};
use crate::domain::request_context::Lineage;
use crate::domain::text::{check_name, check_reason};
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::store::purging::{self, PurgeOrder};

/// Most candidates a purge by subject considers: a subject with more records than this is
/// purged in rounds (each round's purge removes what it confirmed from the next list).
const MAX_CANDIDATES: usize = 10_000;

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
        let reason = check_reason("reason", Some(reason), &self.services.config.limits)?
            .filter(|r| !r.trim().is_empty())
            .ok_or_else(|| {
                MemoryError::new(
                    ErrorCode::EmptyValue,
                    "a purge needs a `reason`, for the audit",
                )
            })?;
        let tenant = caller.tenant_id.as_str();
        let store = &self.services.store;
        let scope = target.scope();
        // What is named: ids (records, confirmed candidates), or an owner whose rows all go.
        let (named, owner): (PurgeSet, Option<Option<&str>>) = match &target {
            PurgeTarget::Record { memory_type, id } => {
                let now = self.services.clock.now();
                if store
                    .record(tenant, *memory_type, *id, now)
                    .await?
                    .is_none()
                {
                    return Err(MemoryError::not_found(*memory_type, *id));
                }
                (PurgeSet::of([(*memory_type, id)]), None)
            }
            PurgeTarget::Subject { subject, confirm } => {
                if subject.trim().is_empty() {
                    return Err(MemoryError::new(
                        ErrorCode::EmptyValue,
                        "`subject` is empty: name who or what to purge",
                    ));
                }
                let candidates = store
                    .purge_candidates(tenant, subject.trim(), MAX_CANDIDATES + 1)
                    .await?;
                match confirm {
                    Some(confirm) if !dry_run => (confirmed_set(&candidates, confirm)?, None),
                    _ => return Ok(preview(scope, candidates)),
                }
            }
            PurgeTarget::Butler(butler) => {
                check_name("butler", butler)?;
                (PurgeSet::default(), Some(Some(butler.as_str())))
            }
            PurgeTarget::Tenant(named) if named == tenant => (PurgeSet::default(), Some(None)),
            PurgeTarget::Tenant(named) => {
                return Err(MemoryError::new(
                    ErrorCode::InvalidPurgeTarget,
                    format!(
                        "`tenant` must name the key's own tenant to confirm; `{named}` does not"
                    ),
                ));
            }
        };
        if dry_run {
            let set = match owner {
                Some(butler) => store.purge_counts(tenant, butler).await?,
                None => named,
            };
            return Ok(Purge {
                dry_run: true,
                scope,
                purge_id: None,
                counts: set.counts(),
                records: listed(&set),
                truncated: set.all_ids().len() > MAX_LISTED,
                events_rewritten: 0,
            });
        }

        let purge_id = Uuid::now_v7();
        let author = Author::new(caller.actor(), lineage);
        let now = self.services.clock.now();
        let mut tx = store.begin().await?;
        let set = purging::lock_purge_set(&mut tx, tenant, &named, owner).await?;
        let order = PurgeOrder {
            purge_id,
            scope,
            reason: &reason,
            audit_key: self.services.config.privacy.audit_key.as_bytes(),
            author: &author,
            now,
        };
        let (mut records, events_rewritten) =
            purging::erase(&mut tx, tenant, &set, owner, &order).await?;
        tx.commit().await?;
        self.services.generations.bump(tenant);
        for (memory_type, ids) in set.by_type() {
            metrics::counter!("butler_memory_purged_total", "type" => memory_type.as_str())
                .increment(ids.len() as u64);
        }
        tracing::info!(
            %purge_id, %scope, episodes = set.episodes.len(), facts = set.facts.len(),
            rules = set.rules.len(), events_rewritten, "purged"
        );
        let store = store.clone();
        tokio::spawn(async move { purging::vacuum_after_purge(&store).await });
        let truncated = records.len() > MAX_LISTED;
        records.truncate(MAX_LISTED);
        Ok(Purge {
            dry_run: false,
            scope,
            purge_id: Some(purge_id),
            counts: set.counts(),
            records,
            truncated,
            events_rewritten,
        })
    }
}

/// A dry run's list: the records by type and id (the first [`MAX_LISTED`]).
fn listed(set: &PurgeSet) -> Vec<PurgeRecord> {
    set.by_type()
        .into_iter()
        .flat_map(|(memory_type, ids)| {
            ids.iter().map(move |id| PurgeRecord {
                memory_type,
                id: *id,
                preview: None,
                matched: None,
                content_hash: None,
            })
        })
        .take(MAX_LISTED)
        .collect()
}

/// The candidates of a purge by subject, for a person to confirm.
fn preview(scope: PurgeScope, mut candidates: Vec<PurgeRecord>) -> Purge {
    let counts = PurgeSet::of(candidates.iter().map(|c| (c.memory_type, &c.id))).counts();
    let truncated = candidates.len() > MAX_LISTED;
    candidates.truncate(MAX_LISTED);
    Purge {
        dry_run: true,
        scope,
        purge_id: None,
        counts,
        records: candidates,
        truncated,
        events_rewritten: 0,
    }
}
