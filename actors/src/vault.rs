//! Encrypted high-risk facts (memory_butler.md §10, docs/privacy.md): what is sealed, and
//! the keys that seal and open it.
//!
//! Envelope encryption: each tenant has data keys (versions 1, 2, ... — a new one per
//! rotation), stored in `data_keys` wrapped by the master key, which lives only in the
//! configuration. A sealed fact's content and metadata are one AES-256-GCM message under its
//! tenant's newest data key, bound to the tenant, the fact's id and the key version (a
//! ciphertext copied to another row does not open). Unwrapped data keys are cached for the
//! life of the process; rotating the master key re-wraps the data keys and touches no fact.
//!
//! Failing closed: a sealed fact whose key cannot be unwrapped (missing or wrong master key)
//! or whose ciphertext does not authenticate is an `integrity` error
//! (`sealed_unreadable`), never its placeholder or ciphertext passed off as content.

mod master_key;
mod policy;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use ring::aead::{AES_256_GCM, LessSafeKey, UnboundKey};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

pub use master_key::{MIN_SECRET_CHARS, MasterKey};
pub use policy::{SealPolicy, SealedNames};

use crate::error::{ErrorCode, MemoryError, MemoryResult};
use crate::store::data_keys::{self, WrappedKey};

/// What a sealed fact stores as its content, and as its metadata: `{}`.
pub const SEALED_CONTENT: &str = "[encrypted]";

/// A fact's content and metadata, sealed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    pub key_version: i32,
    pub bytes: Vec<u8>,
}

/// A sealed fact's content and metadata, opened.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Opened {
    pub content: String,
    pub metadata: Value,
}

/// The master keys, the policy, and the data keys unwrapped so far.
pub struct Vault {
    policy: SealPolicy,
    /// The key that wraps new data keys, then earlier ones that only unwrap.
    masters: Vec<MasterKey>,
    keys: RwLock<HashMap<(String, i32), Arc<LessSafeKey>>>,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Vault")
            .field("policy", &self.policy)
            .field("masters", &self.masters)
            .finish_non_exhaustive()
    }
}

impl Vault {
    /// Seals nothing, opens nothing: what the tools that read no facts use.
    pub fn none() -> Vault {
        Vault::new(SealPolicy::default(), Vec::new())
    }

    /// `masters`: the current master key first.
    pub fn new(policy: SealPolicy, masters: Vec<MasterKey>) -> Vault {
        Vault {
            policy,
            masters,
            keys: RwLock::default(),
        }
    }

    /// The vault of the configured policy and master keys (current first), or what is wrong.
    pub fn from_config(
        names: SealedNames,
        tenants: BTreeMap<String, SealedNames>,
        secrets: &[&str],
    ) -> Result<Vault, String> {
        let policy = SealPolicy::new(names, tenants)?;
        let masters = secrets
            .iter()
            .filter(|s| !s.trim().is_empty())
            .map(|s| MasterKey::derive(s))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|why| format!("encryption: {why}"))?;
        if !policy.is_empty() && masters.is_empty() {
            return Err(
                "encryption: predicates or scopes are named but no master key is set".into(),
            );
        }
        Ok(Vault::new(policy, masters))
    }

    /// Whether a fact of `tenant` with `scope` and `predicate` is stored sealed.
    pub fn seals(&self, tenant_id: &str, scope: &str, predicate: &str) -> bool {
        self.policy.seals(tenant_id, scope, predicate)
    }

    /// The policy of what is sealed.
    pub fn policy(&self) -> &SealPolicy {
        &self.policy
    }

    /// The id of the master key that wraps new data keys.
    pub fn master_key_id(&self) -> Option<&str> {
        self.masters.first().map(MasterKey::id)
    }

    /// `opened` sealed for fact `id` under the tenant's newest data key (made, as version 1,
    /// when the tenant has none), in the caller's transaction.
    pub async fn seal(
        &self,
        conn: &mut PgConnection,
        tenant_id: &str,
        id: Uuid,
        opened: &Opened,
    ) -> MemoryResult<Sealed> {
        let (version, key) = match data_keys::newest(conn, tenant_id).await? {
            Some(stored) => (stored.version, self.unwrapped(&stored)?),
            None => self.first_key(conn, tenant_id).await?,
        };
        Ok(Sealed {
            key_version: version,
            bytes: self.seal_with(&key, tenant_id, id, version, opened),
        })
    }

    /// Makes the tenant's first data key; another writer may have made it meanwhile.
    async fn first_key(
        &self,
        conn: &mut PgConnection,
        tenant_id: &str,
    ) -> MemoryResult<(i32, Arc<LessSafeKey>)> {
        let stored = self.new_version(tenant_id, 1)?;
        data_keys::insert(conn, &stored).await?;
        let stored = data_keys::version(conn, tenant_id, 1)
            .await?
            .ok_or_else(|| MemoryError::internal("a data key just stored is not there"))?;
        Ok((1, self.unwrapped(&stored)?))
    }

    /// A new random data key of `version`, wrapped by the current master key.
    pub fn new_version(&self, tenant_id: &str, version: i32) -> MemoryResult<WrappedKey> {
        let master = self.masters.first().ok_or_else(|| {
            MemoryError::new(
                ErrorCode::SealedUnreadable,
                "no master key is configured (encryption.master_key)",
            )
        })?;
        let raw = master_key::random_key();
        Ok(WrappedKey {
            tenant_id: tenant_id.to_owned(),
            version,
            wrapped: master.wrap(tenant_id, version, &raw),
            master_key_id: master.id().to_owned(),
        })
    }

    /// `stored` wrapped again by the current master key (the data key is the same).
    pub fn rewrapped(&self, stored: &WrappedKey) -> MemoryResult<WrappedKey> {
        let raw = self.raw_key(stored)?;
        let master = &self.masters[0];
        Ok(WrappedKey {
            wrapped: master.wrap(&stored.tenant_id, stored.version, &raw),
            master_key_id: master.id().to_owned(),
            ..stored.clone()
        })
    }

    /// The unwrapped key of `(tenant, version)` when it is cached.
    pub fn cached(&self, tenant_id: &str, version: i32) -> Option<Arc<LessSafeKey>> {
        self.keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(tenant_id.to_owned(), version))
            .cloned()
    }

    /// The data key `(tenant, version)`, from the cache or the database.
    pub async fn key(
        &self,
        conn: &mut PgConnection,
        tenant_id: &str,
        version: i32,
    ) -> MemoryResult<Arc<LessSafeKey>> {
        if let Some(key) = self.cached(tenant_id, version) {
            return Ok(key);
        }
        let stored = data_keys::version(conn, tenant_id, version)
            .await?
            .ok_or_else(|| {
                unreadable(format!(
                    "data key version {version} of tenant `{tenant_id}` does not exist"
                ))
            })?;
        self.unwrapped(&stored)
    }

    /// `stored` unwrapped (and cached).
    fn unwrapped(&self, stored: &WrappedKey) -> MemoryResult<Arc<LessSafeKey>> {
        if let Some(key) = self.cached(&stored.tenant_id, stored.version) {
            return Ok(key);
        }
        let raw = self.raw_key(stored)?;
        let key = Arc::new(LessSafeKey::new(
            UnboundKey::new(&AES_256_GCM, &raw)
                .map_err(|_| unreadable("a data key is not 32 bytes"))?,
        ));
        self.keys
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert((stored.tenant_id.clone(), stored.version), key.clone());
        Ok(key)
    }

    /// The bytes of a stored data key, unwrapped by the master key that wrapped it.
    fn raw_key(&self, stored: &WrappedKey) -> MemoryResult<Vec<u8>> {
        let master = self
            .masters
            .iter()
            .find(|m| m.id() == stored.master_key_id)
            .ok_or_else(|| {
                unreadable(format!(
                    "data key version {} of tenant `{}` was wrapped by master key {}, which is not configured",
                    stored.version, stored.tenant_id, stored.master_key_id
                ))
            })?;
        master
            .unwrap(&stored.tenant_id, stored.version, &stored.wrapped)
            .ok_or_else(|| {
                unreadable(format!(
                    "data key version {} of tenant `{}` does not unwrap: it was altered",
                    stored.version, stored.tenant_id
                ))
            })
    }

    /// `opened` sealed under `key`.
    pub fn seal_with(
        &self,
        key: &LessSafeKey,
        tenant_id: &str,
        id: Uuid,
        version: i32,
        opened: &Opened,
    ) -> Vec<u8> {
        let plain = serde_json::to_vec(opened).expect("text and JSON serialise");
        master_key::seal(key, &fact_aad(tenant_id, id, version), &plain)
    }

    /// The content and metadata `sealed` holds for fact `id`.
    pub fn open_with(
        &self,
        key: &LessSafeKey,
        tenant_id: &str,
        id: Uuid,
        version: i32,
        sealed: &[u8],
    ) -> MemoryResult<Opened> {
        master_key::open(key, &fact_aad(tenant_id, id, version), sealed)
            .and_then(|plain| serde_json::from_slice(&plain).ok())
            .ok_or_else(|| {
                unreadable(format!(
                    "encrypted fact {id} does not open under data key version {version}: the key or the ciphertext was altered"
                ))
            })
    }
}

/// What binds a sealed fact to its row: tenant, id and key version.
fn fact_aad(tenant_id: &str, id: Uuid, version: i32) -> Vec<u8> {
    format!("butler-memory fact\x1f{tenant_id}\x1f{id}\x1f{version}").into_bytes()
}

fn unreadable(message: impl Into<String>) -> MemoryError {
    let err = MemoryError::new(ErrorCode::SealedUnreadable, message);
    tracing::error!(error = %err.message, "an encrypted fact cannot be opened");
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vault(secret: &str) -> Vault {
        Vault::new(
            SealPolicy::default(),
            vec![MasterKey::derive(secret).unwrap()],
        )
    }

    const A: &str = "first master secret, long enough for the tests";
    const B: &str = "second master secret, long enough for the tests";

    #[test]
    fn a_fact_opens_under_its_key_tenant_id_and_version_only() {
        let v = vault(A);
        let stored = v.new_version("t", 1).unwrap();
        let key = v.unwrapped(&stored).unwrap();
        let id = Uuid::now_v7();
        let opened = Opened {
            content: "Type 2 diabetes".into(),
            metadata: serde_json::json!({"doctor": "Dr. Who"}),
        };
        let sealed = v.seal_with(&key, "t", id, 1, &opened);
        assert!(!String::from_utf8_lossy(&sealed).contains("diabetes"));
        assert_eq!(v.open_with(&key, "t", id, 1, &sealed).unwrap(), opened);
        for (tenant, fact, version) in [("u", id, 1), ("t", Uuid::now_v7(), 1), ("t", id, 2)] {
            let err = v
                .open_with(&key, tenant, fact, version, &sealed)
                .unwrap_err();
            assert_eq!(err.code, ErrorCode::SealedUnreadable);
        }
    }

    #[test]
    fn rewrapping_keeps_the_data_key_and_needs_the_old_master_only_until_then() {
        let old = vault(A);
        let stored = old.new_version("t", 1).unwrap();
        let both = Vault::new(
            SealPolicy::default(),
            vec![MasterKey::derive(B).unwrap(), MasterKey::derive(A).unwrap()],
        );
        let rewrapped = both.rewrapped(&stored).unwrap();
        assert_ne!(rewrapped.master_key_id, stored.master_key_id);
        let new_only = vault(B);
        assert_eq!(
            new_only.raw_key(&rewrapped).unwrap(),
            old.raw_key(&stored).unwrap()
        );
        let err = new_only.raw_key(&stored).unwrap_err();
        assert_eq!(err.code, ErrorCode::SealedUnreadable);
        assert!(err.message.contains("not configured"), "{}", err.message);
    }

    #[test]
    fn a_policy_without_a_master_key_is_refused() {
        let names = SealedNames {
            predicates: vec!["health.*".into()],
            scopes: vec![],
        };
        assert!(Vault::from_config(names.clone(), BTreeMap::new(), &[""]).is_err());
        assert!(Vault::from_config(names, BTreeMap::new(), &[A]).is_ok());
        assert!(Vault::from_config(SealedNames::default(), BTreeMap::new(), &["short"]).is_err());
    }
}
