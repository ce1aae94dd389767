//! `memory_context` inside a reader: gather candidates for a butler (relevant to the prompt,
//! plus standing facts and rules and recent episodes), then [`compose`]: rank each section,
//! render it and fit the sections into the token budget. Gathering is the IO; composing is
//! pure, so the same candidates at the same clock time give the same bytes.

use std::collections::HashSet;

use super::ReaderState;
use super::search::{candidate_lists_in_time, in_sessions, known_empty, ranking_for};
use super::second_stage::reranked;
use crate::config::ContextConfig;
use crate::domain::context_block::{
    ContextBlock, ContextOutcome, Quotas, TokenCounter, assemble, episode_line, fact_line,
    rule_line,
};
use crate::domain::diversity::demote_near_duplicates;
use crate::domain::maturity::Maturity;
use crate::domain::memory_type::MemoryType;
use crate::domain::scoring::{Ranking, order};
use crate::domain::search::{Candidate, ContextRequest, Hit, Scored, SearchMode};
use crate::domain::time_window::TimeWindow;
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
        embedding_version: state.compared_version(),
        window: request.window,
    };
    let types = [MemoryType::Fact, MemoryType::Rule, MemoryType::Episode];
    let store = &state.kit.store;
    let standing = i64::from(config.standing_depth);
    let (mut ranking, _) = ranking_for(&state.services.config.retrieval, &request.trigger_prompt);
    let (lists, facts, rules, recent) = futures::try_join!(
        candidate_lists_in_time(
            state,
            &types,
            &filter,
            &request.trigger_prompt,
            embedding,
            SearchMode::Hybrid,
            i64::from(config.relevant_depth),
            request.stated.as_ref(),
            &mut ranking,
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
    let (relevant, adjacent) = in_sessions(
        state,
        &ranking,
        &filter,
        ranking.relevance(mode, lists.semantic, lists.keyword),
        config.relevant_depth as usize,
    )
    .await?;
    let (relevant, rerank_skipped) = reranked(
        state,
        &request.scope.tenant_id,
        &request.trigger_prompt,
        embedding,
        relevant,
        &adjacent,
    )
    .await;
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
    Ok(ContextOutcome {
        block,
        degraded,
        rerank_skipped,
    })
}

/// The lines of a section checked for restatements: more than a budget ever holds.
const DIVERSITY_WINDOW: usize = 64;

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
    // Ranked as things stood at the window's end; ages are told from now.
    let reference = TimeWindow::reference(request.window.as_ref(), now);
    let mut hits = ranking.finish(gathered.relevant, reference);
    let mut seen: HashSet<_> = hits.iter().map(|h| h.candidate.id).collect();
    for candidate in gathered.standing {
        if seen.insert(candidate.id) {
            hits.push(ranking.standing(candidate, reference));
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
    // A fact or rule that restates one above it goes last, the first the budget cuts.
    // Facts are not capped by subject here as search caps them: most are about the user.
    // Episodes keep their order: the recent context is the latest turns, of one session.
    let fact_hits = demote_near_duplicates(fact_hits, DIVERSITY_WINDOW);
    let rule_hits = demote_near_duplicates(rule_hits, DIVERSITY_WINDOW);

    assemble(
        [
            fact_hits
                .iter()
                .map(|h| fact_line(h, now, config.max_line_bytes))
                .collect(),
            rule_hits
                .iter()
                .map(|h| rule_line(h, config.max_line_bytes))
                .collect(),
            episode_hits
                .iter()
                .map(|h| episode_line(h, now, config.max_line_bytes))
                .collect(),
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

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Duration, TimeZone, Utc};
    use uuid::Uuid;

    use super::super::search::ranking;
    use super::*;
    use crate::domain::context_block::Words;
    use crate::domain::search::{ComponentScores, SearchScope};

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 1, 9, 0, 0).unwrap()
    }

    /// A candidate as the store returns it; `n` orders ids and ages.
    fn candidate(memory_type: MemoryType, n: u128, content: &str, importance: f64) -> Candidate {
        let at = now() - Duration::hours(n as i64);
        Candidate {
            content: content.into(),
            importance,
            subject: (memory_type == MemoryType::Fact).then(|| "user".into()),
            predicate: (memory_type == MemoryType::Fact).then(|| format!("p{n}")),
            scope: (memory_type != MemoryType::Episode).then(|| "global".into()),
            permanence: (memory_type == MemoryType::Fact).then(|| "stable".into()),
            validity: (memory_type != MemoryType::Episode).then(|| "active".into()),
            butler: Some("health".into()),
            ..Candidate::fixture(memory_type, n, at)
        }
    }

    fn rule(n: u128, content: &str, maturity: &str) -> Candidate {
        Candidate {
            maturity: Some(maturity.into()),
            ..candidate(MemoryType::Rule, n, content, 5.0)
        }
    }

    /// Found by the prompt's lists, with this relevance.
    fn relevant(candidate: Candidate, relevance: f64) -> Scored {
        Scored {
            candidate,
            scores: ComponentScores {
                relevance,
                ..ComponentScores::blank()
            },
        }
    }

    fn request(token_budget: usize) -> ContextRequest {
        ContextRequest {
            trigger_prompt: "tea".into(),
            butler: "health".into(),
            token_budget,
            scope: SearchScope {
                tenant_id: "t".into(),
                scopes: None,
                butlers: None,
            },
            min_confidence: 0.2,
            now: now(),
            window: None,
            stated: None,
        }
    }

    fn block(gathered: Gathered, budget: usize) -> ContextBlock {
        let config = crate::config::defaults().retrieval;
        compose(
            gathered,
            &ranking(&config),
            &config.context,
            &request(budget),
            &Words,
        )
    }

    fn fixture() -> Gathered {
        Gathered {
            relevant: vec![
                relevant(candidate(MemoryType::Fact, 1, "Drinks green tea", 5.0), 0.9),
                relevant(
                    candidate(MemoryType::Episode, 2, "Made tea at noon", 5.0),
                    0.8,
                ),
                relevant(rule(3, "Offer tea after lunch", "candidate"), 0.7),
            ],
            standing: vec![
                candidate(MemoryType::Fact, 4, "Lives in Lyon", 9.0),
                // Also found by the prompt: counted once, with its relevance.
                candidate(MemoryType::Fact, 1, "Drinks green tea", 5.0),
                rule(5, "Confirm before sending", "proven"),
                rule(6, "Do not call after 9pm", "anti_pattern"),
                candidate(MemoryType::Episode, 7, "Asked about the weather", 5.0),
            ],
        }
    }

    #[test]
    fn sections_in_order_rules_by_maturity_and_anti_patterns_last() {
        let block = block(fixture(), 3000);
        let text = &block.text;
        let facts = text.find("(Facts)").unwrap();
        let rules = text.find("(Rules)").unwrap();
        let episodes = text.find("(Episodes)").unwrap();
        assert!(facts < rules && rules < episodes, "{text}");
        let proven = text.find("Confirm before sending").unwrap();
        let candidate = text.find("Offer tea after lunch").unwrap();
        let avoid = text.find("- Avoid: Do not call after 9pm").unwrap();
        assert!(proven < candidate && candidate < avoid, "{text}");
        assert_eq!(block.sections.rules, [5, 3, 6].map(Uuid::from_u128));
        assert_eq!(text.matches("Drinks green tea").count(), 1, "{text}");
        assert_eq!(block.candidates, 7, "the duplicate counts once");
        assert_eq!(block.dropped, 0);
    }

    #[test]
    fn a_tight_budget_drops_the_lowest_ranked_and_holds() {
        let roomy = block(fixture(), 3000);
        let tight = block(fixture(), roomy.tokens_used / 2);
        assert!(tight.tokens_used <= tight.token_budget, "{tight:?}");
        assert!(tight.dropped > 0, "{tight:?}");
        assert_eq!(Words.count(&tight.text), tight.tokens_used);
        // Within each section, what stays is a prefix of what the roomy block ranked.
        for (kept, all) in [
            (&tight.sections.facts, &roomy.sections.facts),
            (&tight.sections.rules, &roomy.sections.rules),
            (&tight.sections.episodes, &roomy.sections.episodes),
        ] {
            assert_eq!(kept[..], all[..kept.len()]);
        }
    }

    /// The block depends on the candidates, not on the order the store returned them in:
    /// two reads of the same data give the same bytes.
    #[test]
    fn the_same_candidates_in_any_order_give_the_same_bytes() {
        let expected = block(fixture(), 40);
        for rotation in 1..5 {
            let mut gathered = fixture();
            gathered.relevant.rotate_left(rotation % 3);
            gathered.standing.rotate_left(rotation);
            gathered.standing.reverse();
            assert_eq!(block(gathered, 40), expected, "rotation {rotation}");
        }
    }
}
