//! The write path around the shards: admission (the write budget, refusals before anything
//! reaches a shard) and the cross-shard commit queue (shards' episode groups sharing one
//! statement, each shard's order kept).

mod admission;
mod commit_queue;

pub(crate) use admission::Admission;
#[cfg(feature = "testkit")]
pub(crate) use admission::Admitted;
pub(crate) use commit_queue::{CommitOutcome, CommitQueue};
#[cfg(test)]
pub(crate) use commit_queue::{InsertEpisodes, stored_as_new};
