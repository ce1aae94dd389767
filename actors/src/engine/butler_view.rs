//! A butler's view (`/api/butlers/{name}/memory/…` and the dashboard's
//! `/butlers/{name}/memory`; memory_project_plan.md, "Memory Tab on Butler Detail"): what
//! that butler sees, whoever looks — the facts and rules of scope `global` or its own, its
//! episodes, and the events of those — not what the looking key sees, nor what the butler
//! wrote (`source_butler` stays a filter like any other). Its tenant's admin or auditor and
//! the butler's own key may look; another butler's key is `other_butler`. The same reads
//! as the caller's own lists, stats and feed, under `visible_as` instead of `visible`.

use super::Engine;
use crate::domain::caller::Caller;
use crate::domain::episode::Episode;
use crate::domain::event::{Since, StoredEvent};
use crate::domain::fact::Fact;
use crate::domain::listing::{EpisodeQuery, FactQuery, Page, RuleQuery};
use crate::domain::rule::Rule;
use crate::domain::stats::MemoryStats;
use crate::error::MemoryResult;

impl Engine {
    /// The butler's statistics: counts, bands and backlog of what it sees (`scope`: only
    /// `global` or only its own), from the projections like every `memory_stats`.
    pub async fn butler_stats(
        &self,
        caller: &Caller,
        butler: &str,
        scope: Option<String>,
    ) -> MemoryResult<MemoryStats> {
        self.services.database.check()?;
        let scope = self.visible_as(caller, butler, scope)?;
        self.stats_within(scope).await
    }

    /// A page of the facts the butler sees.
    pub async fn butler_facts(
        &self,
        caller: &Caller,
        butler: &str,
        query: FactQuery,
    ) -> MemoryResult<Page<Fact>> {
        self.facts_seen_by(caller, Some(butler), query).await
    }

    /// A page of the rules the butler sees.
    pub async fn butler_rules(
        &self,
        caller: &Caller,
        butler: &str,
        query: RuleQuery,
    ) -> MemoryResult<Page<Rule>> {
        self.rules_seen_by(caller, Some(butler), query).await
    }

    /// A page of the butler's episodes (`query.butler`, if given, must be that butler).
    pub async fn butler_episodes(
        &self,
        caller: &Caller,
        butler: &str,
        query: EpisodeQuery,
    ) -> MemoryResult<Page<Episode>> {
        self.episodes_seen_by(caller, Some(butler), query).await
    }

    /// The audit stream of what the butler sees: events of the facts and rules of its
    /// scopes and of its episodes (the butler page's feed).
    pub async fn butler_activity(
        &self,
        caller: &Caller,
        butler: &str,
        since: Since,
        limit: Option<u32>,
    ) -> MemoryResult<Vec<StoredEvent>> {
        let visible = self.visible_as(caller, butler, None)?;
        self.activity_within(caller, since, None, None, limit, Some(visible))
            .await
    }
}
