//! The second stage of a read, when `retrieval.rerank` is on: the first stage's most
//! relevant candidates measured against the query token by token (`domain::rerank`), each
//! from the token sketch stored with it, or, when it has none (embedded before sketches
//! were stored), from its text read by the model. The query's own tokens always take a
//! model run. A read never waits for it longer than `timeout_ms`, and never fails because
//! of it: on a timeout, a full queue or a failed model the first stage's order stands
//! (`butler_memory_rerank_skipped_total`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::future::join_all;
use uuid::Uuid;

use super::ReaderState;
use crate::actors::embedder_pool::Passage;
use crate::domain::memory_type::MemoryType;
use crate::domain::rerank::{apply, candidate_set};
use crate::domain::search::Scored;

/// `scored` with the second stage applied, or as it was when the second stage is off or
/// did not answer in time; and whether it was skipped (on, and without an answer).
pub async fn reranked(
    state: &ReaderState,
    tenant_id: &str,
    query: &str,
    mut scored: Vec<Scored>,
) -> (Vec<Scored>, bool) {
    let config = &state.services.config.retrieval.rerank;
    if !config.enabled {
        return (scored, false);
    }
    let set = candidate_set(&scored, config.candidates);
    if set.len() < 2 {
        return (scored, false);
    }
    let started = Instant::now();
    let stored = stored_sketches(state, tenant_id, &scored, &set).await;
    let passages: Vec<Passage> = set
        .iter()
        .map(|&i| {
            let candidate = &scored[i].candidate;
            match stored.get(&candidate.id) {
                Some(sketch) => Passage::Sketch(sketch.clone()),
                None => Passage::Text(candidate.content.clone()),
            }
        })
        .collect();
    let read = passages
        .iter()
        .filter(|p| matches!(p, Passage::Text(_)))
        .count();
    metrics::counter!("butler_memory_rerank_passages_total", "source" => "stored")
        .increment((passages.len() - read) as u64);
    metrics::counter!("butler_memory_rerank_passages_total", "source" => "model")
        .increment(read as u64);
    let measured = state
        .kit
        .embedder
        .late_interaction(
            query.to_owned(),
            passages,
            Duration::from_millis(config.timeout_ms),
        )
        .await;
    match measured {
        Ok(measures) => {
            metrics::histogram!("butler_memory_rerank_seconds")
                .record(started.elapsed().as_secs_f64());
            apply(&mut scored, &set, &measures, config.weight);
            (scored, false)
        }
        Err(e) => {
            metrics::counter!("butler_memory_rerank_skipped_total").increment(1);
            tracing::debug!(error = %e, "second stage skipped; first-stage order kept");
            (scored, true)
        }
    }
}

/// The sketches stored for the set's members by the running model, one statement per
/// memory type. A failed lookup costs the set a model run, not the read.
async fn stored_sketches(
    state: &ReaderState,
    tenant_id: &str,
    scored: &[Scored],
    set: &[usize],
) -> HashMap<Uuid, Vec<u8>> {
    let mut by_type: HashMap<MemoryType, Vec<Uuid>> = HashMap::new();
    for &i in set {
        let c = &scored[i].candidate;
        by_type.entry(c.memory_type()).or_default().push(c.id);
    }
    let store = &state.kit.store;
    let lookups = by_type.iter().map(|(memory_type, ids)| {
        store.token_sketches(*memory_type, tenant_id, ids, state.embedding_version)
    });
    let mut found = HashMap::new();
    for answer in join_all(lookups).await {
        match answer {
            Ok(rows) => found.extend(rows),
            Err(e) => tracing::debug!(error = %e, "stored sketches not read; the model reads"),
        }
    }
    found
}
