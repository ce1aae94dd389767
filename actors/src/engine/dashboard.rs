//! The dashboard's side of the engine (issue 20, the REST API): lists with filters and
//! cursors, and single records, under exactly the MCP tools' visibility (`visible`: butler
//! keys their scopes and episodes, admins everything of their tenant; or, for a butler's
//! view, `visible_as`: what that butler sees, `butler_view.rs`), where a person
//! browsing changes nothing (no reference count moves); and an admin's corrections, each
//! through the same write as the tools (a fact edit is a superseding fact, a rule rewrite a
//! new candidate that supersedes a retracted one, a delete is `memory_forget`).

use uuid::Uuid;

use super::Engine;
use crate::actors::ShardMsg;
use crate::domain::author::Author;
use crate::domain::caller::{Caller, Role};
use crate::domain::episode::Episode;
use crate::domain::event::{Since, StoredEvent};
use crate::domain::fact::{Fact, FactInput, StoredFact};
use crate::domain::feedback::StoredApplication;
use crate::domain::governance::Governance;
use crate::domain::listing::{
    EpisodeQuery, FactEdit, FactQuery, Page, RuleEdit, RuleQuery, check_min_confidence, page_size,
};
use crate::domain::memory_type::MemoryType;
use crate::domain::provenance::Provenance;
use crate::domain::record::RecordWithLinks;
use crate::domain::record::{Forgetting, MemoryRecord};
use crate::domain::relation::{LinkTarget, Relation};
use crate::domain::request_context::Lineage;
use crate::domain::rule::Rule;
use crate::domain::rule::RuleInput;
use crate::domain::search::{SearchInput, SearchOutcome};
use crate::domain::shard_key::ShardKey;
use crate::domain::stats::{MAX_TIMELINE_DAYS, Timeline};
use crate::domain::text::{check_name, check_reason, check_required_reason, normalize_key};
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::store::stats::StatsFilter;

impl Engine {
    /// A page of the facts the caller may see.
    pub async fn list_facts(&self, caller: &Caller, query: FactQuery) -> MemoryResult<Page<Fact>> {
        self.facts_seen_by(caller, None, query).await
    }

    /// A page of the facts the caller, or (`view`) that butler, sees (`seen_by`).
    pub(super) async fn facts_seen_by(
        &self,
        caller: &Caller,
        view: Option<&str>,
        mut query: FactQuery,
    ) -> MemoryResult<Page<Fact>> {
        self.services.database.check()?;
        let size = page_size(query.limit)?;
        query.min_confidence = check_min_confidence(query.min_confidence)?;
        let limits = &self.services.config.limits;
        query.subject = query
            .subject
            .map(|s| normalize_key("subject", &s, limits))
            .transpose()?;
        query.q = query
            .q
            .map(|q| normalize_key("q", &q, limits))
            .transpose()?;
        if let Some(b) = &query.source_butler {
            check_owner(b)?;
        }
        let visible = self.seen_by(caller, view, query.scope.clone(), None)?;
        let now = self.services.clock.now();
        let (visible, query) = (&visible, &query);
        self.routed(&caller.tenant_id, |store| async move {
            store.list_facts(visible, query, size, now).await
        })
        .await
    }

    /// A page of the rules the caller may see.
    pub async fn list_rules(&self, caller: &Caller, query: RuleQuery) -> MemoryResult<Page<Rule>> {
        self.rules_seen_by(caller, None, query).await
    }

    /// A page of the rules the caller, or (`view`) that butler, sees (`seen_by`).
    pub(super) async fn rules_seen_by(
        &self,
        caller: &Caller,
        view: Option<&str>,
        mut query: RuleQuery,
    ) -> MemoryResult<Page<Rule>> {
        self.services.database.check()?;
        let size = page_size(query.limit)?;
        let limits = &self.services.config.limits;
        query.q = query
            .q
            .map(|q| normalize_key("q", &q, limits))
            .transpose()?;
        if let Some(b) = &query.source_butler {
            check_owner(b)?;
        }
        let visible = self.seen_by(caller, view, query.scope.clone(), None)?;
        let now = self.services.clock.now();
        let (visible, query) = (&visible, &query);
        self.routed(&caller.tenant_id, |store| async move {
            store.list_rules(visible, query, size, now).await
        })
        .await
    }

    /// A page of the episodes the caller may see.
    pub async fn list_episodes(
        &self,
        caller: &Caller,
        query: EpisodeQuery,
    ) -> MemoryResult<Page<Episode>> {
        self.episodes_seen_by(caller, None, query).await
    }

    /// A page of the episodes the caller, or (`view`) that butler, sees (`seen_by`).
    pub(super) async fn episodes_seen_by(
        &self,
        caller: &Caller,
        view: Option<&str>,
        query: EpisodeQuery,
    ) -> MemoryResult<Page<Episode>> {
        self.services.database.check()?;
        let size = page_size(query.limit)?;
        let visible = self.seen_by(caller, view, None, query.butler.clone())?;
        let (visible, query) = (&visible, &query);
        self.routed(&caller.tenant_id, |store| async move {
            store.list_episodes(visible, query, size).await
        })
        .await
    }

    /// One record the caller may see, with its links, for a person to look at.
    pub async fn record_for_dashboard(
        &self,
        caller: &Caller,
        memory_type: MemoryType,
        id: Uuid,
    ) -> MemoryResult<RecordWithLinks> {
        self.look_up(caller, memory_type, id, None).await
    }

    /// Why a record exists and what became of it (`domain/provenance.rs`), within what the
    /// caller may see.
    pub async fn provenance(
        &self,
        caller: &Caller,
        memory_type: MemoryType,
        id: Uuid,
    ) -> MemoryResult<Provenance> {
        let record = self.look_up(caller, memory_type, id, None).await?;
        let store = &self.services.store;
        let tenant = &caller.tenant_id;
        let now = self.services.clock.now();
        let acting = caller.butler.as_deref();
        let visible = |record: &MemoryRecord| {
            let (scope, owner) = match record {
                MemoryRecord::Episode(e) => (None, Some(e.butler.as_str())),
                MemoryRecord::Fact(f) => (Some(f.scope.as_str()), None),
                MemoryRecord::Rule(r) => (Some(r.scope.as_str()), None),
            };
            caller.may_read(acting, scope, owner)
        };
        let (mut versions, source) = match &record.record {
            // A fact's versions share its key, scope included: what it may see.
            MemoryRecord::Fact(f) => (
                store.fact_versions(tenant, id, now).await?,
                f.source_episode_id,
            ),
            MemoryRecord::Rule(r) => (Vec::new(), r.source_episode_id),
            MemoryRecord::Episode(_) => (Vec::new(), None),
        };
        let source_episode = match source {
            Some(episode) => store
                .record(tenant, MemoryType::Episode, episode, now)
                .await?
                .filter(visible)
                .and_then(|r| match r {
                    MemoryRecord::Episode(e) => Some(e),
                    _ => None,
                }),
            None => None,
        };
        let mut derived: Vec<MemoryRecord> = match memory_type {
            MemoryType::Episode => store
                .derived_from(tenant, id, now)
                .await?
                .into_iter()
                .filter(visible)
                .collect(),
            _ => Vec::new(),
        };
        // Opened once what the caller may see is settled (the audit events stay sealed).
        store.open_facts(&mut versions).await?;
        for record in &mut derived {
            store.open_record(record).await?;
        }
        let events = store.events_for(tenant, id).await?;
        Ok(Provenance {
            record,
            versions,
            source_episode,
            derived,
            events,
        })
    }

    /// A rule's applications, newest first, a page at a time (`before`: the last id of the
    /// previous page).
    pub async fn rule_applications(
        &self,
        caller: &Caller,
        rule_id: Uuid,
        before: Option<Uuid>,
        limit: Option<u32>,
    ) -> MemoryResult<Page<StoredApplication>> {
        let size = page_size(limit)?;
        self.look_up(caller, MemoryType::Rule, rule_id, None)
            .await?;
        let tenant = &caller.tenant_id;
        let (mut items, total) = self
            .routed(tenant, |store| async move {
                store
                    .rule_applications(tenant, rule_id, before, i64::from(size) + 1)
                    .await
            })
            .await?;
        let more = items.len() > size as usize;
        items.truncate(size as usize);
        Ok(Page {
            next_cursor: if more {
                items.last().map(|a| a.id)
            } else {
                None
            },
            items,
            total: Some(total),
        })
    }

    /// Search across types for a person: what `memory_search` finds, changing nothing.
    pub async fn search_for_dashboard(
        &self,
        caller: &Caller,
        input: SearchInput,
    ) -> MemoryResult<SearchOutcome> {
        self.search_touching(caller, input, false).await
    }

    /// `POST /api/memory/rules/{id}/{decision}` (admin): promote, demote, disable or enable
    /// a live rule, in its shard, with the reason in its event.
    pub async fn govern_rule(
        &self,
        caller: &Caller,
        id: Uuid,
        decision: Governance,
        reason: String,
        lineage: Lineage,
    ) -> MemoryResult<Rule> {
        self.services.database.check()?;
        caller.require_admin()?;
        let limits = &self.services.config.limits;
        let reason = check_required_reason(reason, limits, "a decision about a rule")?;
        let (owner, _) = self.owner_of(caller, None, MemoryType::Rule, id).await?;
        let author = Author::new(caller.actor(), lineage);
        let rule = self
            .owner_ask(&owner, |reply| ShardMsg::Govern {
                id,
                decision,
                reason,
                author,
                reply,
            })
            .await?;
        Ok(rule.at(self.services.clock.now()))
    }

    /// `GET /api/memory/activity`: the audit stream, for an admin the tenant's, for a butler
    /// key the events of what it may see (its scopes' facts and rules, its episodes).
    pub async fn activity_for_dashboard(
        &self,
        caller: &Caller,
        since: Since,
        scope: Option<String>,
        butler: Option<String>,
        limit: Option<u32>,
    ) -> MemoryResult<Vec<StoredEvent>> {
        let visible = match caller.role {
            Role::Admin | Role::Auditor => None,
            Role::Butler | Role::Operator | Role::Orchestrator => {
                Some(self.visible(caller, None, None)?)
            }
        };
        self.activity_within(caller, since, scope, butler, limit, visible)
            .await
    }

    /// `PUT /api/memory/facts/{id}` (admin): a new version of a live fact, superseding it,
    /// with the same subject, predicate, scope, butler and start of validity.
    pub async fn edit_fact(
        &self,
        caller: &Caller,
        id: Uuid,
        edit: FactEdit,
        lineage: Lineage,
    ) -> MemoryResult<StoredFact> {
        caller.require_admin()?;
        let MemoryRecord::Fact(old) = self.editable(caller, MemoryType::Fact, id).await? else {
            return Err(MemoryError::internal("a fact lookup answered another type"));
        };
        let input = FactInput {
            subject: old.subject,
            predicate: old.predicate,
            content: edit.content,
            importance: edit.importance.or(Some(old.importance)),
            permanence: edit.permanence.or(Some(old.permanence)),
            scope: Some(old.scope),
            tags: edit.tags.or_else(|| serde_json::from_value(old.tags).ok()),
            metadata: edit.metadata.or(Some(old.metadata)),
            links: Vec::new(),
            butler: old.source_butler,
            confidence: edit.confidence,
            source_episode_id: old.source_episode_id,
            // An edit corrects: the new version was true for as long as the old one was
            // thought to be, which then was never true (`valid_until` = its `valid_from`).
            valid_from: Some(old.valid_from.to_rfc3339()),
        };
        self.store_fact(caller, input, lineage).await
    }

    /// `PUT /api/memory/rules/{id}` (admin): a new candidate rule linked as superseding the
    /// live rule it rewrites, which is retracted with the reason, both in one transaction
    /// of the rule's shard (`store::rules::replace`).
    pub async fn edit_rule(
        &self,
        caller: &Caller,
        id: Uuid,
        edit: RuleEdit,
        lineage: Lineage,
    ) -> MemoryResult<Rule> {
        caller.require_admin()?;
        let MemoryRecord::Rule(old) = self.editable(caller, MemoryType::Rule, id).await? else {
            return Err(MemoryError::internal("a rule lookup answered another type"));
        };
        let owner = ShardKey::for_butler(&old.tenant_id, old.source_butler.as_deref());
        let input = RuleInput {
            content: edit.content,
            scope: Some(old.scope),
            tags: serde_json::from_value(old.tags).ok(),
            metadata: Some(old.metadata),
            links: vec![LinkTarget {
                target_type: MemoryType::Rule,
                target_id: id,
                relation: Relation::Supersedes,
            }],
            butler: old.source_butler,
            importance: Some(old.importance),
            permanence: Some(old.permanence),
            source_episode_id: old.source_episode_id,
        };
        let rule = self.new_rule(caller, input).await?;
        let reason = match edit.reason {
            Some(reason) => format!("{reason} (replaced by rule {})", rule.id),
            None => format!("replaced by rule {}", rule.id),
        };
        let reason =
            check_reason("reason", Some(reason), &self.services.config.limits)?.unwrap_or_default();
        let author = Author::new(caller.actor(), lineage);
        let new = self
            .owner_ask(&owner, |reply| ShardMsg::ReplaceRule {
                rule: Box::new(rule),
                replaces: id,
                reason,
                author,
                reply,
            })
            .await?;
        Ok(new.at(self.services.clock.now()))
    }

    /// A live fact or rule the caller may see, to edit (history is not edited: `not_live`).
    async fn editable(
        &self,
        caller: &Caller,
        memory_type: MemoryType,
        id: Uuid,
    ) -> MemoryResult<MemoryRecord> {
        let record = self.look_up(caller, memory_type, id, None).await?.record;
        let validity = match &record {
            MemoryRecord::Fact(f) => f.validity,
            MemoryRecord::Rule(r) => r.validity,
            MemoryRecord::Episode(_) => {
                return Err(MemoryError::internal("episodes are not edited"));
            }
        };
        if !validity.is_live() {
            return Err(MemoryError::new(
                ErrorCode::NotLive,
                format!(
                    "{memory_type} {id} is {validity}: only a live {memory_type} can be edited"
                ),
            ));
        }
        Ok(record)
    }

    /// `DELETE /api/memory/{type}/{id}` (admin): `memory_forget`, reversible.
    pub async fn forget_for_dashboard(
        &self,
        caller: &Caller,
        memory_type: MemoryType,
        id: Uuid,
        reason: Option<String>,
        lineage: Lineage,
    ) -> MemoryResult<Forgetting> {
        caller.require_admin()?;
        self.forget(caller, memory_type, id, reason, None, lineage)
            .await
    }

    /// The last `days` days (UTC, today included) of what the caller may see: episodes
    /// stored per day and lifecycle runs, for the dashboard's charts.
    pub async fn timeline(
        &self,
        caller: &Caller,
        butler: Option<String>,
        days: Option<u32>,
    ) -> MemoryResult<Timeline> {
        self.services.database.check()?;
        let days = days.unwrap_or(14);
        if days == 0 || days > MAX_TIMELINE_DAYS {
            return Err(MemoryError::new(
                ErrorCode::InvalidLimit,
                format!("`days` must be between 1 and {MAX_TIMELINE_DAYS}"),
            ));
        }
        let scope = self.visible(caller, None, butler)?;
        let filter = StatsFilter::from(scope);
        let today = self.services.clock.now().date_naive();
        let first = today - chrono::Days::new(u64::from(days - 1));
        let from = first.and_time(chrono::NaiveTime::MIN).and_utc();
        let filter = &filter;
        self.routed(&caller.tenant_id, |store| async move {
            store.timeline(filter, from, days).await
        })
        .await
    }
}

/// A butler name, or `_tenant` (the facts and rules written without one).
fn check_owner(butler: &str) -> MemoryResult<()> {
    if butler == crate::domain::shard_key::TENANT_SHARD_BUTLER {
        return Ok(());
    }
    check_name("source_butler", butler)
}
