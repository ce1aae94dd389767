//! The commit queue with a stand-in statement: shards' requests share statements, each
//! shard's order holds across statements, small statements take turns, and a failed
//! combined statement is retried request by request.

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
            occurred_at: None,
            expires_at: at + chrono::Duration::days(7),
            idempotency_key: None,
            redacted: Default::default(),
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
            let contents: Vec<String> = group.iter().map(|s| s.episode.content.clone()).collect();
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
            Ok(stored_as_new(&group))
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
