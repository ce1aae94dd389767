//! Reads run apart from writes: the retrieval actors live on a tokio runtime of their own,
//! with their own threads and their own read connections.
//!
//! A read is a chain of short steps (candidate lists, session neighbours, assembly), each
//! woken by a database answer. On the runtime that also serves a write burst, every wake-up
//! would queue behind thousands of write requests a second (docs/decisions.md has what that
//! cost). Here a read's steps queue only behind other reads, and the runtime's threads,
//! asleep between reads, are the kernel's first choice when a read wakes them. Qdrant keeps
//! its searches on a runtime apart from its updates for the same reason.
//!
//! The connections are opened on this runtime too (`Store::with_reads_here`): a socket is
//! driven by the runtime that opened it, and one opened on the busy runtime would wake its
//! reader only when that runtime got round to it. Writes keep the shared write pool.

use tokio::runtime::{Builder, Handle, Runtime};

use crate::config::RetrievalConfig;
use crate::store::Store;

pub struct ReaderRuntime {
    /// Taken on drop: a runtime must be shut down without blocking, since the last owner
    /// may be dropped inside async code.
    runtime: Option<Runtime>,
    handle: Handle,
    store: Store,
}

impl std::fmt::Debug for ReaderRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReaderRuntime").finish_non_exhaustive()
    }
}

impl ReaderRuntime {
    /// Starts `retrieval.threads` reader threads, and a read pool of
    /// `retrieval.connections` on them beside `store`'s.
    pub fn start(retrieval: &RetrievalConfig, store: &Store) -> std::io::Result<ReaderRuntime> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(retrieval.threads.get())
            .thread_name("retrieval")
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        // The pool's upkeep tasks and its connections belong to the reader runtime.
        let store = {
            let _on_readers = handle.enter();
            store.with_reads_here("butler-memory retrieval", retrieval.connections.get())
        };
        Ok(ReaderRuntime {
            runtime: Some(runtime),
            handle,
            store,
        })
    }

    /// Where retrieval actors are spawned.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// The store retrieval reads through (its read pool is the readers').
    pub fn store(&self) -> &Store {
        &self.store
    }
}

impl Drop for ReaderRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
