//! One sweep of one shard as a sequence of bounded steps. The shard actor runs one step per
//! message and queues the next behind whatever arrived meanwhile, so a sweep over a large
//! shard stays ordered with the shard's writes without stalling them: a write waits for at
//! most one page, never for the whole sweep.
//!
//! Consolidation's extraction is not a step: a model takes seconds per episode. The step that
//! reads a batch hands it out ([`Stepped::extract`]); the shard runs the extraction in a task
//! of its own and goes on with its writes, and delivers the answer ([`SweepRun::deliver`])
//! to the step that persists it.
//!
//! Everything a sweep decides is judged at one instant (`as_of`, the clock when it began),
//! so re-running it at that instant finds nothing left to change.

use std::collections::VecDeque;
use std::time::Instant;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::consolidation::{ExtractError, ExtractedBy};
use crate::domain::consolidation_status::AttemptFailure;
use crate::domain::extraction::{Extraction, KnownFact, SourceEpisode};
use crate::domain::shard_key::ShardKey;
use crate::domain::sweep::{SweepKind, SweepReport};
use crate::error::{MemoryError, MemoryResult};
use crate::services::Services;
use crate::store::consolidation_queue::Attempt;
use crate::store::decay_sweep::{DecayTable, Thresholds};
use crate::store::episode_cleanup::Cleanup;

/// The actor recorded in `memory_events` for sweep changes.
pub const SWEEP_ACTOR: &str = "sweep";

/// The shard's live facts and rules an extractor is given as reference, most recently
/// confirmed first (each message carries those most related to its episode).
const KNOWN_FOR_EXTRACTION: i64 = 500;

#[derive(Debug, Clone, Copy)]
enum Stage {
    Decay {
        table: DecayTable,
        after: Uuid,
    },
    Reevaluate,
    Expired,
    Capacity,
    /// The next batch: a refused batch's episodes one at a time, else the oldest pending.
    Consolidate,
    /// The batch is with the extractor; the run waits for its answer.
    Extracting,
    Done,
}

/// A batch handed out for extraction, with its reference.
pub struct ExtractionJob {
    pub batch: Vec<SourceEpisode>,
    pub facts: Vec<KnownFact>,
    pub rules: Vec<String>,
}

/// What the extractor answered.
pub type ExtractionAnswer = Result<(Extraction, ExtractedBy), ExtractError>;

/// What one step did.
pub struct Stepped {
    /// Rows it changed.
    pub changed: u64,
    /// A batch to extract: the run waits for [`SweepRun::deliver`].
    pub extract: Option<ExtractionJob>,
}

/// The batch with the extractor.
#[derive(Debug)]
struct InFlight {
    batch: Vec<SourceEpisode>,
    facts: Vec<KnownFact>,
    answer: Option<ExtractionAnswer>,
}

/// A sweep in progress.
#[derive(Debug)]
pub struct SweepRun {
    report: SweepReport,
    stage: Stage,
    started: Instant,
    /// A consolidation attempt failed in this run: stop, the batch waits for its retry.
    failed: bool,
    /// A refused batch's episodes, tried one at a time before the next batch is read.
    singles: VecDeque<SourceEpisode>,
    /// The last batch read was full: more may be pending.
    more_pending: bool,
    in_flight: Option<InFlight>,
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
            singles: VecDeque::new(),
            more_pending: false,
            in_flight: None,
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

    /// Runs one bounded step (one page or batch, in its own transaction), or hands a batch
    /// out for extraction.
    pub async fn step(&mut self, services: &Services) -> MemoryResult<Stepped> {
        let before = self.report.changed();
        let extract = self.advance(services).await?;
        Ok(Stepped {
            changed: self.report.changed() - before,
            extract,
        })
    }

    /// The extractor's answer for the batch handed out; the next step persists it.
    pub fn deliver(&mut self, answer: ExtractionAnswer) {
        if let Some(flight) = &mut self.in_flight {
            flight.answer = Some(answer);
        }
    }

    async fn advance(&mut self, services: &Services) -> MemoryResult<Option<ExtractionJob>> {
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
                let batch = match self.singles.pop_front() {
                    Some(single) => vec![single],
                    None => {
                        let batch_size = config.consolidation.batch_size.get() as usize;
                        let batch = store
                            .pending_episodes(&shard, as_of, batch_size as i64)
                            .await?;
                        self.more_pending = batch.len() == batch_size;
                        batch
                    }
                };
                if batch.is_empty() {
                    Stage::Done
                } else {
                    let (facts, rules) = store
                        .known_for_consolidation(&shard, KNOWN_FOR_EXTRACTION)
                        .await?;
                    let job = ExtractionJob {
                        batch: batch.clone(),
                        facts: facts.clone(),
                        rules,
                    };
                    self.in_flight = Some(InFlight {
                        batch,
                        facts,
                        answer: None,
                    });
                    self.stage = Stage::Extracting;
                    return Ok(Some(job));
                }
            }
            Stage::Extracting => {
                let Some(InFlight {
                    batch,
                    facts,
                    answer: Some(answer),
                }) = self.in_flight.take()
                else {
                    return Err(MemoryError::internal(
                        "a consolidation step ran before its extraction answered",
                    ));
                };
                self.consolidate(services, &shard, &batch, &facts, answer)
                    .await?;
                if self.failed {
                    Stage::Done
                } else if !self.singles.is_empty() || self.more_pending {
                    Stage::Consolidate
                } else {
                    Stage::Done
                }
            }
            Stage::Done => Stage::Done,
        };
        Ok(None)
    }

    /// One consolidation job: validate and persist what the extractor answered, or record
    /// a failed attempt. The episodes of a batch the extractor refused are tried again one
    /// at a time, so that only the episode refused on its own is `failed`.
    async fn consolidate(
        &mut self,
        services: &Services,
        shard: &ShardKey,
        batch: &[SourceEpisode],
        facts: &[KnownFact],
        answer: ExtractionAnswer,
    ) -> MemoryResult<()> {
        let store = &services.store;
        let config = &services.config.consolidation;
        let as_of = self.report.as_of;
        let (extracted, by) = match answer {
            Ok((extraction, by)) => (
                extraction
                    .validated(batch, facts, &services.config.limits)
                    .map_err(|e| {
                        (
                            AttemptFailure::InvalidAnswer,
                            format!("the extractor's answer is not valid: {e}"),
                        )
                    }),
                by,
            ),
            Err(e) => (Err((e.kind(), e.to_string())), config.extractor.as_str()),
        };
        match extracted {
            Ok(extraction) => {
                let outcome = store
                    .persist_consolidation(shard, batch, &extraction, by, &services.redactor, as_of)
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
                let rejected: u64 = extraction.rejected.values().sum();
                self.report.add("items_rejected", rejected);
            }
            Err((AttemptFailure::Refused, error)) if batch.len() > 1 => {
                tracing::info!(shard = %shard, %error, episodes = batch.len(), "batch refused; trying its episodes one at a time");
                self.singles.extend(batch.iter().cloned());
            }
            Err((failure, error)) => {
                tracing::warn!(shard = %shard, %error, ?failure, "consolidation attempt failed");
                let (base, max) = (config.retry_base_secs, config.retry_max_secs);
                let attempt = Attempt {
                    extractor: by,
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
