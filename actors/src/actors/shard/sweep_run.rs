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

use crate::consolidation::Extractor;
use crate::domain::consolidation_status::AttemptFailure;
use crate::domain::extraction::SourceEpisode;
use crate::domain::shard_key::ShardKey;
use crate::domain::sweep::{SweepKind, SweepReport};
use crate::error::MemoryResult;
use crate::services::Services;
use crate::store::consolidation_queue::Attempt;
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
    /// A consolidation attempt failed in this run: stop, the batch waits for its retry.
    failed: bool,
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
            failed: false,
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
    pub async fn step(&mut self, services: &Services, extractor: &Extractor) -> MemoryResult<u64> {
        let before = self.report.changed();
        self.advance(services, extractor).await?;
        Ok(self.report.changed() - before)
    }

    async fn advance(&mut self, services: &Services, extractor: &Extractor) -> MemoryResult<()> {
        let store = &services.store;
        let config = &services.config;
        let page_size = i64::from(config.lifecycle.sweep_page_size.get());
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
                metrics::counter!("butler_memory_rule_inversions_total", "path" => "sweep")
                    .increment(inverted);
                Stage::Done
            }
            Stage::Expired => {
                let cleanup = self.cleanup(services, page_size);
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
                let max = config.episodes.max_entries.get();
                if count <= max {
                    Stage::Done
                } else {
                    let cleanup = self.cleanup(services, page_size);
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
                let batch_size = i64::from(config.consolidation.batch_size.get());
                let batch = store.pending_episodes(&shard, as_of, batch_size).await?;
                if batch.is_empty() {
                    Stage::Done
                } else {
                    self.consolidate(services, extractor, &shard, &batch)
                        .await?;
                    if self.failed || (batch.len() as i64) < batch_size {
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

    /// One consolidation job: extract, validate, persist — or record a failed attempt. A
    /// batch the extractor refuses is tried again one episode at a time, so that only the
    /// episode refused on its own is `failed`.
    async fn consolidate(
        &mut self,
        services: &Services,
        extractor: &Extractor,
        shard: &ShardKey,
        batch: &[SourceEpisode],
    ) -> MemoryResult<()> {
        let store = &services.store;
        let config = &services.config.consolidation;
        let as_of = self.report.as_of;
        let (facts, rules) = store.known_for_consolidation(shard, 200).await?;
        let extracted = match extractor.extract(batch, &facts, &rules).await {
            Ok(extraction) => extraction
                .validated(batch, &facts, &services.config.limits)
                .map_err(|e| {
                    (
                        AttemptFailure::InvalidAnswer,
                        format!("the extractor's answer is not valid: {e}"),
                    )
                }),
            Err(e) => Err((e.kind(), e.to_string())),
        };
        match extracted {
            Ok(extraction) => {
                let outcome = store
                    .persist_consolidation(
                        shard,
                        batch,
                        &extraction,
                        extractor.name(),
                        &services.redactor,
                        as_of,
                    )
                    .await?;
                self.report.scanned += outcome.episodes;
                self.report.add("episodes_consolidated", outcome.episodes);
                self.report.add("facts_created", outcome.facts_created);
                self.report
                    .add("facts_superseded", outcome.facts_superseded);
                metrics::counter!("butler_memory_supersessions_total", "path" => "consolidation")
                    .increment(outcome.facts_superseded);
                crate::services::count_redactions(&outcome.redacted);
                self.report.add("facts_confirmed", outcome.facts_confirmed);
                self.report.add("rules_created", outcome.rules_created);
                self.report.add("rules_confirmed", outcome.rules_confirmed);
            }
            Err((AttemptFailure::Refused, error)) if batch.len() > 1 => {
                tracing::info!(shard = %shard, %error, episodes = batch.len(), "batch refused; trying its episodes one at a time");
                for episode in batch {
                    Box::pin(self.consolidate(
                        services,
                        extractor,
                        shard,
                        std::slice::from_ref(episode),
                    ))
                    .await?;
                    if self.failed {
                        break;
                    }
                }
            }
            Err((failure, error)) => {
                tracing::warn!(shard = %shard, %error, ?failure, "consolidation attempt failed");
                let (base, max) = (config.retry_base_secs, config.retry_max_secs);
                let attempt = Attempt {
                    extractor: extractor.name(),
                    error: &error,
                    failure,
                    at: as_of,
                };
                let failed = store
                    .record_failed_attempt(
                        shard,
                        batch,
                        attempt,
                        config.max_attempts.get(),
                        |attempt| backoff(attempt, base, max),
                    )
                    .await?;
                self.report.add("episodes_retrying", failed.retrying);
                self.report
                    .add("episodes_dead_lettered", failed.dead_lettered);
                self.report.add("episodes_failed", failed.failed);
                // Episodes left to retry wait for their time; this run stops here. What
                // reached a terminal state is done with, and the run goes on.
                if failed.retrying > 0 {
                    self.failed = true;
                }
            }
        }
        Ok(())
    }

    fn cleanup(&self, services: &Services, batch: i64) -> Cleanup {
        Cleanup::new(
            self.report.as_of,
            services.config.lifecycle.dead_letter_retention_days,
            batch,
        )
    }
}

/// Exponential backoff with jitter: `base * 2^(attempt-1)`, at most `max`, then between
/// half and all of it (so retries of many shards do not land together).
fn backoff(attempt: i32, base_secs: f64, max_secs: f64) -> chrono::Duration {
    let exp = base_secs * 2f64.powi((attempt - 1).clamp(0, 30));
    let capped = exp.min(max_secs);
    let jitter = 0.5 + 0.5 * rand_fraction();
    chrono::Duration::milliseconds((capped * jitter * 1000.0) as i64)
}

/// A fraction in [0, 1) from the clock's nanoseconds: jitter needs spread, not quality.
fn rand_fraction() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    f64::from(nanos % 1_000_000) / 1_000_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        for attempt in 1..=10 {
            let d = backoff(attempt, 60.0, 3600.0).num_milliseconds() as f64 / 1000.0;
            let full = (60.0 * 2f64.powi(attempt - 1)).min(3600.0);
            assert!(
                d >= full * 0.5 - 0.001 && d <= full + 0.001,
                "{attempt}: {d}"
            );
        }
    }
}
