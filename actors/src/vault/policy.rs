//! Which facts are high-risk: those whose predicate or scope the configuration names, for
//! every tenant or for one. A name is exact (`user.ssn`) or a prefix ending in `*`
//! (`health.*`; `*` alone names everything). A tenant's names add to the global ones: a
//! tenant can ask for more encryption, never for less.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Predicates and scopes whose facts are sealed.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct SealedNames {
    #[serde(default)]
    pub predicates: Vec<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl SealedNames {
    fn is_empty(&self) -> bool {
        self.predicates.is_empty() && self.scopes.is_empty()
    }
}

/// The compiled policy.
#[derive(Debug, Clone, Default)]
pub struct SealPolicy {
    global: SealedNames,
    tenants: BTreeMap<String, SealedNames>,
}

impl SealPolicy {
    /// The policy of `global` and `tenants`' additions, or why a name is not usable.
    pub fn new(
        global: SealedNames,
        tenants: BTreeMap<String, SealedNames>,
    ) -> Result<SealPolicy, String> {
        let check = |where_: &str, names: &SealedNames| -> Result<(), String> {
            for name in names.predicates.iter().chain(&names.scopes) {
                let bare = name.strip_suffix('*').unwrap_or(name);
                if name.trim().is_empty() || bare.contains('*') || name != &name.to_lowercase() {
                    return Err(format!(
                        "{where_}: `{name}` is not a lowercase name or a prefix ending in `*`"
                    ));
                }
            }
            Ok(())
        };
        check("encryption", &global)?;
        for (tenant, names) in &tenants {
            check(&format!("encryption.tenants.{tenant}"), names)?;
        }
        Ok(SealPolicy { global, tenants })
    }

    /// Whether any fact of any tenant can be sealed.
    pub fn is_empty(&self) -> bool {
        self.global.is_empty() && self.tenants.values().all(SealedNames::is_empty)
    }

    /// Whether a fact of `tenant` with `scope` and `predicate` (both normalised) is sealed.
    pub fn seals(&self, tenant_id: &str, scope: &str, predicate: &str) -> bool {
        let named = |names: &SealedNames| {
            names.predicates.iter().any(|p| matches(p, predicate))
                || names.scopes.iter().any(|s| matches(s, scope))
        };
        named(&self.global) || self.tenants.get(tenant_id).is_some_and(named)
    }
}

impl SealPolicy {
    /// Every predicate and every scope any tenant's policy names, as SQL `LIKE` patterns:
    /// a superset of what [`SealPolicy::seals`] says yes to, for finding candidates in SQL.
    pub fn like_patterns(&self) -> (Vec<String>, Vec<String>) {
        let every = std::iter::once(&self.global).chain(self.tenants.values());
        let mut predicates = Vec::new();
        let mut scopes = Vec::new();
        for names in every {
            predicates.extend(names.predicates.iter().map(|p| like(p)));
            scopes.extend(names.scopes.iter().map(|s| like(s)));
        }
        (predicates, scopes)
    }
}

/// A name as a `LIKE` pattern (backslash escapes): `health.*` -> `health.%`.
fn like(name: &str) -> String {
    let (bare, prefix) = match name.strip_suffix('*') {
        Some(bare) => (bare, true),
        None => (name, false),
    };
    let mut out: String = bare
        .chars()
        .flat_map(|c| match c {
            '\\' | '%' | '_' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    if prefix {
        out.push('%');
    }
    out
}

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(predicates: &[&str], scopes: &[&str]) -> SealedNames {
        SealedNames {
            predicates: predicates.iter().map(|s| s.to_string()).collect(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn exact_names_and_prefixes() {
        let policy =
            SealPolicy::new(names(&["health.*", "user.ssn"], &[]), BTreeMap::new()).unwrap();
        assert!(policy.seals("t", "global", "health.condition"));
        assert!(policy.seals("t", "global", "user.ssn"));
        assert!(!policy.seals("t", "global", "user.ssn_last4"));
        assert!(!policy.seals("t", "global", "healthy_habits"));
        assert!(!policy.seals("t", "global", "health"));
    }

    #[test]
    fn scopes_and_a_tenants_additions() {
        let tenants = BTreeMap::from([("acme".to_owned(), names(&["salary"], &["hr"]))]);
        let policy = SealPolicy::new(names(&[], &["medical"]), tenants).unwrap();
        assert!(policy.seals("other", "medical", "anything"));
        assert!(policy.seals("acme", "medical", "anything"));
        assert!(policy.seals("acme", "global", "salary"));
        assert!(policy.seals("acme", "hr", "anything"));
        assert!(!policy.seals("other", "hr", "salary"));
        assert!(!policy.is_empty());
        assert!(SealPolicy::default().is_empty());
    }

    #[test]
    fn like_patterns_escape_and_cover_every_tenant() {
        let tenants = BTreeMap::from([("acme".to_owned(), names(&["pay_grade"], &["h%r"]))]);
        let policy = SealPolicy::new(names(&["health.*", "user.ssn"], &[]), tenants).unwrap();
        let (predicates, scopes) = policy.like_patterns();
        assert_eq!(predicates, vec!["health.%", "user.ssn", "pay\\_grade"]);
        assert_eq!(scopes, vec!["h\\%r"]);
    }

    #[test]
    fn a_star_inside_or_capitals_are_refused() {
        assert!(SealPolicy::new(names(&["he*th"], &[]), BTreeMap::new()).is_err());
        assert!(SealPolicy::new(names(&["Health"], &[]), BTreeMap::new()).is_err());
        assert!(SealPolicy::new(names(&[], &[" "]), BTreeMap::new()).is_err());
        assert!(
            SealPolicy::new(names(&["*"], &[]), BTreeMap::new())
                .unwrap()
                .seals("t", "s", "p")
        );
    }
}
