//! A fail-open client of butler-memory, for the runtime that starts a butler's session
//! (memory_project_plan.md, "Integration with Butler Framework"): before the session it asks
//! for the memory context, after it records the episode, and memory never fails the user's
//! task.
//!
//! - [`MemoryClient::context`] answers within its deadline: the block, or an empty one
//!   saying why (timeout, error, circuit open).
//! - [`MemoryClient::record_episode`] gives every episode an idempotency key before it is
//!   sent, and keeps what it could not deliver in a bounded outbox on disk, replayed in
//!   order when the service answers again; the key makes a replay of something that did
//!   arrive a no-op, so nothing is lost or stored twice.
//! - A circuit breaker stops calling a service that keeps failing: while it is open, a call
//!   costs a lock and a clock read, not a timeout; after a cooldown one call tries again.
//!
//! ```no_run
//! # async fn run() -> Result<(), butler_memory_client::ClientError> {
//! use butler_memory_client::{ClientConfig, Episode, MemoryClient};
//!
//! let client = MemoryClient::new(ClientConfig::new(
//!     "http://127.0.0.1:8150/mcp",
//!     "key-of-the-health-butler",
//!     "/var/lib/my-butler/memory-outbox",
//! ))?;
//! let context = client.context("health", "Good morning!").await;
//! // ... run the session with context.text in the prompt ...
//! client
//!     .record_episode(Episode::new("health", "Talked about sleep; suggested a walk."))
//!     .await;
//! # Ok(())
//! # }
//! ```

mod breaker;
mod client;
mod outbox;
mod rpc;

pub use client::{ClientConfig, ClientError, Context, Episode, MemoryClient, Recorded};
pub use outbox::FlushReport;
