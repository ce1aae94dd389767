//! What the engine's parts share: services, not actors. The store, the one clock, the
//! configuration, the write generations the read caches compare, and the write budget whose
//! count of admitted episodes tells background work that a burst is on. No mailbox lives
//! here: an actor gets the handles of the neighbours it talks to in its own `Args`.

use std::sync::Arc;

use ractor::OutputPort;

use crate::clock::SharedClock;
use crate::config::EngineConfig;
use crate::read_path::Generations;
use crate::store::Store;
use crate::write_path::Admission;

/// Shared by every part of the engine, for the life of the engine.
#[derive(Debug)]
pub(crate) struct Services {
    pub store: Store,
    pub clock: SharedClock,
    pub config: EngineConfig,
    /// Moves forward with every committed write of a tenant (and every embedding stored).
    pub generations: Generations,
    /// The write budget. Its count of admitted episodes is the write rate that background
    /// work (the indexer, consolidation triggers) yields to.
    pub admission: Admission,
}

impl Services {
    pub fn new(store: Store, clock: SharedClock, config: EngineConfig) -> Self {
        Services {
            admission: Admission::new(&config.writes),
            generations: Generations::default(),
            store,
            clock,
            config,
        }
    }
}

#[cfg(test)]
impl Services {
    /// Services for a unit test of one actor: the documented configuration, `clock`, and a
    /// store that is never reached (its pools connect lazily, to nothing), so a test that
    /// needs the database fails loudly instead of passing by accident.
    pub fn for_tests(clock: SharedClock) -> Self {
        let config = crate::config::defaults();
        let nowhere = sqlx::postgres::PgConnectOptions::new().socket("/nonexistent/butler-memory");
        let database = crate::store::DatabaseConfig {
            max_connections: 1,
            write_connections: 1,
            min_connections: 0,
            acquire_timeout_ms: std::num::NonZeroU64::MIN,
            statement_timeout_ms: 1000,
            startup_wait_secs: 0,
        };
        Services::new(Store::open(nowhere, &database), clock, config)
    }
}

/// "Rows that still need an embedding were committed": published by whoever commits such
/// rows (shards, consolidation), received by whoever embeds them (the indexer), without
/// either naming the other. Receivers must not rely on every notice arriving (a burst
/// coalesces them): only on one arriving after the last commit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RowsCommitted;

/// Where [`RowsCommitted`] is published.
pub(crate) type CommitNotices = Arc<OutputPort<RowsCommitted>>;
