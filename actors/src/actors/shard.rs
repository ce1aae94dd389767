//! The shard actor: the only writer for one `(tenant_id, butler)`.
//!
//! Supervised by the root supervisor, which starts it on first use, restarts it with a
//! bounded policy when it fails, and stops it (draining its mailbox) after it has been idle
//! for `shards.idle_stop_secs`. It performs its shard's writes one at a time, in arrival
//! order, and answers each only after the transaction committed. Reads do not pass through
//! it, except as reference-count bumps (`Touch`), which it batches into one UPDATE per
//! flush. `Flush` is a barrier: it answers after everything sent before it is written.
//!
//! Episodes are group-committed: a `StoreEpisode` joins a pending group and the shard sends
//! itself `CommitEpisodes`, which reaches it after every message already queued; whatever
//! episodes arrived by then are written in one statement (rows and their events together,
//! atomic on its own) and each caller is answered after it committed. Any other write
//! first commits the pending group, so the shard's order of writes is their arrival order.
//!
//! Lifecycle changes of the shard's rows (confirmations, feedback, forgetting) are writes
//! like any other. Sweeps run here too, one bounded step per message (`SweepStep`), so they
//! are ordered with the writes without holding them up for more than one page. A batch's
//! extraction, which takes a model seconds per episode, runs in a task beside the shard;
//! its answer comes back as a message (`Extracted`) to the step that persists it.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::Instrument;
use uuid::Uuid;

use super::directory::ActorInfo;
use super::supervisor::SupervisorMsg;
use crate::domain::author::Author;
use crate::domain::episode::{Inserted, NewEpisode};
use crate::domain::fact::{NewFact, StoredFact};
use crate::domain::feedback::{Rated, RuleApplication};
use crate::domain::governance::Governance;
use crate::domain::memory_type::MemoryType;
use crate::domain::record::{Forgetting, MemoryRecord};
use crate::domain::rule::{NewRule, Rule};
use crate::domain::shard_key::ShardKey;
use crate::domain::sweep::{SweepKind, SweepReport};
use crate::error::MemoryResult;
use crate::services::{CommitNotices, Services};
use crate::store::references;
use crate::write_path::CommitQueue;

mod group_commit;
mod record_writes;
mod sweep_run;

pub use sweep_run::SWEEP_ACTOR;

#[cfg(test)]
mod tests;

use group_commit::{EpisodeReply, PendingEpisodes};
use record_writes::shard_span;
use sweep_run::SweepRun;

pub struct Shard;

/// What every shard shares besides the services: the cross-shard commit queue its episode
/// groups join, and where it announces rows that need embedding.
#[derive(Clone)]
pub struct ShardKit {
    pub commits: Arc<CommitQueue>,
    pub notices: CommitNotices,
}

pub struct ShardArgs {
    pub key: ShardKey,
    pub services: Arc<Services>,
    pub kit: ShardKit,
    pub info: Arc<ActorInfo>,
    /// Told when the shard has been idle, so that it is unregistered before it stops.
    pub supervisor: ActorRef<SupervisorMsg>,
}

pub enum ShardMsg {
    StoreEpisode {
        episode: Box<NewEpisode>,
        author: Author,
        reply: RpcReplyPort<MemoryResult<Inserted>>,
    },
    /// Episodes of one `memory_ingest_batch` for this shard, committed together.
    StoreEpisodes {
        episodes: Vec<NewEpisode>,
        author: Author,
        reply: RpcReplyPort<MemoryResult<Vec<Inserted>>>,
    },
    /// Internal: write the pending group of episodes.
    CommitEpisodes,
    StoreFact {
        fact: Box<NewFact>,
        author: Author,
        reply: RpcReplyPort<MemoryResult<StoredFact>>,
    },
    StoreRule {
        rule: Box<NewRule>,
        author: Author,
        reply: RpcReplyPort<MemoryResult<Rule>>,
    },
    /// Store a rewrite of a live rule and retract the rule it replaces, in one transaction.
    ReplaceRule {
        rule: Box<NewRule>,
        replaces: Uuid,
        reason: String,
        author: Author,
        reply: RpcReplyPort<MemoryResult<Rule>>,
    },
    /// Reset the decay clock of a fact or rule.
    Confirm {
        memory_type: MemoryType,
        id: Uuid,
        author: Author,
        reply: RpcReplyPort<MemoryResult<MemoryRecord>>,
    },
    /// Record how applying a rule went.
    Rate {
        application: RuleApplication,
        author: Author,
        reply: RpcReplyPort<MemoryResult<Rated>>,
    },
    Forget {
        memory_type: MemoryType,
        id: Uuid,
        reason: Option<String>,
        author: Author,
        reply: RpcReplyPort<MemoryResult<Forgetting>>,
    },
    /// An admin's decision about a rule.
    Govern {
        id: Uuid,
        decision: Governance,
        reason: String,
        author: Author,
        reply: RpcReplyPort<MemoryResult<Rule>>,
    },
    Restore {
        memory_type: MemoryType,
        id: Uuid,
        author: Author,
        reply: RpcReplyPort<MemoryResult<Forgetting>>,
    },
    /// Run a lifecycle sweep of this shard; answers when it is done.
    Sweep {
        kind: SweepKind,
        reply: RpcReplyPort<MemoryResult<SweepReport>>,
    },
    /// Internal: the next step of the sweep at the head of the queue.
    SweepStep,
    /// Internal: the extractor's answer for the batch the running sweep handed out.
    Extracted(sweep_run::ExtractionAnswer),
    /// These memories were read: bump their reference counts (batched).
    Touch {
        memory_type: MemoryType,
        ids: Vec<Uuid>,
    },
    /// Answer once every message sent before this one is done and written.
    Flush {
        reply: RpcReplyPort<MemoryResult<()>>,
    },
    /// Periodic: write pending touches; stop if idle.
    Tick,
    /// Fail on purpose, as a crash would (an error, or a panic): exercises supervision.
    #[cfg(feature = "testkit")]
    InjectFailure { panic: bool },
}

pub struct ShardState {
    key: ShardKey,
    services: Arc<Services>,
    kit: ShardKit,
    info: Arc<ActorInfo>,
    supervisor: ActorRef<SupervisorMsg>,
    last_work: Instant,
    touches: HashMap<MemoryType, HashMap<Uuid, i32>>,
    last_touch_flush: Instant,
    /// Sweeps asked for, the running one first.
    sweeps: VecDeque<(SweepRun, RpcReplyPort<MemoryResult<SweepReport>>)>,
    /// Episodes waiting for the next group commit, in arrival order.
    pending: Vec<PendingEpisodes>,
    pending_count: usize,
    /// Tasks answering the groups handed to the cross-shard group commit, oldest first.
    committing: Vec<tokio::task::JoinHandle<()>>,
}

impl Actor for Shard {
    type Msg = ShardMsg;
    type State = ShardState;
    type Arguments = ShardArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ShardArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let shards = &args.services.config.shards;
        let tick = Duration::from_millis(shards.touch_flush_ms.get())
            .min(Duration::from_secs(shards.idle_stop_secs.get()) / 4)
            .max(Duration::from_millis(10));
        myself.send_interval(tick, || ShardMsg::Tick);
        args.info.started();
        Ok(ShardState {
            key: args.key,
            services: args.services,
            kit: args.kit,
            info: args.info,
            supervisor: args.supervisor,
            last_work: Instant::now(),
            touches: HashMap::new(),
            last_touch_flush: Instant::now(),
            sweeps: VecDeque::new(),
            pending: Vec::new(),
            pending_count: 0,
            committing: Vec::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if !matches!(message, ShardMsg::Tick) {
            state.info.begin();
            state.last_work = Instant::now();
        }
        // Writes are done in arrival order: episodes handed over before go first.
        if message.waits_for_episodes() {
            state.settle_episodes().await;
        }
        match message {
            ShardMsg::StoreEpisode {
                episode,
                author,
                reply,
            } => {
                state.enqueue(
                    &myself,
                    PendingEpisodes {
                        episodes: vec![*episode],
                        author,
                        reply: EpisodeReply::One(reply),
                    },
                )?;
            }
            ShardMsg::StoreEpisodes {
                episodes,
                author,
                reply,
            } => {
                state.enqueue(
                    &myself,
                    PendingEpisodes {
                        episodes,
                        author,
                        reply: EpisodeReply::Many(reply),
                    },
                )?;
            }
            ShardMsg::CommitEpisodes => state.commit_pending(),
            ShardMsg::StoreFact {
                fact,
                author,
                reply,
            } => {
                let span = shard_span(&author, "store_fact", &state.key);
                let result = state.store_fact(&fact, &author).instrument(span).await;
                let _ = reply.send(result);
            }
            ShardMsg::StoreRule {
                rule,
                author,
                reply,
            } => {
                let span = shard_span(&author, "store_rule", &state.key);
                let result = state.store_rule(&rule, &author).instrument(span).await;
                let _ = reply.send(result);
            }
            ShardMsg::ReplaceRule {
                rule,
                replaces,
                reason,
                author,
                reply,
            } => {
                let span = shard_span(&author, "replace_rule", &state.key);
                let result = state
                    .replace_rule(&rule, replaces, &reason, &author)
                    .instrument(span)
                    .await;
                let _ = reply.send(result);
            }
            ShardMsg::Confirm {
                memory_type,
                id,
                author,
                reply,
            } => {
                let span = shard_span(&author, "confirm", &state.key);
                let result = state
                    .confirm(memory_type, id, &author)
                    .instrument(span)
                    .await;
                let _ = reply.send(result);
            }
            ShardMsg::Rate {
                application,
                author,
                reply,
            } => {
                let span = shard_span(&author, "rate", &state.key);
                let result = state.rate(&application, &author).instrument(span).await;
                let _ = reply.send(result);
            }
            ShardMsg::Govern {
                id,
                decision,
                reason,
                author,
                reply,
            } => {
                let span = shard_span(&author, "govern", &state.key);
                let result = state
                    .govern(id, decision, &reason, &author)
                    .instrument(span)
                    .await;
                let _ = reply.send(result);
            }
            ShardMsg::Forget {
                memory_type,
                id,
                reason,
                author,
                reply,
            } => {
                let span = shard_span(&author, "forget", &state.key);
                let result = state
                    .forget(memory_type, id, reason.as_deref(), &author)
                    .instrument(span)
                    .await;
                let _ = reply.send(result);
            }
            ShardMsg::Restore {
                memory_type,
                id,
                author,
                reply,
            } => {
                let span = shard_span(&author, "restore", &state.key);
                let result = state
                    .restore(memory_type, id, &author)
                    .instrument(span)
                    .await;
                let _ = reply.send(result);
            }
            ShardMsg::Sweep { kind, reply } => {
                let run = SweepRun::new(kind, state.key.clone(), state.services.clock.now());
                state.sweeps.push_back((run, reply));
                if state.sweeps.len() == 1 {
                    myself.send_message(ShardMsg::SweepStep)?;
                }
            }
            ShardMsg::SweepStep => {
                if state.sweep_step(&myself).await {
                    myself.send_message(ShardMsg::SweepStep)?;
                }
            }
            ShardMsg::Extracted(answer) => {
                if let Some((run, _)) = state.sweeps.front_mut() {
                    run.deliver(answer);
                    myself.send_message(ShardMsg::SweepStep)?;
                }
            }
            ShardMsg::Touch { memory_type, ids } => {
                let counts = state.touches.entry(memory_type).or_default();
                for id in ids {
                    *counts.entry(id).or_default() += 1;
                }
            }
            ShardMsg::Flush { reply } => {
                let _ = reply.send(state.flush_touches().await);
            }
            ShardMsg::Tick => {
                let flush_every =
                    Duration::from_millis(state.services.config.shards.touch_flush_ms.get());
                if state.last_touch_flush.elapsed() >= flush_every
                    && let Err(e) = state.flush_touches().await
                {
                    tracing::warn!(shard = %state.key, error = %e, "reference counts not written; will retry");
                }
                let idle_for =
                    Duration::from_secs(state.services.config.shards.idle_stop_secs.get());
                if state.last_work.elapsed() >= idle_for
                    && state.touches.is_empty()
                    && state.sweeps.is_empty()
                    && state.episodes_settled()
                {
                    // The supervisor unregisters us before draining, so no new work arrives.
                    let _ = state.supervisor.cast(SupervisorMsg::ShardIdle {
                        key: state.key.clone(),
                        actor: myself.get_id(),
                    });
                    // Not asking again on every tick while the supervisor acts.
                    state.last_work = Instant::now();
                }
            }
            #[cfg(feature = "testkit")]
            ShardMsg::InjectFailure { panic } => {
                let message = format!("injected failure in shard {}", state.key);
                if panic {
                    panic!("{message}");
                }
                return Err(message.into());
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Stopping while idle drains the mailbox first; what it left pending is written now.
        state.settle_episodes().await;
        if let Err(e) = state.flush_touches().await {
            tracing::warn!(shard = %state.key, error = %e, "reference counts lost at stop");
        }
        Ok(())
    }
}

impl ShardState {
    /// Runs one step of the sweep at the head of the queue; when it finishes, records it
    /// and answers. Returns whether another step is due now (not while a batch is with the
    /// extractor: its answer brings the next step).
    async fn sweep_step(&mut self, myself: &ActorRef<ShardMsg>) -> bool {
        let Some((run, _)) = self.sweeps.front_mut() else {
            return false;
        };
        let stepped = run.step(&self.services).await;
        let done = run.is_done();
        let stepped = match stepped {
            Ok(stepped) => {
                if stepped.changed > 0 {
                    // Reads see each committed page at once; inverted rules get embedded again.
                    self.committed();
                }
                if let Some(job) = stepped.extract {
                    self.extract(job, myself);
                    return false;
                }
                Ok(())
            }
            Err(e) => Err(e),
        };
        if stepped.is_ok() && !done {
            return true;
        }
        let (run, reply) = self.sweeps.pop_front().expect("a sweep at the head");
        let result = match stepped {
            Ok(_) => self.sweep_finished(run.finish()).await,
            Err(e) => {
                tracing::warn!(shard = %self.key, error = %e, "sweep failed; the next one resumes its work");
                metrics::counter!("butler_memory_sweeps_total", "outcome" => "failed").increment(1);
                Err(e)
            }
        };
        let _ = reply.send(result);
        !self.sweeps.is_empty()
    }

    /// Extracts a batch in a task of its own, and sends the answer back to this shard.
    fn extract(&self, job: sweep_run::ExtractionJob, myself: &ActorRef<ShardMsg>) {
        let extractor = self.services.extractor.clone();
        let shard = myself.clone();
        let span = tracing::info_span!("extraction", shard = %self.key, episodes = job.batch.len());
        tokio::spawn(
            async move {
                let answer = extractor.extract(&job.batch, &job.facts, &job.rules).await;
                // A shard stopped meanwhile (a crash) leaves the batch pending for a later run.
                let _ = shard.cast(ShardMsg::Extracted(answer));
            }
            .instrument(span),
        );
    }

    async fn sweep_finished(&self, report: SweepReport) -> MemoryResult<SweepReport> {
        let kind = report.kind.as_str();
        metrics::counter!("butler_memory_sweeps_total", "outcome" => "ok").increment(1);
        metrics::histogram!("butler_memory_sweep_duration_seconds", "kind" => kind)
            .record(report.elapsed_ms as f64 / 1000.0);
        for (change, n) in &report.changes {
            metrics::counter!("butler_memory_sweep_changes_total", "kind" => kind, "change" => change.clone())
                .increment(*n);
        }
        let finished = self.services.clock.now();
        self.services
            .store
            .record_run(
                &self.key,
                kind,
                report.as_of,
                finished,
                &serde_json::to_value(&report).unwrap_or_default(),
            )
            .await?;
        tracing::info!(shard = %self.key, kind, changes = ?report.changes, ms = report.elapsed_ms, "sweep done");
        Ok(report)
    }

    /// Writes the batched reference-count bumps, one UPDATE per memory type.
    async fn flush_touches(&mut self) -> MemoryResult<()> {
        self.last_touch_flush = Instant::now();
        if self.touches.is_empty() {
            return Ok(());
        }
        // While the database is known down, an attempt would only wait out a connection
        // timeout, holding the shard (and a stop) behind it; the bumps wait for a later one.
        self.services.database.check()?;
        let now = self.services.clock.now();
        // At most a day (config's problems), well within chrono's range.
        let resolution = self.services.config.shards.reference_date_resolution_secs as i64;
        let dated_before = now - chrono::Duration::seconds(resolution);
        let mut conn = self.services.store.writer().acquire().await?;
        for (memory_type, counts) in std::mem::take(&mut self.touches) {
            references::bump(
                &mut conn,
                memory_type,
                &self.key.tenant_id,
                counts,
                now,
                dated_before,
            )
            .await?;
        }
        Ok(())
    }
}

impl ShardMsg {
    /// Whether the message is a write (or a barrier) that must come after every episode
    /// handed over before it. Episodes join the pending group instead, and reference bumps
    /// and ticks are not writes of their own.
    fn waits_for_episodes(&self) -> bool {
        match self {
            ShardMsg::StoreEpisode { .. }
            | ShardMsg::StoreEpisodes { .. }
            | ShardMsg::CommitEpisodes
            | ShardMsg::Touch { .. }
            | ShardMsg::Extracted(_)
            | ShardMsg::Tick => false,
            #[cfg(feature = "testkit")]
            ShardMsg::InjectFailure { .. } => false,
            ShardMsg::StoreFact { .. }
            | ShardMsg::StoreRule { .. }
            | ShardMsg::ReplaceRule { .. }
            | ShardMsg::Confirm { .. }
            | ShardMsg::Rate { .. }
            | ShardMsg::Forget { .. }
            | ShardMsg::Govern { .. }
            | ShardMsg::Restore { .. }
            | ShardMsg::Sweep { .. }
            | ShardMsg::SweepStep
            | ShardMsg::Flush { .. } => true,
        }
    }
}
