//! `[auth]`: the API keys. The key alone decides the caller's tenant, role and (optionally)
//! butler; these checks refuse keys that are guessable, repeated or incomplete at start.

use butler_memory_actors::{Role, check_name};
use serde::Deserialize;

use super::secret::Secret;

/// Shortest key accepted: anything shorter is guessable.
pub const MIN_KEY_CHARS: usize = 16;

/// `[auth]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    pub keys: Vec<KeyConfig>,
    pub bootstrap_admin_key: bool,
}

/// One `[[auth.keys]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// Label in the audit stream and logs; defaults to the role and butler or tenant.
    #[serde(default)]
    pub name: Option<String>,
    pub key: Secret,
    #[serde(default)]
    pub tenant: Option<String>,
    pub role: Role,
    #[serde(default)]
    pub butler: Option<String>,
}

impl AuthConfig {
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, k) in self.keys.iter().enumerate() {
            let at = format!("auth.keys[{i}]");
            if k.key.expose().chars().count() < MIN_KEY_CHARS {
                out.push(format!(
                    "{at}.key: must be at least {MIN_KEY_CHARS} characters"
                ));
            }
            if !seen.insert(k.key.expose().to_owned()) {
                out.push(format!("{at}.key: the same key is configured twice"));
            }
            match (&k.tenant, k.role) {
                (None, Role::Butler | Role::Admin | Role::Orchestrator) => out.push(format!(
                    "{at}.tenant: required for {} keys",
                    k.role.as_str()
                )),
                (Some(_), Role::Auditor) => out.push(format!(
                    "{at}.tenant: auditor keys name the tenant they read with each request (X-Audit-Tenant), not in the key"
                )),
                (Some(t), _) => {
                    if let Err(e) = check_name("tenant", t) {
                        out.push(format!("{at}.tenant: {}", e.message));
                    }
                }
                (None, Role::Operator | Role::Auditor) => {}
            }
            if let Some(b) = &k.butler {
                if let Err(e) = check_name("butler", b) {
                    out.push(format!("{at}.butler: {}", e.message));
                }
                if k.role != Role::Butler {
                    out.push(format!(
                        "{at}.butler: only butler keys are bound to a butler"
                    ));
                }
            }
        }
        out
    }
}

#[cfg(test)]
impl KeyConfig {
    /// A key entry as a test writes it.
    pub fn for_test(key: &str, role: Role, tenant: Option<&str>, butler: Option<&str>) -> Self {
        KeyConfig {
            name: None,
            key: Secret::new(key),
            tenant: tenant.map(str::to_owned),
            role,
            butler: butler.map(str::to_owned),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weak_duplicate_or_incomplete_keys_are_refused() {
        let config = AuthConfig {
            keys: vec![
                KeyConfig::for_test("short", Role::Butler, Some("t"), None),
                KeyConfig::for_test(&"a".repeat(16), Role::Admin, None, None),
                KeyConfig::for_test(&"a".repeat(16), Role::Admin, Some("t"), Some("health")),
            ],
            bootstrap_admin_key: true,
        };
        let problems = config.problems().join("\n");
        assert!(problems.contains("auth.keys[0].key"), "{problems}");
        assert!(problems.contains("auth.keys[1].tenant"), "{problems}");
        assert!(
            problems.contains("auth.keys[2].key: the same key"),
            "{problems}"
        );
        assert!(problems.contains("auth.keys[2].butler"), "{problems}");
    }
}
