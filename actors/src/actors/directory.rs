//! The directory of live actors that `/actors` shows: kind, key, status, queue depth,
//! messages handled, restarts and last error, kept in atomics the actors update themselves.
//!
//! ractor mailboxes are unbounded and do not report their length, so senders count what
//! they enqueue ([`ActorInfo::enqueued`]) and actors count what they take
//! ([`ActorInfo::begin`]); the difference is the queue depth.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

use chrono::{DateTime, Utc};
use dashmap::DashMap;
use serde::Serialize;

/// What an actor does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorKind {
    Supervisor,
    EmbedderPool,
    Indexer,
    /// A reader: one of the stateless retrieval actors (`retrieval` on the wire, as the
    /// `[retrieval]` section that sizes them).
    #[serde(rename = "retrieval")]
    Reader,
    Scheduler,
    Ingester,
    Shard,
}

impl ActorKind {
    /// The `kind` label of the actor metrics.
    pub fn label(self) -> &'static str {
        match self {
            ActorKind::Supervisor => "Supervisor",
            ActorKind::EmbedderPool => "EmbedderPool",
            ActorKind::Indexer => "Indexer",
            ActorKind::Reader => "Retrieval",
            ActorKind::Scheduler => "Scheduler",
            ActorKind::Ingester => "Ingester",
            ActorKind::Shard => "Shard",
        }
    }
}

/// Lifecycle status as shown to operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorStatus {
    Starting,
    Running,
    /// Failed more often than the restart policy allows; refusing work until it cools down.
    Failed,
    Stopping,
}

/// Live counters of one actor (kept across its restarts).
#[derive(Debug)]
pub struct ActorInfo {
    pub kind: ActorKind,
    pub key: String,
    started_at: Mutex<DateTime<Utc>>,
    status: Mutex<ActorStatus>,
    queue_depth: AtomicI64,
    handled: AtomicU64,
    restarts: AtomicU32,
    last_error: Mutex<Option<String>>,
    /// Rows this actor embedded (the indexer; with several instances, each counts its own).
    rows_embedded: AtomicU64,
}

/// A point-in-time copy of an [`ActorInfo`], as served by `/actors`.
#[derive(Debug, Clone, Serialize)]
pub struct ActorSnapshot {
    pub kind: ActorKind,
    pub key: String,
    pub status: ActorStatus,
    pub started_at: DateTime<Utc>,
    pub queue_depth: i64,
    pub messages_handled: u64,
    pub restarts: u32,
    pub last_error: Option<String>,
    /// Rows embedded since start: the indexer only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows_embedded: Option<u64>,
}

impl ActorInfo {
    fn new(kind: ActorKind, key: String) -> Self {
        ActorInfo {
            kind,
            key,
            started_at: Mutex::new(Utc::now()),
            status: Mutex::new(ActorStatus::Starting),
            queue_depth: AtomicI64::new(0),
            handled: AtomicU64::new(0),
            restarts: AtomicU32::new(0),
            last_error: Mutex::new(None),
            rows_embedded: AtomicU64::new(0),
        }
    }

    /// A sender put a message in the mailbox.
    pub fn enqueued(&self) {
        self.queue_depth.fetch_add(1, Ordering::Relaxed);
    }

    /// A sender's message never reached the mailbox (the actor was gone).
    pub fn not_enqueued(&self) {
        self.queue_depth.fetch_sub(1, Ordering::Relaxed);
    }

    /// The actor took a message that was counted by [`ActorInfo::enqueued`].
    pub fn begin(&self) {
        self.queue_depth.fetch_sub(1, Ordering::Relaxed);
        self.handled.fetch_add(1, Ordering::Relaxed);
    }

    /// The actor took a message its sender did not count (self-sent or a direct call).
    pub fn handled(&self) {
        self.handled.fetch_add(1, Ordering::Relaxed);
    }

    pub fn queue_depth(&self) -> i64 {
        self.queue_depth.load(Ordering::Relaxed).max(0)
    }

    pub fn set_status(&self, status: ActorStatus) {
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = status;
    }

    pub fn status(&self) -> ActorStatus {
        *self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The actor (re)started: messages queued in the old mailbox are gone with it.
    pub fn started(&self) {
        *self.started_at.lock().unwrap_or_else(|p| p.into_inner()) = Utc::now();
        self.queue_depth.store(0, Ordering::Relaxed);
        self.set_status(ActorStatus::Running);
    }

    pub fn failed(&self, error: String) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(error);
    }

    pub fn restarted(&self) {
        self.restarts.fetch_add(1, Ordering::Relaxed);
    }

    pub fn restarts(&self) -> u32 {
        self.restarts.load(Ordering::Relaxed)
    }

    /// The actor (the indexer) embedded `rows` rows.
    pub fn embedded(&self, rows: u64) {
        self.rows_embedded.fetch_add(rows, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> ActorSnapshot {
        ActorSnapshot {
            kind: self.kind,
            key: self.key.clone(),
            status: self.status(),
            started_at: *self.started_at.lock().unwrap_or_else(|p| p.into_inner()),
            queue_depth: self.queue_depth(),
            messages_handled: self.handled.load(Ordering::Relaxed),
            restarts: self.restarts(),
            last_error: self
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            rows_embedded: (self.kind == ActorKind::Indexer)
                .then(|| self.rows_embedded.load(Ordering::Relaxed)),
        }
    }
}

/// Every live actor's [`ActorInfo`].
#[derive(Debug, Default)]
pub struct ActorDirectory {
    entries: DashMap<(ActorKind, String), Arc<ActorInfo>>,
}

impl ActorDirectory {
    /// The entry for `(kind, key)`, created on first use and kept across restarts.
    pub fn entry(&self, kind: ActorKind, key: impl Into<String>) -> Arc<ActorInfo> {
        let key = key.into();
        self.entries
            .entry((kind, key.clone()))
            .or_insert_with(|| Arc::new(ActorInfo::new(kind, key)))
            .clone()
    }

    pub fn remove(&self, kind: ActorKind, key: &str) {
        self.entries.remove(&(kind, key.to_owned()));
    }

    /// Every entry, ordered by kind then key.
    pub fn snapshot(&self) -> Vec<ActorSnapshot> {
        let mut all: Vec<ActorSnapshot> =
            self.entries.iter().map(|e| e.value().snapshot()).collect();
        all.sort_by(|a, b| (a.kind, &a.key).cmp(&(b.kind, &b.key)));
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_depth_is_enqueued_minus_taken() {
        let dir = ActorDirectory::default();
        let info = dir.entry(ActorKind::Shard, "t/b");
        info.enqueued();
        info.enqueued();
        info.begin();
        assert_eq!(info.queue_depth(), 1);
        assert_eq!(info.snapshot().messages_handled, 1);
        assert!(Arc::ptr_eq(&info, &dir.entry(ActorKind::Shard, "t/b")));
    }
}
