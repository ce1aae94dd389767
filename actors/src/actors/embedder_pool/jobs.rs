//! The requests the embedder pool batches, and how a batch's results go back to them:
//! vectors, vectors with their texts' sketches (to store), or vectors with their texts as
//! the second stage's questions. Sketches and questions are projections of every token,
//! made here, on the worker's blocking thread that ran the batch.

use ractor::RpcReplyPort;

use super::Embeddings;
use crate::embedder::token_sketch::SketchQuery;
use crate::embedder::{EmbedError, Sketched, TokenVectors, sketched};
use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// A query's embedding and the query as the second stage's question.
pub type Asked = (Vec<f32>, SketchQuery);

/// A batch's texts embedded, each with its token vectors when a job in it wants them.
pub(super) type BatchResult = Result<Vec<(Vec<f32>, Option<TokenVectors>)>, EmbedError>;

/// One caller's request.
pub struct Job {
    pub(super) texts: Vec<String>,
    pub(super) reply: JobReply,
}

/// Where a request's answer goes: vectors, vectors with their texts' sketches (to store),
/// or vectors with their texts as questions (to measure sketches against).
pub enum JobReply {
    Vectors(RpcReplyPort<MemoryResult<Embeddings>>),
    Sketched(RpcReplyPort<MemoryResult<Vec<Sketched>>>),
    Questions(RpcReplyPort<MemoryResult<Vec<Asked>>>),
}

impl JobReply {
    /// The answer to a request of no texts.
    pub(super) fn nothing(self) {
        match self {
            JobReply::Vectors(reply) => {
                let _ = reply.send(Ok(Vec::new()));
            }
            JobReply::Sketched(reply) => {
                let _ = reply.send(Ok(Vec::new()));
            }
            JobReply::Questions(reply) => {
                let _ = reply.send(Ok(Vec::new()));
            }
        }
    }

    pub(super) fn fail(self, error: MemoryError) {
        match self {
            JobReply::Vectors(reply) => {
                let _ = reply.send(Err(error));
            }
            JobReply::Sketched(reply) => {
                let _ = reply.send(Err(error));
            }
            JobReply::Questions(reply) => {
                let _ = reply.send(Err(error));
            }
        }
    }
}

/// A batch with a job that wants token vectors reads them for every text.
const TOKENS_READ: &str = "a batch that reads token vectors reads them for every text";

/// Splits a batch's embeddings back into the requests it came from, sketching or making
/// questions of the token vectors where a request wants them.
pub(super) fn answer(jobs: Vec<Job>, result: BatchResult) {
    match result {
        Ok(mut embedded) => {
            // Peel from the back so each job gets its own slice without copying.
            for job in jobs.into_iter().rev() {
                let rest = embedded.split_off(embedded.len() - job.texts.len());
                match job.reply {
                    JobReply::Vectors(reply) => {
                        let _ = reply.send(Ok(rest.into_iter().map(|(v, _)| v).collect()));
                    }
                    JobReply::Sketched(reply) => {
                        let embedded = rest
                            .into_iter()
                            .map(|(v, t)| (v, t.expect(TOKENS_READ)))
                            .collect();
                        let _ = reply.send(Ok(sketched(embedded)));
                    }
                    JobReply::Questions(reply) => {
                        let questions = rest
                            .into_iter()
                            .map(|(v, t)| (v, SketchQuery::new(&t.expect(TOKENS_READ))))
                            .collect();
                        let _ = reply.send(Ok(questions));
                    }
                }
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "embedding batch failed");
            for job in jobs {
                job.reply.fail(MemoryError::new(
                    ErrorCode::EmbedderFailed,
                    format!("embedding failed: {e}"),
                ));
            }
        }
    }
}
