//! `memory_context` inside a retrieval actor: gather candidates for a butler (relevant to
//! the prompt, plus standing facts and rules and recent episodes), rank each section, render
//! and fit them into the token budget.

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use super::search::{candidate_lists, in_sessions, known_empty, ranking};
use crate::context::EngineContext;
use crate::domain::context::{ContextBlock, Quotas, assemble, episode_line, fact_line, rule_line};
use crate::domain::maturity::Maturity;
use crate::domain::memory_type::MemoryType;
use crate::domain::scoring::order;
use crate::domain::search::{Candidate, Hit, SearchMode, SearchScope};
use crate::error::MemoryResult;
use crate::query_embedding::QueryEmbedding;
use crate::store::search::Filter;

/// A context request, validated.
#[derive(Debug, Clone)]
pub struct ContextRequest {
    pub trigger_prompt: String,
    pub butler: String,
    pub token_budget: usize,
    pub scope: SearchScope,
    pub min_confidence: f64,
    pub now: DateTime<Utc>,
}

/// The block and whether relevance had to do without embeddings.
#[derive(Debug, Clone)]
pub struct ContextOutcome {
    pub block: ContextBlock,
    pub degraded: bool,
}

pub async fn run(
    ctx: &EngineContext,
    request: &ContextRequest,
    embedding: &QueryEmbedding,
) -> MemoryResult<ContextOutcome> {
    let config = &ctx.config.retrieval.context;
    let filter = Filter {
        scope: &request.scope,
        now: request.now,
        min_confidence: request.min_confidence,
    };
    let types = [MemoryType::Fact, MemoryType::Rule, MemoryType::Episode];
    let store = ctx.reads.store();
    let standing = i64::from(config.standing_depth);
    let (lists, facts, rules, recent) = futures::try_join!(
        candidate_lists(
            ctx,
            &types,
            &filter,
            &request.trigger_prompt,
            embedding,
            SearchMode::Hybrid,
            i64::from(config.relevant_depth),
        ),
        unless_empty(ctx, MemoryType::Fact, &filter, || {
            store.standing_facts(&filter, standing)
        }),
        unless_empty(ctx, MemoryType::Rule, &filter, || {
            store.standing_rules(&filter, standing)
        }),
        unless_empty(ctx, MemoryType::Episode, &filter, || {
            store.recent_episodes(&filter, i64::from(config.recent_episodes))
        }),
    )?;
    let (mode, degraded) = (lists.mode(SearchMode::Hybrid), lists.degraded);
    let ranking = ranking(ctx);
    let scored = in_sessions(
        ctx,
        &ranking,
        &filter,
        ranking.relevance(mode, lists.semantic, lists.keyword),
    )
    .await?;
    let mut hits = ranking.finish(scored, request.now);
    let mut seen: HashSet<_> = hits.iter().map(|h| h.candidate.id).collect();
    for candidate in facts.into_iter().chain(rules).chain(recent) {
        if seen.insert(candidate.id) {
            hits.push(ranking.standing(candidate, request.now));
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
    // Rules by maturity, then score; anti-patterns last, as warnings.
    rule_hits.sort_by(|a, b| {
        maturity_rank(a)
            .cmp(&maturity_rank(b))
            .then_with(|| order(a, b))
    });

    let now = request.now;
    let block = assemble(
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
        ctx.token_counter.as_ref(),
    );
    Ok(ContextOutcome { block, degraded })
}

/// `query`'s candidates, or none without asking when the tenant has no memories of the type.
async fn unless_empty<F, Fut>(
    ctx: &EngineContext,
    memory_type: MemoryType,
    filter: &Filter<'_>,
    query: F,
) -> MemoryResult<Vec<Candidate>>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = MemoryResult<Vec<Candidate>>>,
{
    if known_empty(ctx, memory_type, filter) {
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
