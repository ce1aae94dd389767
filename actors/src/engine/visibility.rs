//! What a read may show: the caller's own view of a tenant (its role, the acting butler, a
//! scope or butler that narrows it), or a butler's view looked through by someone allowed
//! to (`engine/butler_view.rs`). One rule of what a butler sees, used by every read.

use super::Engine;
use crate::domain::caller::{Caller, GLOBAL_SCOPE, Role};
use crate::domain::search::SearchScope;
use crate::domain::text::check_name;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

impl Engine {
    /// What the caller may see: the tenant always; butler keys `global` plus the acting
    /// butler's scope and episodes; admin keys every scope and butler unless they narrow it.
    pub(super) fn visible(
        &self,
        caller: &Caller,
        scope: Option<String>,
        butler: Option<String>,
    ) -> MemoryResult<SearchScope> {
        if let Some(s) = &scope {
            check_name("scope", s)?;
        }
        if let Some(b) = &butler {
            check_name("butler", b)?;
        }
        let acting = caller.reading_as(butler.as_deref())?;
        Ok(match caller.role {
            Role::Admin | Role::Auditor => SearchScope {
                tenant_id: caller.tenant_id.clone(),
                scopes: scope.map(|s| vec![s]),
                butlers: acting.map(|b| vec![b]),
            },
            Role::Butler | Role::Operator | Role::Orchestrator => {
                let scopes = match scope {
                    Some(s) => {
                        caller.check_scope(&s, acting.as_deref())?;
                        vec![s]
                    }
                    None => std::iter::once(GLOBAL_SCOPE.to_owned())
                        .chain(acting.clone())
                        .collect(),
                };
                SearchScope {
                    tenant_id: caller.tenant_id.clone(),
                    scopes: Some(scopes),
                    butlers: Some(acting.into_iter().collect()),
                }
            }
        })
    }

    /// What butler `butler` sees, for a caller who may look through its eyes (a butler's
    /// view, `engine/butler_view.rs`): exactly what `visible` gives a key bound to that
    /// butler (`global` and its own scope, optionally narrowed to one of them by `scope`;
    /// its episodes), so that there is one rule of what a butler sees. Its tenant's admin
    /// or auditor, and that butler's own key, may look; another butler's key is
    /// `other_butler` (`reading_as`), an operator's `operator_key`.
    pub(super) fn visible_as(
        &self,
        caller: &Caller,
        butler: &str,
        scope: Option<String>,
    ) -> MemoryResult<SearchScope> {
        check_name("butler", butler)?;
        caller.reading_as(Some(butler))?;
        let eyes = Caller {
            tenant_id: caller.tenant_id.clone(),
            role: Role::Butler,
            butler: Some(butler.to_owned()),
            key_name: caller.key_name.clone(),
            audit_reason: None,
        };
        self.visible(&eyes, scope.clone(), None).map_err(|e| {
            // Said of the butler, not of the key: an admin's key may use any scope, but
            // the butler it looks through does not see this one.
            if e.code == ErrorCode::ScopeForbidden {
                let scope = scope.unwrap_or_default();
                MemoryError::new(
                    e.code,
                    format!("butler `{butler}` sees scope `global` and its own, not `{scope}`"),
                )
            } else {
                e
            }
        })
    }

    /// What a read shows: what the caller sees (`view` none) or, on butler `view`'s view,
    /// what that butler sees; `scope` narrows either, `butler` narrows the caller's own
    /// (on a butler's view it may only name that butler).
    pub(super) fn seen_by(
        &self,
        caller: &Caller,
        view: Option<&str>,
        scope: Option<String>,
        butler: Option<String>,
    ) -> MemoryResult<SearchScope> {
        match view {
            None => self.visible(caller, scope, butler),
            Some(view) => {
                let seen = self.visible_as(caller, view, scope)?;
                match butler {
                    Some(other) if other != view => Err(MemoryError::new(
                        ErrorCode::InvalidArguments,
                        format!("butler `{view}`'s view shows its own episodes, not `{other}`'s"),
                    )),
                    _ => Ok(seen),
                }
            }
        }
    }
}
