//! The shard on its own: a shard actor spawned with a commit queue whose statements are a
//! test double (they record what they were given and can be held or fail), so its ordering,
//! its barrier and its per-request refusals are checked without a database.

use std::sync::{Arc, Mutex};

use chrono::{TimeZone, Utc};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::{Semaphore, oneshot};
use uuid::Uuid;

use super::{Shard, ShardArgs, ShardKit, ShardMsg};
use crate::actors::directory::{ActorDirectory, ActorKind};
use crate::actors::supervisor::SupervisorMsg;
use crate::clock::ManualClock;
use crate::domain::author::Author;
use crate::domain::episode::{Inserted, NewEpisode, Submission};
use crate::domain::request_context::Lineage;
use crate::domain::shard_key::ShardKey;
use crate::error::{ErrorClass, ErrorCode, MemoryError, MemoryResult};
use crate::services::Services;
use crate::write_path::{CommitQueue, InsertEpisodes, stored_as_new};

/// A supervisor that is told things and does nothing: the shard only tells it it is idle.
struct Bystander;

impl Actor for Bystander {
    type Msg = SupervisorMsg;
    type State = ();
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        _args: (),
    ) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
}

/// The statements the shard's episode groups became, in the order they ran; each waits for
/// a permit (so a test can hold them), and one holding the content `bad` fails.
struct Statements {
    ran: Mutex<Vec<Vec<String>>>,
    gate: Semaphore,
}

impl Statements {
    fn insert(self: &Arc<Self>) -> InsertEpisodes {
        let statements = self.clone();
        Arc::new(move |group: Vec<Submission>| {
            let statements = statements.clone();
            Box::pin(async move {
                let contents: Vec<String> =
                    group.iter().map(|s| s.episode.content.clone()).collect();
                let _permit = statements
                    .gate
                    .acquire()
                    .await
                    .expect("the gate stays open");
                statements.ran.lock().unwrap().push(contents.clone());
                if contents.iter().any(|c| c == "bad") {
                    return Err(MemoryError::new(ErrorCode::ConstraintViolation, "refused"));
                }
                Ok(stored_as_new(&group))
            })
        })
    }

    /// Every episode written, in statement order.
    fn written(&self) -> Vec<String> {
        self.ran.lock().unwrap().iter().flatten().cloned().collect()
    }
}

struct TestShard {
    shard: ActorRef<ShardMsg>,
    statements: Arc<Statements>,
    directory: ActorDirectory,
}

/// A shard of `t/b` whose statements start held when `held` (release with the gate).
async fn shard(held: bool) -> TestShard {
    let at = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
    let services = Arc::new(Services::for_tests(Arc::new(ManualClock::new(at))));
    let statements = Arc::new(Statements {
        ran: Mutex::new(Vec::new()),
        gate: Semaphore::new(if held { 0 } else { Semaphore::MAX_PERMITS }),
    });
    let kit = ShardKit {
        commits: Arc::new(CommitQueue::new(2, 64, 512, statements.insert())),
        notices: Arc::default(),
    };
    let (supervisor, _) = Actor::spawn(None, Bystander, ()).await.unwrap();
    let directory = ActorDirectory::default();
    let args = ShardArgs {
        key: ShardKey::new("t", "b"),
        services,
        kit,
        info: directory.entry(ActorKind::Shard, "t/b"),
        supervisor,
    };
    let (shard, _) = Actor::spawn(None, Shard, args).await.unwrap();
    TestShard {
        shard,
        statements,
        directory,
    }
}

fn episode(content: &str) -> Box<NewEpisode> {
    let at = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap();
    Box::new(NewEpisode {
        id: Uuid::now_v7(),
        tenant_id: "t".into(),
        butler: "b".into(),
        session_id: None,
        content: content.into(),
        importance: 5.0,
        metadata: serde_json::json!({}),
        created_at: at,
        occurred_at: None,
        expires_at: at + chrono::Duration::days(7),
        idempotency_key: None,
        redacted: Default::default(),
    })
}

fn author() -> Author {
    Author::new("butler:b", Lineage::generated())
}

/// Sends an episode write and returns where its answer will arrive.
fn store(shard: &ActorRef<ShardMsg>, content: &str) -> oneshot::Receiver<MemoryResult<Inserted>> {
    let (tx, rx) = oneshot::channel();
    let reply: RpcReplyPort<_> = tx.into();
    shard
        .cast(ShardMsg::StoreEpisode {
            episode: episode(content),
            author: author(),
            reply,
        })
        .unwrap();
    rx
}

fn flush(shard: &ActorRef<ShardMsg>) -> oneshot::Receiver<MemoryResult<()>> {
    let (tx, rx) = oneshot::channel();
    shard.cast(ShardMsg::Flush { reply: tx.into() }).unwrap();
    rx
}

fn messages_handled(directory: &ActorDirectory) -> u64 {
    directory
        .snapshot()
        .iter()
        .find(|a| a.key == "t/b")
        .map_or(0, |a| a.messages_handled)
}

#[tokio::test]
async fn episodes_are_written_and_answered_in_arrival_order() {
    let t = shard(false).await;
    let sent: Vec<String> = (0..50).map(|i| format!("e{i}")).collect();
    let answers: Vec<_> = sent.iter().map(|c| store(&t.shard, c)).collect();
    let mut stored = Vec::new();
    for answer in answers {
        stored.push(answer.await.unwrap().unwrap().episode.content);
    }
    assert_eq!(stored, sent, "each caller gets its own episode back");
    assert_eq!(t.statements.written(), sent, "written in arrival order");
    assert!(
        t.statements.ran.lock().unwrap().len() < sent.len(),
        "concurrent episodes share statements"
    );
}

#[tokio::test]
async fn a_flush_answers_only_after_every_episode_before_it_is_answered() {
    let t = shard(true).await;
    let episodes: Vec<_> = ["a", "b", "c"].iter().map(|c| store(&t.shard, c)).collect();
    let mut flushed = flush(&t.shard);
    // The shard counts messages as it takes them: the flush is the fourth. Once it is
    // taken, it waits there for the held statement, and nothing is answered yet.
    while messages_handled(&t.directory) < 4 {
        tokio::task::yield_now().await;
    }
    assert!(
        flushed.try_recv().is_err(),
        "the flush waits for the episodes"
    );
    t.statements.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    flushed.await.unwrap().unwrap();
    let mut answered = Vec::new();
    for mut e in episodes {
        // Answered before the flush was: no waiting needed.
        answered.push(e.try_recv().expect("answered").unwrap().episode.content);
    }
    assert_eq!(answered, ["a", "b", "c"]);
}

#[tokio::test]
async fn a_refused_episode_fails_alone_and_the_others_are_written() {
    let t = shard(true).await;
    let a = store(&t.shard, "a");
    let bad = store(&t.shard, "bad");
    let c = store(&t.shard, "c");
    t.statements.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    assert_eq!(a.await.unwrap().unwrap().episode.content, "a");
    let refused = bad.await.unwrap().unwrap_err();
    assert_eq!(refused.class(), ErrorClass::Integrity);
    assert_eq!(c.await.unwrap().unwrap().episode.content, "c");
    let written: Vec<String> = t
        .statements
        .written()
        .into_iter()
        .filter(|c| c != "bad")
        .collect();
    // The combined statement failed; each request was written again on its own, in order.
    assert_eq!(&written[written.len() - 2..], ["a", "c"]);
}
