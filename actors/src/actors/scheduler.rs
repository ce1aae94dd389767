//! The scheduler actor: decides when the lifecycle sweeps run; the tree runs them.
//!
//! Every `lifecycle.scheduler_tick_ms` it compares the engine clock with each job's next
//! scheduled time (cron, UTC). When one is due it asks [`LifecycleWork`] to run that sweep
//! over every shard that holds data (a shard stopped while idle is started again for it,
//! DECISIONS.md #13); each shard runs it in order with its writes. At start, a job whose last
//! scheduled time passed while the service was down runs at the first tick
//! (`lifecycle.catch_up_missed_runs`).
//!
//! Each tick it also has the shards whose consolidation backlog reached
//! `consolidation.trigger_backlog_size` or `trigger_backlog_age_secs` consolidated
//! (DECISIONS.md #14), so freshness holds between cron runs. While episodes are admitted
//! faster than `indexer.yield_above_writes_per_sec`, only the age trigger applies: a burst
//! keeps the CPU, and its backlog is consolidated after it.
//!
//! Supervised by the root supervisor; it holds no state worth keeping across a restart
//! (the schedules are recomputed, missed runs caught up from the record of runs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::directory::ActorInfo;
use crate::domain::cron::CronSchedule;
use crate::domain::sweep::SweepKind;
use crate::error::MemoryResult;
use crate::services::Services;

/// The lifecycle work the scheduler times and the tree does: the scheduler knows when,
/// not how.
#[async_trait::async_trait]
pub trait LifecycleWork: Send + Sync + 'static {
    /// When a sweep of `kind` last finished, on any shard.
    async fn last_run(&self, kind: SweepKind) -> MemoryResult<Option<DateTime<Utc>>>;

    /// Runs a sweep of `kind` on every shard that holds data, one shard after another.
    async fn sweep_all(&self, kind: SweepKind);

    /// Consolidates the shards whose backlog is over a trigger at `now` (only over the age
    /// trigger while `writes_hot`), and exports the backlog's size and age.
    async fn consolidate_backlogs(&self, now: DateTime<Utc>, writes_hot: bool);
}

pub struct Scheduler;

pub struct SchedulerArgs {
    pub services: Arc<Services>,
    pub work: Arc<dyn LifecycleWork>,
    pub info: Arc<ActorInfo>,
}

pub enum SchedulerMsg {
    Tick,
}

struct Job {
    kind: SweepKind,
    schedule: CronSchedule,
    next: Option<DateTime<Utc>>,
}

pub struct SchedulerState {
    services: Arc<Services>,
    work: Arc<dyn LifecycleWork>,
    info: Arc<ActorInfo>,
    jobs: Vec<Job>,
    /// Episodes admitted so far and when that was read, for the write rate.
    writes_seen: (Instant, u64),
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
        let lifecycle = &args.services.config.lifecycle;
        let now = args.services.clock.now();
        let mut jobs = Vec::new();
        for (kind, schedule) in [
            (SweepKind::DecaySweep, &lifecycle.decay_sweep_cron),
            (SweepKind::EpisodeCleanup, &lifecycle.episode_cleanup_cron),
            (SweepKind::Consolidation, &lifecycle.consolidation_cron),
        ] {
            let mut next = schedule.next_after(now);
            if lifecycle.catch_up_missed_runs
                && let Some(due) = schedule.last_at_or_before(now)
            {
                let last = args.work.last_run(kind).await?;
                if last.is_none_or(|last| last < due) {
                    next = Some(now);
                }
            }
            jobs.push(Job {
                kind,
                schedule: schedule.clone(),
                next,
            });
        }
        let tick = Duration::from_millis(lifecycle.scheduler_tick_ms.get());
        myself.send_interval(tick, || SchedulerMsg::Tick);
        args.info.started();
        Ok(SchedulerState {
            services: args.services,
            work: args.work,
            info: args.info,
            jobs,
            writes_seen: (Instant::now(), 0),
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
                let now = state.services.clock.now();
                let hot = state.writes_hot();
                state.work.consolidate_backlogs(now, hot).await;
                for i in 0..state.jobs.len() {
                    if state.jobs[i].next.is_some_and(|due| due <= now) {
                        state.info.begin();
                        let kind = state.jobs[i].kind;
                        state.work.sweep_all(kind).await;
                        // Judged from the clock after the run: a long run skips the times it
                        // overlapped rather than queueing them up.
                        let after = state.services.clock.now().max(now);
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
    /// Whether episodes were admitted faster than the indexer's yield threshold since the
    /// last tick: the size trigger would spend the CPU a burst needs on work that can wait.
    fn writes_hot(&mut self) -> bool {
        let threshold = self.services.config.indexer.yield_above_writes_per_sec;
        let (since, seen) = self.writes_seen;
        let admitted = self.services.admission.admitted_total();
        let rate = admitted.saturating_sub(seen) as f64 / since.elapsed().as_secs_f64().max(1e-3);
        self.writes_seen = (Instant::now(), admitted);
        threshold > 0.0 && rate > threshold
    }
}
