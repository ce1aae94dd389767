//! The dashboard's reads (issue 20, the REST API): lists with filters and cursors, and
//! single records, under exactly the MCP tools' visibility (`visible`: butler keys their
//! scopes and episodes, admins everything of their tenant). A person browsing changes
//! nothing: no reference count moves.

use uuid::Uuid;

use super::Engine;
use crate::domain::caller::Caller;
use crate::domain::episode::Episode;
use crate::domain::fact::Fact;
use crate::domain::listing::{
    EpisodeQuery, FactQuery, Page, RuleQuery, check_min_confidence, page_size,
};
use crate::domain::memory_type::MemoryType;
use crate::domain::record::RecordWithLinks;
use crate::domain::rule::Rule;
use crate::domain::text::{check_name, normalize_key};
use crate::error::MemoryResult;

impl Engine {
    /// A page of the facts the caller may see.
    pub async fn list_facts(
        &self,
        caller: &Caller,
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
        let visible = self.visible(caller, query.scope.clone(), None)?;
        let now = self.services.clock.now();
        self.services
            .store
            .list_facts(&visible, &query, size, now)
            .await
    }

    /// A page of the rules the caller may see.
    pub async fn list_rules(
        &self,
        caller: &Caller,
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
        let visible = self.visible(caller, query.scope.clone(), None)?;
        let now = self.services.clock.now();
        self.services
            .store
            .list_rules(&visible, &query, size, now)
            .await
    }

    /// A page of the episodes the caller may see.
    pub async fn list_episodes(
        &self,
        caller: &Caller,
        query: EpisodeQuery,
    ) -> MemoryResult<Page<Episode>> {
        self.services.database.check()?;
        let size = page_size(query.limit)?;
        let visible = self.visible(caller, None, query.butler.clone())?;
        self.services
            .store
            .list_episodes(&visible, &query, size)
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
}

/// A butler name, or `_tenant` (the facts and rules written without one).
fn check_owner(butler: &str) -> MemoryResult<()> {
    if butler == crate::domain::shard_key::TENANT_SHARD_BUTLER {
        return Ok(());
    }
    check_name("source_butler", butler)
}
