//! Which database serves a read (issue 21, `database.read_urls`): a streaming replica in
//! rotation whose replay covers the tenant's last commit (`HeadsWatch` says where that is in
//! the primary's WAL), else — after waiting at most `replica_wait_ms` for one to catch up —
//! the primary. A read never gets an answer that misses a write committed before it began,
//! wherever it is served.
//!
//! The replicas' state is kept current by the replica watch (`replica_watch.rs`): in
//! rotation or out (down, lagging past `max_replica_lag_ms`, not a replica of this primary),
//! how far each has replayed, how far behind it is. Between two looks a replica's replay
//! position here is the last one seen: it only ever trails the real one, so a read sent to
//! a replica on its strength is never sent too early.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{ErrorClass, ErrorCode, MemoryError};
use crate::store::Store;

/// How often a read waiting for a replica asks it how far it has replayed.
const CATCH_UP_POLL: Duration = Duration::from_millis(2);

/// Where a read is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadTarget {
    Primary,
    /// The replica at this index of `database.read_urls`.
    Replica(usize),
}

/// The replicas and their state.
#[derive(Debug)]
pub struct ReplicaSet {
    replicas: Vec<Replica>,
    /// Spreads reads over the replicas that cover them.
    next: AtomicUsize,
    wait: Duration,
    max_lag: Duration,
}

#[derive(Debug)]
struct Replica {
    label: String,
    in_rotation: AtomicBool,
    /// How far it has replayed, in bytes of WAL from 0/0 (-1: not known).
    replayed: AtomicI64,
    lag_ms: AtomicU64,
    /// Why it is out of rotation (none while it is in).
    out_because: Mutex<Option<String>>,
}

/// One replica as `/readyz` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ReplicaHealth {
    pub replica: String,
    pub in_rotation: bool,
    pub lag_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ReplicaSet {
    /// The replicas named `labels`, each out of rotation until the watch has looked at it.
    pub fn new(labels: Vec<String>, wait: Duration, max_lag: Duration) -> ReplicaSet {
        let replicas = labels
            .into_iter()
            .map(|label| {
                metrics::gauge!("butler_memory_replica_in_rotation", "replica" => label.clone())
                    .set(0.0);
                Replica {
                    label,
                    in_rotation: AtomicBool::new(false),
                    replayed: AtomicI64::new(-1),
                    lag_ms: AtomicU64::new(0),
                    out_because: Mutex::new(Some("not looked at yet".into())),
                }
            })
            .collect();
        ReplicaSet {
            replicas,
            next: AtomicUsize::new(0),
            wait,
            max_lag,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }

    pub fn len(&self) -> usize {
        self.replicas.len()
    }

    /// The longest a replica may trail the primary and stay in rotation.
    pub fn max_lag(&self) -> Duration {
        self.max_lag
    }

    /// Where to serve a read of a tenant whose last commit is at `required` in the
    /// primary's WAL: a replica that has replayed that far, waiting up to `replica_wait_ms`
    /// for one, else the primary.
    pub async fn route(&self, store: &Store, required: i64) -> ReadTarget {
        if let Some(index) = self.covering(required) {
            return self.served_by(ReadTarget::Replica(index));
        }
        let Some(closest) = self.closest() else {
            return self.served_by(ReadTarget::Primary);
        };
        let deadline = Instant::now() + self.wait;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            // A replica slow to answer must not hold the read past its bound.
            match tokio::time::timeout(left, store.replica_status(closest)).await {
                Ok(Ok(status)) => self.replayed(closest, status.replayed.unwrap_or(-1)),
                Ok(Err(_)) | Err(_) => break,
            }
            if let Some(index) = self.covering(required) {
                metrics::counter!("butler_memory_replica_waits_total", "outcome" => "caught_up")
                    .increment(1);
                return self.served_by(ReadTarget::Replica(index));
            }
            tokio::time::sleep(CATCH_UP_POLL).await;
        }
        metrics::counter!("butler_memory_replica_waits_total", "outcome" => "timed_out")
            .increment(1);
        self.served_by(ReadTarget::Primary)
    }

    /// A replica in rotation that has replayed to `required`, taken in turn.
    fn covering(&self, required: i64) -> Option<usize> {
        let n = self.replicas.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n).map(|i| (start + i) % n).find(|&i| {
            let r = &self.replicas[i];
            r.in_rotation.load(Ordering::Acquire) && r.replayed.load(Ordering::Acquire) >= required
        })
    }

    /// The replica in rotation that has replayed furthest: the one to wait for.
    fn closest(&self) -> Option<usize> {
        self.replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| r.in_rotation.load(Ordering::Acquire))
            .max_by_key(|(_, r)| r.replayed.load(Ordering::Acquire))
            .map(|(i, _)| i)
    }

    fn served_by(&self, target: ReadTarget) -> ReadTarget {
        let label = match target {
            ReadTarget::Primary => "primary".to_owned(),
            ReadTarget::Replica(i) => self.replicas[i].label.clone(),
        };
        metrics::counter!("butler_memory_reads_by_target_total", "target" => label).increment(1);
        target
    }

    /// Replica `index` has replayed at least to `position`.
    pub fn replayed(&self, index: usize, position: i64) {
        self.replicas[index]
            .replayed
            .fetch_max(position, Ordering::AcqRel);
    }

    /// The watch's look at replica `index`: its replay position, how far it trails the
    /// primary, and why it must not serve reads (none: it may). Answers whether it came
    /// into rotation (`Some(true)`) or went out (`Some(false)`) with this look.
    pub fn looked(
        &self,
        index: usize,
        replayed: Option<i64>,
        lag: Duration,
        out_because: Option<String>,
    ) -> Option<bool> {
        let r = &self.replicas[index];
        if let Some(position) = replayed {
            r.replayed.fetch_max(position, Ordering::AcqRel);
        }
        let lag_ms = lag.as_millis() as u64;
        r.lag_ms.store(lag_ms, Ordering::Release);
        metrics::gauge!("butler_memory_replica_lag_seconds", "replica" => r.label.clone())
            .set(lag.as_secs_f64());
        let in_rotation = out_because.is_none();
        *r.out_because.lock().unwrap_or_else(|p| p.into_inner()) = out_because;
        let was = r.in_rotation.swap(in_rotation, Ordering::AcqRel);
        metrics::gauge!("butler_memory_replica_in_rotation", "replica" => r.label.clone())
            .set(if in_rotation { 1.0 } else { 0.0 });
        (was != in_rotation).then_some(in_rotation)
    }

    /// A read on replica `index` failed as if it were gone: out of rotation until the
    /// watch finds it answering again.
    pub fn failed(&self, index: usize, why: &str) {
        let r = &self.replicas[index];
        *r.out_because.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.to_owned());
        if r.in_rotation.swap(false, Ordering::AcqRel) {
            tracing::warn!(replica = %r.label, error = why, "read replica out of rotation");
            metrics::gauge!("butler_memory_replica_in_rotation", "replica" => r.label.clone())
                .set(0.0);
        }
    }

    /// Whether a read that failed with `error` on replica `index` should be run again on
    /// the primary: the replica did not answer (it is taken out of rotation until the watch
    /// finds it answering) or cancelled the read for a conflict with its recovery.
    pub fn retry_on_primary(&self, index: usize, error: &MemoryError) -> bool {
        match error.code {
            ErrorCode::SerializationFailure => true,
            _ if error.class() == ErrorClass::Unavailable => {
                self.failed(index, &error.message);
                true
            }
            _ => false,
        }
    }

    /// Replica `index`'s name.
    pub fn label(&self, index: usize) -> &str {
        &self.replicas[index].label
    }

    /// Every replica, for `/readyz`.
    pub fn health(&self) -> Vec<ReplicaHealth> {
        self.replicas
            .iter()
            .map(|r| ReplicaHealth {
                replica: r.label.clone(),
                in_rotation: r.in_rotation.load(Ordering::Acquire),
                lag_ms: r.lag_ms.load(Ordering::Acquire),
                error: r
                    .out_because
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(n: usize) -> ReplicaSet {
        let labels = (0..n).map(|i| format!("r{i}")).collect();
        ReplicaSet::new(labels, Duration::ZERO, Duration::from_secs(5))
    }

    #[test]
    fn a_replica_serves_only_in_rotation_and_only_what_it_has_replayed() {
        let s = set(2);
        assert_eq!(s.covering(0), None, "out of rotation until looked at");
        assert_eq!(s.looked(0, Some(100), Duration::ZERO, None), Some(true));
        assert_eq!(s.covering(100), Some(0));
        assert_eq!(s.covering(101), None);
        assert_eq!(s.closest(), Some(0));
        // A late answer never moves a replay position back.
        s.looked(0, Some(50), Duration::ZERO, None);
        assert_eq!(s.covering(100), Some(0));
        assert_eq!(
            s.looked(0, Some(200), Duration::from_secs(9), Some("lagging".into())),
            Some(false)
        );
        assert_eq!(s.covering(0), None);
        assert_eq!(s.health()[0].error.as_deref(), Some("lagging"));
        assert_eq!(s.health()[0].lag_ms, 9000);
    }

    #[test]
    fn reads_are_spread_over_the_replicas_that_cover_them() {
        let s = set(3);
        for i in 0..3 {
            s.looked(i, Some(10), Duration::ZERO, None);
        }
        s.replayed(2, 20);
        let picked: std::collections::HashSet<usize> =
            (0..6).filter_map(|_| s.covering(10)).collect();
        assert_eq!(picked.len(), 3);
        assert_eq!(s.covering(15), Some(2));
        assert_eq!(s.closest(), Some(2));
        s.failed(2, "connection refused");
        assert_eq!(s.covering(15), None);
        assert!(!s.health()[2].in_rotation);
    }
}
