//! High-risk facts on their way into and out of the store (`vault.rs`). A fact is sealed in
//! the transaction that writes it, so no statement ever carries its plaintext to a column;
//! rows read for a caller are opened before they leave the store. Rows read to be written
//! into the audit stream stay sealed: events carry the ciphertext, never the plaintext.

use std::sync::Arc;

use base64::Engine as _;
use ring::aead::LessSafeKey;
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

use super::Store;
use crate::domain::fact::{Fact, NewFact};
use crate::domain::record::MemoryRecord;
use crate::domain::search::Candidate;
use crate::error::{MemoryError, MemoryResult};
use crate::vault::{Opened, Sealed, Vault};

/// `fact`'s content and metadata sealed, when the policy names its predicate or scope.
pub async fn seal_new(
    conn: &mut PgConnection,
    vault: &Vault,
    fact: &NewFact,
) -> MemoryResult<Option<Sealed>> {
    if !vault.seals(&fact.tenant_id, &fact.scope, &fact.predicate) {
        return Ok(None);
    }
    let opened = Opened {
        content: fact.content.clone(),
        metadata: fact.metadata.clone(),
    };
    Ok(Some(
        vault.seal(conn, &fact.tenant_id, fact.id, &opened).await?,
    ))
}

/// `fact`'s content and metadata, opened if sealed, inside the caller's transaction.
pub async fn opened_in(
    conn: &mut PgConnection,
    vault: &Vault,
    fact: &Fact,
) -> MemoryResult<Opened> {
    match (fact.key_version, &fact.sealed) {
        (Some(version), Some(bytes)) => {
            let key = vault.key(conn, &fact.tenant_id, version).await?;
            vault.open_with(&key, &fact.tenant_id, fact.id, version, bytes)
        }
        _ => Ok(Opened {
            content: fact.content.clone(),
            metadata: fact.metadata.clone(),
        }),
    }
}

impl Store {
    /// What fact `id` of `tenant` sealed under data key `version`: the key cached, or read
    /// on a connection of its own.
    async fn open_sealed(
        &self,
        tenant_id: &str,
        id: Uuid,
        version: i32,
        bytes: &[u8],
    ) -> MemoryResult<Opened> {
        let key: Arc<LessSafeKey> = match self.vault().cached(tenant_id, version) {
            Some(key) => key,
            None => {
                let mut conn = self.pool().acquire().await?;
                self.vault().key(&mut conn, tenant_id, version).await?
            }
        };
        self.vault().open_with(&key, tenant_id, id, version, bytes)
    }

    /// `fact` as a caller sees it: opened when sealed (its ciphertext dropped). Failing to
    /// open it is an error, never its placeholder passed off as content.
    pub async fn open_fact(&self, fact: &mut Fact) -> MemoryResult<()> {
        let (Some(version), Some(bytes)) = (fact.key_version, fact.sealed.take()) else {
            return Ok(());
        };
        let opened = self
            .open_sealed(&fact.tenant_id, fact.id, version, &bytes)
            .await?;
        fact.content = opened.content;
        fact.metadata = opened.metadata;
        Ok(())
    }

    /// Every fact of `facts` opened.
    pub async fn open_facts(&self, facts: &mut [Fact]) -> MemoryResult<()> {
        for fact in facts {
            self.open_fact(fact).await?;
        }
        Ok(())
    }

    /// `record` opened when it is a sealed fact.
    pub async fn open_record(&self, record: &mut MemoryRecord) -> MemoryResult<()> {
        match record {
            MemoryRecord::Fact(fact) => self.open_fact(fact).await,
            MemoryRecord::Episode(_) | MemoryRecord::Rule(_) => Ok(()),
        }
    }

    /// A fact row of an export (`to_jsonb`, `sealed` in base64) opened in place: a bundle
    /// holds what its owner may read, sealed again on import by the importing database's
    /// policy and keys.
    pub async fn open_row(&self, row: &mut Value) -> MemoryResult<()> {
        let Some(fields) = row.as_object_mut() else {
            return Ok(());
        };
        let Some(sealed) = fields.remove("sealed") else {
            return Ok(());
        };
        let version = fields.remove("key_version").and_then(|v| v.as_i64());
        let tenant_id = fields.get("tenant_id").and_then(Value::as_str);
        let id = fields
            .get("id")
            .and_then(Value::as_str)
            .and_then(|id| id.parse::<Uuid>().ok());
        let bytes = sealed
            .as_str()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
        let (Some(version), Some(tenant_id), Some(id), Some(bytes)) =
            (version, tenant_id, id, bytes)
        else {
            return Err(MemoryError::internal(
                "a sealed fact row lacks its key version or id",
            ));
        };
        let version = i32::try_from(version)
            .map_err(|_| MemoryError::internal("a key version out of range"))?;
        let opened = self.open_sealed(tenant_id, id, version, &bytes).await?;
        fields.insert("content".into(), Value::String(opened.content));
        fields.insert("metadata".into(), opened.metadata);
        Ok(())
    }

    /// Every sealed candidate opened, before ranking reads its content.
    pub async fn open_candidates(&self, candidates: &mut [Candidate]) -> MemoryResult<()> {
        for candidate in candidates {
            let (Some(tenant_id), Some(version), Some(bytes)) = (
                candidate.tenant_id.as_deref(),
                candidate.key_version,
                candidate.sealed.take(),
            ) else {
                continue;
            };
            let opened = self
                .open_sealed(tenant_id, candidate.id, version, &bytes)
                .await?;
            candidate.content = opened.content;
            candidate.metadata = opened.metadata;
        }
        Ok(())
    }
}
