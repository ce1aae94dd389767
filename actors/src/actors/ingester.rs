//! The ingester actor: finds files dropped in the orchestrators' ingest folders and takes
//! each through the pipeline (`ingest/pipeline.rs`), one at a time.
//!
//! It watches each folder (inotify, through `notify`): a change queues one `Scan` (at most
//! one waits in its mailbox however many events a copy makes). It also lists every folder
//! every `memory.ingest.rescan_secs`, as a safety net for what a watch misses (network file
//! systems, a full event queue, files dropped while the service was down). A file changed
//! less than `memory.ingest.settle_ms` ago is left for a scan that far ahead. While the
//! database is down, files wait in their folder. Supervised by the root supervisor: a
//! crash mid-file leaves the file in `ingest/` for the restarted ingester, which creates
//! nothing twice. `Flush` reads every waiting file now (tests use it instead of sleeping).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

use super::directory::ActorInfo;
use crate::error::MemoryResult;
use crate::ingest::{DropZone, Ingested, ingest};
use crate::services::Services;

pub struct Ingester;

pub struct IngesterArgs {
    pub services: Arc<Services>,
    pub info: Arc<ActorInfo>,
}

pub enum IngesterMsg {
    /// A folder changed, or the rescan is due: read what has settled.
    Scan,
    /// Read every waiting file now, settled or not; answers how many were processed or
    /// rejected.
    Flush {
        reply: RpcReplyPort<MemoryResult<usize>>,
    },
    /// A drill: crash (panic) right after the next file's write commits.
    #[cfg(feature = "testkit")]
    CrashAfterNextCommit,
}

pub struct IngesterState {
    services: Arc<Services>,
    info: Arc<ActorInfo>,
    zones: Vec<DropZone>,
    /// Kept alive for its watch; none when the folders could not be watched (the rescan
    /// still finds files).
    _watcher: Option<RecommendedWatcher>,
    /// Whether a `Scan` waits in the mailbox (set by whoever sends one).
    scan_pending: Arc<AtomicBool>,
    crash_after_commit: bool,
}

impl Actor for Ingester {
    type Msg = IngesterMsg;
    type State = IngesterState;
    type Arguments = IngesterArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: IngesterArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let memory = &args.services.config.memory;
        let on = memory.enabled && memory.ingest.enabled;
        let mut zones = Vec::new();
        if on {
            for orchestrator in &memory.orchestrators {
                match DropZone::open(&memory.root, orchestrator, &memory.ingest.shared_paths) {
                    Ok(zone) => zones.push(zone),
                    Err(e) => tracing::error!(
                        orchestrator,
                        root = %memory.root.display(),
                        error = %e,
                        "the orchestrator's ingest folder cannot be made; its files are not read"
                    ),
                }
            }
        }
        let scan_pending = Arc::new(AtomicBool::new(true));
        let watcher = if zones.is_empty() {
            None
        } else {
            watch(&zones, &myself, &scan_pending)
        };
        if !zones.is_empty() {
            let rescan = Duration::from_secs(u64::from(memory.ingest.rescan_secs.get()));
            let pending = scan_pending.clone();
            myself.send_interval(rescan, move || {
                pending.store(true, Ordering::Release);
                IngesterMsg::Scan
            });
            // Files dropped while the service was down are work to do now.
            myself.cast(IngesterMsg::Scan)?;
        }
        args.info.started();
        Ok(IngesterState {
            services: args.services,
            info: args.info,
            zones,
            _watcher: watcher,
            scan_pending,
            crash_after_commit: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.info.begin();
        match message {
            IngesterMsg::Scan => {
                state.scan_pending.store(false, Ordering::Release);
                let settle =
                    Duration::from_millis(u64::from(state.services.config.memory.ingest.settle_ms));
                let settling = state.scan(settle).await.1;
                if settling && !state.scan_pending.swap(true, Ordering::AcqRel) {
                    myself.send_after(settle, || IngesterMsg::Scan);
                }
            }
            IngesterMsg::Flush { reply } => {
                let (done, _) = state.scan(Duration::ZERO).await;
                let _ = reply.send(Ok(done));
            }
            #[cfg(feature = "testkit")]
            IngesterMsg::CrashAfterNextCommit => state.crash_after_commit = true,
        }
        Ok(())
    }
}

impl IngesterState {
    /// Takes every file of every folder changed at least `settle` ago through the
    /// pipeline. Answers how many were processed or rejected, and whether some are still
    /// settling. A folder whose file the store could not take now is left for later.
    async fn scan(&mut self, settle: Duration) -> (usize, bool) {
        let mut done = 0;
        let mut settling = false;
        if self.services.database.down().is_some() {
            return (0, false);
        }
        for zone in &self.zones {
            let listing = match zone.list(settle) {
                Ok(listing) => listing,
                Err(e) => {
                    tracing::warn!(folder = %zone.ingest.display(), error = %e, "ingest folder not listed");
                    continue;
                }
            };
            settling |= listing.settling;
            for entry in listing.ready {
                let crash = std::mem::take(&mut self.crash_after_commit);
                let ingested = ingest(&self.services, zone, &entry, crash).await;
                metrics::counter!("butler_memory_ingest_files_total", "outcome" => ingested.label())
                    .increment(1);
                match ingested {
                    Ingested::Settled(_) => done += 1,
                    Ingested::Later => break,
                }
            }
        }
        (done, settling)
    }
}

/// Watches each zone's `ingest/` folder (not its subfolders): an event queues a `Scan`
/// unless one waits already. A folder that cannot be watched is logged and left to the
/// rescan.
fn watch(
    zones: &[DropZone],
    myself: &ActorRef<IngesterMsg>,
    scan_pending: &Arc<AtomicBool>,
) -> Option<RecommendedWatcher> {
    let actor = myself.clone();
    let pending = scan_pending.clone();
    let handler = move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| !e.kind.is_access()) && !pending.swap(true, Ordering::AcqRel) {
            let _ = actor.cast(IngesterMsg::Scan);
        }
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(watcher) => watcher,
        Err(e) => {
            tracing::warn!(error = %e, "ingest folders not watched; they are listed every memory.ingest.rescan_secs");
            return None;
        }
    };
    for zone in zones {
        if let Err(e) = watcher.watch(&zone.ingest, RecursiveMode::NonRecursive) {
            tracing::warn!(folder = %zone.ingest.display(), error = %e, "ingest folder not watched; it is listed every memory.ingest.rescan_secs");
        }
    }
    Some(watcher)
}
