//! Lifecycle operations: confirmations, rule feedback, forgetting and restoring, sweeps on
//! demand and the audit stream. The record is first looked up as the caller may see it
//! (what a caller cannot read, it cannot change: `not_found`), then the change is made by
//! the shard that owns the record, which re-reads and locks it and refuses transitions the
//! record's current state does not allow (`integrity`).

use std::time::Duration;

use uuid::Uuid;

use super::Engine;
use crate::actors::{ReaderMsg, ShardMsg};
use crate::domain::author::Author;
use crate::domain::caller::{Caller, Role};
use crate::domain::episode::DeadLetter;
use crate::domain::event::{Since, StoredEvent};
use crate::domain::feedback::{Mark, Rated, RuleApplication};
use crate::domain::memory_type::MemoryType;
use crate::domain::record::{Forgetting, MemoryRecord};
use crate::domain::request_context::Lineage;
use crate::domain::search::SearchScope;
use crate::domain::shard_key::ShardKey;
use crate::domain::sweep::{SweepKind, SweepReport};
use crate::domain::text::{check_name, check_reason};
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::read_path::ReadTarget;
use crate::store::activity::ActivityFilter;

/// How long an on-demand sweep of one shard may take before the caller stops waiting (the
/// sweep itself goes on).
/// How long a sweep asked for now waits for a shard's lease held by another instance.
const LEASE_WAIT: Duration = Duration::from_secs(10);

/// Most events in one page of the activity stream.
pub const MAX_ACTIVITY_PAGE: u32 = 1000;

impl Engine {
    /// `memory_confirm`: the fact or rule is still true; its decay starts over.
    pub async fn confirm(
        &self,
        caller: &Caller,
        memory_type: MemoryType,
        id: Uuid,
        butler: Option<String>,
        lineage: Lineage,
    ) -> MemoryResult<MemoryRecord> {
        self.services.database.check()?;
        if memory_type == MemoryType::Episode {
            return Err(MemoryError::new(
                ErrorCode::NotConfirmable,
                "episodes have no confidence to confirm; confirm facts and rules",
            ));
        }
        let (owner, _) = self.owner_of(caller, butler, memory_type, id).await?;
        let author = Author::new(caller.actor(), lineage);
        let record = self
            .owner_ask(&owner, |reply| ShardMsg::Confirm {
                memory_type,
                id,
                author,
                reply,
            })
            .await?;
        Ok(self.at_now(record))
    }

    /// `memory_mark_helpful` / `memory_mark_harmful`: how applying a rule went.
    pub async fn rate_rule(
        &self,
        caller: &Caller,
        rule_id: Uuid,
        mark: Mark,
        reason: Option<String>,
        butler: Option<String>,
        lineage: Lineage,
    ) -> MemoryResult<Rated> {
        self.services.database.check()?;
        let reason = check_reason("reason", reason, &self.services.config.limits)?;
        let (owner, acting) = match self
            .owner_of(caller, butler.clone(), MemoryType::Rule, rule_id)
            .await
        {
            // An id of another type is a broken invariant, not a typo: say so.
            Err(e) if e.class() == crate::error::ErrorClass::NotFound => {
                for other in [MemoryType::Fact, MemoryType::Episode] {
                    if self
                        .owner_of(caller, butler.clone(), other, rule_id)
                        .await
                        .is_ok()
                    {
                        return Err(MemoryError::new(
                            ErrorCode::NotARule,
                            format!("{rule_id} is a {other}; only rules take feedback"),
                        ));
                    }
                }
                return Err(e);
            }
            other => other?,
        };
        let application = RuleApplication {
            rule_id,
            mark,
            reason,
            butler: acting,
        };
        let author = Author::new(caller.actor(), lineage);
        let mut rated = self
            .owner_ask(&owner, |reply| ShardMsg::Rate {
                application,
                author,
                reply,
            })
            .await?;
        rated.rule = rated.rule.at(self.services.clock.now());
        Ok(rated)
    }

    /// `memory_forget`: out of retrieval, recorded, and restorable by an admin.
    pub async fn forget(
        &self,
        caller: &Caller,
        memory_type: MemoryType,
        id: Uuid,
        reason: Option<String>,
        butler: Option<String>,
        lineage: Lineage,
    ) -> MemoryResult<Forgetting> {
        self.services.database.check()?;
        let reason = check_reason("reason", reason, &self.services.config.limits)?;
        let (owner, _) = self.owner_of(caller, butler, memory_type, id).await?;
        let author = Author::new(caller.actor(), lineage);
        let mut done = self
            .owner_ask(&owner, |reply| ShardMsg::Forget {
                memory_type,
                id,
                reason,
                author,
                reply,
            })
            .await?;
        done.record = self.at_now(done.record);
        Ok(done)
    }

    /// `memory_restore` (admin): undoes a forget where no newer fact took its place.
    pub async fn restore(
        &self,
        caller: &Caller,
        memory_type: MemoryType,
        id: Uuid,
        lineage: Lineage,
    ) -> MemoryResult<Forgetting> {
        self.services.database.check()?;
        caller.require_admin()?;
        let (owner, _) = self.owner_of(caller, None, memory_type, id).await?;
        let author = Author::new(caller.actor(), lineage);
        let mut done = self
            .owner_ask(&owner, |reply| ShardMsg::Restore {
                memory_type,
                id,
                author,
                reply,
            })
            .await?;
        done.record = self.at_now(done.record);
        Ok(done)
    }

    /// Runs sweeps now, shard by shard: an admin's over its tenant (or one butler's shard),
    /// an operator's over every tenant. Answers with each shard's report.
    pub async fn sweep_now(
        &self,
        caller: &Caller,
        kinds: &[SweepKind],
        butler: Option<String>,
    ) -> MemoryResult<Vec<SweepReport>> {
        self.services.database.check()?;
        let tenant = match caller.role {
            Role::Admin => Some(caller.tenant_id.as_str()),
            Role::Operator => None,
            Role::Butler | Role::Auditor | Role::Orchestrator => {
                return Err(MemoryError::new(
                    ErrorCode::AdminOnly,
                    "sweeps are run by admin and operator keys",
                ));
            }
        };
        if let Some(b) = &butler {
            check_name("butler", b)?;
        }
        let keys: Vec<ShardKey> = self
            .services
            .store
            .shard_keys(tenant)
            .await?
            .into_iter()
            .filter(|k| butler.as_ref().is_none_or(|b| &k.butler == b))
            .collect();
        let mut reports = Vec::new();
        for key in keys {
            for kind in kinds {
                reports.push(self.sweep_shard(&key, *kind).await?);
            }
        }
        Ok(reports)
    }

    /// One sweep of one shard, waiting for it, under the shard's lifecycle lease: when
    /// another instance holds it, the call waits for it [`LEASE_WAIT`] at most, then fails
    /// as `lifecycle_busy` (`store/lifecycle_lease.rs`).
    pub async fn sweep_shard(&self, key: &ShardKey, kind: SweepKind) -> MemoryResult<SweepReport> {
        self.shards
            .sweep_leased(&self.services.store, key, kind, LEASE_WAIT)
            .await?
            .unwrap_or_else(|| {
                Err(MemoryError::new(
                    ErrorCode::LifecycleBusy,
                    format!("another instance is running the lifecycle work of shard {key}"),
                ))
            })
    }

    /// `memory_activity_stream` (admin): the tenant's audit stream in order, one page.
    pub async fn activity(
        &self,
        caller: &Caller,
        since: Since,
        scope: Option<String>,
        butler: Option<String>,
        limit: Option<u32>,
    ) -> MemoryResult<Vec<StoredEvent>> {
        caller.require_admin_read()?;
        self.activity_within(caller, since, scope, butler, limit, None)
            .await
    }

    /// The audit stream as far as `visible` reaches (`None`: the whole tenant), one page.
    pub(super) async fn activity_within(
        &self,
        caller: &Caller,
        since: Since,
        scope: Option<String>,
        butler: Option<String>,
        limit: Option<u32>,
        visible: Option<SearchScope>,
    ) -> MemoryResult<Vec<StoredEvent>> {
        self.services.database.check()?;
        if let Some(s) = &scope {
            check_name("scope", s)?;
        }
        if let Some(b) = &butler {
            check_name("butler", b)?;
        }
        let limit = limit.unwrap_or(100);
        if limit == 0 || limit > MAX_ACTIVITY_PAGE {
            return Err(MemoryError::new(
                ErrorCode::InvalidLimit,
                format!("`limit` must be between 1 and {MAX_ACTIVITY_PAGE}"),
            ));
        }
        let newest_first = matches!(since, Since::Latest);
        let (after_id, since) = match since {
            Since::Cursor(id) => (id, None),
            Since::Time(t) => (0, Some(t)),
            Since::Latest => (0, None),
        };
        let filter = ActivityFilter {
            tenant_id: caller.tenant_id.clone(),
            after_id,
            since,
            scopes: scope.map(|s| vec![s]),
            butlers: butler.map(|b| vec![b]),
            visible,
            limit: i64::from(limit),
            newest_first,
        };
        self.read(|reply| ReaderMsg::Activity {
            filter,
            span: tracing::Span::current(),
            reply,
        })
        .await
    }

    /// `memory_dead_letters` (admin): the tenant's dead-lettered episodes, oldest first.
    pub async fn dead_letters(
        &self,
        caller: &Caller,
        limit: Option<u32>,
    ) -> MemoryResult<Vec<DeadLetter>> {
        self.services.database.check()?;
        caller.require_admin_read()?;
        let limit = limit.unwrap_or(100);
        if limit == 0 || limit > MAX_ACTIVITY_PAGE {
            return Err(MemoryError::new(
                ErrorCode::InvalidLimit,
                format!("`limit` must be between 1 and {MAX_ACTIVITY_PAGE}"),
            ));
        }
        self.services
            .store
            .dead_letters(&caller.tenant_id, i64::from(limit))
            .await
    }

    /// `memory_requeue_dead_letters` (admin): back in the queue with fresh attempts.
    pub async fn requeue_dead_letters(
        &self,
        caller: &Caller,
        ids: Option<Vec<Uuid>>,
    ) -> MemoryResult<Vec<Uuid>> {
        self.services.database.check()?;
        caller.require_admin()?;
        let requeued = self
            .services
            .store
            .requeue_dead_letters(
                &caller.tenant_id,
                ids.as_deref(),
                &Author::service(&caller.actor()),
                self.services.clock.now(),
            )
            .await?;
        if !requeued.is_empty() {
            self.services.generations.bump(&caller.tenant_id);
        }
        Ok(requeued)
    }

    /// The shard that owns a record the caller, acting as `butler`, may see; and the
    /// acting butler.
    pub(super) async fn owner_of(
        &self,
        caller: &Caller,
        butler: Option<String>,
        memory_type: MemoryType,
        id: Uuid,
    ) -> MemoryResult<(ShardKey, Option<String>)> {
        if let Some(b) = &butler {
            check_name("butler", b)?;
        }
        let acting = caller.acting_butler(butler.as_deref())?;
        let caller_copy = caller.clone();
        let found = self
            .read(|reply| ReaderMsg::Get {
                caller: caller_copy,
                butler: acting.clone(),
                memory_type,
                id,
                // The shard acts on what the primary holds.
                target: ReadTarget::Primary,
                span: tracing::Span::current(),
                reply,
            })
            .await?;
        let owner = match &found.record {
            MemoryRecord::Episode(e) => ShardKey::new(&e.tenant_id, &e.butler),
            MemoryRecord::Fact(f) => ShardKey::for_butler(&f.tenant_id, f.source_butler.as_deref()),
            MemoryRecord::Rule(r) => ShardKey::for_butler(&r.tenant_id, r.source_butler.as_deref()),
        };
        Ok((owner, acting))
    }

    pub(super) async fn owner_ask<R, F>(&self, owner: &ShardKey, build: F) -> MemoryResult<R>
    where
        F: FnOnce(ractor::RpcReplyPort<MemoryResult<R>>) -> ShardMsg,
        R: Send + 'static,
    {
        let shard = self.shards.get(owner).await?;
        shard.ask(build, self.write_timeout(), "the shard").await?
    }

    fn at_now(&self, record: MemoryRecord) -> MemoryRecord {
        let now = self.services.clock.now();
        match record {
            MemoryRecord::Fact(f) => MemoryRecord::Fact(f.at(now)),
            MemoryRecord::Rule(r) => MemoryRecord::Rule(r.at(now)),
            episode => episode,
        }
    }
}
