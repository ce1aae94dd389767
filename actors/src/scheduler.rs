//! The scheduler actor: runs the lifecycle sweeps on their cron schedules.
//!
//! Every `lifecycle.scheduler_tick_ms` it compares the engine clock with each job's next
//! scheduled time. When one is due it finds every shard that holds data (a shard stopped
//! while idle is started again for it, DECISIONS.md #13) and asks each, one after another,
//! to run the sweep; the shard runs it in order with its writes. At start, a job whose last
//! scheduled time passed while the service was down runs at the first tick
//! (`lifecycle.catch_up_missed_runs`).
//!
//! Each tick it also exports the consolidation backlog (size and age) and consolidates
//! right away any shard whose backlog reached `consolidation.trigger_backlog_size` or
//! `trigger_backlog_age_secs` (DECISIONS.md #14), so freshness holds between cron runs.
//! While episodes are admitted faster than `indexer.yield_above_writes_per_sec`, only the
//! age trigger applies: a burst keeps the CPU, and its backlog is consolidated after it.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::actor_directory::ActorInfo;
use crate::context::EngineContext;
use crate::domain::sweep::SweepKind;
use crate::schedule::Schedule;
use crate::shard::ShardMsg;
use crate::supervisor::SupervisorMsg;

/// How long the scheduler waits for one shard's sweep before moving on to the next shard.
const SWEEP_WAIT: Duration = Duration::from_secs(30 * 60);

pub struct Scheduler;

pub struct SchedulerArgs {
    pub ctx: Arc<EngineContext>,
    pub info: Arc<ActorInfo>,
    pub supervisor: ActorRef<SupervisorMsg>,
}

pub enum SchedulerMsg {
    Tick,
}

struct Job {
    kind: SweepKind,
    schedule: Schedule,
    next: Option<DateTime<Utc>>,
}

pub struct SchedulerState {
    ctx: Arc<EngineContext>,
    info: Arc<ActorInfo>,
    supervisor: ActorRef<SupervisorMsg>,
    jobs: Vec<Job>,
    /// Episodes admitted so far and when that was read, for the write rate.
    writes_seen: (std::time::Instant, u64),
}

impl Actor for Scheduler {
    type Msg = SchedulerMsg;
    type State = SchedulerState;
    type Arguments = SchedulerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SchedulerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let lifecycle = &args.ctx.config.lifecycle;
        let now = args.ctx.clock.now();
        let mut jobs = Vec::new();
        for (kind, expression) in [
            (SweepKind::DecaySweep, &lifecycle.decay_sweep_cron),
            (SweepKind::EpisodeCleanup, &lifecycle.episode_cleanup_cron),
            (SweepKind::Consolidation, &lifecycle.consolidation_cron),
        ] {
            let schedule = Schedule::parse(expression)?;
            let mut next = schedule.next_after(now);
            if lifecycle.catch_up_missed_runs
                && let Some(due) = schedule.last_at_or_before(now)
            {
                let last = args.ctx.store.last_run_of(kind.as_str()).await?;
                if last.is_none_or(|last| last < due) {
                    next = Some(now);
                }
            }
            jobs.push(Job {
                kind,
                schedule,
                next,
            });
        }
        myself.send_interval(Duration::from_millis(lifecycle.scheduler_tick_ms), || {
            SchedulerMsg::Tick
        });
        args.info.started();
        Ok(SchedulerState {
            ctx: args.ctx,
            info: args.info,
            supervisor: args.supervisor,
            jobs,
            writes_seen: (std::time::Instant::now(), 0),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SchedulerMsg::Tick => {
                let now = state.ctx.clock.now();
                state.consolidate_backlogs(now).await;
                for i in 0..state.jobs.len() {
                    if state.jobs[i].next.is_some_and(|due| due <= now) {
                        state.info.begin();
                        let kind = state.jobs[i].kind;
                        state.run(kind).await;
                        // Judged from the clock after the run: a long run skips the times it
                        // overlapped rather than queueing them up.
                        let after = state.ctx.clock.now().max(now);
                        state.jobs[i].next = state.jobs[i].schedule.next_after(after);
                        state.info.handled();
                    }
                }
            }
        }
        Ok(())
    }
}

impl SchedulerState {
    /// Exports the consolidation backlog and consolidates the shards over a trigger.
    async fn consolidate_backlogs(&mut self, now: DateTime<Utc>) {
        let store = &self.ctx.store;
        if let Ok((size, oldest)) = store.consolidation_backlog(now).await {
            metrics::gauge!("butler_memory_consolidation_backlog").set(size as f64);
            let age = oldest
                .map(|t| ((now - t).num_milliseconds() as f64 / 1000.0).max(0.0))
                .unwrap_or(0.0);
            metrics::gauge!("butler_memory_consolidation_backlog_age_seconds").set(age);
        }
        let config = &self.ctx.config.consolidation;
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
        // During a write burst only the age trigger counts: the size trigger would spend
        // the CPU the burst needs on work that can wait (as the indexer's yield does).
        let (since_read, seen) = self.writes_seen;
        let admitted = self.ctx.admission.admitted_total();
        let rate =
            admitted.saturating_sub(seen) as f64 / since_read.elapsed().as_secs_f64().max(1e-3);
        self.writes_seen = (std::time::Instant::now(), admitted);
        let hot = rate > self.ctx.config.indexer.yield_above_writes_per_sec
            && self.ctx.config.indexer.yield_above_writes_per_sec > 0.0;
        for backlog in shards {
            if hot && backlog.oldest > since {
                continue;
            }
            let key = crate::domain::shard_key::ShardKey::new(backlog.tenant_id, backlog.butler);
            tracing::info!(shard = %key, pending = backlog.pending, "consolidation backlog over its trigger");
            self.run_on(&key, SweepKind::Consolidation).await;
        }
    }

    /// Runs one sweep over every shard with data, one shard at a time.
    async fn run(&self, kind: SweepKind) {
        let keys = match self.ctx.store.shard_keys(None).await {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!(kind = %kind, error = %e, "scheduled sweep skipped: shards unknown");
                return;
            }
        };
        tracing::info!(kind = %kind, shards = keys.len(), "scheduled sweep");
        for key in keys {
            self.run_on(&key, kind).await;
        }
    }

    /// Runs one sweep on one shard, starting it if it is not running.
    async fn run_on(&self, key: &crate::domain::shard_key::ShardKey, kind: SweepKind) {
        let shard = match self
            .supervisor
            .call(
                |reply| SupervisorMsg::Shard {
                    key: key.clone(),
                    reply,
                },
                Some(Duration::from_secs(10)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(Ok(shard))) => shard,
            _ => {
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
