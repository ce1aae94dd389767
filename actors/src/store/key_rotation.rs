//! `butler-memory rotate-keys`: re-wraps every data key under the current master key (no
//! fact changes), then gives each tenant a new data key and re-seals its facts under it, a
//! batch per transaction, beside a running service. Earlier data key versions are kept: the
//! audit stream's events of sealed facts stay sealed under the version of their time.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::Store;
use super::data_keys;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// Facts re-sealed per transaction: short row locks beside a running service.
const BATCH: i64 = 200;

/// What a rotation did.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct RotationReport {
    /// The current master key's id.
    pub master_key_id: String,
    /// Data keys that were wrapped by an earlier master key and now are by the current one.
    pub rewrapped: u64,
    /// Tenants given a new data key version.
    pub tenants: u64,
    /// Facts re-sealed under their tenant's new data key.
    pub resealed: u64,
}

impl Store {
    /// Rotates the keys: re-wraps, then (unless `rewrap_only`) new data keys and re-sealing.
    pub async fn rotate_keys(
        &self,
        rewrap_only: bool,
        now: DateTime<Utc>,
    ) -> MemoryResult<RotationReport> {
        let vault = self.vault();
        let master = vault.master_key_id().ok_or_else(|| {
            MemoryError::new(
                ErrorCode::SealedUnreadable,
                "no master key is configured (encryption.master_key)",
            )
        })?;
        let mut report = RotationReport {
            master_key_id: master.to_owned(),
            ..RotationReport::default()
        };
        let mut conn = self.pool().acquire().await?;
        let keys = data_keys::all(&mut conn).await?;
        for key in keys.iter().filter(|k| k.master_key_id != master) {
            data_keys::rewrap(&mut conn, &vault.rewrapped(key)?, now).await?;
            report.rewrapped += 1;
        }
        drop(conn);
        if rewrap_only {
            return Ok(report);
        }
        let mut tenants: Vec<&str> = keys.iter().map(|k| k.tenant_id.as_str()).collect();
        tenants.dedup();
        for tenant in tenants {
            report.resealed += self.rotate_tenant(tenant).await?;
            report.tenants += 1;
        }
        Ok(report)
    }

    /// A new data key for `tenant`, then every fact an older one seals re-sealed under it.
    async fn rotate_tenant(&self, tenant_id: &str) -> MemoryResult<u64> {
        let vault = self.vault();
        let mut tx = self.begin().await?;
        let newest = data_keys::newest(&mut tx, tenant_id)
            .await?
            .map_or(0, |k| k.version);
        let version = newest + 1;
        if !data_keys::insert(&mut tx, &vault.new_version(tenant_id, version)?).await? {
            return Err(MemoryError::new(
                ErrorCode::UniqueViolation,
                format!("tenant `{tenant_id}`'s data keys are being rotated by another process"),
            ));
        }
        tx.commit().await?;
        let mut resealed = 0;
        loop {
            let mut tx = self.begin().await?;
            let rows = data_keys::sealed_before(&mut tx, tenant_id, version, BATCH).await?;
            if rows.is_empty() {
                drop(tx);
                let mut conn = self.pool().acquire().await?;
                // Rows another transaction held were skipped: wait for them, then take them.
                if data_keys::count_sealed_before(&mut conn, tenant_id, version).await? == 0 {
                    return Ok(resealed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            let new_key = vault.key(&mut tx, tenant_id, version).await?;
            for row in &rows {
                let old_key = vault.key(&mut tx, tenant_id, row.key_version).await?;
                let opened =
                    vault.open_with(&old_key, tenant_id, row.id, row.key_version, &row.sealed)?;
                let sealed = vault.seal_with(&new_key, tenant_id, row.id, version, &opened);
                data_keys::reseal(&mut tx, tenant_id, row.id, version, &sealed).await?;
            }
            tx.commit().await?;
            resealed += rows.len() as u64;
        }
    }
}
