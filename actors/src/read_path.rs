//! What makes reads cheap and keeps them current: the write generations every cache
//! compares, the BM25 statistics per tenant and type, query embeddings (cached, or on
//! their way while a read runs its keyword work), whole answers for repeated requests, and
//! the look at other instances' writes that keeps them all current, and which database
//! (a replica or the primary) serves a read.

mod admitted_lru;
mod corpus_cache;
mod doorkeeper;
mod generations;
mod heads_watch;
mod query_cache;
mod query_embedding;
mod replica_set;
mod result_cache;

pub(crate) use corpus_cache::CorpusCache;
pub(crate) use generations::Generations;
pub(crate) use heads_watch::HeadsWatch;
pub(crate) use query_cache::QueryCache;
pub(crate) use query_embedding::{QueryEmbedder, QueryEmbedding};
pub use replica_set::{ReadTarget, ReplicaHealth, ReplicaSet};
pub(crate) use result_cache::{Cached, ResultCache, ResultCacheLimits};
