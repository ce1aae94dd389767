//! A search, end to end inside a reader: candidate lists from the store, fusion, session
//! context, the second stage when it is on, composite scores, diversification, the top
//! `limit`. The candidate lists, the session neighbours and the second stage are the IO;
//! [`rank`] is the rest, and pure.

use std::collections::HashSet;
use std::sync::Arc;

use futures::future::try_join_all;
use tokio::sync::OnceCell;
use uuid::Uuid;

use super::ReaderState;
use super::second_stage::reranked;
use crate::config::RetrievalConfig;
use crate::domain::intent::Intent;
use crate::domain::memory_type::MemoryType;
use crate::domain::rerank::{Adjacent, adjacent};
use crate::domain::scoring::{Ranking, TypeWeights};
use crate::domain::search::{Candidate, Hit, Scored, SearchMode, SearchOutcome, SearchQuery};
use crate::domain::stated_time::StatedTime;
use crate::domain::time_window::TimeWindow;
use crate::domain::widening::{widen, widened_query_words};
use crate::error::MemoryResult;
use crate::read_path::QueryEmbedding;
use crate::store::query_words::WordsAsked;
use crate::store::search::Filter;

/// The ranking knobs from the configuration.
pub fn ranking(r: &RetrievalConfig) -> Ranking {
    Ranking {
        weights: r.score_weights.clone(),
        maturity_weights: r.maturity_weights.clone(),
        fusion: r.fusion,
        rrf_k: r.rrf_k,
        semantic_weight: r.semantic_weight,
        recency_half_life_days: r.recency_half_life_days,
        max_cluster_share: r.max_cluster_share,
        session_neighbour_weight: r.session_neighbour_weight,
        session_neighbour_decay: r.session_neighbour_decay,
        type_weights: TypeWeights::NEUTRAL,
        stated_time: None,
    }
}

/// The ranking of a read of `text`: as configured, routed by the text's intent when
/// `retrieval.intent_routing` is on (then with the intent).
pub fn ranking_for(r: &RetrievalConfig, text: &str) -> (Ranking, Option<Intent>) {
    match r.intent_routing.route(text) {
        Some((intent, route)) => (route.apply(ranking(r)), Some(intent)),
        None => (ranking(r), None),
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
    /// These lists and `more` as one pair of lists, each candidate once (as these have it).
    fn with(self, more: CandidateLists) -> CandidateLists {
        let union = |mut a: Vec<Candidate>, b: Vec<Candidate>| {
            let seen: HashSet<Uuid> = a.iter().map(|c| c.id).collect();
            a.extend(b.into_iter().filter(|c| !seen.contains(&c.id)));
            merge(vec![a])
        };
        CandidateLists {
            semantic: union(self.semantic, more.semantic),
            keyword: union(self.keyword, more.keyword),
            degraded: self.degraded,
        }
    }

    fn is_empty(&self) -> bool {
        self.semantic.is_empty() && self.keyword.is_empty()
    }

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
/// semantic ones as soon as the query embedding is there. `words` holds the query's words
/// once they are looked up (by the first of the read's lists to need them).
#[allow(clippy::too_many_arguments)]
pub async fn candidate_lists(
    state: &ReaderState,
    types: &[MemoryType],
    filter: &Filter<'_>,
    text: &str,
    embedding: &QueryEmbedding,
    mode: SearchMode,
    depth: i64,
    words: &OnceCell<QueryWords>,
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
        if !wants_keyword || types.is_empty() {
            return Ok(Vec::new());
        }
        let words = words
            .get_or_try_init(|| query_words(state, &filter.scope.tenant_id, text))
            .await?;
        try_join_all(types.iter().map(|t| async {
            let (corpus, plan) = state
                .kit
                .corpus_cache
                .keyword_plan(
                    store,
                    &state.services.generations,
                    *t,
                    &filter.scope.tenant_id,
                    &words.lexemes,
                    &words.widened,
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

/// A read's query words: its lexemes as the full-text index holds them, and the words its
/// keyword query is widened with, with their weights (`domain::widening`; none while
/// widening is off).
pub struct QueryWords {
    lexemes: Arc<Vec<String>>,
    widened: Vec<(String, f64)>,
}

/// The query words of a read of `text`: a text read before has its lexemes cached and
/// looks up only its words' neighbours; a new one asks for both in one statement.
async fn query_words(state: &ReaderState, tenant_id: &str, text: &str) -> MemoryResult<QueryWords> {
    let widening = state.services.config.retrieval.widening;
    let store = &state.kit.store;
    let cache = &state.kit.corpus_cache;
    let asked = widening.enabled.then_some(WordsAsked {
        tenant_id,
        version: state.embedding_version,
        max_words: widening.max_query_words,
        per_word: widening.words_per_word,
    });
    let (lexemes, neighbours) = match (cache.lexemes(text), asked) {
        (Some(lexemes), None) => (lexemes, Vec::new()),
        (Some(lexemes), Some(asked)) => {
            let words = widened_query_words(&lexemes, asked.max_words);
            let neighbours = store
                .word_neighbours(tenant_id, asked.version, &words, asked.per_word)
                .await?;
            (lexemes, neighbours)
        }
        (None, asked) => {
            let (lexemes, neighbours) = store.query_words(text, asked).await?;
            (cache.keep_lexemes(text, lexemes), neighbours)
        }
    };
    // No neighbours while widening is off: nothing to widen with.
    let widened = widen(&lexemes, &neighbours, widening);
    Ok(QueryWords { lexemes, widened })
}

/// [`candidate_lists`], and when the read's words state a time (`domain::stated_time`), the
/// episode and fact lists of that time too, merged in: they find what the lists over
/// everything may miss (a superseded fact is only found in a window). Rules are not looked
/// up there: a time does not move them (how to behave does not depend on when a rule was
/// made). Then `ranking` ranks that time's episodes and facts first, if it has any:
/// otherwise every one would lose the same share, which would move them against rules for
/// nothing.
#[allow(clippy::too_many_arguments)]
pub async fn candidate_lists_in_time(
    state: &ReaderState,
    types: &[MemoryType],
    filter: &Filter<'_>,
    text: &str,
    embedding: &QueryEmbedding,
    mode: SearchMode,
    depth: i64,
    stated: Option<&StatedTime>,
    ranking: &mut Ranking,
) -> MemoryResult<CandidateLists> {
    let words = OnceCell::new();
    let lists =
        |types, filter| candidate_lists(state, types, filter, text, embedding, mode, depth, &words);
    let timed: Vec<MemoryType> = types
        .iter()
        .copied()
        .filter(|t| *t != MemoryType::Rule)
        .collect();
    let Some(stated) = stated.filter(|_| !timed.is_empty()) else {
        return lists(types, filter).await;
    };
    let window = stated.window();
    let in_time = Filter {
        window: Some(window),
        ..filter.clone()
    };
    let (all, of_the_time) = futures::try_join!(lists(types, filter), lists(&timed, &in_time))?;
    if !of_the_time.is_empty() {
        ranking.stated_time = Some((window, state.services.config.retrieval.stated_time_share));
    }
    Ok(all.with(of_the_time))
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
        embedding_version: state.compared_version(),
        window: query.window,
    };
    let depth = i64::from(state.services.config.retrieval.candidate_depth).max(query.limit as i64);
    let (mut ranking, intent) = ranking_for(&state.services.config.retrieval, &query.text);
    let lists = candidate_lists_in_time(
        state,
        &query.types,
        &filter,
        &query.text,
        embedding,
        query.mode,
        depth,
        query.stated.as_ref(),
        &mut ranking,
    )
    .await?;
    let (mode, degraded) = (lists.mode(query.mode), lists.degraded);
    let (scored, adjacent) = in_sessions(
        state,
        &ranking,
        &filter,
        ranking.relevance(mode, lists.semantic, lists.keyword),
        neighbours_reach(query.limit),
    )
    .await?;
    let (scored, rerank_skipped) = reranked(
        state,
        &query.scope.tenant_id,
        &query.text,
        embedding,
        scored,
        &adjacent,
    )
    .await;
    Ok(SearchOutcome {
        hits: rank(&ranking, scored, query),
        mode,
        degraded,
        intent,
        rerank_skipped,
        stated_time: query.stated.clone(),
    })
}

/// The top `limit` of scored candidates: composite scores, then diversified.
pub fn rank(ranking: &Ranking, scored: Vec<Scored>, query: &SearchQuery) -> Vec<Hit> {
    // Ranked as things stood at the window's end (recency, decayed confidence).
    let reference = TimeWindow::reference(query.window.as_ref(), query.now);
    let mut hits = ranking.diversify(ranking.finish(scored, reference), query.limit);
    hits.truncate(query.limit);
    hits
}

/// How many of a search's most relevant episodes have their neighbours looked up: twice
/// what it returns, at least a page. A neighbour shares its found episode's relevance, so
/// an episode far below the cut lends too little to lift anything into it, and looking
/// up every candidate's neighbours cost the database more than the search's keyword list
/// (336 rows, 9.6 ms of 22 per cold search; docs/benchmarks.md, "Where a cold search's CPU
/// goes"). A pair found through its better half still shares both ways.
pub fn neighbours_reach(limit: usize) -> usize {
    (2 * limit).max(20)
}

/// Adds session context to scored candidates: looks up the session neighbours of the
/// `reach` most relevant episodes among them, with the neighbours the lists did not find
/// (one statement), and lets the ranking share relevance along sessions. Also gives the
/// turns around each episode the lookup reached, which the second stage reads it with.
pub async fn in_sessions(
    state: &ReaderState,
    ranking: &Ranking,
    filter: &Filter<'_>,
    mut scored: Vec<Scored>,
    reach: usize,
) -> MemoryResult<(Vec<Scored>, Adjacent)> {
    if ranking.session_neighbour_weight <= 0.0 {
        return Ok((scored, Adjacent::new()));
    }
    // Episodes in a session, or without one when episodes stored close together make a
    // conversation (`episodes.conversation_gap_secs`).
    let gap = state.services.config.episodes.conversation_gap_secs;
    let mut episodes: Vec<(f64, &Candidate)> = scored
        .iter()
        .filter(|s| {
            s.candidate.memory_type() == MemoryType::Episode
                && (s.candidate.session_id.is_some() || gap > 0.0)
        })
        .map(|s| (s.scores.relevance, &s.candidate))
        .collect();
    if episodes.is_empty() {
        return Ok((scored, Adjacent::new()));
    }
    episodes.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.id.cmp(&b.1.id)));
    let episodes: Vec<&Candidate> = episodes.into_iter().take(reach).map(|(_, c)| c).collect();
    let known: HashSet<Uuid> = scored.iter().map(|s| s.candidate.id).collect();
    let (neighbours, fetched) = state
        .kit
        .store
        .session_neighbours(
            filter,
            &episodes,
            &known,
            gap,
            state.services.config.retrieval.session_neighbour_reach,
            // Turns further away lend a smaller share: worth looking up for the episodes
            // that make the answer, the better half, not for those near the cut.
            episodes.len().div_ceil(2),
        )
        .await?;
    ranking.with_session_neighbours(&mut scored, &neighbours, fetched);
    Ok((scored, adjacent(&neighbours)))
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeZone, Utc};

    use super::*;
    use crate::domain::search::SearchScope;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 5, 1, 9, 0, 0).unwrap()
    }

    fn episode(n: u128, session: &str, signal: f64) -> Candidate {
        Candidate {
            content: format!("episode {n}"),
            butler: Some("health".into()),
            session_id: Some(session.into()),
            signal,
            ..Candidate::fixture(MemoryType::Episode, n, now())
        }
    }

    fn query(limit: usize) -> SearchQuery {
        SearchQuery {
            text: "tea".into(),
            embedding_needed: true,
            types: vec![MemoryType::Episode],
            mode: SearchMode::Hybrid,
            limit,
            min_confidence: 0.2,
            scope: SearchScope {
                tenant_id: "t".into(),
                scopes: None,
                butlers: None,
            },
            now: now(),
            window: None,
            stated: None,
        }
    }

    fn ids(hits: &[Hit]) -> Vec<u128> {
        hits.iter().map(|h| h.candidate.id.as_u128()).collect()
    }

    /// Fusion and the cut, on lists as the store returns them: what both lists found leads,
    /// each list's clear winner beats its runner-up, and no more than `limit` come back.
    #[test]
    fn both_lists_agreeing_lead_and_the_cut_holds() {
        let ranking = ranking(&crate::config::defaults().retrieval);
        let semantic = vec![
            episode(1, "a", 0.9),
            episode(2, "b", 0.5),
            episode(3, "c", 0.4),
        ];
        let keyword = vec![
            episode(1, "a", 7.0),
            episode(4, "d", 6.0),
            episode(5, "e", 1.0),
        ];
        let scored = ranking.relevance(SearchMode::Hybrid, semantic, keyword);
        let hits = rank(&ranking, scored, &query(3));
        assert_eq!(hits.len(), 3);
        assert_eq!(ids(&hits)[0], 1, "found by both lists");
        assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
        assert!(ids(&hits).contains(&4), "the keyword list's strong second");
    }

    /// Diversification: one session cannot take the whole top-k while others have hits.
    #[test]
    fn one_session_cannot_fill_the_top() {
        let ranking = ranking(&crate::config::defaults().retrieval);
        let semantic: Vec<Candidate> = (1..=6)
            .map(|n| {
                episode(
                    n,
                    if n <= 4 { "same" } else { "other" },
                    1.0 - n as f64 / 10.0,
                )
            })
            .collect();
        let scored = ranking.relevance(SearchMode::Semantic, semantic, Vec::new());
        let hits = rank(&ranking, scored, &query(4));
        let same = hits
            .iter()
            .filter(|h| h.candidate.session_id.as_deref() == Some("same"))
            .count();
        assert!(same <= 2, "max_cluster_share 0.5 of 4: {:?}", ids(&hits));
    }
}
