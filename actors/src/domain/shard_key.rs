//! The shard key `(tenant_id, butler)`: the unit of ordered writes and lifecycle work.
//!
//! Episodes belong to the shard of their butler, facts and rules to the shard of their
//! `source_butler`; rows written without a butler (admin keys) belong to the shard
//! `(tenant_id, "_tenant")` (DECISIONS.md #13).

use std::fmt;

use serde::Serialize;

/// The butler name of the shard that owns rows written without a butler.
pub const TENANT_SHARD_BUTLER: &str = "_tenant";

/// Identifies one shard actor.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
pub struct ShardKey {
    pub tenant_id: String,
    pub butler: String,
}

impl ShardKey {
    pub fn new(tenant_id: impl Into<String>, butler: impl Into<String>) -> Self {
        ShardKey {
            tenant_id: tenant_id.into(),
            butler: butler.into(),
        }
    }

    /// The shard for a row written by `butler`, or the tenant shard when there is none.
    pub fn for_butler(tenant_id: &str, butler: Option<&str>) -> Self {
        ShardKey::new(tenant_id, butler.unwrap_or(TENANT_SHARD_BUTLER))
    }
}

impl fmt::Display for ShardKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tenant_id, self.butler)
    }
}
