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
//! order, so a request fails only for its own reasons, unless the database itself was out of
//! reach: then every request of the statement has its answer at once.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::future::BoxFuture;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};
use tracing::Instrument;

use crate::domain::episode::{Inserted, Submission};
use crate::domain::shard_key::ShardKey;
use crate::error::{ErrorClass, ErrorCode, MemoryError, MemoryResult};
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
async fn write(insert: InsertEpisodes, taken: Vec<Waiting>, statement: Statement) {
    let span = statement_span(&taken);
    write_traced(insert, taken, statement)
        .instrument(span)
        .await
}

/// The span of one episode statement: in the trace of the first request it carries, linked
/// to the traces of the others (a group commit serves several calls at once).
fn statement_span(taken: &[Waiting]) -> tracing::Span {
    let mut authors = taken
        .iter()
        .flat_map(|w| w.group.first())
        .map(|submission| &submission.author.span);
    let Some(first) = authors.next() else {
        return tracing::Span::none();
    };
    let episodes: usize = taken.iter().map(|w| w.group.len()).sum();
    let span = tracing::info_span!(
        target: crate::TRACE_SPANS,
        parent: first,
        "write.group_commit",
        episodes,
        requests = taken.len(),
    );
    for other in authors {
        span.follows_from(other);
    }
    span
}

async fn write_traced(insert: InsertEpisodes, taken: Vec<Waiting>, _statement: Statement) {
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
        // The database itself is out of reach: each request on its own would only wait for
        // the same answer.
        Err(e) if e.class() == ErrorClass::Unavailable => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
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

/// What a statement that stores every episode of `group` as new answers: for the stand-in
/// statements of unit tests.
#[cfg(test)]
pub fn stored_as_new(group: &[Submission]) -> Vec<Inserted> {
    group
        .iter()
        .map(|s| Inserted {
            episode: s.episode.stored(&s.author.lineage.request_id),
            duplicate: false,
        })
        .collect()
}

#[cfg(test)]
mod tests;
