//! Group commit across shards: the episode groups that shards commit at the same time share
//! one statement.
//!
//! A shard already gathers its own concurrent writes into one group (`shard/group_commit.rs`),
//! but a fleet spreads its writes over many shards, each lightly loaded: at 2,000 writes/s over
//! 8 shards a shard's group held 1.9 episodes, and per-statement work (executor start-up,
//! commit, WAL flush) was a fifth of PostgreSQL's time. Here every shard's group joins one
//! queue, and at most `writes.commit_concurrency` statements run at once: whichever shard gets
//! a turn takes everything queued (up to `writes.group_commit_max` episodes) and writes it in
//! one statement. Under load the queue fills while statements run, so statements grow with
//! the load; at low load a group goes out at once, alone, with no added wait. This is leader
//! election, not a background task: nothing to supervise, nothing left running when idle.
//!
//! Small statements take turns even so: a statement of a few episodes is mostly
//! per-statement work (executor start-up, constraint and default expressions, commit), and
//! two of them side by side pay it twice for what one would carry after the other (measured:
//! 3.4 episodes a statement at 2,000 writes/s with two small statements at once, 4.6 one at
//! a time, and PostgreSQL's CPU followed the statement count). Only a statement of at least
//! `writes.parallel_commit_min_episodes` runs beside another, so batch ingest, whose
//! statements are large and CPU-bound per row, still uses every core.
//!
//! Each shard still has at most one group in flight and waits for its outcome before its next
//! write, so a shard's writes keep their arrival order. The statement runs in a task of its
//! own, so a shard that stops mid-commit cannot leave the others without an answer. If a
//! combined statement fails, each group is written again on its own, so a group fails only
//! for its own reasons.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::domain::episode::NewEpisode;
use crate::domain::request_context::Lineage;
use crate::error::{MemoryError, MemoryResult};
use crate::store::Store;
use crate::store::episodes::{self, Inserted, Submitted};

/// One episode of a group, with who asked for it.
#[derive(Debug, Clone)]
pub struct Submission {
    pub episode: NewEpisode,
    pub actor: String,
    pub lineage: Lineage,
}

/// Writes episodes in one statement, in order, answering one outcome per episode.
pub type InsertEpisodes =
    Arc<dyn Fn(Vec<Submission>) -> BoxFuture<'static, MemoryResult<Vec<Inserted>>> + Send + Sync>;

/// A shard's group waiting for a statement.
struct Waiting {
    group: Vec<Submission>,
    reply: oneshot::Sender<MemoryResult<Vec<Inserted>>>,
}

pub struct EpisodeCommits {
    /// Groups not yet taken by a statement, oldest first.
    queue: Mutex<VecDeque<Waiting>>,
    /// Turns to run a statement: bounds the write connections episodes take at once.
    turns: Arc<Semaphore>,
    /// The one turn small statements share.
    small_lane: Arc<Semaphore>,
    /// Fewest queued episodes for a statement to run beside another.
    parallel_min: usize,
    /// Most episodes in one statement (a larger group still goes, alone).
    max_episodes: usize,
    insert: InsertEpisodes,
}

impl std::fmt::Debug for EpisodeCommits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpisodeCommits")
            .field("turns", &self.turns.available_permits())
            .field("max_episodes", &self.max_episodes)
            .finish()
    }
}

impl EpisodeCommits {
    pub fn new(
        concurrency: usize,
        parallel_min: usize,
        max_episodes: usize,
        insert: InsertEpisodes,
    ) -> Self {
        EpisodeCommits {
            queue: Mutex::new(VecDeque::new()),
            turns: Arc::new(Semaphore::new(concurrency.max(1))),
            small_lane: Arc::new(Semaphore::new(1)),
            parallel_min,
            max_episodes: max_episodes.max(1),
            insert,
        }
    }

    /// Statements on the store's write pool (`episodes::insert_batch`).
    pub fn on_store(
        concurrency: usize,
        parallel_min: usize,
        max_episodes: usize,
        store: Store,
    ) -> Self {
        let insert: InsertEpisodes = Arc::new(move |group: Vec<Submission>| {
            let store = store.clone();
            Box::pin(async move {
                let batch: Vec<Submitted> = group
                    .iter()
                    .map(|s| Submitted {
                        episode: &s.episode,
                        actor: &s.actor,
                        lineage: &s.lineage,
                    })
                    .collect();
                // One statement, atomic by itself: no transaction, one round trip.
                let mut conn = store.writer().acquire().await?;
                episodes::insert_batch(&mut conn, &batch).await
            })
        });
        EpisodeCommits::new(concurrency, parallel_min, max_episodes, insert)
    }

    /// Commits one shard's group, alone or with other shards' groups; answers once the
    /// statement holding it has committed (or failed), one outcome per episode, in order.
    pub async fn commit(&self, group: Vec<Submission>) -> MemoryResult<Vec<Inserted>> {
        let (reply, mut outcome) = oneshot::channel();
        self.lock().push_back(Waiting { group, reply });
        loop {
            tokio::select! {
                biased;
                answer = &mut outcome => return answer.unwrap_or_else(|_| Err(abandoned())),
                turn = self.turns.clone().acquire_owned() => {
                    // A small statement waits for the small one running, if any, and takes
                    // what queued meanwhile. Nothing else can take this group while it
                    // waits: the other turns are held, or themselves wait for the lane.
                    let lane = if self.queued_episodes() < self.parallel_min {
                        self.small_lane.clone().acquire_owned().await.ok()
                    } else {
                        None
                    };
                    let taken = self.take();
                    let (Ok(turn), false) = (turn, taken.is_empty()) else {
                        // Another shard's statement took this group: its answer is coming.
                        return (&mut outcome).await.unwrap_or_else(|_| Err(abandoned()));
                    };
                    // In a task of its own: if this shard stops now, the statement still
                    // answers every group it took.
                    let _ = tokio::spawn(write(self.insert.clone(), taken, (turn, lane))).await;
                }
            }
        }
    }

    /// The oldest waiting groups, up to `max_episodes` (at least one group if any wait).
    fn take(&self) -> Vec<Waiting> {
        let mut queue = self.lock();
        let mut taken = Vec::new();
        let mut episodes = 0;
        while let Some(next) = queue.front() {
            if !taken.is_empty() && episodes + next.group.len() > self.max_episodes {
                break;
            }
            episodes += next.group.len();
            taken.extend(queue.pop_front());
        }
        taken
    }

    fn queued_episodes(&self) -> usize {
        self.lock().iter().map(|w| w.group.len()).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Waiting>> {
        // The queue is consistent after every push and pop: a panic elsewhere cannot have
        // left it half-changed.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The answer of a group whose statement ended without one (its task panicked).
fn abandoned() -> MemoryError {
    MemoryError::unavailable(
        "commit_abandoned",
        "the statement holding these episodes ended without an answer; retry with the same idempotency keys",
    )
}

/// Writes the groups in one statement and answers each; if that fails, writes each group on
/// its own. Holds its turn (and the small lane, if it took it) until every group is answered.
async fn write(
    insert: InsertEpisodes,
    taken: Vec<Waiting>,
    _turn: (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>),
) {
    let sizes: Vec<usize> = taken.iter().map(|w| w.group.len()).collect();
    let total: usize = sizes.iter().sum();
    metrics::histogram!("butler_memory_episode_statement_episodes").record(total as f64);
    metrics::histogram!("butler_memory_episode_statement_groups").record(taken.len() as f64);
    if taken.len() == 1 {
        let Some(Waiting { group, reply }) = taken.into_iter().next() else {
            return;
        };
        let _ = reply.send(insert(group).await);
        return;
    }
    let (groups, replies): (Vec<Vec<Submission>>, Vec<_>) =
        taken.into_iter().map(|w| (w.group, w.reply)).unzip();
    let all: Vec<Submission> = groups.iter().flatten().cloned().collect();
    match insert(all).await {
        Ok(mut inserted) if inserted.len() == total => {
            for (size, reply) in sizes.into_iter().zip(replies) {
                let rest = inserted.split_off(size);
                let _ = reply.send(Ok(std::mem::replace(&mut inserted, rest)));
            }
        }
        Ok(inserted) => {
            // Committed, but not one outcome per episode: nothing to write again, and no
            // way to tell whose is whose.
            let message = format!("{} outcomes for {total} episodes", inserted.len());
            for reply in replies {
                let _ = reply.send(Err(MemoryError::internal(message.clone())));
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, groups = groups.len(), episodes = total, "combined episode statement failed; writing each group on its own");
            for (group, reply) in groups.into_iter().zip(replies) {
                let _ = reply.send(insert(group).await);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::sync::Notify;
    use uuid::Uuid;

    fn submission(butler: &str, content: &str) -> Submission {
        let at = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
        Submission {
            episode: NewEpisode {
                id: Uuid::now_v7(),
                tenant_id: "t".into(),
                butler: butler.into(),
                session_id: None,
                content: content.into(),
                importance: 5.0,
                metadata: serde_json::json!({}),
                created_at: at,
                expires_at: at + chrono::Duration::days(7),
                idempotency_key: None,
            },
            actor: format!("butler:{butler}"),
            lineage: Lineage {
                request_id: "r".into(),
                subrequest_id: None,
                segment_id: None,
                generated: true,
            },
        }
    }

    /// An inserter that records each statement's contents, holds the first statement until
    /// released, and fails any statement containing the content "bad".
    struct Recorder {
        statements: Mutex<Vec<Vec<String>>>,
        release_first: Notify,
        started: Notify,
        calls: AtomicUsize,
    }

    fn recording() -> (Arc<Recorder>, InsertEpisodes) {
        let recorder = Arc::new(Recorder {
            statements: Mutex::new(Vec::new()),
            release_first: Notify::new(),
            started: Notify::new(),
            calls: AtomicUsize::new(0),
        });
        let r = recorder.clone();
        let insert: InsertEpisodes = Arc::new(move |group: Vec<Submission>| {
            let r = r.clone();
            Box::pin(async move {
                let contents: Vec<String> =
                    group.iter().map(|s| s.episode.content.clone()).collect();
                r.statements.lock().unwrap().push(contents.clone());
                if r.calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    r.started.notify_one();
                    r.release_first.notified().await;
                }
                if contents.iter().any(|c| c == "bad") {
                    return Err(MemoryError::invalid_input("bad", "a bad episode"));
                }
                Ok(group
                    .iter()
                    .map(|s| Inserted {
                        episode: s.episode.stored(&s.lineage.request_id),
                        duplicate: false,
                    })
                    .collect())
            })
        });
        (recorder, insert)
    }

    fn contents(result: &MemoryResult<Vec<Inserted>>) -> Vec<String> {
        result
            .as_ref()
            .expect("committed")
            .iter()
            .map(|i| i.episode.content.clone())
            .collect()
    }

    type Answer = tokio::task::JoinHandle<MemoryResult<Vec<Inserted>>>;

    fn spawn_commit(commits: &Arc<EpisodeCommits>, group: Vec<Submission>) -> Answer {
        let c = commits.clone();
        tokio::spawn(async move { c.commit(group).await })
    }

    /// Commits butler a's "a1" and waits until its statement runs (and is held).
    async fn hold_first(commits: &Arc<EpisodeCommits>, recorder: &Recorder) -> Answer {
        let first = spawn_commit(commits, vec![submission("a", "a1")]);
        recorder.started.notified().await;
        first
    }

    /// Waits until `n` groups wait in the queue.
    async fn queued(commits: &EpisodeCommits, n: usize) {
        while commits.lock().len() < n {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn groups_queued_during_a_statement_share_the_next_one_in_order() {
        let (recorder, insert) = recording();
        let commits = Arc::new(EpisodeCommits::new(1, 64, 100, insert));
        let first = hold_first(&commits, &recorder).await;
        // While the first statement runs, three shards queue their groups.
        let mut later = Vec::new();
        for (butler, texts) in [
            ("b", vec!["b1", "b2"]),
            ("c", vec!["c1"]),
            ("d", vec!["d1"]),
        ] {
            let group = texts.iter().map(|t| submission(butler, t)).collect();
            later.push(spawn_commit(&commits, group));
            tokio::task::yield_now().await;
        }
        queued(&commits, 3).await;
        recorder.release_first.notify_one();

        assert_eq!(contents(&first.await.unwrap()), vec!["a1"]);
        let answers: Vec<_> = futures::future::join_all(later).await;
        assert_eq!(contents(answers[0].as_ref().unwrap()), vec!["b1", "b2"]);
        assert_eq!(contents(answers[1].as_ref().unwrap()), vec!["c1"]);
        assert_eq!(contents(answers[2].as_ref().unwrap()), vec!["d1"]);
        let statements = recorder.statements.lock().unwrap().clone();
        assert_eq!(
            statements,
            vec![vec!["a1"], vec!["b1", "b2", "c1", "d1"]],
            "the three queued groups went out together, in arrival order"
        );
    }

    #[tokio::test]
    async fn a_failing_group_fails_alone() {
        let (recorder, insert) = recording();
        let commits = Arc::new(EpisodeCommits::new(1, 64, 100, insert));
        let first = hold_first(&commits, &recorder).await;
        let good = spawn_commit(&commits, vec![submission("b", "b1")]);
        queued(&commits, 1).await;
        let bad = spawn_commit(&commits, vec![submission("c", "bad")]);
        queued(&commits, 2).await;
        recorder.release_first.notify_one();

        first.await.unwrap().expect("first");
        assert_eq!(contents(&good.await.unwrap()), vec!["b1"]);
        let err = bad.await.unwrap().expect_err("the bad group fails");
        assert_eq!(err.class().as_str(), "invalid_input");
        let statements = recorder.statements.lock().unwrap().clone();
        assert_eq!(
            statements,
            vec![
                vec!["a1".to_owned()],
                vec!["b1".to_owned(), "bad".to_owned()],
                vec!["b1".to_owned()],
                vec!["bad".to_owned()],
            ],
            "the combined statement failed, then each group was written on its own"
        );
    }

    #[tokio::test]
    async fn a_statement_takes_at_most_max_episodes_but_a_large_group_still_goes() {
        let (recorder, insert) = recording();
        let commits = Arc::new(EpisodeCommits::new(1, 64, 3, insert));
        let first = hold_first(&commits, &recorder).await;
        let mut later = Vec::new();
        for (butler, n) in [("b", 4), ("c", 2), ("d", 1)] {
            let group = (0..n)
                .map(|i| submission(butler, &format!("{butler}{i}")))
                .collect();
            later.push(spawn_commit(&commits, group));
            queued(&commits, later.len()).await;
        }
        recorder.release_first.notify_one();
        first.await.unwrap().expect("first");
        for answer in futures::future::join_all(later).await {
            answer.unwrap().expect("committed");
        }
        let sizes: Vec<usize> = recorder
            .statements
            .lock()
            .unwrap()
            .iter()
            .map(Vec::len)
            .collect();
        assert_eq!(
            sizes,
            vec![1, 4, 3],
            "b's 4 alone (over the cap), then c and d"
        );
    }

    #[tokio::test]
    async fn small_statements_take_turns_and_what_queues_meanwhile_goes_together() {
        let (recorder, insert) = recording();
        // Two turns, but these statements are all small.
        let commits = Arc::new(EpisodeCommits::new(2, 64, 100, insert));
        let first = hold_first(&commits, &recorder).await;
        let b = spawn_commit(&commits, vec![submission("b", "b1")]);
        let c = spawn_commit(&commits, vec![submission("c", "c1")]);
        // Neither runs beside the held statement: both stay queued.
        tokio::time::timeout(Duration::from_secs(5), queued(&commits, 2))
            .await
            .expect("a small statement ran beside another");
        assert_eq!(recorder.statements.lock().unwrap().len(), 1);
        recorder.release_first.notify_one();

        first.await.unwrap().expect("first");
        assert_eq!(contents(&b.await.unwrap()), vec!["b1"]);
        assert_eq!(contents(&c.await.unwrap()), vec!["c1"]);
        let statements = recorder.statements.lock().unwrap().clone();
        assert_eq!(statements, vec![vec!["a1"], vec!["b1", "c1"]]);
    }

    #[tokio::test]
    async fn a_large_statement_runs_beside_a_small_one() {
        let (recorder, insert) = recording();
        let commits = Arc::new(EpisodeCommits::new(2, 3, 100, insert));
        let first = hold_first(&commits, &recorder).await;
        let group = (0..4).map(|i| submission("b", &format!("b{i}"))).collect();
        // Four episodes (at least three): it goes while the first statement is still held.
        let large = spawn_commit(&commits, group);
        let answer = tokio::time::timeout(Duration::from_secs(5), large)
            .await
            .expect("the large statement waited for the small one");
        assert_eq!(contents(&answer.unwrap()), vec!["b0", "b1", "b2", "b3"]);
        recorder.release_first.notify_one();
        assert_eq!(contents(&first.await.unwrap()), vec!["a1"]);
    }
}
