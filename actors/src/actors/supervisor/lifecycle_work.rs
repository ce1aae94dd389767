//! The lifecycle work the scheduler times, done by the tree: which shards hold data or are
//! over a consolidation trigger (from the store), and a sweep on each, one shard after
//! another, started if it is not running (DECISIONS.md #13). Each shard runs its sweep in
//! order with its writes. A scheduled sweep runs only where it is claimed, once per
//! scheduled time however many instances share the database, and one abandoned by a dead
//! instance is taken over (`store/lifecycle_claims.rs`).

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Shards;
use crate::actors::scheduler::LifecycleWork;
use crate::actors::shard::{SWEEP_ACTOR, ShardMsg};
use crate::domain::shard_key::ShardKey;
use crate::domain::sweep::{SweepKind, SweepReport};
use crate::error::MemoryResult;
use crate::services::Services;
use crate::store::Store;
use crate::store::episode_cleanup::Cleanup;
use crate::store::lifecycle_claims::SweepFire;

/// How long one shard's sweep may take before the next shard's begins (the sweep itself
/// goes on).
const SWEEP_WAIT: Duration = Duration::from_secs(30 * 60);

/// [`LifecycleWork`] over the live tree.
pub struct TreeLifecycle {
    services: Arc<Services>,
    shards: Shards,
    /// This instance's name in sweep claims.
    instance: String,
}

impl TreeLifecycle {
    pub fn new(services: Arc<Services>, shards: Shards) -> Self {
        let instance = services.config.lifecycle.instance();
        TreeLifecycle {
            services,
            shards,
            instance,
        }
    }

    fn lease(&self) -> chrono::Duration {
        let secs = self.services.config.lifecycle.lease_secs.get();
        chrono::Duration::seconds(i64::try_from(secs).unwrap_or(i64::MAX / 1000))
    }

    /// Runs a scheduled sweep on its shard if this instance claims it, beating the claim's
    /// heartbeat every third of the lease while it runs, then marks it finished.
    async fn run_claimed(&self, fire: &SweepFire) {
        let store = &self.services.store;
        let instance = &self.instance;
        let now = self.services.clock.now();
        match store.claim_sweep(fire, instance, now, self.lease()).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(shard = %fire.shard, kind = %fire.kind, "sweep claimed by another instance");
                return;
            }
            Err(e) => {
                tracing::warn!(shard = %fire.shard, kind = %fire.kind, error = %e, "sweep not claimed; skipped");
                return;
            }
        }
        let heartbeat = {
            let (services, fire, instance) =
                (self.services.clone(), fire.clone(), instance.clone());
            let every = self.lease().to_std().unwrap_or_default() / 3;
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let now = services.clock.now();
                    if let Err(e) = services.store.beat(&fire, &instance, now).await {
                        tracing::warn!(shard = %fire.shard, error = %e, "sweep heartbeat failed");
                    }
                }
            })
        };
        let ran = self.run_on(&fire.shard, fire.kind).await;
        heartbeat.abort();
        if !ran {
            // Left unfinished and silent: taken over (here or elsewhere) once the lease
            // has passed, when the shard's other work is done.
            return;
        }
        let now = self.services.clock.now();
        if let Err(e) = store.finish_claim(fire, instance, now).await {
            tracing::warn!(shard = %fire.shard, error = %e, "sweep claim not marked finished");
        }
    }

    /// Runs one sweep on one shard under its lifecycle lease; `false` when another
    /// instance holds the lease (nothing ran).
    async fn run_on(&self, key: &ShardKey, kind: SweepKind) -> bool {
        match self
            .shards
            .sweep_leased(&self.services.store, key, kind, Duration::ZERO)
            .await
        {
            Ok(Some(ran)) => {
                if let Err(e) = ran {
                    tracing::warn!(shard = %key, kind = %kind, error = %e, "sweep failed");
                }
                true
            }
            Ok(None) => {
                tracing::debug!(shard = %key, kind = %kind, "another instance runs this shard's lifecycle work");
                false
            }
            Err(e) => {
                tracing::warn!(shard = %key, kind = %kind, error = %e, "sweep skipped: no lease");
                false
            }
        }
    }
}

impl Shards {
    /// One sweep of one shard (started if it is not running), waiting for it, under the
    /// shard's lifecycle lease (`store/lifecycle_lease.rs`): when another session holds the
    /// lease, waits for it up to `lease_wait`, then answers `None` (nothing ran). The outer
    /// error is the lease's (nothing ran), the inner one the sweep's.
    pub async fn sweep_leased(
        &self,
        store: &Store,
        key: &ShardKey,
        kind: SweepKind,
        lease_wait: Duration,
    ) -> MemoryResult<Option<MemoryResult<SweepReport>>> {
        let started = std::time::Instant::now();
        let lease = loop {
            if let Some(lease) = store.try_lifecycle_lease(key).await? {
                break lease;
            }
            if started.elapsed() >= lease_wait {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let report = match self.get(key).await {
            Ok(shard) => shard
                .ask(
                    |reply| ShardMsg::Sweep { kind, reply },
                    SWEEP_WAIT,
                    "the shard",
                )
                .await
                .and_then(|r| r),
            Err(e) => Err(e),
        };
        lease.release().await;
        Ok(Some(report))
    }
}

impl TreeLifecycle {
    /// Before the shards' cleanups: the past months whose episodes have all expired, retired
    /// whole (`store/episode_partitions.rs`), fleet-wide; what is left the shards delete row
    /// by row.
    async fn retire_expired_months(&self) {
        let config = &self.services.config.lifecycle;
        let cleanup = Cleanup::new(
            self.services.clock.now(),
            config.dead_letter_retention_days,
            0,
        );
        match self
            .services
            .store
            .retire_expired_episode_months(cleanup, SWEEP_ACTOR)
            .await
        {
            Ok(retired) => {
                for month in retired {
                    tracing::info!(
                        partition = month.partition,
                        episodes = month.episodes,
                        "a month of expired episodes retired whole"
                    );
                }
            }
            Err(error) => {
                tracing::warn!(%error, "retiring expired months failed; the shards' cleanups delete row by row")
            }
        }
    }
}

#[async_trait::async_trait]
impl LifecycleWork for TreeLifecycle {
    async fn last_run(&self, kind: SweepKind) -> MemoryResult<Option<DateTime<Utc>>> {
        self.services.store.last_run_of(kind.as_str()).await
    }

    async fn sweep_all(&self, kind: SweepKind, fire_at: DateTime<Utc>) {
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
        if kind == SweepKind::EpisodeCleanup {
            self.retire_expired_months().await;
        }
        for shard in keys {
            self.run_claimed(&SweepFire {
                shard,
                kind,
                fire_at,
            })
            .await;
        }
    }

    async fn take_over_abandoned(&self, now: DateTime<Utc>) {
        let store = &self.services.store;
        let abandoned = match store.abandoned_claims(now, self.lease()).await {
            Ok(abandoned) => abandoned,
            Err(e) => {
                tracing::warn!(error = %e, "abandoned sweeps unknown; the next tick looks again");
                return;
            }
        };
        for fire in abandoned {
            tracing::warn!(shard = %fire.shard, kind = %fire.kind, fire_at = %fire.fire_at,
                "taking over a sweep whose instance stopped before finishing it");
            self.run_claimed(&fire).await;
        }
        // Finished claims are only needed while their time's instances may still claim.
        if let Err(e) = store
            .forget_finished_claims(now - chrono::Duration::days(7))
            .await
        {
            tracing::warn!(error = %e, "forgetting finished sweep claims failed");
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
            let _ = self.run_on(&key, SweepKind::Consolidation).await;
        }
    }
}
