//! The second stage of a read, when `retrieval.rerank` is on: the first stage's most
//! relevant candidates sent to the embedder pool with the query, their late-interaction
//! measures blended into their relevance (`domain::rerank`). A read never waits for it
//! longer than `timeout_ms`, and never fails because of it: on a timeout, a full queue or a
//! failed model the first stage's order stands (`butler_memory_rerank_skipped_total`).

use std::time::{Duration, Instant};

use super::ReaderState;
use crate::domain::rerank::{apply, candidate_set};
use crate::domain::search::Scored;

/// `scored` with the second stage applied, or as it was when the second stage is off or
/// did not answer in time; and whether it was skipped (on, and without an answer).
pub async fn reranked(
    state: &ReaderState,
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
    let passages = set
        .iter()
        .map(|&i| scored[i].candidate.content.clone())
        .collect();
    let started = Instant::now();
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
