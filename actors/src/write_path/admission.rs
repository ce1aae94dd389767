//! Admission of writes: bounded, and refused at once when full. A write takes room for its
//! episodes from a global budget (`writes.max_in_flight`, episodes accepted but not yet
//! committed) and is refused if its shard's mailbox is already `writes.max_queued_per_shard`
//! deep. A refusal is `overloaded` with a retry hint and happens before anything is sent to
//! a shard, so nothing is half-written and nothing waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::WritesConfig;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// The write budget.
#[derive(Debug)]
pub struct Admission {
    in_flight: Arc<Semaphore>,
    max_in_flight: u32,
    max_queued_per_shard: i64,
    retry_after_ms: u64,
    /// Episodes admitted since start (the write rate, for work that yields to writes).
    admitted: AtomicU64,
}

/// Room for some episodes; given back when dropped (after the write is answered).
#[derive(Debug)]
pub struct Admitted {
    _permit: OwnedSemaphorePermit,
}

impl Admission {
    pub fn new(config: &WritesConfig) -> Self {
        Admission {
            in_flight: Arc::new(Semaphore::new(config.max_in_flight as usize)),
            max_in_flight: config.max_in_flight,
            max_queued_per_shard: i64::from(config.max_queued_per_shard.get()),
            retry_after_ms: config.overload_retry_after_ms,
            admitted: AtomicU64::new(0),
        }
    }

    /// Room for `episodes` episodes going to shards whose deepest mailbox holds
    /// `shard_queue_depth` messages, or `overloaded`.
    pub fn admit(&self, episodes: u32, shard_queue_depth: i64) -> MemoryResult<Admitted> {
        if shard_queue_depth >= self.max_queued_per_shard {
            metrics::counter!("butler_memory_writes_refused_total", "reason" => "shard_queue")
                .increment(u64::from(episodes));
            return Err(MemoryError::overloaded(
                ErrorCode::ShardBusy,
                format!("this butler's writes are queued {shard_queue_depth} deep; retry shortly"),
                self.retry_after_ms,
            ));
        }
        match self.in_flight.clone().try_acquire_many_owned(episodes) {
            Ok(permit) => {
                self.admitted
                    .fetch_add(u64::from(episodes), Ordering::Relaxed);
                metrics::gauge!("butler_memory_writes_in_flight").set(self.in_flight());
                Ok(Admitted { _permit: permit })
            }
            Err(_) => {
                metrics::counter!("butler_memory_writes_refused_total", "reason" => "in_flight")
                    .increment(u64::from(episodes));
                Err(MemoryError::overloaded(
                    ErrorCode::WritesInFlight,
                    format!(
                        "{} episodes are being written (the limit is {}); retry shortly",
                        self.in_flight() as u64,
                        self.max_in_flight
                    ),
                    self.retry_after_ms,
                ))
            }
        }
    }

    /// Episodes admitted since start.
    pub fn admitted_total(&self) -> u64 {
        self.admitted.load(Ordering::Relaxed)
    }

    /// Episodes accepted and not yet committed.
    pub fn in_flight(&self) -> f64 {
        f64::from(self.max_in_flight) - self.in_flight.available_permits() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::num::NonZeroU32;

    use crate::error::ErrorClass;

    fn config(max_in_flight: u32, max_queued_per_shard: u32) -> WritesConfig {
        WritesConfig {
            max_in_flight,
            max_queued_per_shard: NonZeroU32::new(max_queued_per_shard).unwrap(),
            overload_retry_after_ms: 150,
            ..crate::config::defaults().writes
        }
    }

    #[test]
    fn room_is_taken_and_given_back() {
        let a = Admission::new(&config(10, 100));
        let first = a.admit(6, 0).unwrap();
        let err = a.admit(5, 0).unwrap_err();
        assert_eq!(err.class(), ErrorClass::Overloaded);
        assert_eq!(err.retry_after_ms, Some(150));
        drop(first);
        assert!(a.admit(10, 0).is_ok());
    }

    #[test]
    fn a_deep_shard_queue_refuses_without_taking_room() {
        let a = Admission::new(&config(10, 3));
        assert_eq!(a.admit(1, 3).unwrap_err().code, ErrorCode::ShardBusy);
        assert_eq!(a.in_flight(), 0.0);
        assert!(a.admit(1, 2).is_ok());
    }
}
