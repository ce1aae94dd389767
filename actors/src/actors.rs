//! The actor tree (ractor on tokio), in start order:
//!
//! ```text
//! supervisor                 starts, wires and restarts the rest (supervisor.rs)
//! ├── embedder pool          micro-batched MiniLM inference (embedder_pool.rs)
//! ├── indexer                embeds committed rows that have no embedding yet (indexer.rs)
//! ├── reader × N             stateless reads, on a runtime of their own (reader.rs, reader/)
//! ├── scheduler              when the lifecycle sweeps run (scheduler.rs)
//! ├── ingester               files dropped in the orchestrators' ingest folders (ingester.rs)
//! └── shard × (tenant, butler), on demand: ordered writes, group commit, sweeps (shard.rs, shard/)
//! ```
//!
//! Each actor gets the handles of the neighbours it talks to in its `Args`, and only the
//! supervisor and its children refer to each other. Mailboxes are unbounded, as ractor's
//! are; writes are bounded before they reach a shard (`write_path/admission.rs`), and every
//! call has a timeout (`mailbox.rs`). `directory.rs` keeps the live counters `/actors` shows.

pub(crate) mod directory;
mod embedder_pool;
mod indexer;
mod ingester;
pub(crate) mod mailbox;
mod reader;
mod scheduler;
mod shard;
mod supervisor;

pub use embedder_pool::EmbedderFactory;
pub(crate) use embedder_pool::EmbedderHandle;
pub(crate) use indexer::IndexerMsg;
pub(crate) use ingester::IngesterMsg;
pub(crate) use reader::{ReaderKit, ReaderMsg, ReaderRuntime};
pub(crate) use shard::{ShardKit, ShardMsg};
pub(crate) use supervisor::{Shards, Supervisor, SupervisorArgs, SupervisorMsg, TreeHandles};
