//! The second stage of a read, when `retrieval.rerank` is on: the first stage's most
//! relevant candidates measured against the query token by token (`domain::rerank`), each
//! from the token sketch stored with it, or, when it has none (embedded before sketches
//! were stored), from its text read by the model. An episode is read with the turns around
//! it (`retrieval.rerank.neighbour_share`), as far as the session lookup found them: a
//! reply covers the question words the turn it answers holds. The query comes as a
//! question from the model run that embedded it (`read_path::query_embedding`), so that a
//! set whose members all have sketches is measured here, without the embedder pool; the
//! pool reads what has no sketch (each member alone then), and the query of a search that
//! embedded none (a keyword search) where `keyword_searches` asks for it:
//! otherwise such a search keeps the first stage's order, lexical and without a model run.
//! A read never waits for it longer than `timeout_ms`, and never fails because of it: on a
//! timeout, a full queue or a failed model the first stage's order stands
//! (`butler_memory_rerank_skipped_total`). Nor does it read more than `max_model_reads`
//! members by the model: a set with more (memories embedded before the second stage was on)
//! keeps the first stage's order.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::ReaderState;
use crate::actors::embedder_pool::{Passage, Question, measure_sketches};
use crate::domain::memory_type::MemoryType;
use crate::domain::rerank::{Adjacent, apply, candidate_set};
use crate::domain::search::Scored;
use crate::embedder::token_sketch::SketchQuery;
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::read_path::QueryEmbedding;

/// `scored` with the second stage applied, or as it was when the second stage is off or
/// did not answer in time; and whether it was skipped (on, and without an answer).
pub async fn reranked(
    state: &ReaderState,
    tenant_id: &str,
    query: &str,
    embedding: &QueryEmbedding,
    mut scored: Vec<Scored>,
    adjacent: &Adjacent,
) -> (Vec<Scored>, bool) {
    let config = &state.services.config.retrieval.rerank;
    if !config.enabled {
        return (scored, false);
    }
    let set = candidate_set(&scored, config.candidates);
    if set.len() < 2 {
        return (scored, false);
    }
    // Awaited already by the semantic list where there is one: no wait of its own.
    let ready = embedding.question().await;
    if ready.is_none() && !config.keyword_searches {
        return (scored, false);
    }
    // A member stored without its vector has no sketch: a set with more of them than the
    // model may read (a read during a write burst, the indexer behind) keeps the first
    // stage's order without looking its sketches up, as it would after the lookup.
    let unembedded = set
        .iter()
        .filter(|&&i| scored[i].candidate.unembedded)
        .count();
    if unembedded > config.max_model_reads {
        return (scored, unread("unembedded"));
    }
    let started = Instant::now();
    // Each member's turns around it, read with it (none while the share is 0).
    let share = config.neighbour_share as f32;
    let near: Vec<Vec<Uuid>> = set
        .iter()
        .map(|&i| match adjacent.get(&scored[i].candidate.id) {
            Some(turns) if share > 0.0 => turns.clone(),
            _ => Vec::new(),
        })
        .collect();
    let mut stored = stored_sketches(state, tenant_id, &scored, &set, &near).await;
    let ids: Vec<Uuid> = set.iter().map(|&i| scored[i].candidate.id).collect();
    let unsketched = ids.iter().filter(|id| !stored.contains_key(id)).count();
    if unsketched > config.max_model_reads {
        // Rows embedded before sketches were stored (the second stage just turned on over
        // old memories), or not embedded yet: reading them all would cost a model run each
        // on every search.
        return (scored, unread("unsketched"));
    }
    metrics::counter!("butler_memory_rerank_passages_total", "source" => "stored")
        .increment((ids.len() - unsketched) as u64);
    metrics::counter!("butler_memory_rerank_passages_total", "source" => "model")
        .increment(unsketched as u64);
    metrics::counter!("butler_memory_rerank_questions_total",
        "source" => if ready.is_some() { "query" } else { "model" })
    .increment(1);
    // Every member sketched and the question ready: measured here, from the sketches as
    // fetched. Otherwise the embedder pool reads the set, each member alone: its sketch
    // moved out of the map, or its text.
    let read = match (unsketched, ready) {
        (0, Some(question)) => Read::Here(
            question,
            Beside {
                share,
                near,
                sketches: stored,
            },
        ),
        (_, ready) => Read::Pool(
            ready.map_or_else(|| Question::Text(query.to_owned()), Question::Ready),
            set.iter()
                .zip(&ids)
                .map(|(&i, id)| match stored.remove(id) {
                    Some(sketch) => Passage::Sketch(sketch),
                    None => Passage::Text(scored[i].candidate.content.clone()),
                })
                .collect(),
        ),
    };
    let measured = measure(state, ids, read, config.timeout_ms).await;
    match measured {
        Ok(measures) => {
            metrics::histogram!("butler_memory_rerank_seconds")
                .record(started.elapsed().as_secs_f64());
            apply(&mut scored, &set, &measures, config.weight);
            (scored, false)
        }
        Err(e) => {
            metrics::counter!("butler_memory_rerank_skipped_total", "reason" => "unanswered")
                .increment(1);
            tracing::debug!(error = %e, "second stage skipped; first-stage order kept");
            (scored, true)
        }
    }
}

/// Counts a set left in the first stage's order because too many of its members have no
/// sketch, for `reason` (not embedded yet, or embedded without one); the read is not marked
/// skipped: nothing failed, so the answer may be remembered like any other.
fn unread(reason: &'static str) -> bool {
    metrics::counter!("butler_memory_rerank_skipped_total", "reason" => reason).increment(1);
    false
}

/// How a set is read: here, each member from its stored sketch with the turns beside it,
/// against the question the query's model run made; or by the embedder pool, each member
/// alone (its sketch, or its text), against that question or the query's text.
enum Read {
    Here(Arc<SketchQuery>, Beside),
    Pool(Question, Vec<Passage>),
}

/// What the members are read with: each one's adjacent turns (`near`, in the set's order),
/// whose sketches are among `sketches` with the members' own, at `share` of their likeness.
struct Beside {
    share: f32,
    near: Vec<Vec<Uuid>>,
    sketches: HashMap<Uuid, Vec<u8>>,
}

/// Each member's measure, the members `ids` in the set's order: here (a few small matrix
/// products, on a blocking thread), or by the embedder pool.
async fn measure(
    state: &ReaderState,
    ids: Vec<Uuid>,
    read: Read,
    timeout_ms: u64,
) -> MemoryResult<Vec<f32>> {
    let timeout = Duration::from_millis(timeout_ms);
    let (ready, beside) = match read {
        Read::Here(ready, beside) => (ready, beside),
        Read::Pool(question, passages) => {
            return state
                .kit
                .embedder
                .late_interaction(question, passages, timeout)
                .await;
        }
    };
    let here = tokio::task::spawn_blocking(move || {
        let read = ids.iter().zip(&beside.near).map(|(id, near)| {
            let own = beside.sketches.get(id).map_or(&[][..], Vec::as_slice);
            let near = near
                .iter()
                .filter_map(|id| beside.sketches.get(id).map(Vec::as_slice))
                .collect();
            (own, near)
        });
        measure_sketches(&ready, read, beside.share)
    });
    match tokio::time::timeout(timeout, here).await {
        Ok(Ok(measures)) => Ok(measures),
        Ok(Err(e)) => Err(MemoryError::new(
            ErrorCode::Internal,
            format!("the second stage's measure failed: {e}"),
        )),
        Err(_) => Err(MemoryError::new(
            ErrorCode::Timeout,
            format!("the second stage took longer than {timeout_ms} ms"),
        )),
    }
}

/// The sketches stored by the running model for the set's members and the episodes beside
/// them (`near`), in one statement. A failed lookup costs the set a model run, not the read.
async fn stored_sketches(
    state: &ReaderState,
    tenant_id: &str,
    scored: &[Scored],
    set: &[usize],
    near: &[Vec<Uuid>],
) -> HashMap<Uuid, Vec<u8>> {
    let mut by_type: HashMap<MemoryType, Vec<Uuid>> = HashMap::new();
    for &i in set {
        let c = &scored[i].candidate;
        by_type.entry(c.memory_type()).or_default().push(c.id);
    }
    let episodes = by_type.entry(MemoryType::Episode).or_default();
    episodes.extend(near.iter().flatten());
    episodes.sort();
    episodes.dedup();
    match state
        .kit
        .store
        .token_sketches(tenant_id, &by_type, state.embedding_version)
        .await
    {
        Ok(rows) => rows.into_iter().collect(),
        Err(e) => {
            tracing::debug!(error = %e, "stored sketches not read; the model reads");
            HashMap::new()
        }
    }
}
