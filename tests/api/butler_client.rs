//! The fail-open client (`client/`) against the real service behind a gate that can stop
//! it, slow it, or let requests through while losing the answers: the caller never gets an
//! error, a dead service costs no network once the circuit is open, and every episode ends
//! stored exactly once, in the order it was recorded.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use butler_memory_client::{ClientConfig, Episode, MemoryClient, Recorded};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::helpers::*;

/// What the gate does with a connection.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Mode {
    /// Passes everything both ways.
    Open = 0,
    /// Closes every connection at once, as a stopped service's host does.
    Down = 1,
    /// Accepts and never answers, as a stuck service does.
    Stuck = 2,
    /// Passes requests to the service but loses its answers.
    LoseAnswers = 3,
}

/// A TCP gate in front of the service.
struct Gate {
    address: SocketAddr,
    mode: Arc<AtomicU8>,
    accepted: Arc<AtomicUsize>,
    connections: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
}

impl Gate {
    async fn start(service: SocketAddr) -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mode = Arc::new(AtomicU8::new(Mode::Open as u8));
        let accepted = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (m, a, c) = (mode.clone(), accepted.clone(), connections.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                let mode = m.load(Ordering::SeqCst);
                let task = tokio::spawn(async move {
                    if mode == Mode::Down as u8 {
                        return;
                    }
                    if mode == Mode::Stuck as u8 {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        return;
                    }
                    let Ok(mut upstream) = TcpStream::connect(service).await else {
                        return;
                    };
                    if mode == Mode::LoseAnswers as u8 {
                        let (mut from_client, _to_client) = client.split();
                        let (_from_service, mut to_service) = upstream.split();
                        let _ = tokio::io::copy(&mut from_client, &mut to_service).await;
                        return;
                    }
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
                c.lock().unwrap().push(task);
            }
        });
        Gate {
            address,
            mode,
            accepted,
            connections,
        }
    }

    /// Switches mode; connections already open are cut, as a restart cuts them.
    fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
        for task in self.connections.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    fn url(&self) -> String {
        format!("http://{}/mcp", self.address)
    }
}

fn config(gate: &Gate, outbox: &std::path::Path) -> ClientConfig {
    let mut config = ClientConfig::new(gate.url(), TENANT_A_HEALTH, outbox);
    config.context_deadline = Duration::from_millis(500);
    config.write_timeout = Duration::from_millis(1000);
    config.breaker_failures = 2;
    config.breaker_cooldown = Duration::from_millis(300);
    config
}

/// How many episodes hold `content`.
async fn stored(app: &TestApp, content: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM episodes WHERE content = $1")
        .bind(content)
        .fetch_one(&mut app.sql().await)
        .await
        .unwrap()
}

/// Waits out the breaker's cooldown, so that the next call may try the service again.
async fn cooldown() {
    tokio::time::sleep(Duration::from_millis(350)).await;
}

#[tokio::test]
async fn a_stopped_service_costs_no_calls_once_the_circuit_opens_and_loses_nothing() {
    let app = spawn_app().await;
    let gate = Gate::start(app.service.address).await;
    let outbox = tempfile::tempdir().unwrap();
    let client = MemoryClient::new(config(&gate, outbox.path())).unwrap();
    gate.set(Mode::Down);

    let context = client.context("health", "good morning").await;
    assert_eq!(context.text, "");
    assert!(context.missing.is_some());
    for i in 0..5 {
        let recorded = client
            .record_episode(Episode::new("health", format!("while down {i}")))
            .await;
        assert!(matches!(recorded, Recorded::Queued { .. }), "{recorded:?}");
    }
    assert!(client.circuit_open());
    let tried = gate.accepted.load(Ordering::SeqCst);
    assert!(
        tried <= 2,
        "the circuit opened after 2 failures, yet {tried} connections"
    );
    // While open, nothing reaches the network.
    for _ in 0..20 {
        let _ = client.context("health", "hello?").await;
    }
    assert_eq!(gate.accepted.load(Ordering::SeqCst), tried);
    assert_eq!(client.pending(), 5);

    gate.set(Mode::Open);
    cooldown().await;
    let came_back = chrono::Utc::now();
    let report = client.flush_outbox().await;
    assert_eq!((report.sent, report.remaining), (5, 0), "{report:?}");
    for i in 0..5 {
        assert_eq!(stored(&app, &format!("while down {i}")).await, 1);
    }
    // Each is dated when it was recorded, while the service was down, and stored when it
    // came back.
    let times: Vec<(chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as(
            "SELECT occurred_at, created_at FROM episodes WHERE content LIKE 'while down %'
             ORDER BY content",
        )
        .fetch_all(&mut app.sql().await)
        .await
        .unwrap();
    assert_eq!(times.len(), 5);
    for (occurred, created) in times {
        assert!(
            occurred < came_back && came_back <= created,
            "{occurred} {created}"
        );
    }
    assert!(!client.circuit_open());
    app.stop().await;
}

#[tokio::test]
async fn a_stuck_service_is_waited_for_no_longer_than_the_deadline() {
    let app = spawn_app().await;
    let gate = Gate::start(app.service.address).await;
    let outbox = tempfile::tempdir().unwrap();
    let client = MemoryClient::new(config(&gate, outbox.path())).unwrap();
    gate.set(Mode::Stuck);

    let context = client.context("health", "good morning").await;
    assert_eq!(context.text, "");
    let why = context.missing.unwrap();
    assert!(why.contains("no answer within"), "{why}");
    let recorded = client
        .record_episode(Episode::new("health", "while stuck"))
        .await;
    assert!(matches!(recorded, Recorded::Queued { .. }), "{recorded:?}");

    gate.set(Mode::Open);
    cooldown().await;
    let context = client.context("health", "good morning").await;
    assert_eq!(context.missing, None, "memory answers again");
    assert_eq!(client.flush_outbox().await.sent, 1);
    assert_eq!(stored(&app, "while stuck").await, 1);
    app.stop().await;
}

#[tokio::test]
async fn across_a_restart_episodes_arrive_once_and_in_order() {
    let app = spawn_app().await;
    let gate = Gate::start(app.service.address).await;
    let outbox = tempfile::tempdir().unwrap();
    let client = MemoryClient::new(config(&gate, outbox.path())).unwrap();

    let first = client
        .record_episode(Episode::new("health", "restart A"))
        .await;
    assert!(
        matches!(
            first,
            Recorded::Stored {
                duplicate: false,
                ..
            }
        ),
        "{first:?}"
    );
    // The service takes B but its answer is lost: B waits in the outbox although stored.
    gate.set(Mode::LoseAnswers);
    // The pooled connection was cut with the switch: the first call finds it dead.
    let _ = client.context("health", "anyone there?").await;
    let b = client
        .record_episode(Episode::new("health", "restart B"))
        .await;
    assert!(matches!(b, Recorded::Queued { .. }), "{b:?}");
    eventually(Duration::from_secs(5), || async {
        match stored(&app, "restart B").await {
            1 => Ok(()),
            n => Err(format!("{n} stored")),
        }
    })
    .await
    .expect("the service stored B; only its answer was lost");
    gate.set(Mode::Down);
    let c = client
        .record_episode(Episode::new("health", "restart C"))
        .await;
    assert!(matches!(c, Recorded::Queued { .. }), "{c:?}");
    // A new client on the same outbox (the butler runtime restarted too) finds B and C.
    drop(client);
    let client = MemoryClient::new(config(&gate, outbox.path())).unwrap();
    assert_eq!(client.pending(), 2);

    gate.set(Mode::Open);
    let d = client
        .record_episode(Episode::new("health", "restart D"))
        .await;
    assert!(matches!(d, Recorded::Stored { .. }), "{d:?}");
    assert_eq!(client.pending(), 0);
    for content in ["restart A", "restart B", "restart C", "restart D"] {
        assert_eq!(stored(&app, content).await, 1, "{content}");
    }
    let order: Vec<String> = sqlx::query_scalar(
        "SELECT content FROM episodes WHERE content LIKE 'restart %' ORDER BY created_at, id",
    )
    .fetch_all(&mut app.sql().await)
    .await
    .unwrap();
    assert_eq!(order, ["restart A", "restart B", "restart C", "restart D"]);
    // What the service refuses is dropped at once, not kept to fail forever.
    let refused = client.record_episode(Episode::new("health", "")).await;
    assert!(matches!(refused, Recorded::Dropped { .. }), "{refused:?}");
    assert_eq!(client.pending(), 0);
    app.stop().await;
}

/// A queued episode is dated by this host's clock when it is sent. A host whose clock runs
/// ahead of the service's by more than the skew it allows still has its episodes stored (as
/// of their arrival), not dropped for a clock; an episode its caller dated in the future is
/// still refused, as it would have been at once.
#[tokio::test]
async fn a_host_clock_ahead_of_the_services_costs_no_queued_episode() {
    let app = spawn_app().await;
    let gate = Gate::start(app.service.address).await;
    let outbox = tempfile::tempdir().unwrap();
    let now = chrono::Utc::now();
    let queue = |content: &str, recorded_at: chrono::DateTime<chrono::Utc>, occurred_at| {
        let mut arguments = serde_json::json!({"butler": "health", "content": content,
                                               "idempotency_key": uuid::Uuid::now_v7().to_string()});
        if let Some(t) = occurred_at {
            arguments["occurred_at"] = serde_json::json!(t);
        }
        let file = serde_json::json!({"arguments": arguments, "recorded_at": recorded_at});
        std::fs::write(
            outbox.path().join(format!("{}.json", uuid::Uuid::now_v7())),
            file.to_string(),
        )
        .unwrap();
    };
    queue(
        "recorded by a clock ten minutes fast",
        now + chrono::Duration::minutes(10),
        None,
    );
    queue(
        "dated tomorrow by its caller",
        now,
        Some((now + chrono::Duration::days(1)).to_rfc3339()),
    );
    queue(
        "recorded an hour ago",
        now - chrono::Duration::hours(1),
        None,
    );

    let client = MemoryClient::new(config(&gate, outbox.path())).unwrap();
    let report = client.flush_outbox().await;
    assert_eq!(
        (report.sent, report.dropped, report.remaining),
        (2, 1, 0),
        "{report:?}"
    );
    let happened = |content: &'static str| {
        let app = &app;
        async move {
            sqlx::query_scalar::<_, Option<chrono::DateTime<chrono::Utc>>>(
                "SELECT occurred_at FROM episodes WHERE content = $1",
            )
            .bind(content)
            .fetch_all(&mut app.sql().await)
            .await
            .unwrap()
        }
    };
    assert_eq!(
        happened("recorded by a clock ten minutes fast").await,
        [None],
        "stored once, as of its arrival"
    );
    assert_eq!(happened("dated tomorrow by its caller").await, []);
    let hour_ago = happened("recorded an hour ago").await;
    assert_eq!(hour_ago.len(), 1);
    let dated = hour_ago[0].expect("dated by when it was recorded");
    assert!(
        (dated - (now - chrono::Duration::hours(1)))
            .num_milliseconds()
            .abs()
            < 1,
        "{dated}"
    );
    app.stop().await;
}
