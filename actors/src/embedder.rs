//! Text embeddings. Everything that touches ONNX Runtime lives under this module, behind the
//! [`Embedder`] trait; the rest of the engine sees vectors only.

#[cfg(test)]
pub mod hashing;
pub mod minilm;
pub mod token_counter;
pub mod token_sketch;
pub mod token_vectors;
mod tokenizer_file;

use std::path::PathBuf;

use serde::Deserialize;

pub use token_vectors::TokenVectors;
pub use tokenizer_file::shared_tokenizer;

/// Dimensions of every stored embedding (the `vector(384)` columns).
pub const DIMENSIONS: usize = 384;

/// What produced an embedding, as recorded in `embedding_versions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelInfo {
    pub name: String,
    pub sha256: String,
    pub dimensions: usize,
    pub pooling: &'static str,
}

/// Why texts could not be embedded.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EmbedError {
    #[error("the embedding model could not be loaded: {0}")]
    Load(String),
    #[error("inference failed: {0}")]
    Inference(String),
}

/// Turns texts into unit-length vectors of [`DIMENSIONS`] floats. Implementations are
/// CPU-bound and synchronous: callers run them on a blocking thread. `&mut self` because an
/// ONNX Runtime session runs one batch at a time; a pool holds one embedder per worker.
pub trait Embedder: Send + 'static {
    fn info(&self) -> &ModelInfo;
    fn embed(&mut self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Each text's token vectors, before pooling (the second stage's late interaction).
    fn token_vectors(&mut self, texts: &[String]) -> Result<Vec<TokenVectors>, EmbedError>;
    /// Each text's embedding and its token vectors. This default runs the model twice; an
    /// embedder that can, reads both from one run.
    fn embed_with_tokens(&mut self, texts: &[String]) -> Result<Vec<Embedded>, EmbedError> {
        let vectors = self.embed(texts)?;
        let tokens = self.token_vectors(texts)?;
        Ok(vectors.into_iter().zip(tokens).collect())
    }
    /// Each text's embedding and the sketch of its token vectors (`token_sketch`), for
    /// storing both.
    fn embed_with_sketches(&mut self, texts: &[String]) -> Result<Vec<Sketched>, EmbedError> {
        Ok(sketched(self.embed_with_tokens(texts)?))
    }
}

/// Each text's embedding with the sketch of its token vectors, the texts sketched together
/// (`token_sketch::sketch_all`).
pub fn sketched(embedded: Vec<Embedded>) -> Vec<Sketched> {
    let (vectors, tokens): (Vec<_>, Vec<_>) = embedded.into_iter().unzip();
    vectors
        .into_iter()
        .zip(token_sketch::sketch_all(&tokens))
        .collect()
}

/// A text's embedding and its token vectors, from one run of the model.
pub type Embedded = (Vec<f32>, TokenVectors);

/// A text's embedding and the sketch of its token vectors.
pub type Sketched = (Vec<f32>, Vec<u8>);

/// `[embedder]` configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbedderConfig {
    /// The ONNX Runtime shared library (`libonnxruntime.so`).
    pub onnxruntime_path: PathBuf,
    /// The all-MiniLM-L6-v2 ONNX model.
    pub model_path: PathBuf,
    /// Its `tokenizer.json`.
    pub tokenizer_path: PathBuf,
    /// Name recorded in `embedding_versions`.
    pub model_name: String,
    /// sha256 of the model file, recorded in `embedding_versions` (the set-up step verifies it).
    pub model_sha256: String,
    /// Parallel inference workers, each with its own session.
    pub workers: std::num::NonZeroUsize,
    /// ONNX Runtime intra-op threads per worker.
    pub intra_threads: std::num::NonZeroUsize,
    /// Most texts in one inference batch.
    pub max_batch: std::num::NonZeroUsize,
    /// Most texts in a batch that carries background work (the indexer's rows): a query
    /// that comes while it runs waits for it, so it is kept short.
    pub background_batch: std::num::NonZeroUsize,
    /// How long a lone request waits for others to share its batch, in milliseconds.
    pub max_wait_ms: u64,
    /// Most texts waiting for a worker; beyond it requests are refused as `overloaded`.
    pub max_queue: usize,
    /// Longest input in tokens; longer texts are truncated, as sentence-transformers does.
    pub max_tokens: usize,
    /// Most padded tokens (texts times the longest) in one inference call: what bounds the
    /// memory inference takes.
    pub max_batch_tokens: usize,
}
