//! A read's query embedding, on its way. The engine starts embedding a request's prompts
//! before it dispatches the read, and the read waits for the vector only where a semantic
//! list needs it: its keyword lists, standing facts and rules and recent episodes run
//! meanwhile, so a fresh prompt's embedding does not come before every statement of the
//! read.
//!
//! Vectors in the query cache are ready at once; the rest of a request's texts go to the
//! embedder pool in one batch (one for a whole `memory_context_batch`), in a task of its
//! own, so the embedding also runs while the read waits for a retrieval actor. It is never
//! waited for past `retrieval.embed_timeout_ms`: a read without its embedding answers from
//! the keyword path, marked `degraded`.
//!
//! With the second stage on (`retrieval.rerank`), the same model run also gives the query
//! as a question to measure candidates' sketches against: the second stage needs no model
//! run of its own for the query.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use tracing::Instrument;

use super::query_cache::{QueryCache, QueryVectors};
use crate::actors::EmbedderHandle;
use crate::embedder::token_sketch::SketchQuery;

type Vector = Arc<Vec<f32>>;

/// One text's embedding: ready, or the slot it will fill in a batch under way.
#[derive(Clone)]
pub struct QueryEmbedding(Slot);

#[derive(Clone)]
enum Slot {
    Ready(Option<QueryVectors>),
    Pending {
        batch: Shared<BoxFuture<'static, Arc<Vec<Option<QueryVectors>>>>>,
        index: usize,
    },
}

impl std::fmt::Debug for QueryEmbedding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.0 {
            Slot::Ready(Some(_)) => "ready",
            Slot::Ready(None) => "none",
            Slot::Pending { .. } => "pending",
        };
        f.debug_tuple("QueryEmbedding").field(&state).finish()
    }
}

impl QueryEmbedding {
    /// For a read that needs no embedding (a keyword search).
    pub fn none() -> Self {
        QueryEmbedding(Slot::Ready(None))
    }

    /// The vector, once embedded; `None` where the embedder failed or did not answer within
    /// `embed_timeout_ms`. Any number of waiters share the one batch.
    pub async fn vector(&self) -> Option<Vector> {
        self.vectors().await.map(|v| v.vector)
    }

    /// The query as the second stage's question, from the run that embedded it; `None`
    /// where there is no vector, or when the second stage is off.
    pub async fn question(&self) -> Option<Arc<SketchQuery>> {
        self.vectors().await.and_then(|v| v.question)
    }

    async fn vectors(&self) -> Option<QueryVectors> {
        match &self.0 {
            Slot::Ready(vectors) => vectors.clone(),
            Slot::Pending { batch, index } => batch.clone().await.get(*index).cloned().flatten(),
        }
    }
}

/// Embeds the texts reads search with: from the cache, or batched by the embedder pool.
#[derive(Debug)]
pub struct QueryEmbedder {
    cache: QueryCache,
    embedder: EmbedderHandle,
    /// How long a read waits for its embedding (`retrieval.embed_timeout_ms`).
    timeout: Duration,
    /// Whether queries are also made questions for the second stage (`retrieval.rerank`).
    questions: bool,
}

impl QueryEmbedder {
    pub fn new(
        cache: QueryCache,
        embedder: EmbedderHandle,
        timeout: Duration,
        questions: bool,
    ) -> Self {
        QueryEmbedder {
            cache,
            embedder,
            timeout,
            questions,
        }
    }

    /// Starts embedding `texts` and returns their embeddings in order, at once: cached ones
    /// ready, the others (each distinct text once) in one batch under way.
    pub fn embed(self: &Arc<Self>, texts: &[String]) -> Vec<QueryEmbedding> {
        let (slots, missing) = slots(texts, |text| self.cache.get(text));
        let batch = (!missing.is_empty()).then(|| {
            // In the trace of the call that asked (its span is current here).
            let span = tracing::info_span!(
                target: crate::TRACE_SPANS,
                "embed.query",
                texts = missing.len(),
            );
            let task = tokio::spawn(self.clone().embed_batch(missing).instrument(span));
            // A batch task that panicked leaves every read it serves on the keyword path.
            async move { Arc::new(task.await.unwrap_or_default()) }
                .boxed()
                .shared()
        });
        slots
            .into_iter()
            .map(|slot| {
                QueryEmbedding(match (slot, &batch) {
                    (Ok(vector), _) => Slot::Ready(Some(vector)),
                    (Err(index), Some(batch)) => Slot::Pending {
                        batch: batch.clone(),
                        index,
                    },
                    // Not reached: a text has a place only when there is a batch.
                    (Err(_), None) => Slot::Ready(None),
                })
            })
            .collect()
    }

    /// One embedder call for `texts`, remembered in the cache; all `None` on failure.
    async fn embed_batch(self: Arc<Self>, texts: Vec<String>) -> Vec<Option<QueryVectors>> {
        let embedded = if self.questions {
            self.embedder
                .embed_questions(texts.clone(), self.timeout)
                .await
                .map(|all| {
                    all.into_iter()
                        .map(|(vector, question)| QueryVectors {
                            vector: Arc::new(vector),
                            question: Some(Arc::new(question)),
                        })
                        .collect::<Vec<_>>()
                })
        } else {
            self.embedder
                .embed(texts.clone(), self.timeout)
                .await
                .map(|all| all.into_iter().map(QueryVectors::vector).collect())
        };
        match embedded {
            Ok(vectors) => texts
                .into_iter()
                .zip(vectors)
                .map(|(text, vectors)| {
                    self.cache.put(text, vectors.clone());
                    Some(vectors)
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "query embedding unavailable; answering from the keyword path");
                vec![None; texts.len()]
            }
        }
    }
}

/// Each text's cached vector, or its place in the batch to embed: the texts not cached,
/// each distinct one once, in order of first appearance.
fn slots(
    texts: &[String],
    cached: impl Fn(&str) -> Option<QueryVectors>,
) -> (Vec<Result<QueryVectors, usize>>, Vec<String>) {
    let mut missing: Vec<String> = Vec::new();
    let slots = texts
        .iter()
        .map(|text| match cached(text) {
            Some(vector) => Ok(vector),
            None => Err(match missing.iter().position(|m| m == text) {
                Some(index) => index,
                None => {
                    missing.push(text.clone());
                    missing.len() - 1
                }
            }),
        })
        .collect();
    (slots, missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_texts_are_ready_and_each_other_text_is_embedded_once() {
        let cached = QueryVectors::vector(vec![1.0_f32]);
        let texts: Vec<String> = ["new a", "known", "new b", "new a", "known", "new b"]
            .map(String::from)
            .to_vec();
        let (slots, missing) = slots(&texts, |t| (t == "known").then(|| cached.clone()));
        assert_eq!(missing, vec!["new a", "new b"]);
        let places: Vec<Option<usize>> = slots.iter().map(|s| s.as_ref().err().copied()).collect();
        assert_eq!(places, vec![Some(0), None, Some(1), Some(0), None, Some(1)]);
        assert!(
            slots[1]
                .as_ref()
                .is_ok_and(|v| Arc::ptr_eq(&v.vector, &cached.vector))
        );
    }

    #[tokio::test]
    async fn waiters_share_the_batch_and_read_their_own_place() {
        let batch: Shared<BoxFuture<'static, Arc<Vec<Option<QueryVectors>>>>> =
            async { Arc::new(vec![Some(QueryVectors::vector(vec![0.5])), None]) }
                .boxed()
                .shared();
        let pending = |index| {
            QueryEmbedding(Slot::Pending {
                batch: batch.clone(),
                index,
            })
        };
        assert_eq!(pending(0).vector().await.as_deref(), Some(&vec![0.5]));
        assert_eq!(
            pending(1).vector().await,
            None,
            "the embedder failed this one"
        );
        assert_eq!(pending(2).vector().await, None, "a place past the batch");
        assert_eq!(QueryEmbedding::none().vector().await, None);
    }
}
