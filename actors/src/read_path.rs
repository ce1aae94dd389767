//! What makes reads cheap and keeps them current: the write generations every cache
//! compares, the BM25 statistics per tenant and type, query embeddings (cached, or on
//! their way while a read runs its keyword work), and whole answers for repeated requests.

mod corpus_cache;
mod generations;
mod query_cache;
mod query_embedding;
mod result_cache;

pub(crate) use corpus_cache::CorpusCache;
pub(crate) use generations::Generations;
pub(crate) use query_cache::QueryCache;
pub(crate) use query_embedding::{QueryEmbedder, QueryEmbedding};
pub(crate) use result_cache::{Cached, ResultCache};
