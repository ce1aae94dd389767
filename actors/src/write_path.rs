//! The write path around the shards: admission (the write budget, refusals before anything
//! reaches a shard) and the cross-shard commit queue (shards' episode groups sharing one
//! statement, each shard's order kept); and the orchestrator graph's write, which needs no
//! shard (one transaction per write).

mod admission;
mod commit_queue;
mod graph_write;

pub(crate) use admission::Admission;
#[cfg(feature = "testkit")]
pub(crate) use admission::Admitted;
pub(crate) use commit_queue::{CommitOutcome, CommitQueue};
#[cfg(test)]
pub(crate) use commit_queue::{InsertEpisodes, stored_as_new};
pub(crate) use graph_write::write_graph;
