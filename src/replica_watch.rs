//! The read replicas (`database.read_urls`), watched like the database itself: every
//! quarter second the watch reads the primary's WAL position and asks each replica whether
//! it is a replica, of this primary, and how far it has replayed. A replica that does not
//! answer, is not in recovery, belongs to another primary, or trails the primary by more
//! than `database.max_replica_lag_ms` is taken out of rotation (reads go to the others, or
//! to the primary), logged, shown on `/readyz` and in `/metrics`; once it answers and has
//! caught up it rejoins.
//!
//! Lag is time, not bytes: how long ago the primary had written WAL the replica has not
//! replayed yet, from the positions the watch has seen (one look's precision). An idle
//! primary with a replica that has replayed everything has no lag, however long ago its
//! last write was.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use butler_memory_actors::{ReplicaSet, Store};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How often the watch looks.
const PERIOD: Duration = Duration::from_millis(250);

/// How long a replica (or the primary) may take to answer a look.
const LOOK_TIMEOUT: Duration = Duration::from_secs(1);

/// How long the primary's positions are remembered beyond the allowed lag: a replica behind
/// all of them is behind by at least the oldest one's age.
const HISTORY_MARGIN: Duration = Duration::from_secs(10);

/// A running watch; [`ReplicaWatch::stop`] ends it.
pub struct ReplicaWatch {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl ReplicaWatch {
    /// Watches the replicas of `store`, keeping `replicas` current. Nothing runs when there
    /// are none.
    pub fn start(store: Store, replicas: Arc<ReplicaSet>) -> ReplicaWatch {
        let stop = CancellationToken::new();
        let watch = Watch {
            history: VecDeque::new(),
            horizon: replicas.max_lag() + HISTORY_MARGIN,
            primary_id: None,
            store,
            replicas,
        };
        let task = if watch.replicas.is_empty() {
            tokio::spawn(async {})
        } else {
            tokio::spawn(watch.run(stop.clone()))
        };
        ReplicaWatch { stop, task }
    }

    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

struct Watch {
    store: Store,
    replicas: Arc<ReplicaSet>,
    /// The primary's WAL positions, oldest first, with when each was read.
    history: VecDeque<(Instant, i64)>,
    horizon: Duration,
    /// The primary's system identifier, once read.
    primary_id: Option<i64>,
}

impl Watch {
    async fn run(mut self, stop: CancellationToken) {
        let mut tick = tokio::time::interval(PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.look() => {}
            }
        }
    }

    async fn look(&mut self) {
        if self.primary_id.is_none() {
            self.primary_id = answer(self.store.system_identifier()).await.ok();
        }
        // The primary's position first: a replica that has replayed to it is not behind.
        if let Ok(position) = answer(self.store.wal_position()).await {
            let now = Instant::now();
            self.history.push_back((now, position));
            while let Some(&(at, _)) = self.history.front()
                && now.duration_since(at) > self.horizon
            {
                self.history.pop_front();
            }
        }
        let looks = (0..self.replicas.len()).map(|i| answer(self.store.replica_status(i)));
        let statuses = futures::future::join_all(looks).await;
        for (index, status) in statuses.into_iter().enumerate() {
            let (replayed, lag, out_because) = match status {
                Err(why) => (
                    None,
                    Duration::ZERO,
                    Some(format!("does not answer: {why}")),
                ),
                Ok(status) => {
                    let lag = status.replayed.map_or(Duration::ZERO, |r| self.lag(r));
                    (status.replayed, lag, self.unfit(&status, lag))
                }
            };
            match self
                .replicas
                .looked(index, replayed, lag, out_because.clone())
            {
                Some(true) => tracing::info!(
                    replica = self.replicas.label(index),
                    "read replica in rotation"
                ),
                Some(false) => tracing::warn!(
                    replica = self.replicas.label(index),
                    error = out_because.as_deref().unwrap_or_default(),
                    "read replica out of rotation"
                ),
                None => {}
            }
        }
    }

    /// Why a replica that answered must not serve reads, if it must not.
    fn unfit(&self, status: &butler_memory_actors::ReplicaStatus, lag: Duration) -> Option<String> {
        if !status.in_recovery {
            return Some("not a replica: the server is not in recovery".into());
        }
        if self
            .primary_id
            .is_some_and(|id| id != status.system_identifier)
        {
            return Some("a replica of another primary (its system identifier differs)".into());
        }
        if status.replayed.is_none() {
            return Some("has replayed nothing yet".into());
        }
        let max = self.replicas.max_lag();
        (lag > max).then(|| {
            format!(
                "{} ms behind the primary (database.max_replica_lag_ms = {})",
                lag.as_millis(),
                max.as_millis()
            )
        })
    }

    /// How long ago the primary had written WAL past `replayed`: none if it had not at the
    /// last look.
    fn lag(&self, replayed: i64) -> Duration {
        let now = Instant::now();
        self.history
            .iter()
            .find(|&&(_, position)| position > replayed)
            .map_or(Duration::ZERO, |&(at, _)| now.duration_since(at))
    }
}

/// A statement's answer within the look's timeout, its error as text.
async fn answer<T>(
    statement: impl Future<Output = butler_memory_actors::MemoryResult<T>>,
) -> Result<T, String> {
    match tokio::time::timeout(LOOK_TIMEOUT, statement).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(e.message),
        Err(_) => Err(format!("no answer within {LOOK_TIMEOUT:?}")),
    }
}
