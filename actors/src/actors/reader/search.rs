//! A search, end to end inside a reader: candidate lists from the store, fusion, session
//! context, composite scores, diversification, the top `limit`. The candidate lists and the
//! session neighbours are the IO; [`rank`] is the rest, and pure.

use std::collections::HashSet;

use futures::future::try_join_all;
use uuid::Uuid;

use super::ReaderState;
use crate::domain::memory_type::MemoryType;
use crate::domain::scoring::Ranking;
use crate::domain::search::{Candidate, Hit, Scored, SearchMode, SearchOutcome, SearchQuery};
use crate::error::MemoryResult;
use crate::read_path::QueryEmbedding;
use crate::store::search::Filter;

/// The ranking knobs from the configuration.
pub fn ranking(state: &ReaderState) -> Ranking {
    let r = &state.services.config.retrieval;
    Ranking {
        weights: r.score_weights.clone(),
        maturity_weights: r.maturity_weights.clone(),
        fusion: r.fusion,
        rrf_k: r.rrf_k,
        semantic_weight: r.semantic_weight,
        recency_half_life_days: r.recency_half_life_days,
        max_cluster_share: r.max_cluster_share,
        session_neighbour_weight: r.session_neighbour_weight,
    }
}

/// The candidate lists of one read, each merged across memory types best first.
pub struct CandidateLists {
    pub semantic: Vec<Candidate>,
    pub keyword: Vec<Candidate>,
    /// The semantic list was asked for but the query embedding never came: the keyword list
    /// stands alone.
    pub degraded: bool,
}

impl CandidateLists {
    /// The mode that actually ran when `asked` was asked for.
    pub fn mode(&self, asked: SearchMode) -> SearchMode {
        if self.degraded {
            SearchMode::Keyword
        } else {
            asked
        }
    }
}

/// The semantic and keyword lists over `types`. The keyword lists start at once; the
/// semantic ones as soon as the query embedding is there.
pub async fn candidate_lists(
    state: &ReaderState,
    types: &[MemoryType],
    filter: &Filter<'_>,
    text: &str,
    embedding: &QueryEmbedding,
    mode: SearchMode,
    depth: i64,
) -> MemoryResult<CandidateLists> {
    let store = &state.kit.store;
    // A type the tenant has nothing of (as of now) needs no queries.
    let types: Vec<MemoryType> = types
        .iter()
        .copied()
        .filter(|t| !known_empty(state, *t, filter))
        .collect();
    // Nothing to search: the answer is empty whether or not the embedding comes.
    let wants_semantic = mode.uses_semantic() && !types.is_empty();
    let semantic = async {
        if !wants_semantic {
            return Ok((Vec::new(), false));
        }
        let Some(embedding) = embedding.vector().await else {
            return Ok((Vec::new(), true));
        };
        let vector = pgvector::Vector::from(embedding.as_ref().clone());
        let lists = try_join_all(
            types
                .iter()
                .map(|t| store.semantic_candidates(*t, filter, &vector, depth)),
        )
        .await?;
        Ok((lists, false))
    };
    let common_df = i64::from(state.services.config.retrieval.keyword_common_df.get());
    let keyword = async {
        // A semantic search whose embedding never comes answers from keywords instead.
        let wants_keyword =
            mode.uses_keyword() || (wants_semantic && embedding.vector().await.is_none());
        if !wants_keyword {
            return Ok(Vec::new());
        }
        try_join_all(types.iter().map(|t| async {
            let (corpus, plan) = state
                .kit
                .corpus_cache
                .keyword_plan(
                    store,
                    &state.services.generations,
                    *t,
                    &filter.scope.tenant_id,
                    text,
                    filter.now,
                )
                .await?;
            store
                .keyword_candidates(*t, filter, &plan, depth, corpus, common_df)
                .await
        }))
        .await
    };
    let ((semantic, degraded), keyword) = futures::try_join!(semantic, keyword)?;
    Ok(CandidateLists {
        semantic: merge(semantic),
        keyword: merge(keyword),
        degraded,
    })
}

/// Whether the tenant has no memories of `memory_type` at all, as of its latest write.
pub fn known_empty(state: &ReaderState, memory_type: MemoryType, filter: &Filter<'_>) -> bool {
    state.kit.corpus_cache.known_empty(
        &state.services.generations,
        memory_type,
        &filter.scope.tenant_id,
    )
}

/// One list from per-type lists: best signal first, ties by id, so order is deterministic.
fn merge(lists: Vec<Vec<Candidate>>) -> Vec<Candidate> {
    let mut all: Vec<Candidate> = lists.into_iter().flatten().collect();
    all.sort_by(|a, b| b.signal.total_cmp(&a.signal).then_with(|| a.id.cmp(&b.id)));
    all
}

/// Runs a search with the query's embedding (or without one: degraded to keyword).
pub async fn run(
    state: &ReaderState,
    query: &SearchQuery,
    embedding: &QueryEmbedding,
) -> MemoryResult<SearchOutcome> {
    let filter = Filter {
        scope: &query.scope,
        now: query.now,
        min_confidence: query.min_confidence,
    };
    let depth = i64::from(state.services.config.retrieval.candidate_depth).max(query.limit as i64);
    let lists = candidate_lists(
        state,
        &query.types,
        &filter,
        &query.text,
        embedding,
        query.mode,
        depth,
    )
    .await?;
    let (mode, degraded) = (lists.mode(query.mode), lists.degraded);
    let ranking = ranking(state);
    let scored = in_sessions(
        state,
        &ranking,
        &filter,
        ranking.relevance(mode, lists.semantic, lists.keyword),
    )
    .await?;
    Ok(SearchOutcome {
        hits: rank(&ranking, scored, query),
        mode,
        degraded,
    })
}

/// The top `limit` of scored candidates: composite scores, then diversified.
pub fn rank(ranking: &Ranking, scored: Vec<Scored>, query: &SearchQuery) -> Vec<Hit> {
    let mut hits = ranking.diversify(ranking.finish(scored, query.now), query.limit);
    hits.truncate(query.limit);
    hits
}

/// Adds session context to scored candidates: looks up the session neighbours of every
/// episode among them, with the neighbours the lists did not find (one statement), and lets
/// the ranking share relevance along sessions.
pub async fn in_sessions(
    state: &ReaderState,
    ranking: &Ranking,
    filter: &Filter<'_>,
    mut scored: Vec<Scored>,
) -> MemoryResult<Vec<Scored>> {
    if ranking.session_neighbour_weight <= 0.0 {
        return Ok(scored);
    }
    let episodes: Vec<Uuid> = scored
        .iter()
        .filter(|s| {
            s.candidate.memory_type() == MemoryType::Episode && s.candidate.session_id.is_some()
        })
        .map(|s| s.candidate.id)
        .collect();
    if episodes.is_empty() {
        return Ok(scored);
    }
    let known: HashSet<Uuid> = scored.iter().map(|s| s.candidate.id).collect();
    let (neighbours, fetched) = state
        .kit
        .store
        .session_neighbours(filter, &episodes, &known)
        .await?;
    ranking.with_session_neighbours(&mut scored, &neighbours, fetched);
    Ok(scored)
}
