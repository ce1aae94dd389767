//! The second stage's work for the embedder pool: a question and its candidates, each given
//! as text (the model reads it) or as the token sketch stored with it, measured token by
//! token (`embedder::token_sketch`). Every candidate is measured against a sketch, fresh or
//! stored, so that the two compare.

use ractor::RpcReplyPort;

use crate::embedder::token_sketch::{SketchQuery, sketch};
use crate::embedder::{EmbedError, Embedder};
use crate::error::MemoryResult;

/// A passage the second stage measures: its text (the model reads it) or the sketch stored
/// with it.
#[derive(Debug, Clone)]
pub enum Passage {
    Text(String),
    Sketch(Vec<u8>),
}

/// One caller's late interaction: a query and the passages to measure against it.
pub struct LateInteractionJob {
    pub(super) query: String,
    pub(super) passages: Vec<Passage>,
    pub(super) reply: RpcReplyPort<MemoryResult<Vec<f32>>>,
}

impl LateInteractionJob {
    /// The texts the model reads: the query, then the passages given as text.
    pub(super) fn texts(&self) -> usize {
        1 + self
            .passages
            .iter()
            .filter(|p| matches!(p, Passage::Text(_)))
            .count()
    }

    /// Each passage's coverage of the query, in order: the token vectors of the query and
    /// of the passages given as text in one call, the latter sketched.
    pub(super) fn run(&self, worker: &mut dyn Embedder) -> Result<Vec<f32>, EmbedError> {
        let texts: Vec<String> = std::iter::once(self.query.clone())
            .chain(self.passages.iter().filter_map(|p| match p {
                Passage::Text(text) => Some(text.clone()),
                Passage::Sketch(_) => None,
            }))
            .collect();
        let mut vectors = worker.token_vectors(&texts)?.into_iter();
        let query = SketchQuery::new(&vectors.next().expect("the query is first"));
        Ok(self
            .passages
            .iter()
            .map(|p| {
                let fresh;
                let stored = match p {
                    Passage::Sketch(s) => s,
                    Passage::Text(_) => {
                        fresh = sketch(&vectors.next().expect("a vector per text"));
                        &fresh
                    }
                };
                // A sketch of another format (stored by another version) counts as no match
                // rather than failing the read.
                query.measure(stored).unwrap_or(0.0)
            })
            .collect())
    }
}
