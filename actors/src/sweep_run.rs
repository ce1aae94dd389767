//! One sweep of one shard as a sequence of bounded steps. The shard actor runs one step per
//! message and queues the next behind whatever arrived meanwhile, so a sweep over a large
//! shard stays ordered with the shard's writes without stalling them: a write waits for at
//! most one page, never for the whole sweep.
//!
//! Everything a sweep decides is judged at one instant (`as_of`, the clock when it began),
//! so re-running it at that instant finds nothing left to change.

use std::time::Instant;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::context::EngineContext;
use crate::domain::heuristic_extractor;
use crate::domain::shard_key::ShardKey;
use crate::domain::sweep::{SweepKind, SweepReport};
use crate::error::{MemoryError, MemoryResult};
use crate::store::decay_sweep::{DecayTable, Thresholds};
use crate::store::episode_cleanup::Cleanup;

/// The actor recorded in `memory_events` for sweep changes.
pub const SWEEP_ACTOR: &str = "sweep";

#[derive(Debug, Clone, Copy)]
enum Stage {
    Decay { table: DecayTable, after: Uuid },
    Reevaluate,
    Expired,
    Capacity,
    Consolidate,
    Done,
}

/// A sweep in progress.
#[derive(Debug)]
pub struct SweepRun {
    report: SweepReport,
    stage: Stage,
    started: Instant,
}

impl SweepRun {
    pub fn new(kind: SweepKind, shard: ShardKey, as_of: DateTime<Utc>) -> Self {
        let stage = match kind {
            SweepKind::DecaySweep => Stage::Decay {
                table: DecayTable::Facts,
                after: Uuid::nil(),
            },
            SweepKind::EpisodeCleanup => Stage::Expired,
            SweepKind::Consolidation => Stage::Consolidate,
        };
        SweepRun {
            report: SweepReport::new(kind, shard, as_of),
            stage,
            started: Instant::now(),
        }
    }

    pub fn is_done(&self) -> bool {
        matches!(self.stage, Stage::Done)
    }

    /// The report, once done.
    pub fn finish(mut self) -> SweepReport {
        self.report.elapsed_ms = self.started.elapsed().as_millis() as u64;
        self.report
    }

    /// Runs one bounded step (one page or batch, in its own transaction). Returns how many
    /// rows it changed.
    pub async fn step(&mut self, ctx: &EngineContext) -> MemoryResult<u64> {
        let before = self.report.changed();
        self.advance(ctx).await?;
        Ok(self.report.changed() - before)
    }

    async fn advance(&mut self, ctx: &EngineContext) -> MemoryResult<()> {
        let store = &ctx.store;
        let config = &ctx.config;
        let page_size = i64::from(config.lifecycle.sweep_page_size);
        let shard = self.report.shard.clone();
        let as_of = self.report.as_of;
        self.stage = match self.stage {
            Stage::Decay { table, after } => {
                let thresholds = Thresholds {
                    retrieval: config.facts.retrieval_confidence_threshold,
                    expiry: config.facts.expiry_confidence_threshold,
                };
                let page = store
                    .decay_page(
                        &shard,
                        table,
                        after,
                        page_size,
                        as_of,
                        thresholds,
                        SWEEP_ACTOR,
                    )
                    .await?;
                let entity = table.entity();
                self.report.scanned += page.scanned as u64;
                self.report
                    .add(&format!("{entity}_fading"), page.fading as u64);
                self.report
                    .add(&format!("{entity}_expired"), page.expired as u64);
                self.report
                    .add(&format!("{entity}_active"), page.active as u64);
                match (page.last_id, table) {
                    (Some(last), _) if page.scanned == page_size => {
                        Stage::Decay { table, after: last }
                    }
                    (_, DecayTable::Facts) => Stage::Decay {
                        table: DecayTable::Rules,
                        after: Uuid::nil(),
                    },
                    (_, DecayTable::Rules) => Stage::Reevaluate,
                }
            }
            Stage::Reevaluate => {
                let (promoted, inverted) = store
                    .reevaluate_rules(&shard, as_of, &config.rules, SWEEP_ACTOR)
                    .await?;
                self.report.add("rule_promoted", promoted);
                self.report.add("rule_inverted", inverted);
                Stage::Done
            }
            Stage::Expired => {
                let cleanup = self.cleanup(ctx, page_size);
                let n = store
                    .delete_expired_episodes(&shard, cleanup, SWEEP_ACTOR)
                    .await?;
                self.report.add("expired_deleted", n);
                if n as i64 == page_size {
                    Stage::Expired
                } else {
                    Stage::Capacity
                }
            }
            Stage::Capacity => {
                let count = store.shard_episode_count(&shard).await?;
                self.report.scanned = count;
                let max = config.episodes.max_entries;
                if count <= max {
                    Stage::Done
                } else {
                    let cleanup = self.cleanup(ctx, page_size);
                    let n = store
                        .delete_over_capacity_episodes(&shard, cleanup, count - max, SWEEP_ACTOR)
                        .await?;
                    self.report.add("capacity_deleted", n);
                    if n == 0 {
                        self.report.over_capacity_protected = Some(count - max);
                        Stage::Done
                    } else {
                        self.report.scanned = count - n;
                        Stage::Capacity
                    }
                }
            }
            Stage::Consolidate => {
                let batch_size = i64::from(config.consolidation.batch_size);
                let batch = store.pending_episodes(&shard, as_of, batch_size).await?;
                if batch.is_empty() {
                    Stage::Done
                } else {
                    let extraction = heuristic_extractor::extract(&batch);
                    extraction
                        .validate(&batch, config.limits.max_key_chars.max(1000))
                        .map_err(|e| MemoryError::internal(format!("extraction invalid: {e}")))?;
                    let outcome = store
                        .persist_consolidation(&shard, &batch, &extraction, "heuristic", as_of)
                        .await?;
                    self.report.scanned += outcome.episodes;
                    self.report.add("episodes_consolidated", outcome.episodes);
                    self.report.add("facts_created", outcome.facts_created);
                    self.report
                        .add("facts_superseded", outcome.facts_superseded);
                    self.report.add("facts_confirmed", outcome.facts_confirmed);
                    self.report.add("rules_created", outcome.rules_created);
                    self.report.add("rules_confirmed", outcome.rules_confirmed);
                    if (batch.len() as i64) < batch_size {
                        Stage::Done
                    } else {
                        Stage::Consolidate
                    }
                }
            }
            Stage::Done => Stage::Done,
        };
        Ok(())
    }

    fn cleanup(&self, ctx: &EngineContext, batch: i64) -> Cleanup {
        Cleanup::new(
            self.report.as_of,
            ctx.config.lifecycle.dead_letter_retention_days,
            batch,
        )
    }
}
