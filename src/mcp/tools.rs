//! The tools: each turns its typed parameters into a call on the engine and the engine's
//! answer into JSON.

use butler_memory_actors::Engine;
use butler_memory_actors::domain::caller::Caller;
use butler_memory_actors::domain::episode::EpisodeInput;
use butler_memory_actors::domain::fact::FactInput;
use butler_memory_actors::domain::record::MemoryRecord;
use butler_memory_actors::domain::request_context::Lineage;
use butler_memory_actors::domain::rule::RuleInput;
use butler_memory_actors::error::MemoryResult;
use serde_json::{Value, json};

use super::params::{GetParams, StatsParams, StoreEpisodeParams, StoreFactParams, StoreRuleParams};
use super::reply::to_json;

/// What a tool produced: the lineage to echo (once resolved) and its result.
pub struct Outcome {
    pub lineage: Option<Lineage>,
    pub result: MemoryResult<Value>,
}

/// Resolves the lineage, then runs the tool body with it.
async fn with_lineage<F, Fut>(
    context: Option<butler_memory_actors::domain::request_context::RequestContext>,
    body: F,
) -> Outcome
where
    F: FnOnce(Lineage) -> Fut,
    Fut: Future<Output = MemoryResult<Value>>,
{
    match Lineage::resolve(context) {
        Ok(lineage) => Outcome {
            result: body(lineage.clone()).await,
            lineage: Some(lineage),
        },
        Err(e) => Outcome {
            lineage: None,
            result: Err(e),
        },
    }
}

pub async fn store_episode(engine: &Engine, caller: &Caller, p: StoreEpisodeParams) -> Outcome {
    with_lineage(p.request_context, |lineage| async move {
        let input = EpisodeInput {
            butler: p.butler,
            session_id: p.session_id,
            content: p.content,
            importance: p.importance,
            metadata: p.metadata.map(Value::Object),
            ttl_days: p.ttl_days,
        };
        let episode = engine.store_episode(caller, input, lineage).await?;
        to_json(MemoryRecord::Episode(episode))
    })
    .await
}

pub async fn store_fact(engine: &Engine, caller: &Caller, p: StoreFactParams) -> Outcome {
    with_lineage(p.request_context, |lineage| async move {
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
        };
        let stored = engine.store_fact(caller, input, lineage).await?;
        let mut body = to_json(MemoryRecord::Fact(stored.fact))?;
        body["outcome"] = to_json(stored.outcome)?;
        body["superseded"] = match stored.superseded {
            Some(old) => to_json(MemoryRecord::Fact(old))?,
            None => Value::Null,
        };
        Ok(body)
    })
    .await
}

pub async fn store_rule(engine: &Engine, caller: &Caller, p: StoreRuleParams) -> Outcome {
    with_lineage(p.request_context, |lineage| async move {
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

pub async fn get(engine: &Engine, caller: &Caller, p: GetParams) -> Outcome {
    with_lineage(p.request_context, |_| async move {
        let found = engine.get(caller, p.memory_type, p.id, p.butler).await?;
        to_json(found)
    })
    .await
}

pub async fn stats(engine: &Engine, caller: &Caller, p: StatsParams) -> Outcome {
    with_lineage(p.request_context, |_| async move {
        let stats = engine.stats(caller, p.scope, p.butler).await?;
        Ok(json!(stats))
    })
    .await
}
