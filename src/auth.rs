//! API keys: every `/mcp` request carries `Authorization: Bearer <key>`; the key alone
//! decides the tenant, the role and (optionally) the butler of the caller.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use butler_memory_actors::{Caller, ErrorCode, MemoryError, Role};

use crate::config::{AuthConfig, KeyConfig, MIN_KEY_CHARS, Secret, key_in_file};
use crate::http::request_meta::RequestMeta;

/// Tenant of the bootstrap admin key.
pub const BOOTSTRAP_TENANT: &str = "default";

/// Resolves keys to callers.
#[derive(Debug, Clone, Default)]
pub struct Authenticator {
    keys: Arc<HashMap<String, Caller>>,
}

impl Authenticator {
    pub fn new(keys: &[KeyConfig]) -> Self {
        let keys = keys
            .iter()
            .map(|k| {
                let name = k.name.clone().unwrap_or_else(|| {
                    k.butler
                        .clone()
                        .or_else(|| k.tenant.clone())
                        .unwrap_or_else(|| "all".into())
                });
                let caller = Caller {
                    // Operators see no tenant's content; their tenant is never used for data.
                    tenant_id: k.tenant.clone().unwrap_or_default(),
                    role: k.role,
                    butler: k.butler.clone(),
                    key_name: name,
                    audit_reason: None,
                };
                (k.key.expose().to_owned(), caller)
            })
            .collect();
        Authenticator {
            keys: Arc::new(keys),
        }
    }

    /// Whether some configured key still stands for `caller` (a dashboard session outlives
    /// its sign-in, not its key).
    pub fn still_configured(&self, caller: &Caller) -> bool {
        self.keys.values().any(|c| c == caller)
    }

    /// The caller a bearer token belongs to.
    pub fn caller(&self, authorization: Option<&str>) -> Option<Caller> {
        let token = authorization?.strip_prefix("Bearer ")?.trim();
        self.keys.get(token).cloned()
    }
}

/// Returns the key configuration to use: the configured keys, or when there are none (and
/// bootstrapping is on) an admin key for tenant `default`, created once in `data_dir`.
pub fn effective_keys(config: &AuthConfig, data_dir: &Path) -> std::io::Result<Vec<KeyConfig>> {
    if !config.keys.is_empty() || !config.bootstrap_admin_key {
        return Ok(config.keys.clone());
    }
    let path = data_dir.join("bootstrap-admin.key");
    let key = key_in_file(&path, "bm_", MIN_KEY_CHARS)?;
    tracing::warn!(
        path = %path.display(),
        "no [[auth.keys]] configured: using the bootstrap admin key for tenant `{BOOTSTRAP_TENANT}` stored in this file"
    );
    Ok(vec![KeyConfig {
        name: Some("bootstrap-admin".into()),
        key: Secret::new(key),
        tenant: Some(BOOTSTRAP_TENANT.into()),
        role: Role::Admin,
        butler: None,
    }])
}

/// Middleware: refuses requests without a known key (401) and attaches the [`Caller`].
pub async fn require_key(
    State(auth): State<Authenticator>,
    mut request: Request,
    next: Next,
) -> Response {
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match auth.caller(header) {
        Some(caller) if caller.role == Role::Auditor && request.uri().path() != "/mcp" => {
            // `/mcp` is where every call of an auditor is recorded before it runs.
            crate::http::error_response(&MemoryError::new(
                ErrorCode::AuditorReadsOnly,
                "auditor keys investigate over /mcp, where every call is recorded",
            ))
        }
        Some(caller) if caller.role == Role::Auditor => {
            match investigation(caller, request.headers()) {
                Ok(caller) => {
                    request.extensions_mut().insert(caller);
                    next.run(request).await
                }
                Err(e) => crate::http::error_response(&e),
            }
        }
        Some(caller) => {
            let meta = request.extensions().get::<RequestMeta>().cloned();
            let tenant = caller.tenant_id.to_string();
            request.extensions_mut().insert(caller);
            let response = next.run(request).await;
            if let Some(meta) = meta {
                meta.note_answer(&tenant, &response);
            }
            response
        }
        None => unauthorized(request.headers()),
    }
}

/// Header naming the tenant an auditor reads in this request.
pub const AUDIT_TENANT: &str = "x-audit-tenant";
/// Header saying why (recorded with every call of the request).
pub const AUDIT_REASON: &str = "x-audit-reason";
/// Longest audit reason, in bytes.
const MAX_AUDIT_REASON_BYTES: usize = 1024;

/// An auditor's caller for one request: the tenant it names and why. Only auditor keys
/// are read this way; for any other key the headers mean nothing.
fn investigation(mut caller: Caller, headers: &HeaderMap) -> Result<Caller, MemoryError> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let (Some(tenant), Some(reason)) = (header(AUDIT_TENANT), header(AUDIT_REASON)) else {
        return Err(MemoryError::new(
            ErrorCode::AuditContextMissing,
            "an auditor key names the tenant it reads and why with every request: \
             X-Audit-Tenant and X-Audit-Reason",
        ));
    };
    butler_memory_actors::check_name("tenant", tenant)?;
    if reason.len() > MAX_AUDIT_REASON_BYTES {
        return Err(MemoryError::new(
            ErrorCode::ContentTooLarge,
            format!("X-Audit-Reason is longer than {MAX_AUDIT_REASON_BYTES} bytes"),
        ));
    }
    caller.tenant_id = tenant.to_owned();
    caller.audit_reason = Some(reason.to_owned());
    Ok(caller)
}

/// The 401 answer: a JSON body in the service's error shape and a bearer challenge that
/// points to the resource's metadata (RFC 9728), as MCP clients expect.
pub fn unauthorized(headers: &HeaderMap) -> Response {
    let error = MemoryError::new(
        ErrorCode::Unauthenticated,
        "missing or unknown API key: send `Authorization: Bearer <key>`",
    );
    let mut response = crate::http::error_response(&error);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        crate::http::resource_metadata::challenge(headers),
    );
    response
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_stands_only_while_a_configured_key_stands_for_it() {
        let keys = [KeyConfig::for_test(
            "k-one-0000000000000000",
            Role::Admin,
            Some("t1"),
            None,
        )];
        let auth = Authenticator::new(&keys);
        let caller = auth.caller(Some("Bearer k-one-0000000000000000")).unwrap();
        assert!(auth.still_configured(&caller));
        let renamed = Caller {
            key_name: "someone-else".into(),
            ..caller.clone()
        };
        assert!(!auth.still_configured(&renamed));
        assert!(!Authenticator::new(&[]).still_configured(&caller));
    }

    #[test]
    fn bearer_tokens_resolve_to_their_caller() {
        let auth = Authenticator::new(&[KeyConfig::for_test(
            "k".repeat(20).as_str(),
            Role::Butler,
            Some("t1"),
            Some("health"),
        )]);
        let caller = auth
            .caller(Some(&format!("Bearer {}", "k".repeat(20))))
            .unwrap();
        assert_eq!(caller.tenant_id, "t1");
        assert_eq!(caller.butler.as_deref(), Some("health"));
        assert!(auth.caller(Some("Bearer nope")).is_none());
        assert!(auth.caller(Some(&"k".repeat(20))).is_none());
        assert!(auth.caller(None).is_none());
    }

    #[test]
    fn bootstrap_key_is_created_once_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let config = AuthConfig {
            keys: vec![],
            bootstrap_admin_key: true,
        };
        let first = effective_keys(&config, dir.path()).unwrap();
        let second = effective_keys(&config, dir.path()).unwrap();
        assert_eq!(first[0].key.expose(), second[0].key.expose());
        assert_eq!(first[0].role, Role::Admin);
    }
}
