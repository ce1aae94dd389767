//! Group commit of a shard's episodes: requests join a pending group, and the group is
//! handed to the cross-shard commit queue (`write_path/commit_queue.rs`) when the shard's
//! self-addressed `CommitEpisodes` comes round (after every message queued before it), when
//! it is full, or before any other write. There it may share a statement with other shards'
//! requests, and it keeps its place behind the shard's earlier groups. The shard does not
//! wait for the outcome to take its next episodes: a task answers the group's requests once
//! it is committed. Any other write waits until every group handed over is answered, so a
//! shard's writes keep their arrival order.

use std::time::Duration;

use ractor::{ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::task::JoinHandle;

use super::{ShardMsg, ShardState};
use crate::domain::author::Author;
use crate::domain::episode::{Inserted, NewEpisode, Submission};
use crate::domain::memory_type::MemoryType;
use crate::error::{MemoryError, MemoryResult};
use crate::services::{CommitNotices, RowsCommitted, Services};
use crate::write_path::CommitOutcome;

/// Where the outcome of a pending write goes.
pub(super) enum EpisodeReply {
    One(RpcReplyPort<MemoryResult<Inserted>>),
    Many(RpcReplyPort<MemoryResult<Vec<Inserted>>>),
}

/// Episodes waiting for the next group commit, from one request.
pub(super) struct PendingEpisodes {
    pub(super) episodes: Vec<NewEpisode>,
    pub(super) author: Author,
    pub(super) reply: EpisodeReply,
}

impl PendingEpisodes {
    fn answer(self, result: CommitOutcome) {
        match self.reply {
            EpisodeReply::One(port) => {
                let _ = port.send(result.and_then(|mut v| {
                    v.pop()
                        .ok_or_else(|| MemoryError::internal("a stored episode went missing"))
                }));
            }
            EpisodeReply::Many(port) => {
                let _ = port.send(result);
            }
        }
    }
}

impl ShardState {
    /// Adds a request's episodes to the pending group; hands the group over at once when it
    /// is full, otherwise when `CommitEpisodes` comes round.
    pub(super) fn enqueue(
        &mut self,
        myself: &ActorRef<ShardMsg>,
        request: PendingEpisodes,
    ) -> Result<(), ActorProcessingErr> {
        let first = self.pending.is_empty();
        self.pending_count += request.episodes.len();
        self.pending.push(request);
        let writes = &self.services.config.writes;
        if self.pending_count >= writes.group_commit_max.get() as usize {
            self.commit_pending();
        } else if first {
            match writes.group_commit_linger_ms {
                0 => myself.send_message(ShardMsg::CommitEpisodes)?,
                ms => {
                    myself.send_after(Duration::from_millis(ms), || ShardMsg::CommitEpisodes);
                }
            }
        }
        Ok(())
    }

    /// Hands the pending group to the cross-shard group commit, behind this shard's earlier
    /// groups, and leaves a task to answer its requests. Each request is written in one
    /// statement with the others, or on its own if that fails, so one bad request cannot fail
    /// the others.
    pub(super) fn commit_pending(&mut self) {
        self.committing.retain(|task| !task.is_finished());
        if self.pending.is_empty() {
            return;
        }
        let group = std::mem::take(&mut self.pending);
        self.pending_count = 0;
        let size: usize = group.iter().map(|p| p.episodes.len()).sum();
        metrics::histogram!("butler_memory_group_commit_episodes").record(size as f64);
        let requests = group.iter().map(PendingEpisodes::submissions).collect();
        let outcomes = self.kit.commits.enqueue(&self.key, requests);
        let services = self.services.clone();
        let commits = self.kit.commits.clone();
        let notices = self.kit.notices.clone();
        let tenant = self.key.tenant_id.clone();
        self.committing.push(tokio::spawn(async move {
            let answers = commits.settle(outcomes).await;
            if answers.iter().any(Result::is_ok) {
                committed_episodes(&services, &notices, &tenant);
            }
            for (request, answer) in group.into_iter().zip(answers) {
                request.answer(answer);
            }
        }));
    }

    /// Hands over the pending group and waits until every group handed over is answered:
    /// what a write that is not an episode does first.
    pub(super) async fn settle_episodes(&mut self) {
        self.commit_pending();
        for task in std::mem::take(&mut self.committing) {
            // A task that panicked has dropped its reply ports: its callers have their answer.
            let _ = task.await;
        }
    }

    /// Whether no episode waits to be handed over or answered.
    pub(super) fn episodes_settled(&self) -> bool {
        self.pending.is_empty() && self.committing.iter().all(JoinHandle::is_finished)
    }
}

impl PendingEpisodes {
    fn submissions(&self) -> Vec<Submission> {
        self.episodes
            .iter()
            .map(|episode| Submission {
                episode: episode.clone(),
                author: self.author.clone(),
            })
            .collect()
    }
}

/// A committed change of a tenant's episodes only (a group commit): what was derived from its
/// facts and rules stays valid, the indexer has rows to embed.
fn committed_episodes(services: &Services, notices: &CommitNotices, tenant: &str) {
    services.generations.bump_type(tenant, MemoryType::Episode);
    notices.send(RowsCommitted);
}
