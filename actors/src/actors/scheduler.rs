//! The scheduler actor: decides when the lifecycle sweeps run; the tree runs them.
//!
//! Every `lifecycle.scheduler_tick_ms` it compares the engine clock with each job's next
//! scheduled time (cron, UTC). When one is due it asks [`LifecycleWork`] to run that sweep
//! over every shard that holds data (each shard's once per scheduled time, however many
//! instances share the database: `store/lifecycle_claims.rs`) (a shard stopped while idle is started again for it,
//! DECISIONS.md #13); each shard runs it in order with its writes. At start, a job whose last
//! scheduled time passed while the service was down runs at the first tick
//! (`lifecycle.catch_up_missed_runs`).
//!
//! Each tick it also folds the count deltas the writers appended for `memory_stats`
//! (`store/projections.rs`), prunes the fleet's old keyword statistics on a shared database
//! (`store/keyword_counts.rs`), and has the shards whose consolidation backlog reached
//! `consolidation.trigger_backlog_size` or `trigger_backlog_age_secs` consolidated
//! (DECISIONS.md #14), so freshness holds between cron runs. While episodes are admitted
//! faster than `indexer.yield_above_writes_per_sec`, only the age trigger applies: a burst
//! keeps the CPU, and its backlog is consolidated after it. At start and each tick it keeps
//! the monthly partitions of the audit stream and of episodes made ahead, and drops the audit
//! stream's months past `lifecycle.event_retention_months` when one is set
//! (`store/event_partitions.rs`).
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
use crate::store::month_partitions::Monthly;

/// How long the fleet's keyword statistics are kept (`store/keyword_counts.rs`): far past
/// the longest any instance takes one (twice a 30 s trust window).
const SHARED_COUNTS_KEPT_MINUTES: i64 = 10;

/// The lifecycle work the scheduler times and the tree does: the scheduler knows when,
/// not how.
#[async_trait::async_trait]
pub trait LifecycleWork: Send + Sync + 'static {
    /// When a sweep of `kind` last finished, on any shard.
    async fn last_run(&self, kind: SweepKind) -> MemoryResult<Option<DateTime<Utc>>>;

    /// Runs the sweep of `kind` scheduled at `fire_at` on every shard that holds data, one
    /// shard after another: each shard's once fleet-wide (the instance that claims it).
    async fn sweep_all(&self, kind: SweepKind, fire_at: DateTime<Utc>);

    /// Runs the scheduled sweeps whose claiming instance stopped beating before finishing.
    async fn take_over_abandoned(&self, now: DateTime<Utc>);

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
                    // The missed time itself, not now: every instance that catches up
                    // claims the same run.
                    next = Some(due);
                }
            }
            jobs.push(Job {
                kind,
                schedule: schedule.clone(),
                next,
            });
        }
        keep_partitions(&args.services, now).await;
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
            // While the database is known down every step would wait out its connection
            // timeout and fail (and hold up a stop): the tick is skipped, and a sweep that
            // fell due runs at the first tick after the database answers again.
            SchedulerMsg::Tick if state.services.database.down().is_some() => {}
            SchedulerMsg::Tick => {
                let now = state.services.clock.now();
                let hot = state.writes_hot();
                state.work.consolidate_backlogs(now, hot).await;
                state.work.take_over_abandoned(now).await;
                // The stats' projections: fold the deltas the writers appended since.
                if let Err(error) = state.services.store.compact_counts().await {
                    tracing::warn!(%error, "folding the stats' count deltas failed; the next tick retries");
                }
                keep_partitions(&state.services, now).await;
                if state.services.config.shared_database {
                    let before = now - chrono::Duration::minutes(SHARED_COUNTS_KEPT_MINUTES);
                    if let Err(error) = state.services.store.prune_shared_counts(before).await {
                        tracing::warn!(%error, "pruning the fleet's keyword statistics failed; the next tick retries");
                    }
                }
                for i in 0..state.jobs.len() {
                    if let Some(due) = state.jobs[i].next.filter(|due| *due <= now) {
                        state.info.begin();
                        let kind = state.jobs[i].kind;
                        state.work.sweep_all(kind, due).await;
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

/// The audit stream's partitions made ahead, and old ones dropped under the retention
/// (`store/event_partitions.rs`); episodes' partitions made ahead
/// (`store/month_partitions.rs`). A failure is logged and the next tick tries again.
async fn keep_partitions(services: &Services, now: DateTime<Utc>) {
    let lifecycle = &services.config.lifecycle;
    match services
        .store
        .keep_event_partitions(
            now,
            lifecycle.event_partitions_ahead,
            lifecycle.event_retention_months,
        )
        .await
    {
        Ok(upkeep) => {
            for partition in upkeep.created {
                tracing::info!(partition, "audit stream partition made ahead");
            }
            for partition in upkeep.dropped {
                tracing::warn!(
                    partition,
                    retention_months = lifecycle.event_retention_months,
                    "audit stream partition dropped under lifecycle.event_retention_months"
                );
            }
        }
        Err(error) => {
            tracing::warn!(%error, "keeping the audit stream's partitions failed; the next tick retries")
        }
    }
    match services
        .store
        .keep_months_ahead(Monthly::Episodes, now, lifecycle.episode_partitions_ahead)
        .await
    {
        Ok(created) => {
            for partition in created {
                tracing::info!(partition, "episodes partition made ahead");
            }
        }
        Err(error) => {
            tracing::warn!(%error, "keeping the episodes' partitions failed; the next tick retries")
        }
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

#[cfg(test)]
mod tests {
    use std::num::NonZeroU64;

    use chrono::TimeZone;
    use tokio::sync::mpsc;

    use super::*;
    use crate::actors::directory::{ActorDirectory, ActorKind};
    use crate::clock::ManualClock;

    /// What the scheduler asked of the tree.
    #[derive(Debug, PartialEq)]
    enum Asked {
        /// The backlog check every tick makes (at this clock time).
        Backlogs(DateTime<Utc>),
        Sweep(SweepKind),
    }

    /// Lifecycle work that only reports what it was asked.
    struct Recorder {
        asked: mpsc::UnboundedSender<Asked>,
        last_run: Option<DateTime<Utc>>,
    }

    #[async_trait::async_trait]
    impl LifecycleWork for Recorder {
        async fn last_run(&self, _kind: SweepKind) -> MemoryResult<Option<DateTime<Utc>>> {
            Ok(self.last_run)
        }

        async fn sweep_all(&self, kind: SweepKind, _fire_at: DateTime<Utc>) {
            let _ = self.asked.send(Asked::Sweep(kind));
        }

        async fn take_over_abandoned(&self, _now: DateTime<Utc>) {}

        async fn consolidate_backlogs(&self, now: DateTime<Utc>, _writes_hot: bool) {
            let _ = self.asked.send(Asked::Backlogs(now));
        }
    }

    fn at(hour: u32, minute: u32, second: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 1, hour, minute, second)
            .unwrap()
    }

    /// A scheduler ticking every second of (paused) tokio time, on a clock the test moves.
    async fn scheduler(
        clock: Arc<ManualClock>,
        catch_up: bool,
        last_run: Option<DateTime<Utc>>,
    ) -> mpsc::UnboundedReceiver<Asked> {
        let mut services = Services::for_tests(clock);
        let lifecycle = &mut services.config.lifecycle;
        lifecycle.scheduler_tick_ms = NonZeroU64::new(1000).unwrap();
        lifecycle.catch_up_missed_runs = catch_up;
        let (asked, asking) = mpsc::unbounded_channel();
        let args = SchedulerArgs {
            services: Arc::new(services),
            work: Arc::new(Recorder { asked, last_run }),
            info: ActorDirectory::default().entry(ActorKind::Scheduler, "lifecycle"),
        };
        Actor::spawn(None, Scheduler, args).await.unwrap();
        asking
    }

    /// What the scheduler asks during the next `ticks` ticks, which all end before this
    /// returns: each tick begins with a backlog check, so the check of the tick after them
    /// marks their end.
    async fn next_ticks(asking: &mut mpsc::UnboundedReceiver<Asked>, ticks: usize) -> Vec<Asked> {
        let mut seen = Vec::new();
        let mut checks = 0;
        loop {
            let asked = asking.recv().await.expect("the scheduler runs");
            if matches!(asked, Asked::Backlogs(_)) {
                checks += 1;
                if checks > ticks {
                    return seen;
                }
            }
            seen.push(asked);
        }
    }

    fn sweeps(asked: &[Asked]) -> Vec<&SweepKind> {
        asked
            .iter()
            .filter_map(|a| match a {
                Asked::Sweep(kind) => Some(kind),
                Asked::Backlogs(_) => None,
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn each_sweep_runs_once_when_its_cron_time_comes() {
        let clock = Arc::new(ManualClock::new(at(2, 59, 30)));
        let mut asking = scheduler(clock.clone(), false, None).await;
        let quiet = next_ticks(&mut asking, 5).await;
        assert!(
            sweeps(&quiet).is_empty(),
            "nothing is due before 03:00: {quiet:?}"
        );
        assert!(quiet.contains(&Asked::Backlogs(at(2, 59, 30))));

        clock.set(at(3, 0, 1));
        let asked = next_ticks(&mut asking, 3).await;
        assert_eq!(sweeps(&asked), [&SweepKind::DecaySweep], "{asked:?}");

        clock.set(at(4, 0, 0));
        let asked = next_ticks(&mut asking, 3).await;
        assert_eq!(sweeps(&asked), [&SweepKind::EpisodeCleanup], "{asked:?}");

        clock.set(at(6, 0, 0));
        let asked = next_ticks(&mut asking, 3).await;
        assert_eq!(sweeps(&asked), [&SweepKind::Consolidation], "{asked:?}");

        // A day later each daily sweep is due once more; the six-hourly one four times over
        // but it runs once: a run skips the times it overlapped.
        clock.set(at(6, 0, 0) + chrono::Duration::days(1));
        let asked = next_ticks(&mut asking, 3).await;
        assert_eq!(
            sweeps(&asked),
            [
                &SweepKind::DecaySweep,
                &SweepKind::EpisodeCleanup,
                &SweepKind::Consolidation
            ],
            "{asked:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_missed_while_down_runs_at_the_first_tick() {
        // 05:00: the decay sweep (03:00) and the cleanup (04:00) last ran the day before;
        // consolidation's last time (00:00) is after its last run too.
        let clock = Arc::new(ManualClock::new(at(5, 0, 0)));
        let yesterday = at(5, 0, 0) - chrono::Duration::days(1);
        let mut asking = scheduler(clock.clone(), true, Some(yesterday)).await;
        let asked = next_ticks(&mut asking, 1).await;
        assert_eq!(
            sweeps(&asked),
            [
                &SweepKind::DecaySweep,
                &SweepKind::EpisodeCleanup,
                &SweepKind::Consolidation
            ],
            "{asked:?}"
        );
        let later = next_ticks(&mut asking, 3).await;
        assert!(sweeps(&later).is_empty(), "caught up once: {later:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_not_missed_is_not_repeated_at_start() {
        let clock = Arc::new(ManualClock::new(at(5, 0, 0)));
        let mut asking = scheduler(clock, true, Some(at(4, 30, 0))).await;
        let asked = next_ticks(&mut asking, 3).await;
        assert!(sweeps(&asked).is_empty(), "{asked:?}");
    }
}
