//! `memory_context` inside a reader: gather candidates for a butler (relevant to the prompt,
//! plus standing facts and rules and recent episodes), then [`compose`]: rank each section,
//! render it and fit the sections into the token budget. Gathering is the IO; composing is
//! pure, so the same candidates at the same clock time give the same bytes.

use std::collections::HashSet;

use super::ReaderState;
use super::search::{candidate_lists, in_sessions, known_empty, ranking};
use crate::config::ContextConfig;
use crate::domain::context_block::{
    ContextBlock, ContextOutcome, Quotas, TokenCounter, assemble, episode_line, fact_line,
    rule_line,
};
use crate::domain::maturity::Maturity;
use crate::domain::memory_type::MemoryType;
use crate::domain::scoring::{Ranking, order};
use crate::domain::search::{Candidate, ContextRequest, Hit, Scored, SearchMode};
use crate::error::MemoryResult;
use crate::read_path::QueryEmbedding;
use crate::store::search::Filter;

/// The candidates of one context block, before ranking.
pub struct Gathered {
    /// Relevant to the prompt, with their relevance (and session context).
    pub relevant: Vec<Scored>,
    /// Standing facts and rules and recent episodes, whatever the prompt.
    pub standing: Vec<Candidate>,
}

pub async fn run(
    state: &ReaderState,
    request: &ContextRequest,
    embedding: &QueryEmbedding,
) -> MemoryResult<ContextOutcome> {
    let config = &state.services.config.retrieval.context;
    let filter = Filter {
        scope: &request.scope,
        now: request.now,
        min_confidence: request.min_confidence,
    };
    let types = [MemoryType::Fact, MemoryType::Rule, MemoryType::Episode];
    let store = &state.kit.store;
    let standing = i64::from(config.standing_depth);
    let (lists, facts, rules, recent) = futures::try_join!(
        candidate_lists(
            state,
            &types,
            &filter,
            &request.trigger_prompt,
            embedding,
            SearchMode::Hybrid,
            i64::from(config.relevant_depth),
        ),
        unless_empty(state, MemoryType::Fact, &filter, || {
            store.standing_facts(&filter, standing)
        }),
        unless_empty(state, MemoryType::Rule, &filter, || {
            store.standing_rules(&filter, standing)
        }),
        unless_empty(state, MemoryType::Episode, &filter, || {
            store.recent_episodes(&filter, i64::from(config.recent_episodes))
        }),
    )?;
    let (mode, degraded) = (lists.mode(SearchMode::Hybrid), lists.degraded);
    let ranking = ranking(state);
    let relevant = in_sessions(
        state,
        &ranking,
        &filter,
        ranking.relevance(mode, lists.semantic, lists.keyword),
    )
    .await?;
    let gathered = Gathered {
        relevant,
        standing: facts.into_iter().chain(rules).chain(recent).collect(),
    };
    let block = compose(
        gathered,
        &ranking,
        config,
        request,
        state.kit.token_counter.as_ref(),
    );
    Ok(ContextOutcome { block, degraded })
}

/// Ranks each section and fits the sections into the request's budget: facts and episodes
/// by score, rules by maturity and then score (anti-patterns last, as warnings). A standing
/// candidate that the prompt's lists also found counts once, with its relevance.
pub fn compose(
    gathered: Gathered,
    ranking: &Ranking,
    config: &ContextConfig,
    request: &ContextRequest,
    counter: &dyn TokenCounter,
) -> ContextBlock {
    let now = request.now;
    let mut hits = ranking.finish(gathered.relevant, now);
    let mut seen: HashSet<_> = hits.iter().map(|h| h.candidate.id).collect();
    for candidate in gathered.standing {
        if seen.insert(candidate.id) {
            hits.push(ranking.standing(candidate, now));
        }
    }

    let (mut fact_hits, mut rule_hits, mut episode_hits) = (Vec::new(), Vec::new(), Vec::new());
    for hit in hits {
        match hit.candidate.memory_type() {
            MemoryType::Fact => fact_hits.push(hit),
            MemoryType::Rule => rule_hits.push(hit),
            MemoryType::Episode => episode_hits.push(hit),
        }
    }
    fact_hits.sort_by(order);
    episode_hits.sort_by(order);
    rule_hits.sort_by(|a, b| {
        maturity_rank(a)
            .cmp(&maturity_rank(b))
            .then_with(|| order(a, b))
    });

    assemble(
        [
            fact_hits.iter().map(|h| fact_line(h, now)).collect(),
            rule_hits.iter().map(rule_line).collect(),
            episode_hits.iter().map(|h| episode_line(h, now)).collect(),
        ],
        request.token_budget,
        Quotas {
            facts: config.facts_share,
            rules: config.rules_share,
            episodes: config.episodes_share,
        },
        counter,
    )
}

/// `query`'s candidates, or none without asking when the tenant has no memories of the type.
async fn unless_empty<F, Fut>(
    state: &ReaderState,
    memory_type: MemoryType,
    filter: &Filter<'_>,
    query: F,
) -> MemoryResult<Vec<Candidate>>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = MemoryResult<Vec<Candidate>>>,
{
    if known_empty(state, memory_type, filter) {
        Ok(Vec::new())
    } else {
        query().await
    }
}

fn maturity_rank(hit: &Hit) -> u8 {
    match hit.candidate.maturity() {
        Some(Maturity::Proven) => 0,
        Some(Maturity::Established) => 1,
        Some(Maturity::Candidate) | None => 2,
        Some(Maturity::AntiPattern) => 3,
    }
}
