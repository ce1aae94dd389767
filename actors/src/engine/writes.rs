//! Writes: validated here against the caller's rights, performed by the owning shard.

use super::Engine;
use crate::domain::caller::Caller;
use crate::domain::episode::{Episode, EpisodeInput};
use crate::domain::fact::{FactInput, StoredFact};
use crate::domain::request_context::Lineage;
use crate::domain::rule::{Rule, RuleInput};
use crate::domain::shard_key::ShardKey;
use crate::error::MemoryResult;
use crate::shard::{Author, ShardMsg};

impl Engine {
    /// Stores an episode in its butler's shard. Answers after it is committed.
    pub async fn store_episode(
        &self,
        caller: &Caller,
        input: EpisodeInput,
        lineage: Lineage,
    ) -> MemoryResult<Episode> {
        let episode = input.validate(
            caller,
            &self.ctx.config.limits,
            self.ctx.config.episodes.default_ttl_days,
            self.ctx.clock.now(),
        )?;
        let shard = self
            .shard(&ShardKey::new(&caller.tenant_id, &episode.butler))
            .await?;
        let author = author(caller, lineage);
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
            .await?
    }

    /// Stores a fact, superseding the live fact with the same subject and predicate.
    pub async fn store_fact(
        &self,
        caller: &Caller,
        input: FactInput,
        lineage: Lineage,
    ) -> MemoryResult<StoredFact> {
        let fact = input.validate(caller, &self.ctx.config.limits, self.ctx.clock.now())?;
        let shard = self
            .shard(&caller.shard(fact.source_butler.as_deref()))
            .await?;
        let author = author(caller, lineage);
        let now = self.ctx.clock.now();
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
        let rule = input.validate(caller, &self.ctx.config.limits, self.ctx.clock.now())?;
        let shard = self
            .shard(&caller.shard(rule.source_butler.as_deref()))
            .await?;
        let author = author(caller, lineage);
        let now = self.ctx.clock.now();
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
}

pub(super) fn author(caller: &Caller, lineage: Lineage) -> Author {
    Author {
        actor: caller.actor(),
        lineage,
    }
}
