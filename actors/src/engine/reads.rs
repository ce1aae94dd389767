//! Reads: resolved to what the caller may see (`visibility.rs`), served by the retrieval
//! actors. A read's query embedding is started here, before dispatch, and travels with the
//! read (`query_embedding`): the read waits for it only where a semantic list needs it.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Engine;
use crate::actors::ReaderMsg;
use crate::config::EngineConfig;
use crate::domain::caller::{Caller, GLOBAL_SCOPE};
use crate::domain::context_block::ContextOutcome;
use crate::domain::memory_type::MemoryType;
use crate::domain::record::{MemoryRecord, RecordWithLinks};
use crate::domain::result_quality;
use crate::domain::search::{
    ContextInput, ContextRequest, SearchInput, SearchMode, SearchOutcome, SearchQuery, SearchScope,
};
use crate::domain::shard_key::ShardKey;
use crate::domain::stated_time::StatedTime;
use crate::domain::stats::MemoryStats;
use crate::domain::text::{check_content, check_name};
use crate::domain::time_window::TimeWindow;
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::read_path::{Cached, QueryEmbedding, ReadTarget};
use crate::store::Store;
use crate::store::stats::StatsFilter;

impl Engine {
    /// One record by type and id, with its links; bumps its reference count.
    pub async fn get(
        &self,
        caller: &Caller,
        memory_type: MemoryType,
        id: Uuid,
        butler: Option<String>,
    ) -> MemoryResult<RecordWithLinks> {
        let found = self.look_up(caller, memory_type, id, butler).await?;
        let owner = match &found.record {
            MemoryRecord::Episode(e) => ShardKey::new(&e.tenant_id, &e.butler),
            MemoryRecord::Fact(f) => ShardKey::for_butler(&f.tenant_id, f.source_butler.as_deref()),
            MemoryRecord::Rule(r) => ShardKey::for_butler(&r.tenant_id, r.source_butler.as_deref()),
        };
        if !caller.reads_leave_no_trace() {
            self.touch(owner, memory_type, vec![id]).await;
        }
        Ok(found)
    }

    /// One record the caller may see, with its links; changes nothing.
    pub(super) async fn look_up(
        &self,
        caller: &Caller,
        memory_type: MemoryType,
        id: Uuid,
        butler: Option<String>,
    ) -> MemoryResult<RecordWithLinks> {
        self.services.database.check()?;
        if let Some(b) = &butler {
            check_name("butler", b)?;
        }
        let butler = caller.reading_as(butler.as_deref())?;
        let position = self.observe_writes(&caller.tenant_id).await?;
        let target = self.read_target(position).await;
        let caller = caller.clone();
        self.read(|reply| ReaderMsg::Get {
            caller,
            butler,
            memory_type,
            id,
            target,
            span: tracing::Span::current(),
            reply,
        })
        .await
    }

    /// Counts and health indicators of what the caller may see.
    pub async fn stats(
        &self,
        caller: &Caller,
        scope: Option<String>,
        butler: Option<String>,
    ) -> MemoryResult<MemoryStats> {
        self.services.database.check()?;
        let scope = self.visible(caller, scope, butler)?;
        self.stats_within(scope).await
    }

    /// Counts and health indicators of `scope` (what someone sees, already resolved),
    /// answered from the read projections.
    pub(super) async fn stats_within(&self, scope: SearchScope) -> MemoryResult<MemoryStats> {
        let filter = StatsFilter::from(scope);
        self.read(|reply| ReaderMsg::Stats {
            filter,
            span: tracing::Span::current(),
            reply,
        })
        .await
    }

    /// Hybrid, semantic or keyword search over what the caller may see. Bumps the reference
    /// counts of what it returns.
    pub async fn search(&self, caller: &Caller, input: SearchInput) -> MemoryResult<SearchOutcome> {
        self.search_touching(caller, input, true).await
    }

    /// [`Engine::search`], bumping the reference counts of the hits when `touch` (a
    /// person browsing the dashboard does not weigh in retrieval).
    pub(super) async fn search_touching(
        &self,
        caller: &Caller,
        input: SearchInput,
        touch: bool,
    ) -> MemoryResult<SearchOutcome> {
        self.services.database.check()?;
        let config = &self.services.config;
        let text = check_content("query", &input.query, &config.limits)?;
        let mode = input.mode.unwrap_or(config.retrieval.default_mode);
        let limit = input.limit.unwrap_or(config.retrieval.default_limit);
        if limit == 0 || limit > config.retrieval.max_limit {
            return Err(MemoryError::new(
                ErrorCode::InvalidLimit,
                format!(
                    "`limit` must be between 1 and {}",
                    config.retrieval.max_limit
                ),
            ));
        }
        let min_confidence = input
            .min_confidence
            .unwrap_or(config.facts.retrieval_confidence_threshold);
        if !(0.0..=1.0).contains(&min_confidence) {
            return Err(MemoryError::new(
                ErrorCode::InvalidMinConfidence,
                "`min_confidence` must be between 0 and 1",
            ));
        }
        let mut types = input.types.unwrap_or_else(|| MemoryType::ALL.to_vec());
        types.sort();
        types.dedup();
        if types.is_empty() {
            return Err(MemoryError::new(
                ErrorCode::EmptyTypes,
                "`types` must name at least one type",
            ));
        }
        let window = TimeWindow::parse(
            input.as_of.as_deref(),
            input.since.as_deref(),
            input.until.as_deref(),
        )?;
        let scope = self.visible(caller, input.scope, input.butler)?;
        let position = self.observe_writes(&caller.tenant_id).await?;
        let generation = self.services.generations.current(&caller.tenant_id);
        let now = self.services.clock.now();
        let stated = stated_time(&text, window.as_ref(), config, now);
        let key = format!(
            "search|{}|{:?}|{:?}|{:?}|{mode}|{limit}|{min_confidence}|{}|{}|{text}",
            scope.tenant_id,
            scope.scopes,
            scope.butlers,
            types,
            TimeWindow::key(window.as_ref()),
            stated_key(stated.as_ref())
        );
        if let Some(Cached::Search(hit)) = self.results.get(&key, generation, now) {
            let outcome = hit.as_ref().clone();
            if touch {
                self.touch_hits(caller, &outcome).await;
            }
            record_search_quality(&outcome);
            return Ok(outcome);
        }
        let query = SearchQuery {
            scope,
            embedding_needed: mode.uses_semantic(),
            text,
            types,
            mode,
            limit: limit as usize,
            min_confidence,
            now,
            window,
            stated,
        };
        let embedding = if query.embedding_needed {
            self.queries
                .embed(std::slice::from_ref(&query.text))
                .remove(0)
        } else {
            QueryEmbedding::none()
        };
        let query = Box::new(query);
        let target = self.read_target(position).await;
        let outcome = self
            .read(|reply| ReaderMsg::Search {
                query,
                embedding,
                target,
                span: tracing::Span::current(),
                reply,
            })
            .await?;
        if touch {
            self.touch_hits(caller, &outcome).await;
        }
        record_search_quality(&outcome);
        if outcome.degraded {
            metrics::counter!("butler_memory_degraded_reads_total", "tool" => "search")
                .increment(1);
        } else if !outcome.rerank_skipped {
            self.results.put(key, generation, now, || {
                Cached::Search(Arc::new(outcome.clone()))
            });
        }
        Ok(outcome)
    }

    /// The facts and rules most relevant to a topic (`input.query`): a hybrid search of
    /// those two types, whatever `input` says of types and mode.
    pub async fn recall(&self, caller: &Caller, input: SearchInput) -> MemoryResult<SearchOutcome> {
        self.search(
            caller,
            SearchInput {
                types: Some(vec![MemoryType::Fact, MemoryType::Rule]),
                mode: Some(SearchMode::Hybrid),
                ..input
            },
        )
        .await
    }

    /// The memory block for a butler's session, within a token budget.
    pub async fn context(
        &self,
        caller: &Caller,
        input: ContextInput,
    ) -> MemoryResult<ContextOutcome> {
        self.context_batch(caller, vec![input]).await.remove(0)
    }

    /// Many context blocks: one embedding batch for every prompt, answers in request order.
    /// Each request succeeds or fails on its own.
    pub async fn context_batch(
        &self,
        caller: &Caller,
        inputs: Vec<ContextInput>,
    ) -> Vec<MemoryResult<ContextOutcome>> {
        if let Err(e) = self.services.database.check() {
            return inputs.iter().map(|_| Err(e.clone())).collect();
        }
        let requests: Vec<MemoryResult<ContextRequest>> = inputs
            .into_iter()
            .map(|input| self.context_request(caller, input))
            .collect();
        let position = match self.observe_writes(&caller.tenant_id).await {
            Ok(position) => position,
            Err(e) => return requests.iter().map(|_| Err(e.clone())).collect(),
        };
        // Answers still in the result cache need neither an embedding nor a reader.
        let generation = self.services.generations.current(&caller.tenant_id);
        let cached: Vec<Option<ContextOutcome>> = requests
            .iter()
            .map(|r| {
                let r = r.as_ref().ok()?;
                match self.results.get(&context_key(r), generation, r.now) {
                    Some(Cached::Context(hit)) => Some(hit.as_ref().clone()),
                    _ => None,
                }
            })
            .collect();
        let prompts: Vec<String> = requests
            .iter()
            .zip(&cached)
            .filter_map(|(r, hit)| match (r, hit) {
                (Ok(r), None) => Some(r.trigger_prompt.clone()),
                _ => None,
            })
            .collect();
        let mut embeddings = self.queries.embed(&prompts).into_iter();
        let answers = requests.into_iter().zip(cached).map(|(request, hit)| {
            let embedding = match (&request, &hit) {
                (Ok(_), None) => embeddings.next().unwrap_or_else(QueryEmbedding::none),
                _ => QueryEmbedding::none(),
            };
            async move {
                if let Some(hit) = hit {
                    return Ok(hit);
                }
                let request = request?;
                let key = context_key(&request);
                let now = request.now;
                let request = Box::new(request);
                let target = self.read_target(position).await;
                let outcome = self
                    .read(|reply| ReaderMsg::Context {
                        request,
                        embedding,
                        target,
                        span: tracing::Span::current(),
                        reply,
                    })
                    .await?;
                record_context_quality(&outcome);
                if outcome.degraded {
                    metrics::counter!("butler_memory_degraded_reads_total", "tool" => "context")
                        .increment(1);
                } else if !outcome.rerank_skipped {
                    self.results.put(key, generation, now, || {
                        Cached::Context(Arc::new(outcome.clone()))
                    });
                }
                Ok(outcome)
            }
        });
        futures::future::join_all(answers).await
    }

    fn context_request(
        &self,
        caller: &Caller,
        input: ContextInput,
    ) -> MemoryResult<ContextRequest> {
        let config = &self.services.config;
        check_name("butler", &input.butler)?;
        // A butler key may only build its own butler's context.
        let butler = caller
            .reading_as(Some(&input.butler))?
            .unwrap_or(input.butler);
        let budget = input
            .token_budget
            .unwrap_or(config.retrieval.context_token_budget.get());
        if budget == 0 || budget > config.retrieval.context.max_token_budget {
            return Err(MemoryError::new(
                ErrorCode::InvalidTokenBudget,
                format!(
                    "`token_budget` must be between 1 and {}",
                    config.retrieval.context.max_token_budget
                ),
            ));
        }
        let window = TimeWindow::parse(
            input.as_of.as_deref(),
            input.since.as_deref(),
            input.until.as_deref(),
        )?;
        let trigger_prompt =
            check_content("trigger_prompt", &input.trigger_prompt, &config.limits)?;
        let now = self.services.clock.now();
        // A prompt is what the user says to the butler, not a question to memory: "today"
        // there ("how are you today?") is about now. Only a time that has ended looks back.
        let stated =
            stated_time(&trigger_prompt, window.as_ref(), config, now).filter(|s| s.until < now);
        Ok(ContextRequest {
            stated,
            trigger_prompt,
            scope: SearchScope {
                tenant_id: caller.tenant_id.clone(),
                scopes: Some(vec![GLOBAL_SCOPE.to_owned(), butler.clone()]),
                butlers: Some(vec![butler.clone()]),
            },
            butler,
            token_budget: budget as usize,
            min_confidence: config.facts.retrieval_confidence_threshold,
            now,
            window,
        })
    }

    /// Moves the tenant's generations if any instance wrote to it since this one last
    /// looked (`Generations::observe_heads`): called before a read consults a cache, so
    /// that no cache of this instance answers without another instance's committed writes.
    /// The statement before each read (shared by the reads in flight, `HeadsWatch`) costs
    /// reads answered from the cache 4–9 % of their throughput at saturation
    /// (docs/benchmarks.md), so it is made only when the database may be shared
    /// (`database.shared`) or the read may go to a replica. Answers where the tenant's last
    /// commit is in the primary's WAL, when it looked.
    async fn observe_writes(&self, tenant_id: &str) -> MemoryResult<Option<i64>> {
        // No other instance writes here (the embedded PostgreSQL) and no replica serves
        // reads: nothing to look for.
        if !self.services.config.shared_database && self.services.replicas.is_empty() {
            return Ok(None);
        }
        self.heads.observe(tenant_id).await.map(Some)
    }

    /// Where a read goes: a replica that has replayed the tenant's last commit (at
    /// `position` in the primary's WAL), after a bounded wait for one, else the primary.
    pub(super) async fn read_target(&self, position: Option<i64>) -> ReadTarget {
        let replicas = &self.services.replicas;
        match position {
            Some(position) if !replicas.is_empty() => {
                replicas.route(&self.services.store, position).await
            }
            _ => ReadTarget::Primary,
        }
    }

    /// Runs `read` on the store that should serve a read of `tenant_id` (`read_target`):
    /// for the reads made on the engine's own runtime (the dashboard's lists). A read a
    /// replica fails as unavailable, or cancels for a conflict with its recovery, is run
    /// again on the primary.
    pub(super) async fn routed<T, F, Fut>(&self, tenant_id: &str, read: F) -> MemoryResult<T>
    where
        F: Fn(Store) -> Fut,
        Fut: Future<Output = MemoryResult<T>>,
    {
        let position = self.observe_writes(tenant_id).await?;
        let store = &self.services.store;
        match self.read_target(position).await {
            ReadTarget::Primary => read(store.clone()).await,
            ReadTarget::Replica(index) => match read(store.on_replica(index)).await {
                Err(e) if self.services.replicas.retry_on_primary(index, &e) => {
                    read(store.clone()).await
                }
                answered => answered,
            },
        }
    }

    /// Bumps the reference counts of returned memories, batched per owning shard.
    async fn touch_hits(&self, caller: &Caller, outcome: &SearchOutcome) {
        if caller.reads_leave_no_trace() {
            return;
        }
        let tenant_id = caller.tenant_id.as_str();
        let mut by_owner: HashMap<(ShardKey, MemoryType), Vec<Uuid>> = HashMap::new();
        for hit in &outcome.hits {
            let c = &hit.candidate;
            let owner = ShardKey::for_butler(tenant_id, c.butler.as_deref());
            by_owner
                .entry((owner, c.memory_type()))
                .or_default()
                .push(c.id);
        }
        for ((owner, memory_type), ids) in by_owner {
            self.touch(owner, memory_type, ids).await;
        }
    }
}

/// Everything a context block depends on besides the tenant's state and the time.
fn context_key(r: &ContextRequest) -> String {
    format!(
        "context|{}|{}|{}|{}|{}|{}|{}",
        r.scope.tenant_id,
        r.butler,
        r.token_budget,
        r.min_confidence,
        TimeWindow::key(r.window.as_ref()),
        stated_key(r.stated.as_ref()),
        r.trigger_prompt
    )
}

/// The time `text` states, read at `now`, when the caller gave no window (a window given is
/// what the caller means) and stated times are read (`retrieval.stated_time_share` < 1).
fn stated_time(
    text: &str,
    window: Option<&TimeWindow>,
    config: &EngineConfig,
    now: DateTime<Utc>,
) -> Option<StatedTime> {
    (window.is_none() && config.retrieval.stated_time_share < 1.0)
        .then(|| StatedTime::find(text, now))
        .flatten()
}

/// A stated time in a result-cache key: where it starts ("yesterday" is another day
/// tomorrow; a span to now keeps its start while it grows, and a write would clear the
/// answer anyway).
fn stated_key(stated: Option<&StatedTime>) -> String {
    stated.map(|s| s.since.to_rfc3339()).unwrap_or_default()
}

/// A search's answer in the retrieval quality metrics (§9.2): how many results, none at
/// all, the effective confidence of the knowledge returned, the diversity of the results.
fn record_search_quality(outcome: &SearchOutcome) {
    let hits = &outcome.hits;
    metrics::histogram!("butler_memory_read_results", "tool" => "search").record(hits.len() as f64);
    if hits.is_empty() {
        metrics::counter!("butler_memory_empty_reads_total", "tool" => "search").increment(1);
    }
    let confidence = metrics::histogram!("butler_memory_result_confidence", "tool" => "search");
    for c in result_quality::confidences(hits) {
        confidence.record(c);
    }
    if let Some(d) = result_quality::diversity(hits) {
        metrics::histogram!("butler_memory_result_diversity", "tool" => "search").record(d);
    }
}

/// A context block in the retrieval quality metrics: how many records it holds, or none.
fn record_context_quality(outcome: &ContextOutcome) {
    let ids = &outcome.block.sections;
    let included = ids.facts.len() + ids.rules.len() + ids.episodes.len();
    metrics::histogram!("butler_memory_read_results", "tool" => "context").record(included as f64);
    if included == 0 {
        metrics::counter!("butler_memory_empty_reads_total", "tool" => "context").increment(1);
    }
}
