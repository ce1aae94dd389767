//! The bulletin of one message (orchestrator_memory_subsystem.md, "Memory Bulletin"): recall
//! for the message, the orchestrator's standing goals, todos, decisions and preferences, and
//! its unresolved contradictions, built by `domain/orchestrator/bulletin.rs` within
//! `memory.bulletin_max_tokens` and written as a snapshot under the orchestrator's
//! `memory/bulletins/` (`latest.md`, and `latest.json` with its citations).
//!
//! A bulletin never blocks the orchestrator: when it cannot be made (the store unreachable
//! or broken, the orchestrator memory off) the answer is the last successful one, read back
//! from its snapshot, or an empty one — with a warning, in the answer and in the log. A
//! caller's own mistake (another orchestrator's id, an empty message) is still an error.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::Engine;
use crate::domain::caller::Caller;
use crate::domain::orchestrator::bulletin::{Bulletin, BulletinAnswer, BulletinInput, build};
use crate::domain::text::check_content;
use crate::error::{ErrorCode, MemoryResult};

/// Standing memories of each type a bulletin considers.
const STANDING_PER_TYPE: i64 = 20;
/// Unresolved contradictions a bulletin considers.
const CONFLICTS: i64 = 10;

/// What a snapshot holds.
#[derive(Serialize, Deserialize)]
struct Snapshot {
    generated_at: DateTime<Utc>,
    bulletin: serde_json::Value,
}

impl Engine {
    /// The bulletin for `message` (see the module comment for its fallbacks).
    pub async fn orchestrator_bulletin(
        &self,
        caller: &Caller,
        orchestrator_id: Option<&str>,
        message: &str,
    ) -> MemoryResult<BulletinAnswer> {
        let config = &self.services.config;
        let message = check_content("message", message, &config.limits)?;
        let orchestrator = match self.orchestrator_of(caller, orchestrator_id, false) {
            Ok(o) => o.to_owned(),
            Err(e) if e.code == ErrorCode::OrchestratorMemoryDisabled => {
                return Ok(BulletinAnswer {
                    bulletin: Bulletin::empty(),
                    generated_at: None,
                    warning: Some(e.message),
                });
            }
            Err(e) => return Err(e),
        };
        match self.make_bulletin(&orchestrator, &message).await {
            Ok(bulletin) => {
                let now = self.services.clock.now();
                // An auditor's reads leave no trace, on disk neither.
                if !caller.reads_leave_no_trace() {
                    self.save_snapshot(&orchestrator, &bulletin, now).await;
                }
                Ok(BulletinAnswer {
                    bulletin,
                    generated_at: Some(now),
                    warning: None,
                })
            }
            Err(e) => {
                tracing::warn!(orchestrator = %orchestrator, error = %e, "bulletin not made; answering the last successful one");
                let (bulletin, generated_at, instead) = match self
                    .last_snapshot(&orchestrator)
                    .await
                {
                    Some((bulletin, at)) => (bulletin, Some(at), "the last successful bulletin"),
                    None => (Bulletin::empty(), None, "an empty bulletin"),
                };
                Ok(BulletinAnswer {
                    bulletin,
                    generated_at,
                    warning: Some(format!("the bulletin could not be made ({e}): {instead}")),
                })
            }
        }
    }

    async fn make_bulletin(&self, orchestrator: &str, message: &str) -> MemoryResult<Bulletin> {
        let config = &self.services.config;
        let store = &self.services.store;
        self.services.database.check()?;
        let top_n = config.memory.retrieval.top_n.get() as usize;
        let (recalled, standing, conflicts) = futures::try_join!(
            self.recalled(orchestrator, message, top_n),
            store.orchestrator_standing(orchestrator, STANDING_PER_TYPE),
            store.orchestrator_conflicts(orchestrator, CONFLICTS),
        )?;
        let input = BulletinInput {
            recalled,
            standing,
            conflicts,
        };
        Ok(build(
            &input,
            config.memory.bulletin_max_tokens.get() as usize,
            self.tokens.as_ref(),
        ))
    }

    /// `<memory.root>/<orchestrator>/memory/bulletins` (the orchestrator's id is a checked
    /// name: one path component).
    fn bulletins_dir(&self, orchestrator: &str) -> PathBuf {
        self.services
            .config
            .memory
            .root
            .join(orchestrator)
            .join("memory")
            .join("bulletins")
    }

    /// Writes the snapshot; a failure is logged, never answered (the bulletin was made).
    async fn save_snapshot(&self, orchestrator: &str, bulletin: &Bulletin, at: DateTime<Utc>) {
        let dir = self.bulletins_dir(orchestrator);
        let snapshot = Snapshot {
            generated_at: at,
            bulletin: serde_json::to_value(bulletin).unwrap_or_default(),
        };
        let written = async {
            tokio::fs::create_dir_all(&dir).await?;
            let json = serde_json::to_vec_pretty(&snapshot).map_err(std::io::Error::other)?;
            // Written aside, then renamed: a reader never sees half a snapshot.
            for (name, bytes) in [
                ("latest.md", bulletin.text.as_bytes()),
                ("latest.json", &json),
            ] {
                let aside = dir.join(format!(".{name}.tmp"));
                tokio::fs::write(&aside, bytes).await?;
                tokio::fs::rename(&aside, dir.join(name)).await?;
            }
            Ok::<_, std::io::Error>(())
        };
        if let Err(e) = written.await {
            tracing::warn!(orchestrator, dir = %dir.display(), error = %e, "bulletin snapshot not written");
        }
    }

    /// The last snapshot written, if it can be read.
    pub(super) async fn last_snapshot(
        &self,
        orchestrator: &str,
    ) -> Option<(Bulletin, DateTime<Utc>)> {
        let bytes = tokio::fs::read(self.bulletins_dir(orchestrator).join("latest.json"))
            .await
            .ok()?;
        let snapshot: Snapshot = serde_json::from_slice(&bytes).ok()?;
        let bulletin = serde_json::from_value(snapshot.bulletin).ok()?;
        Some((bulletin, snapshot.generated_at))
    }
}
