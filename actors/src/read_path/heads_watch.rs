//! One look at the shard heads for many reads (issue 21): before a read consults a cache,
//! it must know the tenant's heads as the database has them *after the read began*
//! (`Generations::observe_heads`). Reads that arrive while a look is under way wait for the
//! next one, which a single task sends as soon as the current one answers, for every tenant
//! waiting at once: as group commit shares a commit among writes, this shares a probe among
//! reads, so under load an instance pays one statement per round trip, not one per read.
//! Every read is answered by a statement sent after it arrived, so none misses a write
//! committed before it began.
//!
//! A look also answers where the tenant's last commit is in the primary's WAL, for a read
//! that may go to a replica (`replica_set.rs`): the position of the first look that saw the
//! tenant's heads as they are now. Every write those heads count committed before that
//! look, so a replica replayed that far has them all; a busy primary's other tenants do not
//! make this tenant's reads wait for their WAL.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use super::generations::Generations;
use crate::error::{MemoryError, MemoryResult};
use crate::store::Store;

type Waiters = HashMap<String, Vec<oneshot::Sender<MemoryResult<i64>>>>;

/// The reads waiting for the next look, whether a task is sending looks, and each
/// tenant's heads with the WAL position of the first look that saw them.
#[derive(Debug, Default)]
struct Pending {
    waiting: Waiters,
    looking: bool,
    covering: HashMap<String, (i64, i64)>,
}

#[derive(Debug)]
pub struct HeadsWatch {
    store: Store,
    generations: Arc<Generations>,
    pending: Arc<Mutex<Pending>>,
}

impl HeadsWatch {
    pub fn new(store: Store, generations: Arc<Generations>) -> Self {
        HeadsWatch {
            store,
            generations,
            pending: Arc::default(),
        }
    }

    /// Returns once the tenant's heads, read after this call began, have been observed:
    /// with the primary's WAL position that covers every write of the tenant committed
    /// before this call.
    pub async fn observe(&self, tenant_id: &str) -> MemoryResult<i64> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut pending = lock(&self.pending);
            pending
                .waiting
                .entry(tenant_id.to_owned())
                .or_default()
                .push(tx);
            !std::mem::replace(&mut pending.looking, true)
        };
        if start {
            tokio::spawn(look(
                self.pending.clone(),
                self.store.clone(),
                self.generations.clone(),
            ));
        }
        rx.await.unwrap_or_else(|_| {
            Err(MemoryError::internal(
                "the look at the shard heads ended without an answer",
            ))
        })
    }
}

/// Sends looks until no read waits: each for every tenant waiting when it is sent.
async fn look(pending: Arc<Mutex<Pending>>, store: Store, generations: Arc<Generations>) {
    let _unwinding = Unwinding(pending.clone());
    loop {
        let mut waiting = {
            let mut pending = lock(&pending);
            if pending.waiting.is_empty() {
                pending.looking = false;
                return;
            }
            std::mem::take(&mut pending.waiting)
        };
        let tenants: Vec<String> = waiting.keys().cloned().collect();
        match store.tenants_heads(&tenants).await {
            Ok(look) => {
                let mut pending = lock(&pending);
                for (tenant, heads) in look.heads {
                    generations.observe_heads(&tenant, heads);
                    let writes = heads.writes;
                    let covering = pending
                        .covering
                        .entry(tenant.clone())
                        .or_insert((writes, look.wal_position));
                    if covering.0 != writes {
                        *covering = (writes, look.wal_position);
                    }
                    let position = covering.1;
                    for tx in waiting
                        .get_mut(&tenant)
                        .map(std::mem::take)
                        .unwrap_or_default()
                    {
                        let _ = tx.send(Ok(position));
                    }
                }
            }
            Err(e) => {
                for (_, senders) in waiting {
                    for tx in senders {
                        let _ = tx.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}

/// Should a look panic, the reads waiting are answered (their senders dropped: an error)
/// and the next read starts another task, rather than every later read waiting forever.
struct Unwinding(Arc<Mutex<Pending>>);

impl Drop for Unwinding {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut pending = lock(&self.0);
            pending.waiting.clear();
            pending.looking = false;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
