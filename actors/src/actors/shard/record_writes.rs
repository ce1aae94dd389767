//! A shard's writes of single records and of their lifecycle: facts (superseding the live
//! one), rules (and a rule's rewrite), confirmations, feedback, forgetting and restoring. Each is one transaction,
//! in the shard's order of writes, in the trace of the call that asked for it.

use uuid::Uuid;

use super::ShardState;
use crate::domain::author::Author;
use crate::domain::fact::{FactOutcome, NewFact, StoredFact};
use crate::domain::feedback::{Rated, RuleApplication};
use crate::domain::governance::Governance;
use crate::domain::maturity::Maturity;
use crate::domain::memory_type::MemoryType;
use crate::domain::record::{Forgetting, MemoryRecord};
use crate::domain::rule::{NewRule, Rule};
use crate::domain::shard_key::ShardKey;
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::services::RowsCommitted;
use crate::store::{facts, feedback, forgetting, governance, rules};

/// The span of a shard's write, in the trace of the call that asked for it.
pub(super) fn shard_span(author: &Author, write: &'static str, shard: &ShardKey) -> tracing::Span {
    tracing::info_span!(
        target: crate::TRACE_SPANS,
        parent: &author.span,
        "shard.write",
        otel.name = %format!("shard.{write}"),
        shard.tenant = %shard.tenant_id,
        shard.butler = %shard.butler,
    )
}

impl ShardState {
    pub(super) async fn store_fact(
        &mut self,
        fact: &NewFact,
        author: &Author,
    ) -> MemoryResult<StoredFact> {
        let mut tx = self.services.store.begin().await?;
        let store = &self.services.store;
        let mut stored =
            facts::insert_superseding(&mut tx, fact, None, author, store.vault()).await?;
        tx.commit().await?;
        self.committed();
        store.open_fact(&mut stored.fact).await?;
        if let Some(old) = &mut stored.superseded {
            store.open_fact(old).await?;
        }
        if stored.outcome == FactOutcome::Superseded {
            metrics::counter!("butler_memory_supersessions_total", "path" => "store_fact")
                .increment(1);
        }
        Ok(stored)
    }

    pub(super) async fn store_rule(
        &mut self,
        rule: &NewRule,
        author: &Author,
    ) -> MemoryResult<Rule> {
        let mut tx = self.services.store.begin().await?;
        let stored = rules::insert(&mut tx, rule, None, author).await?;
        tx.commit().await?;
        self.committed();
        Ok(stored)
    }

    /// A rule rewritten: the new candidate stored and the old rule retracted, together.
    pub(super) async fn replace_rule(
        &mut self,
        rule: &NewRule,
        old: Uuid,
        reason: &str,
        author: &Author,
    ) -> MemoryResult<Rule> {
        let now = self.services.clock.now();
        let mut tx = self.services.store.begin().await?;
        let stored = rules::replace(&mut tx, rule, old, reason, now, author).await?;
        tx.commit().await?;
        self.committed();
        Ok(stored)
    }

    /// A committed change of this tenant's memory: caches recompute, the indexer looks.
    pub(super) fn committed(&self) {
        self.services.generations.bump(&self.key.tenant_id);
        self.kit.notices.send(RowsCommitted);
    }

    pub(super) async fn confirm(
        &mut self,
        memory_type: MemoryType,
        id: Uuid,
        author: &Author,
    ) -> MemoryResult<MemoryRecord> {
        let now = self.services.clock.now();
        let tenant = &self.key.tenant_id;
        let mut tx = self.services.store.begin().await?;
        let record = match memory_type {
            MemoryType::Fact => {
                MemoryRecord::Fact(feedback::confirm_fact(&mut tx, tenant, id, now, author).await?)
            }
            MemoryType::Rule => {
                MemoryRecord::Rule(feedback::confirm_rule(&mut tx, tenant, id, now, author).await?)
            }
            MemoryType::Episode => {
                return Err(MemoryError::new(
                    ErrorCode::NotConfirmable,
                    "episodes have no confidence to confirm; confirm facts and rules",
                ));
            }
        };
        tx.commit().await?;
        self.committed();
        let mut record = record;
        self.services.store.open_record(&mut record).await?;
        Ok(record)
    }

    pub(super) async fn rate(
        &mut self,
        application: &RuleApplication,
        author: &Author,
    ) -> MemoryResult<Rated> {
        let now = self.services.clock.now();
        let mut tx = self.services.store.begin().await?;
        let rated = feedback::rate_rule(
            &mut tx,
            &self.key.tenant_id,
            application,
            now,
            &self.services.config.rules,
            author,
        )
        .await?;
        tx.commit().await?;
        self.committed();
        if rated.rule.maturity == Maturity::AntiPattern
            && rated.maturity_before != Maturity::AntiPattern
        {
            metrics::counter!("butler_memory_rule_inversions_total", "path" => "feedback")
                .increment(1);
        }
        Ok(rated)
    }

    pub(super) async fn forget(
        &mut self,
        memory_type: MemoryType,
        id: Uuid,
        reason: Option<&str>,
        author: &Author,
    ) -> MemoryResult<Forgetting> {
        let now = self.services.clock.now();
        let mut tx = self.services.store.begin().await?;
        let done = forgetting::forget(
            &mut tx,
            &self.key.tenant_id,
            memory_type,
            id,
            reason,
            now,
            author,
        )
        .await?;
        tx.commit().await?;
        if done.changed {
            self.committed();
        }
        let mut done = done;
        self.services.store.open_record(&mut done.record).await?;
        Ok(done)
    }

    pub(super) async fn govern(
        &mut self,
        id: Uuid,
        decision: Governance,
        reason: &str,
        author: &Author,
    ) -> MemoryResult<Rule> {
        let now = self.services.clock.now();
        let mut tx = self.services.store.begin().await?;
        let rule = governance::govern(
            &mut tx,
            &self.key.tenant_id,
            id,
            decision,
            reason,
            now,
            author,
        )
        .await?;
        tx.commit().await?;
        self.committed();
        Ok(rule)
    }

    pub(super) async fn restore(
        &mut self,
        memory_type: MemoryType,
        id: Uuid,
        author: &Author,
    ) -> MemoryResult<Forgetting> {
        let now = self.services.clock.now();
        let mut tx = self.services.store.begin().await?;
        let done =
            forgetting::restore(&mut tx, &self.key.tenant_id, memory_type, id, now, author).await?;
        tx.commit().await?;
        self.committed();
        let mut done = done;
        self.services.store.open_record(&mut done.record).await?;
        Ok(done)
    }
}
