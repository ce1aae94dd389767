//! Writes: validated here against the caller's rights, performed by the owning shard.

use super::Engine;
use crate::actors::ShardMsg;
use crate::domain::author::Author;
use crate::domain::caller::Caller;
use crate::domain::episode::{EpisodeInput, Inserted, NewEpisode};
use crate::domain::fact::{FactInput, StoredFact};
use crate::domain::memory_type::MemoryType;
use crate::domain::redaction::Redactor;
use crate::domain::relation::LinkTarget;
use crate::domain::request_context::Lineage;
use crate::domain::rule::{NewRule, Rule, RuleInput};
use crate::domain::shard_key::ShardKey;
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::services::{count_redactions, redact_write};
use tracing::Instrument;
use uuid::Uuid;

impl Engine {
    /// Stores an episode in its butler's shard. Answers after it is committed (with the
    /// other episodes that reached the shard meanwhile: group commit), or refuses it at
    /// once as `overloaded` when the write budget is spent.
    pub async fn store_episode(
        &self,
        caller: &Caller,
        input: EpisodeInput,
        lineage: Lineage,
    ) -> MemoryResult<Inserted> {
        // While the database is down, every call fails at once, as `unavailable`.
        self.services.database.check()?;
        let mut episode = input.validate(
            caller,
            &self.services.config.limits,
            self.services.config.episodes.default_ttl_days,
            self.services.clock.now(),
        )?;
        self.redact(|r| episode.redact(r).map(count_redactions))?;
        let key = ShardKey::new(&caller.tenant_id, &episode.butler);
        let shard = self.shards.get(&key).await?;
        let _room = self.services.admission.admit(1, shard.info.queue_depth())?;
        let span = episode_write_span(&key, 1);
        let mut author = Author::new(caller.actor(), lineage);
        author.span = span.clone();
        shard
            .ask(
                |reply| ShardMsg::StoreEpisode {
                    episode: Box::new(episode),
                    author,
                    reply,
                },
                self.write_timeout(),
                "the shard",
            )
            .instrument(span)
            .await?
            .map(|inserted| self.acknowledged(inserted))
    }

    /// What an episode's writer is told was stored (the test kit may say otherwise).
    #[cfg(not(feature = "testkit"))]
    fn acknowledged(&self, inserted: Inserted) -> Inserted {
        inserted
    }

    /// `memory_ingest_batch`: many episodes, possibly of several butlers, each shard's share
    /// committed in one transaction, answered in input order. Every input is validated
    /// before anything is written; the whole batch is admitted or refused at once. A batch
    /// spanning several shards is not atomic across them: retry with idempotency keys.
    pub async fn ingest_batch(
        &self,
        caller: &Caller,
        inputs: Vec<EpisodeInput>,
        lineage: Lineage,
    ) -> MemoryResult<Vec<Inserted>> {
        self.services.database.check()?;
        let config = &self.services.config;
        let max = config.writes.max_ingest_batch.get() as usize;
        if inputs.is_empty() || inputs.len() > max {
            return Err(MemoryError::new(
                ErrorCode::InvalidBatch,
                format!("`episodes` must hold 1 to {max} episodes"),
            ));
        }
        let now = self.services.clock.now();
        let mut by_shard: Vec<(ShardKey, Vec<usize>, Vec<NewEpisode>)> = Vec::new();
        for (i, input) in inputs.into_iter().enumerate() {
            let at = |e: MemoryError| MemoryError {
                message: format!("episodes[{i}]: {}", e.message),
                ..e
            };
            let mut episode = input
                .validate(
                    caller,
                    &config.limits,
                    config.episodes.default_ttl_days,
                    now,
                )
                .map_err(at)?;
            self.redact(|r| episode.redact(r).map(count_redactions))
                .map_err(at)?;
            let key = ShardKey::new(&caller.tenant_id, &episode.butler);
            match by_shard.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, positions, episodes)) => {
                    positions.push(i);
                    episodes.push(episode);
                }
                None => by_shard.push((key, vec![i], vec![episode])),
            }
        }
        let total: usize = by_shard.iter().map(|(_, p, _)| p.len()).sum();
        let mut shards = Vec::with_capacity(by_shard.len());
        for (key, _, _) in &by_shard {
            shards.push(self.shards.get(key).await?);
        }
        let deepest = shards
            .iter()
            .map(|s| s.info.queue_depth())
            .max()
            .unwrap_or(0);
        let _room = self.services.admission.admit(total as u32, deepest)?;
        let author = Author::new(caller.actor(), lineage);
        let sends = by_shard
            .into_iter()
            .zip(&shards)
            .map(|((key, positions, episodes), shard)| {
                let span = episode_write_span(&key, episodes.len());
                let mut author = author.clone();
                author.span = span.clone();
                async move {
                    let stored = shard
                        .ask(
                            |reply| ShardMsg::StoreEpisodes {
                                episodes,
                                author,
                                reply,
                            },
                            self.write_timeout(),
                            "the shard",
                        )
                        .await??;
                    Ok::<_, MemoryError>((positions, stored))
                }
                .instrument(span)
            });
        let mut out: Vec<Option<Inserted>> = (0..total).map(|_| None).collect();
        for result in futures::future::join_all(sends).await {
            let (positions, stored) = result?;
            for (i, inserted) in positions.into_iter().zip(stored) {
                out[i] = Some(inserted);
            }
        }
        out.into_iter()
            .map(|o| o.ok_or_else(|| MemoryError::internal("an ingested episode went missing")))
            .collect()
    }

    /// Stores a fact, superseding the live fact with the same subject and predicate.
    pub async fn store_fact(
        &self,
        caller: &Caller,
        input: FactInput,
        lineage: Lineage,
    ) -> MemoryResult<StoredFact> {
        self.services.database.check()?;
        // One instant for the record and for the answer's effective confidence: the answer
        // describes the fact as written, however long the checks before the write took.
        let now = self.services.clock.now();
        let mut fact = input.validate(caller, &self.services.config.limits, now)?;
        self.redact(|r| fact.redact(r).map(count_redactions))?;
        self.check_references(
            caller,
            fact.source_butler.clone(),
            &fact.links,
            fact.source_episode_id,
        )
        .await?;
        let shard = self
            .shards
            .get(&caller.shard(fact.source_butler.as_deref()))
            .await?;
        let author = Author::new(caller.actor(), lineage);
        let mut stored = shard
            .ask(
                |reply| ShardMsg::StoreFact {
                    fact: Box::new(fact),
                    author,
                    reply,
                },
                self.write_timeout(),
                "the shard",
            )
            .await??;
        stored.fact = stored.fact.at(now);
        stored.superseded = stored.superseded.map(|f| f.at(now));
        Ok(stored)
    }

    /// Stores a new candidate rule.
    pub async fn store_rule(
        &self,
        caller: &Caller,
        input: RuleInput,
        lineage: Lineage,
    ) -> MemoryResult<Rule> {
        let now = self.services.clock.now();
        let rule = self.new_rule(caller, input).await?;
        let shard = self
            .shards
            .get(&caller.shard(rule.source_butler.as_deref()))
            .await?;
        let author = Author::new(caller.actor(), lineage);
        Ok(shard
            .ask(
                |reply| ShardMsg::StoreRule {
                    rule: Box::new(rule),
                    author,
                    reply,
                },
                self.write_timeout(),
                "the shard",
            )
            .await??
            .at(now))
    }

    /// A rule as a shard stores it: validated, redacted, its references checked.
    pub(super) async fn new_rule(
        &self,
        caller: &Caller,
        input: RuleInput,
    ) -> MemoryResult<NewRule> {
        self.services.database.check()?;
        let now = self.services.clock.now();
        let mut rule = input.validate(caller, &self.services.config.limits, now)?;
        self.redact(|r| rule.redact(r).map(count_redactions))?;
        self.check_references(
            caller,
            rule.source_butler.clone(),
            &rule.links,
            rule.source_episode_id,
        )
        .await?;
        Ok(rule)
    }

    /// Runs a write's redaction (before anything reaches a shard), counting a refusal; the
    /// caller counts the spans redacted (`count_redactions`).
    pub(super) fn redact(
        &self,
        apply: impl FnOnce(&Redactor) -> MemoryResult<()>,
    ) -> MemoryResult<()> {
        redact_write(&self.services.redactor, apply)
    }

    /// Checks that the caller, acting as `butler`, may read every memory a write refers to
    /// (its links' targets, its source episode). One it may not read is `not_found`, the
    /// same answer as for one that does not exist, so a write is no way to learn what
    /// other butlers or tenants hold.
    async fn check_references(
        &self,
        caller: &Caller,
        butler: Option<String>,
        links: &[LinkTarget],
        source_episode: Option<Uuid>,
    ) -> MemoryResult<()> {
        let targets = links.iter().map(|l| (l.target_type, l.target_id));
        let source = source_episode.map(|id| (MemoryType::Episode, id));
        for (memory_type, id) in targets.chain(source) {
            self.owner_of(caller, butler.clone(), memory_type, id)
                .await?;
        }
        Ok(())
    }
}

/// The span of episodes handed to a shard, from the hand-over until they are committed (the
/// statement that commits them is its child or, shared with other calls, linked to it).
fn episode_write_span(shard: &ShardKey, episodes: usize) -> tracing::Span {
    tracing::info_span!(
        target: crate::TRACE_SPANS,
        "shard.write",
        otel.name = "shard.store_episodes",
        shard.tenant = %shard.tenant_id,
        shard.butler = %shard.butler,
        episodes,
    )
}
