//! Group commit across shards: the episode groups that shards commit at the same time share
//! one statement.
//!
//! A shard already gathers its own concurrent writes into one group (`shard/group_commit.rs`),
//! but a fleet spreads its writes over many shards, each lightly loaded, and per-statement
//! work (executor start-up, commit, WAL flush) would dominate PostgreSQL's time
//! (docs/decisions.md has the figures). Here every shard's requests join one queue, and at
//! most `writes.commit_concurrency` statements run at once: whichever group gets a turn
//! takes everything queued (up to `writes.group_commit_max` episodes) and writes it in one
//! statement. Under load the queue fills while statements run, so statements grow with the
//! load; at low load a request goes out at once, alone, with no added wait. This is leader
//! election, not a background task: nothing to supervise, nothing left running when idle.
//!
//! Small statements take turns even so: a statement of a few episodes is mostly
//! per-statement work (executor start-up, constraint and default expressions, commit), and
//! two of them side by side pay it twice for what one would carry after the other. Only a
//! statement of at least `writes.parallel_commit_min_episodes` runs beside another, so batch
//! ingest, whose statements are large and CPU-bound per row, still uses every core.
//!
//! A shard hands its groups over without waiting for the previous one's outcome, so that its
//! next group can join the statement that starts meanwhile. Its writes keep their arrival
//! order all the same: the queue is first in, first out, and a shard's requests are not
//! taken while a statement holding an earlier one of its requests still runs, so they commit
//! in one statement in order or in statements one after the other. The statement runs in a
//! task of its own, so a shard that stops mid-commit cannot leave the others without an
//! answer. If a combined statement fails, each request is written again on its own, in
//! order, so a request fails only for its own reasons.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::future::BoxFuture;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};

use crate::domain::episode::{Inserted, Submission};
use crate::domain::shard_key::ShardKey;
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::store::Store;
use crate::store::episodes;

/// Writes episodes in one statement, in order, answering one outcome per episode.
pub type InsertEpisodes =
    Arc<dyn Fn(Vec<Submission>) -> BoxFuture<'static, MemoryResult<Vec<Inserted>>> + Send + Sync>;

/// The outcome of one request's episodes, in order.
pub type CommitOutcome = MemoryResult<Vec<Inserted>>;

/// A shard's request waiting for a statement.
struct Waiting {
    shard: ShardKey,
    group: Vec<Submission>,
    reply: oneshot::Sender<CommitOutcome>,
    queued_at: Instant,
}

#[derive(Default)]
struct Queue {
    /// Requests not yet taken by a statement, oldest first.
    waiting: VecDeque<Waiting>,
    /// Shards with a request in a running statement: their later requests wait for it.
    writing: HashSet<ShardKey>,
}

/// What statements and their waiters share.
#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    /// Told whenever a statement ends, which may free its shards' later requests.
    ended: Notify,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // The queue is consistent after every push and pop: a panic elsewhere cannot have
        // left it half-changed.
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub struct CommitQueue {
    shared: Arc<Shared>,
    /// Turns to run a statement: bounds the write connections episodes take at once.
    turns: Arc<Semaphore>,
    /// The one turn small statements share.
    small_lane: Arc<Semaphore>,
    /// Fewest queued episodes for a statement to run beside another.
    parallel_min: usize,
    /// Most episodes in one statement (a larger request still goes, alone).
    max_episodes: usize,
    insert: InsertEpisodes,
}

impl std::fmt::Debug for CommitQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitQueue")
            .field("turns", &self.turns.available_permits())
            .field("max_episodes", &self.max_episodes)
            .finish()
    }
}

impl CommitQueue {
    pub fn new(
        concurrency: usize,
        parallel_min: usize,
        max_episodes: usize,
        insert: InsertEpisodes,
    ) -> Self {
        CommitQueue {
            shared: Arc::default(),
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
                // One statement, atomic by itself: no transaction, one round trip.
                let mut conn = store.writer().acquire().await?;
                episodes::insert_batch(&mut conn, &group).await
            })
        });
        CommitQueue::new(concurrency, parallel_min, max_episodes, insert)
    }

    /// Queues a shard's requests, in order, behind everything queued before; `settle`
    /// then answers them. Queuing is immediate, so the shard may hand over its next requests
    /// at once and they still go after these.
    pub fn enqueue(
        &self,
        shard: &ShardKey,
        requests: Vec<Vec<Submission>>,
    ) -> Vec<oneshot::Receiver<CommitOutcome>> {
        let queued_at = Instant::now();
        let mut queue = self.shared.lock();
        requests
            .into_iter()
            .map(|group| {
                let (reply, outcome) = oneshot::channel();
                queue.waiting.push_back(Waiting {
                    shard: shard.clone(),
                    group,
                    reply,
                    queued_at,
                });
                outcome
            })
            .collect()
    }

    /// Answers requests queued by one `enqueue` once the statements holding them have
    /// committed (or failed), one outcome per request. Runs statements for whatever is queued
    /// whenever a turn comes, its own requests or not.
    pub async fn settle(
        &self,
        mut outcomes: Vec<oneshot::Receiver<CommitOutcome>>,
    ) -> Vec<CommitOutcome> {
        let Some(mut last) = outcomes.pop() else {
            return Vec::new();
        };
        let last = loop {
            // Listening before looking at the queue, so that no statement's end goes unheard.
            let ended = self.shared.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            tokio::select! {
                biased;
                answer = &mut last => break answer,
                turn = self.turns.clone().acquire_owned() => {
                    let Ok(turn) = turn else {
                        // The turns are never closed; were they, nothing could write.
                        break (&mut last).await;
                    };
                    // A small statement waits for the small one running, if any, and takes
                    // what queued meanwhile. Nothing else can take these requests while it
                    // waits: the other turns are held, or themselves wait for the lane.
                    let lane = if self.takeable_episodes() < self.parallel_min {
                        self.small_lane.clone().acquire_owned().await.ok()
                    } else {
                        None
                    };
                    let taken = self.take();
                    if taken.is_empty() {
                        // Ours were taken by another statement and their answer is coming,
                        // or they wait for a statement holding their shard's earlier ones.
                        // The turn and the lane go back first, for that statement's
                        // successors.
                        drop((turn, lane));
                        tokio::select! {
                            biased;
                            answer = &mut last => break answer,
                            () = ended => continue,
                        }
                    }
                    let statement = Statement {
                        _shards: Writing {
                            shared: self.shared.clone(),
                            shards: taken.iter().map(|w| w.shard.clone()).collect(),
                        },
                        _turn: turn,
                        _lane: lane,
                    };
                    // In a task of its own: if this shard stops now, the statement still
                    // answers every request it took.
                    let _ = tokio::spawn(write(self.insert.clone(), taken, statement)).await;
                }
            }
        };
        // The earlier requests went in the same statement as the last or in earlier ones:
        // their answers are in.
        let mut answers = Vec::with_capacity(outcomes.len() + 1);
        for outcome in outcomes {
            answers.push(outcome.await.unwrap_or_else(|_| Err(abandoned())));
        }
        answers.push(last.unwrap_or_else(|_| Err(abandoned())));
        answers
    }

    /// The oldest waiting requests whose shards have no statement running, up to
    /// `max_episodes` (at least one request if any can go); their shards are then marked as
    /// writing until the statement ends.
    fn take(&self) -> Vec<Waiting> {
        let mut queue = self.shared.lock();
        let Queue { waiting, writing } = &mut *queue;
        let mut taken: Vec<Waiting> = Vec::new();
        let mut episodes = 0;
        let mut next = 0;
        while let Some(candidate) = waiting.get(next) {
            if writing.contains(&candidate.shard) {
                next += 1;
                continue;
            }
            if !taken.is_empty() && episodes + candidate.group.len() > self.max_episodes {
                break;
            }
            episodes += candidate.group.len();
            taken.extend(waiting.remove(next));
        }
        writing.extend(taken.iter().map(|w| w.shard.clone()));
        taken
    }

    /// Episodes queued whose shards have no statement running.
    fn takeable_episodes(&self) -> usize {
        let queue = self.shared.lock();
        queue
            .waiting
            .iter()
            .filter(|w| !queue.writing.contains(&w.shard))
            .map(|w| w.group.len())
            .sum()
    }
}

/// A running statement's turn, lane and shards, given back however the statement ends.
struct Statement {
    _shards: Writing,
    _turn: OwnedSemaphorePermit,
    _lane: Option<OwnedSemaphorePermit>,
}

/// The shards a statement holds requests of: free again when it ends.
struct Writing {
    shared: Arc<Shared>,
    shards: Vec<ShardKey>,
}

impl Drop for Writing {
    fn drop(&mut self) {
        let mut queue = self.shared.lock();
        for shard in &self.shards {
            queue.writing.remove(shard);
        }
        drop(queue);
        self.shared.ended.notify_waiters();
    }
}

/// Records how long a statement took, from its turn to its last answer, however it ends.
struct StatementTimer(metrics::Histogram, Instant);

impl Drop for StatementTimer {
    fn drop(&mut self) {
        self.0.record(self.1.elapsed().as_secs_f64());
    }
}

/// The answer of a group whose statement ended without one (its task panicked).
fn abandoned() -> MemoryError {
    MemoryError::new(
        ErrorCode::CommitAbandoned,
        "the statement holding these episodes ended without an answer; retry with the same idempotency keys",
    )
}

/// Writes the requests in one statement and answers each; if that fails, writes each request
/// on its own, in order. Holds its turn (and the small lane, if it took it) and its shards
/// until every request is answered.
async fn write(insert: InsertEpisodes, taken: Vec<Waiting>, _statement: Statement) {
    let sizes: Vec<usize> = taken.iter().map(|w| w.group.len()).collect();
    let total: usize = sizes.iter().sum();
    metrics::histogram!("butler_memory_episode_statement_episodes").record(total as f64);
    metrics::histogram!("butler_memory_episode_statement_requests").record(taken.len() as f64);
    let started = Instant::now();
    for waiting in &taken {
        metrics::histogram!("butler_memory_episode_commit_wait_seconds")
            .record(started.duration_since(waiting.queued_at).as_secs_f64());
    }
    let statement = metrics::histogram!("butler_memory_episode_statement_seconds");
    let _timer = StatementTimer(statement, started);
    if taken.len() == 1 {
        let Some(Waiting { group, reply, .. }) = taken.into_iter().next() else {
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
            tracing::warn!(error = %e, requests = groups.len(), episodes = total, "combined episode statement failed; writing each request on its own");
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

    use crate::domain::author::Author;
    use crate::domain::episode::NewEpisode;
    use crate::domain::request_context::Lineage;

    impl CommitQueue {
        /// One request, of the shard its first episode belongs to, queued and settled.
        async fn commit(&self, group: Vec<Submission>) -> CommitOutcome {
            let episode = &group[0].episode;
            let shard = ShardKey::new(episode.tenant_id.clone(), episode.butler.clone());
            let outcomes = self.enqueue(&shard, vec![group]);
            self.settle(outcomes)
                .await
                .pop()
                .expect("one answer per request")
        }
    }

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
            author: Author::new(
                format!("butler:{butler}"),
                Lineage {
                    request_id: "r".into(),
                    subrequest_id: None,
                    segment_id: None,
                    generated: true,
                },
            ),
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
                    return Err(MemoryError::new(
                        ErrorCode::InvalidCharacters,
                        "a bad episode",
                    ));
                }
                Ok(group
                    .iter()
                    .map(|s| Inserted {
                        episode: s.episode.stored(&s.author.lineage.request_id),
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

    fn spawn_commit(commits: &Arc<CommitQueue>, group: Vec<Submission>) -> Answer {
        let c = commits.clone();
        tokio::spawn(async move { c.commit(group).await })
    }

    /// Commits butler a's "a1" and waits until its statement runs (and is held).
    async fn hold_first(commits: &Arc<CommitQueue>, recorder: &Recorder) -> Answer {
        let first = spawn_commit(commits, vec![submission("a", "a1")]);
        recorder.started.notified().await;
        first
    }

    /// Waits until `n` groups wait in the queue.
    async fn queued(commits: &CommitQueue, n: usize) {
        while commits.shared.lock().waiting.len() < n {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn groups_queued_during_a_statement_share_the_next_one_in_order() {
        let (recorder, insert) = recording();
        let commits = Arc::new(CommitQueue::new(1, 64, 100, insert));
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
        let commits = Arc::new(CommitQueue::new(1, 64, 100, insert));
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
        let commits = Arc::new(CommitQueue::new(1, 64, 3, insert));
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
        let commits = Arc::new(CommitQueue::new(2, 64, 100, insert));
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
        let commits = Arc::new(CommitQueue::new(2, 3, 100, insert));
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

    #[tokio::test]
    async fn a_shards_requests_handed_over_together_share_a_statement_in_order() {
        let (recorder, insert) = recording();
        let commits = Arc::new(CommitQueue::new(1, 64, 100, insert));
        let first = hold_first(&commits, &recorder).await;
        let shard = ShardKey::new("t", "b");
        let earlier = commits.enqueue(&shard, vec![vec![submission("b", "b1")]]);
        let later = commits.enqueue(
            &shard,
            vec![
                vec![submission("b", "b2"), submission("b", "b3")],
                vec![submission("b", "b4")],
            ],
        );
        let c = commits.clone();
        let later = tokio::spawn(async move { c.settle(later).await });
        recorder.release_first.notify_one();
        first.await.unwrap().expect("first");

        let earlier = commits.settle(earlier).await;
        assert_eq!(contents(&earlier[0]), vec!["b1"]);
        let later = later.await.unwrap();
        assert_eq!(later.len(), 2, "one answer per request");
        assert_eq!(contents(&later[0]), vec!["b2", "b3"]);
        assert_eq!(contents(&later[1]), vec!["b4"]);
        let statements = recorder.statements.lock().unwrap().clone();
        assert_eq!(statements, vec![vec!["a1"], vec!["b1", "b2", "b3", "b4"]]);
    }

    #[tokio::test]
    async fn a_shards_request_waits_for_the_statement_holding_its_earlier_one() {
        let (recorder, insert) = recording();
        // Two turns and no small lane: any two statements may run side by side.
        let commits = Arc::new(CommitQueue::new(2, 1, 100, insert));
        let first = hold_first(&commits, &recorder).await;
        // Shard a's second request and shard b's first, handed over while a1 is written.
        let a2 = spawn_commit(&commits, vec![submission("a", "a2")]);
        queued(&commits, 1).await;
        let b1 = spawn_commit(&commits, vec![submission("b", "b1")]);
        // b1 goes beside the held statement; a2 may not, or it could commit before a1.
        let b1 = tokio::time::timeout(Duration::from_secs(5), b1)
            .await
            .expect("b's request waited for a's statement");
        assert_eq!(contents(&b1.unwrap()), vec!["b1"]);
        assert_eq!(
            commits.shared.lock().waiting.len(),
            1,
            "a2 still waits while a1's statement runs"
        );
        recorder.release_first.notify_one();
        assert_eq!(contents(&first.await.unwrap()), vec!["a1"]);
        assert_eq!(contents(&a2.await.unwrap()), vec!["a2"]);
        let statements = recorder.statements.lock().unwrap().clone();
        assert_eq!(statements, vec![vec!["a1"], vec!["b1"], vec!["a2"]]);
    }

    #[tokio::test]
    async fn a_request_answered_elsewhere_leaves_its_shard_free() {
        let (recorder, insert) = recording();
        let commits = Arc::new(CommitQueue::new(2, 1, 100, insert));
        let first = hold_first(&commits, &recorder).await;
        recorder.release_first.notify_one();
        first.await.unwrap().expect("first");
        // The statement's end freed shard a: its next request goes at once.
        let again = tokio::time::timeout(
            Duration::from_secs(5),
            commits.commit(vec![submission("a", "a2")]),
        )
        .await
        .expect("shard a stayed marked as writing");
        assert_eq!(contents(&again), vec!["a2"]);
        assert!(commits.shared.lock().writing.is_empty());
    }
}
