//! The lifecycle work the scheduler times, done by the tree: which shards hold data or are
//! over a consolidation trigger (from the store), and a sweep on each, one shard after
//! another, started if it is not running (DECISIONS.md #13). Each shard runs its sweep in
//! order with its writes.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Shards;
use crate::actors::scheduler::LifecycleWork;
use crate::actors::shard::ShardMsg;
use crate::domain::shard_key::ShardKey;
use crate::domain::sweep::SweepKind;
use crate::error::MemoryResult;
use crate::services::Services;

/// How long one shard's sweep may take before the next shard's begins (the sweep itself
/// goes on).
const SWEEP_WAIT: Duration = Duration::from_secs(30 * 60);

/// [`LifecycleWork`] over the live tree.
pub struct TreeLifecycle {
    services: Arc<Services>,
    shards: Shards,
}

impl TreeLifecycle {
    pub fn new(services: Arc<Services>, shards: Shards) -> Self {
        TreeLifecycle { services, shards }
    }

    /// Runs one sweep on one shard, starting it if it is not running.
    async fn run_on(&self, key: &ShardKey, kind: SweepKind) {
        let shard = match self.shards.get(key).await {
            Ok(shard) => shard,
            Err(_) => {
                tracing::warn!(shard = %key, kind = %kind, "sweep skipped: shard unavailable");
                return;
            }
        };
        let result = shard
            .ask(
                |reply| ShardMsg::Sweep { kind, reply },
                SWEEP_WAIT,
                "the shard",
            )
            .await
            .and_then(|r| r);
        if let Err(e) = result {
            tracing::warn!(shard = %key, kind = %kind, error = %e, "sweep failed");
        }
    }
}

#[async_trait::async_trait]
impl LifecycleWork for TreeLifecycle {
    async fn last_run(&self, kind: SweepKind) -> MemoryResult<Option<DateTime<Utc>>> {
        self.services.store.last_run_of(kind.as_str()).await
    }

    async fn sweep_all(&self, kind: SweepKind) {
        let keys = match self.services.store.shard_keys(None).await {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!(kind = %kind, error = %e, "scheduled sweep skipped: shards unknown");
                metrics::counter!("butler_memory_sweeps_total", "outcome" => "skipped")
                    .increment(1);
                return;
            }
        };
        tracing::info!(kind = %kind, shards = keys.len(), "scheduled sweep");
        for key in keys {
            self.run_on(&key, kind).await;
        }
    }

    async fn consolidate_backlogs(&self, now: DateTime<Utc>, writes_hot: bool) {
        let store = &self.services.store;
        if let Ok((size, oldest)) = store.consolidation_backlog(now).await {
            metrics::gauge!("butler_memory_consolidation_backlog").set(size as f64);
            let age = oldest
                .map(|t| ((now - t).num_milliseconds() as f64 / 1000.0).max(0.0))
                .unwrap_or(0.0);
            metrics::gauge!("butler_memory_consolidation_backlog_age_seconds").set(age);
        }
        let config = &self.services.config.consolidation;
        let since =
            now - chrono::Duration::milliseconds((config.trigger_backlog_age_secs * 1000.0) as i64);
        let shards = match store
            .backlogged_shards(i64::from(config.trigger_backlog_size), since, now)
            .await
        {
            Ok(shards) => shards,
            Err(e) => {
                tracing::warn!(error = %e, "consolidation backlog unknown");
                return;
            }
        };
        for backlog in shards {
            // During a write burst only the age trigger counts.
            if writes_hot && backlog.oldest > since {
                continue;
            }
            let key = ShardKey::new(backlog.tenant_id, backlog.butler);
            tracing::info!(shard = %key, pending = backlog.pending, "consolidation backlog over its trigger");
            self.run_on(&key, SweepKind::Consolidation).await;
        }
    }
}
