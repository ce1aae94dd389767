//! The second stage's work for the embedder pool: a question and its candidates, each given
//! as text (the model reads it) or as the token sketch stored with it, measured token by
//! token (`embedder::token_sketch`). Every candidate is measured against a sketch, fresh or
//! stored, so that the two compare. A question usually comes ready, projected from the run
//! that embedded it for the first stage (`read_path::query_embedding`); then a set whose
//! candidates all have stored sketches needs no model at all (`measure_sketches`).

use std::sync::Arc;

use ractor::RpcReplyPort;

use crate::embedder::token_sketch::{SketchQuery, sketch_all};
use crate::embedder::{EmbedError, Embedder};
use crate::error::MemoryResult;

/// A passage the second stage measures: its text (the model reads it) or the sketch stored
/// with it.
#[derive(Debug, Clone)]
pub enum Passage {
    Text(String),
    Sketch(Vec<u8>),
}

/// What passages are measured against: the question's text (the model reads it first), or
/// the question ready, from the model run that embedded it.
#[derive(Debug, Clone)]
pub enum Question {
    Text(String),
    Ready(Arc<SketchQuery>),
}

/// One caller's late interaction: a question and the passages to measure against it.
pub struct LateInteractionJob {
    pub(super) question: Question,
    pub(super) passages: Vec<Passage>,
    pub(super) reply: RpcReplyPort<MemoryResult<Vec<f32>>>,
}

impl LateInteractionJob {
    /// The texts the model reads: the question when it is text, and the passages given as
    /// text.
    pub(super) fn texts(&self) -> usize {
        usize::from(matches!(self.question, Question::Text(_)))
            + self
                .passages
                .iter()
                .filter(|p| matches!(p, Passage::Text(_)))
                .count()
    }

    /// Each passage's coverage of the question, in order: the token vectors of what the
    /// model reads (the question when it is text, the passages given as text) in one call,
    /// the passages' sketched.
    pub(super) fn run(&self, worker: &mut dyn Embedder) -> Result<Vec<f32>, EmbedError> {
        let question_text = match &self.question {
            Question::Text(text) => Some(text.clone()),
            Question::Ready(_) => None,
        };
        let texts: Vec<String> = question_text
            .into_iter()
            .chain(self.passages.iter().filter_map(|p| match p {
                Passage::Text(text) => Some(text.clone()),
                Passage::Sketch(_) => None,
            }))
            .collect();
        let mut vectors = worker.token_vectors(&texts)?.into_iter();
        let question = match &self.question {
            Question::Ready(question) => question.clone(),
            Question::Text(_) => Arc::new(SketchQuery::new(
                &vectors.next().expect("the question is first"),
            )),
        };
        Ok(measure(
            &question,
            &self.passages,
            sketch_all(&vectors.collect::<Vec<_>>()),
        ))
    }
}

/// Each stored sketch's coverage of `question`, in order, read with the sketches of the
/// turns beside it at `share` (`SketchQuery::measure_all_near`): what a set whose members
/// all have sketches needs, without a model run (the caller measures them itself). A sketch
/// of another format (stored by another version) counts as no match rather than failing
/// the read.
pub fn measure_sketches<'a>(
    question: &SketchQuery,
    sketches: impl IntoIterator<Item = (&'a [u8], Vec<&'a [u8]>)>,
    share: f32,
) -> Vec<f32> {
    question
        .measure_all_near(sketches, share)
        .into_iter()
        .map(|m| m.unwrap_or(0.0))
        .collect()
}

/// Each passage's coverage of `question`, in order; the passages given as text take their
/// sketches from `fresh`, in order. Read alone: a set the model reads part of is measured
/// on its members' own tokens, every member alike.
fn measure(question: &SketchQuery, passages: &[Passage], fresh: Vec<Vec<u8>>) -> Vec<f32> {
    let mut fresh = fresh.iter();
    let own = passages.iter().map(|p| match p {
        Passage::Sketch(stored) => (stored.as_slice(), Vec::new()),
        Passage::Text(_) => (
            fresh.next().expect("a sketch per text").as_slice(),
            Vec::new(),
        ),
    });
    measure_sketches(question, own, 0.0)
}
