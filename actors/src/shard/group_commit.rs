//! Group commit of a shard's episodes: requests join a pending group, and the group is
//! written in one statement when the shard's self-addressed `CommitEpisodes` comes round
//! (after every message queued before it), when it is full, or before any other write. The
//! statement may also hold other shards' groups (`episode_commits.rs`); the shard waits for
//! its outcome before anything else, so its writes keep their arrival order.

use std::time::Duration;

use ractor::{ActorProcessingErr, ActorRef, RpcReplyPort};

use super::{Author, ShardMsg, ShardState};
use crate::domain::episode::NewEpisode;
use crate::episode_commits::Submission;
use crate::error::{MemoryError, MemoryResult};
use crate::store::episodes::Inserted;

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
    fn answer(self, result: MemoryResult<Vec<Inserted>>) {
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
    /// Adds a request's episodes to the pending group; commits at once when the group is
    /// full, otherwise when `CommitEpisodes` comes round.
    pub(super) async fn enqueue(
        &mut self,
        myself: &ActorRef<ShardMsg>,
        request: PendingEpisodes,
    ) -> Result<(), ActorProcessingErr> {
        let first = self.pending.is_empty();
        self.pending_count += request.episodes.len();
        self.pending.push(request);
        let writes = &self.ctx.config.writes;
        if self.pending_count >= writes.group_commit_max as usize {
            self.commit_pending().await;
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

    /// Writes the pending group in one statement and answers each request. If the group
    /// fails as a whole, each request is tried on its own, so one bad request cannot fail
    /// the others.
    pub(super) async fn commit_pending(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let group = std::mem::take(&mut self.pending);
        self.pending_count = 0;
        let size: usize = group.iter().map(|p| p.episodes.len()).sum();
        metrics::histogram!("butler_memory_group_commit_episodes").record(size as f64);
        match self.insert_episodes(&group).await {
            Ok(mut inserted) => {
                self.committed_episodes();
                for request in group {
                    let rest = inserted.split_off(request.episodes.len());
                    let mine = std::mem::replace(&mut inserted, rest);
                    request.answer(Ok(mine));
                }
            }
            Err(e) if group.len() == 1 => {
                for request in group {
                    request.answer(Err(e.clone()));
                }
            }
            Err(e) => {
                tracing::warn!(shard = %self.key, error = %e, size, "group commit failed; writing its requests one by one");
                for request in group {
                    let result = self.insert_episodes(std::slice::from_ref(&request)).await;
                    if result.is_ok() {
                        self.committed_episodes();
                    }
                    request.answer(result);
                }
            }
        }
    }

    /// Writes a group through the cross-shard group commit (`episode_commits.rs`), where
    /// it may share a statement with other shards' groups.
    async fn insert_episodes(&self, group: &[PendingEpisodes]) -> MemoryResult<Vec<Inserted>> {
        let submissions: Vec<Submission> = group
            .iter()
            .flat_map(|p| {
                p.episodes.iter().map(|episode| Submission {
                    episode: episode.clone(),
                    actor: p.author.actor.clone(),
                    lineage: p.author.lineage.clone(),
                })
            })
            .collect();
        self.ctx.episode_commits.commit(submissions).await
    }
}
