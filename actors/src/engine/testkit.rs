//! Test hooks: drills of failure and overload that tests (and benches) run against a real
//! engine. Compiled only with the `testkit` feature, so they are not part of the production
//! API.

use std::time::Duration;

use super::Engine;
use crate::actors::{IngesterMsg, ReaderMsg, ShardMsg, SupervisorMsg};
use crate::domain::episode::Inserted;
use crate::domain::shard_key::ShardKey;
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::write_path::Admitted;

impl Engine {
    /// Makes a shard fail as a crash would (returning an error, or panicking), to exercise
    /// supervision.
    pub async fn inject_shard_failure(&self, key: &ShardKey, panic: bool) -> MemoryResult<()> {
        let shard = self.shards.get(key).await?;
        if shard.tell(ShardMsg::InjectFailure { panic }) {
            Ok(())
        } else {
            Err(MemoryError::new(
                ErrorCode::ActorStopped,
                "the shard is not running",
            ))
        }
    }

    /// Makes reader `index` fail as a crash would (an error, or a panic), to exercise
    /// supervision.
    pub fn inject_reader_failure(&self, index: usize, panic: bool) -> MemoryResult<()> {
        match self.handles.readers.get(index) {
            Some(reader) if reader.tell(ReaderMsg::InjectFailure { panic }) => Ok(()),
            _ => Err(MemoryError::new(
                ErrorCode::ActorStopped,
                "no such retrieval actor is running",
            )),
        }
    }

    /// The ingester panics right after the next dropped file's write commits, before its
    /// manifest and move: a crash mid-file, for the supervisor to restart it.
    pub fn crash_ingest_after_commit(&self) -> MemoryResult<()> {
        let ingester = self.handles.ingester.get()?;
        if ingester.tell(IngesterMsg::CrashAfterNextCommit) {
            Ok(())
        } else {
            Err(MemoryError::new(
                ErrorCode::ActorStopped,
                "the ingester is not running",
            ))
        }
    }

    /// From now on, every `every`-th episode `store_episode` stores is answered with an id
    /// that was never stored (0: never): an acknowledged write lost, for the load tester's
    /// verifier to catch.
    pub fn lose_acknowledged_episodes(&self, every: u64) {
        self.lose_every
            .store(every, std::sync::atomic::Ordering::Relaxed);
    }

    /// What an episode's writer is told was stored: its id replaced when the drill above
    /// says so.
    pub(super) fn acknowledged(&self, mut inserted: Inserted) -> Inserted {
        use std::sync::atomic::{AtomicU64, Ordering};
        static STORED: AtomicU64 = AtomicU64::new(0);
        let every = self.lose_every.load(Ordering::Relaxed);
        if every > 0 && STORED.fetch_add(1, Ordering::Relaxed) % every == every - 1 {
            inserted.episode.id = uuid::Uuid::now_v7();
        }
        inserted
    }

    /// Takes `episodes` of room from the write budget and holds it until the returned value
    /// is dropped: how writes are refused when the budget is spent.
    pub fn reserve_write_room(&self, episodes: u32) -> MemoryResult<Admitted> {
        self.services.admission.admit(episodes, 0)
    }

    /// Stops the embedder pool and keeps it down (`false`), or starts it again (`true`).
    /// While it is down, reads answer from the keyword path (`degraded`) and `/readyz`
    /// names the embedder.
    pub async fn set_embedder_running(&self, running: bool) -> MemoryResult<()> {
        self.ask_supervisor(|reply| SupervisorMsg::SetEmbedder { running, reply })
            .await?
    }

    async fn ask_supervisor<R, F>(&self, build: F) -> MemoryResult<R>
    where
        F: FnOnce(ractor::RpcReplyPort<R>) -> SupervisorMsg,
        R: Send + 'static,
    {
        match self
            .supervisor
            .call(build, Some(Duration::from_secs(10)))
            .await
        {
            Ok(ractor::rpc::CallResult::Success(result)) => Ok(result),
            _ => Err(MemoryError::new(
                ErrorCode::SupervisorUnavailable,
                "the actor tree is not answering",
            )),
        }
    }

    /// Whether semantic search names the running model's version (another model's vectors
    /// may be stored), as the indexer last said.
    pub fn compares_one_model_version(&self) -> bool {
        self.services
            .other_model_vectors
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Says that another model's vectors may be stored, as the indexer does at start when
    /// it finds some: for a test that puts a row back to an old model by hand.
    pub fn assume_other_model_vectors(&self) {
        self.services
            .other_model_vectors
            .store(true, std::sync::atomic::Ordering::Release);
    }
}
