//! Export and import of a tenant's memories by its admin (`domain/bundle.rs`): the
//! tenant comes from the key, as everywhere. An import is visible to reads at once (the
//! tenant's cached answers are dropped) and the indexer embeds what came without usable
//! embeddings on its next look.

use crate::domain::bundle::{EmbeddingModel, ImportReport, parse_bundle};
use crate::domain::caller::Caller;
use crate::domain::text::check_name;
use crate::error::MemoryResult;
use crate::store::bundle::Exporter;

use super::Engine;

impl Engine {
    /// An export of the caller's tenant (only `butler`'s records when given), to read page
    /// by page.
    pub async fn exporter(
        &self,
        caller: &Caller,
        butler: Option<&str>,
        events: bool,
        embeddings: bool,
    ) -> MemoryResult<Exporter> {
        self.services.database.check()?;
        caller.require_admin()?;
        if let Some(butler) = butler {
            check_name("butler", butler)?;
        }
        let now = self.services.clock.now();
        self.services
            .store
            .exporter(&caller.tenant_id, butler, events, embeddings, now)
            .await
    }

    /// Imports a bundle (its JSON Lines) into the caller's tenant.
    pub async fn import_bundle(&self, caller: &Caller, bundle: &str) -> MemoryResult<ImportReport> {
        self.services.database.check()?;
        caller.require_admin()?;
        let (header, rows) = parse_bundle(bundle.lines())?;
        let embedder = &self.services.config.embedder;
        let running = EmbeddingModel {
            model: embedder.model_name.clone(),
            model_sha256: embedder.model_sha256.clone(),
        };
        let now = self.services.clock.now();
        let report = self
            .services
            .store
            .import_bundle(
                &caller.tenant_id,
                &header,
                rows,
                &running,
                now,
                &caller.actor(),
            )
            .await?;
        self.services.generations.bump(&caller.tenant_id);
        Ok(report)
    }
}
