//! The butler-memory engine: the memory domain, its storage, and the actor tree that runs it.
//!
//! The tree, in start order (see `supervisor`):
//! ```text
//! supervisor
//! ├── embedder pool      micro-batched MiniLM inference
//! ├── indexer            embeds rows committed without an embedding
//! ├── retrieval × N      stateless readers, on a runtime of their own (`read_side`)
//! └── shard × (tenant, butler), on demand: ordered writes and lifecycle work
//! ```
//! [`Engine`] is the handle the edge uses: it validates inputs against the caller's rights,
//! routes writes to the owning shard and reads to the least busy reader.

pub mod actor_directory;
pub mod admission;
pub mod clock;
pub mod config;
pub mod context;
pub mod corpus_cache;
pub mod domain;
pub mod embedder;
pub mod embedder_pool;
pub mod engine;
pub mod episode_commits;
pub mod error;
pub mod extractor;
pub mod generations;
pub mod indexer;
pub mod mailbox;
pub mod query_cache;
pub mod query_embedding;
pub mod read_side;
pub mod result_cache;
pub mod retrieval;
pub mod schedule;
pub mod scheduler;
pub mod shard;
pub mod store;
pub mod supervisor;
pub mod sweep_run;

pub use engine::{Engine, Readiness};
