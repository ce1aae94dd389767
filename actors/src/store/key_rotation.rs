//! `butler-memory rotate-keys`: re-wraps every data key under the current master key (no
//! fact changes), then gives each tenant a new data key and re-seals its facts under it, a
//! batch per transaction, beside a running service. Earlier data key versions are kept: the
//! audit stream's events of sealed facts stay sealed under the version of their time. Last,
//! facts stored in the clear before the policy named them are sealed in place.

use std::time::Duration;

use base64::Engine as _;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use sqlx::PgConnection;
use uuid::Uuid;

use super::columns::fact_columns;
use super::{Store, data_keys, events, vocabulary};
use crate::domain::author::Author;
use crate::domain::event::{EventType, NewEvent};
use crate::domain::fact::Fact;
use crate::domain::record::MemoryRecord;
use crate::domain::request_context::Lineage;
use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::vault::{Opened, SEALED_CONTENT, Sealed};

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
    /// Facts stored in the clear before the policy named them, now sealed in place.
    pub sealed_in_place: u64,
}

impl Store {
    /// Rotates the keys: re-wraps, then (unless `rewrap_only`) new data keys, re-sealing, and
    /// sealing in place what the policy names and was stored in the clear.
    pub async fn rotate_keys(
        &self,
        rewrap_only: bool,
        actor: &str,
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
        // Last, so that what it seals is sealed under the newest data keys.
        report.sealed_in_place = self.seal_in_place(actor, now).await?;
        if report.sealed_in_place > 0 {
            // Their plaintext lingers in dead row versions until a vacuum.
            self.vacuum_after_purge().await;
        }
        Ok(report)
    }

    /// Seals, in place, every live or past fact stored in the clear that the policy now
    /// names: content and metadata sealed, embedding dropped, a `fact_sealed` event each.
    /// The fact's earlier events keep the text they were written with (purge erases those).
    async fn seal_in_place(&self, actor: &str, now: DateTime<Utc>) -> MemoryResult<u64> {
        let vault = self.vault();
        let (predicates, scopes) = vault.policy().like_patterns();
        if predicates.is_empty() && scopes.is_empty() {
            return Ok(0);
        }
        let author = Author::new(
            actor,
            Lineage {
                request_id: format!("rotate-keys-{}", Uuid::now_v7()),
                subrequest_id: None,
                segment_id: None,
                generated: true,
            },
        );
        let mut sealed = 0;
        // Every tenant's facts, in key order: (tenant, id) after the last batch's last.
        let mut after: Option<(String, Uuid)> = None;
        loop {
            let mut tx = self.begin().await?;
            let facts: Vec<Fact> = sqlx::query_as(concat!(
                "SELECT ",
                fact_columns!(),
                " FROM facts
                 WHERE key_version IS NULL
                   AND (predicate LIKE ANY ($1) OR scope LIKE ANY ($2))
                   AND ($3::text IS NULL OR (tenant_id, id) > ($3, $5))
                 ORDER BY tenant_id, id LIMIT $4 FOR UPDATE"
            ))
            .bind(&predicates)
            .bind(&scopes)
            .bind(after.as_ref().map(|(t, _)| t))
            .bind(BATCH)
            .bind(after.as_ref().map(|(_, id)| *id))
            .fetch_all(&mut *tx)
            .await?;
            let Some(last) = facts.last() else {
                return Ok(sealed);
            };
            after = Some((last.tenant_id.clone(), last.id));
            for fact in facts
                .iter()
                .filter(|f| vault.seals(&f.tenant_id, &f.scope, &f.predicate))
            {
                let opened = Opened {
                    content: fact.content.clone(),
                    metadata: fact.metadata.clone(),
                };
                let new = vault
                    .seal(&mut tx, &fact.tenant_id, fact.id, &opened)
                    .await?;
                seal_row_in_place(&mut tx, &fact.tenant_id, fact.id, &new).await?;
                let payload = json!({
                    "after": {"content": SEALED_CONTENT, "metadata": {}, "embedding_model": null,
                              "key_version": new.key_version,
                              "sealed": base64::engine::general_purpose::STANDARD.encode(&new.bytes)},
                    "reason": "the encryption policy names it",
                });
                let record = MemoryRecord::Fact(fact.clone());
                let event = NewEvent::about(
                    &fact.tenant_id,
                    EventType::FactSealed,
                    &record,
                    fact.id,
                    &author,
                    payload,
                );
                events::append(&mut tx, &event, now).await?;
                sealed += 1;
            }
            tx.commit().await?;
        }
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

/// Seals a fact stored in the clear, in place: placeholder content, no metadata, no
/// embedding (a vector of the text would leak it), and none of the words of the tenant's
/// vocabulary its text alone held (its subject and predicate stay found by full text, and
/// stay words).
async fn seal_row_in_place(
    conn: &mut PgConnection,
    tenant_id: &str,
    id: Uuid,
    sealed: &Sealed,
) -> MemoryResult<()> {
    let lexemes = vocabulary::lexemes_of(conn, tenant_id, &[], &[id], &[]).await?;
    sqlx::query(
        "UPDATE facts SET content = $2, metadata = '{}', embedding = NULL,
                          embedding_version_id = NULL, key_version = $3, sealed = $4
         WHERE tenant_id = $5 AND id = $1",
    )
    .bind(id)
    .bind(SEALED_CONTENT)
    .bind(sealed.key_version)
    .bind(&sealed.bytes)
    .bind(tenant_id)
    .execute(&mut *conn)
    .await?;
    vocabulary::forget_words(conn, tenant_id, Some(&lexemes)).await?;
    Ok(())
}
