//! The tools: each turns its typed parameters into a call on the engine and the engine's
//! answer into JSON.

use butler_memory_actors::{
    Caller, ContextInput, ContextOutcome, Engine, EpisodeInput, ErrorCode, FactInput, Lineage,
    Mark, MemoryError, MemoryRecord, MemoryResult, Rated, RequestContext, RuleInput, SearchInput,
    SearchOutcome, Since, SweepKind,
};
use serde_json::{Value, json};

use super::params::{
    ActivityStreamParams, AuditReadsParams, ConfirmParams, ContextBatchParams, ContextParams,
    DeadLettersParams, ForgetParams, GetParams, IngestBatchParams, MarkHarmfulParams,
    MarkHelpfulParams, PurgeParams, RecallParams, RequeueParams, RestoreParams, RunSweepParams,
    SearchParams, StatsParams, StoreEpisodeParams, StoreFactParams, StoreRuleParams,
};
use super::reply::to_json;

/// What a tool produced: the lineage to echo and its result.
pub struct Outcome {
    pub lineage: Lineage,
    pub result: MemoryResult<Value>,
}

/// Resolves the lineage (the call's own `request_context`, or else `fallback`, the HTTP
/// request's), then runs the tool body with it. A context that does not validate is
/// refused under `fallback`, so that even that error carries a request id.
pub(super) async fn with_lineage<F, Fut>(
    context: Option<RequestContext>,
    fallback: Lineage,
    body: F,
) -> Outcome
where
    F: FnOnce(Lineage) -> Fut,
    Fut: Future<Output = MemoryResult<Value>>,
{
    let resolved = match context {
        Some(context) => Lineage::resolve(Some(context)),
        None => Ok(fallback.clone()),
    };
    match resolved {
        Ok(lineage) => Outcome {
            result: body(lineage.clone()).await,
            lineage,
        },
        Err(e) => Outcome {
            lineage: fallback,
            result: Err(e),
        },
    }
}

pub async fn store_episode(
    engine: &Engine,
    caller: &Caller,
    p: StoreEpisodeParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |lineage| async move {
        let input = EpisodeInput {
            butler: p.butler,
            session_id: p.session_id,
            content: p.content,
            importance: p.importance,
            metadata: p.metadata.map(Value::Object),
            ttl_days: p.ttl_days,
            idempotency_key: p.idempotency_key,
            occurred_at: p.occurred_at,
        };
        let stored = engine.store_episode(caller, input, lineage).await?;
        let mut body = to_json(MemoryRecord::Episode(stored.episode))?;
        body["duplicate"] = json!(stored.duplicate);
        Ok(body)
    })
    .await
}

pub async fn ingest_batch(
    engine: &Engine,
    caller: &Caller,
    p: IngestBatchParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |lineage| async move {
        let inputs = p
            .episodes
            .into_iter()
            .map(|e| EpisodeInput {
                butler: e.butler,
                session_id: e.session_id,
                content: e.content,
                importance: e.importance,
                metadata: e.metadata.map(Value::Object),
                ttl_days: e.ttl_days,
                idempotency_key: e.idempotency_key,
                occurred_at: e.occurred_at,
            })
            .collect();
        let stored = engine.ingest_batch(caller, inputs, lineage).await?;
        let ids: Vec<_> = stored.iter().map(|s| s.episode.id).collect();
        let duplicates: Vec<usize> = stored
            .iter()
            .enumerate()
            .filter(|(_, s)| s.duplicate)
            .map(|(i, _)| i)
            .collect();
        Ok(json!({
            "ids": ids,
            "count": ids.len(),
            "stored": ids.len() - duplicates.len(),
            "duplicates": duplicates,
        }))
    })
    .await
}

pub async fn store_fact(
    engine: &Engine,
    caller: &Caller,
    p: StoreFactParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |lineage| async move {
        let input = FactInput {
            subject: p.subject,
            predicate: p.predicate,
            content: p.content,
            importance: p.importance,
            permanence: p.permanence,
            scope: p.scope,
            tags: p.tags,
            metadata: p.metadata.map(Value::Object),
            links: p.links.unwrap_or_default(),
            butler: p.butler,
            confidence: p.confidence,
            source_episode_id: p.source_episode_id,
            valid_from: p.valid_from,
        };
        let stored = engine.store_fact(caller, input, lineage).await?;
        to_json(super::answers::FactStored::from(stored))
    })
    .await
}

pub async fn store_rule(
    engine: &Engine,
    caller: &Caller,
    p: StoreRuleParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |lineage| async move {
        let input = RuleInput {
            content: p.content,
            scope: p.scope,
            tags: p.tags,
            metadata: p.metadata.map(Value::Object),
            links: p.links.unwrap_or_default(),
            butler: p.butler,
            importance: p.importance,
            permanence: p.permanence,
            source_episode_id: p.source_episode_id,
        };
        let rule = engine.store_rule(caller, input, lineage).await?;
        to_json(MemoryRecord::Rule(rule))
    })
    .await
}

pub async fn get(engine: &Engine, caller: &Caller, p: GetParams, fallback: Lineage) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        let found = engine.get(caller, p.memory_type, p.id, p.butler).await?;
        to_json(found)
    })
    .await
}

pub async fn stats(engine: &Engine, caller: &Caller, p: StatsParams, fallback: Lineage) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        let stats = engine.stats(caller, p.scope, p.butler).await?;
        Ok(json!(stats))
    })
    .await
}

/// Most requests in one `memory_context_batch`.
pub const MAX_CONTEXT_BATCH: usize = 64;

pub async fn search(
    engine: &Engine,
    caller: &Caller,
    p: SearchParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        let input = SearchInput {
            query: p.query,
            types: p.types,
            scope: p.scope,
            mode: p.mode,
            limit: p.limit,
            min_confidence: p.min_confidence,
            butler: p.butler,
            as_of: p.as_of,
            since: p.since,
            until: p.until,
        };
        search_results(engine.search(caller, input).await?)
    })
    .await
}

pub async fn recall(
    engine: &Engine,
    caller: &Caller,
    p: RecallParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        let input = SearchInput {
            query: p.topic,
            scope: p.scope,
            limit: p.limit,
            min_confidence: p.min_confidence,
            butler: p.butler,
            as_of: p.as_of,
            since: p.since,
            until: p.until,
            ..SearchInput::default()
        };
        search_results(engine.recall(caller, input).await?)
    })
    .await
}

pub async fn context(
    engine: &Engine,
    caller: &Caller,
    p: ContextParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        let butler = p.butler.clone();
        let input = ContextInput {
            trigger_prompt: p.trigger_prompt,
            butler: p.butler,
            token_budget: p.token_budget,
            as_of: p.as_of,
            since: p.since,
            until: p.until,
        };
        context_json(&butler, engine.context(caller, input).await?)
    })
    .await
}

pub async fn context_batch(
    engine: &Engine,
    caller: &Caller,
    p: ContextBatchParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        // A key that may not read memory at all is refused as a whole, not item by item.
        caller.require_memory_access()?;
        if p.requests.is_empty() || p.requests.len() > MAX_CONTEXT_BATCH {
            return Err(MemoryError::new(
                ErrorCode::InvalidBatch,
                format!("`requests` must hold 1 to {MAX_CONTEXT_BATCH} requests"),
            ));
        }
        let butlers: Vec<String> = p.requests.iter().map(|r| r.butler.clone()).collect();
        let inputs = p
            .requests
            .into_iter()
            .map(|r| ContextInput {
                trigger_prompt: r.trigger_prompt,
                butler: r.butler,
                token_budget: r.token_budget,
                as_of: r.as_of,
                since: r.since,
                until: r.until,
            })
            .collect();
        let mut results = Vec::with_capacity(butlers.len());
        for (butler, answer) in butlers
            .iter()
            .zip(engine.context_batch(caller, inputs).await)
        {
            results.push(match answer {
                Ok(outcome) => context_json(butler, outcome)?,
                Err(e) => {
                    json!({"error": {"class": e.class(), "code": e.code, "message": e.message}})
                }
            });
        }
        Ok(json!({ "results": results }))
    })
    .await
}

pub(crate) fn search_results(outcome: SearchOutcome) -> MemoryResult<Value> {
    to_json(super::answers::SearchResults::from(outcome))
}

fn context_json(butler: &str, outcome: ContextOutcome) -> MemoryResult<Value> {
    let mut body = to_json(outcome.block)?;
    body["butler"] = json!(butler);
    body["degraded"] = json!(outcome.degraded);
    Ok(body)
}

pub async fn confirm(
    engine: &Engine,
    caller: &Caller,
    p: ConfirmParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |lineage| async move {
        let record = engine
            .confirm(caller, p.memory_type, p.id, p.butler, lineage)
            .await?;
        to_json(record)
    })
    .await
}

pub async fn mark_helpful(
    engine: &Engine,
    caller: &Caller,
    p: MarkHelpfulParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |lineage| async move {
        let rated = engine
            .rate_rule(caller, p.rule_id, Mark::Helpful, None, p.butler, lineage)
            .await?;
        rated_json(rated)
    })
    .await
}

pub async fn mark_harmful(
    engine: &Engine,
    caller: &Caller,
    p: MarkHarmfulParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |lineage| async move {
        let rated = engine
            .rate_rule(
                caller,
                p.rule_id,
                Mark::Harmful,
                p.reason,
                p.butler,
                lineage,
            )
            .await?;
        rated_json(rated)
    })
    .await
}

fn rated_json(rated: Rated) -> MemoryResult<Value> {
    let before = rated.maturity_before;
    let mut body = to_json(MemoryRecord::Rule(rated.rule))?;
    body["maturity_before"] = json!(before);
    Ok(body)
}

pub async fn forget(
    engine: &Engine,
    caller: &Caller,
    p: ForgetParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |lineage| async move {
        // Legacy callers may name the state: `forgotten` and `retracted` mean the same.
        let _ = p.validity;
        let done = engine
            .forget(caller, p.memory_type, p.id, p.reason, p.butler, lineage)
            .await?;
        let mut body = to_json(done.record)?;
        body["changed"] = json!(done.changed);
        Ok(body)
    })
    .await
}

pub async fn restore(
    engine: &Engine,
    caller: &Caller,
    p: RestoreParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |lineage| async move {
        let done = engine.restore(caller, p.memory_type, p.id, lineage).await?;
        to_json(done.record)
    })
    .await
}

pub async fn activity_stream(
    engine: &Engine,
    caller: &Caller,
    p: ActivityStreamParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        let since = Since::parse(p.since.as_deref())?;
        let events = engine
            .activity(caller, since, p.scope, p.butler, p.limit)
            .await?;
        let next_cursor = since.next_cursor(&events);
        Ok(json!({
            "events": events,
            "count": events.len(),
            "next_cursor": next_cursor,
        }))
    })
    .await
}

pub async fn run_sweep(
    engine: &Engine,
    caller: &Caller,
    p: RunSweepParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        let kinds = p.kinds.unwrap_or_else(|| SweepKind::ALL.to_vec());
        if kinds.is_empty() {
            return Err(MemoryError::new(
                ErrorCode::EmptyKinds,
                "`kinds` must name at least one sweep",
            ));
        }
        let reports = engine.sweep_now(caller, &kinds, p.butler).await?;
        Ok(json!({ "reports": reports, "count": reports.len() }))
    })
    .await
}

pub async fn dead_letters(
    engine: &Engine,
    caller: &Caller,
    p: DeadLettersParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        let episodes = engine.dead_letters(caller, p.limit).await?;
        Ok(json!({ "episodes": episodes, "count": episodes.len() }))
    })
    .await
}

pub async fn requeue_dead_letters(
    engine: &Engine,
    caller: &Caller,
    p: RequeueParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        let ids = engine.requeue_dead_letters(caller, p.ids).await?;
        Ok(json!({ "requeued": ids, "count": ids.len() }))
    })
    .await
}

pub async fn purge(
    engine: &Engine,
    caller: &Caller,
    mut p: PurgeParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context.take(), fallback, |lineage| async move {
        let target = p.target()?;
        to_json(
            engine
                .purge(caller, target, p.reason, p.dry_run, lineage)
                .await?,
        )
    })
    .await
}

pub async fn audit_reads(
    engine: &Engine,
    caller: &Caller,
    p: AuditReadsParams,
    fallback: Lineage,
) -> Outcome {
    with_lineage(p.request_context, fallback, |_| async move {
        let reads = engine.audit_reads(caller, p.since, p.limit).await?;
        let next_cursor = reads.last().map(|r| r.id).or(p.since);
        Ok(json!({ "reads": reads, "count": reads.len(), "next_cursor": next_cursor }))
    })
    .await
}
