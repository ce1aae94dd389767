//! Who is calling, as established by the API key, and what that caller may touch
//! (memory_butler.md §6.3, DECISIONS.md #11).
//!
//! The tenant always comes from the key, never from tool arguments. `butler` keys see their
//! tenant's `global` scope plus their own butler's scope; `admin` keys see every scope of
//! their tenant; `operator` keys see no memory content at all. `auditor` keys are the one
//! way across tenants: for an investigation, an auditor names one tenant and a reason with
//! each request (never in tool arguments), reads everything in it and writes nothing, and
//! every read is recorded in the audit stream of reads before it is answered.

use serde::{Deserialize, Serialize};

use super::shard_key::ShardKey;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// The scope every butler can read and write.
pub const GLOBAL_SCOPE: &str = "global";

/// What a key is allowed to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A butler runtime: its tenant, `global` plus its own scope.
    Butler,
    /// Everything within its tenant, including admin tools.
    Admin,
    /// Operations only: the actor tree and admin operations, never memory content.
    Operator,
    /// Investigations: reads any one tenant named with the request, with a reason; never
    /// writes; every read recorded (`audit_reads`).
    Auditor,
    /// An orchestrator (orchestrator_memory_subsystem.md): its tenant is its
    /// `orchestratorId`; it reads and writes its own memory graph and nothing else.
    Orchestrator,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Butler => "butler",
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Auditor => "auditor",
            Role::Orchestrator => "orchestrator",
        }
    }

    /// The role named `name` (as `as_str` writes it).
    pub fn parse(name: &str) -> Option<Role> {
        [
            Role::Butler,
            Role::Admin,
            Role::Operator,
            Role::Auditor,
            Role::Orchestrator,
        ]
        .into_iter()
        .find(|r| r.as_str() == name)
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub tenant_id: String,
    pub role: Role,
    /// The butler this key is bound to; a bound key may not act as another butler.
    pub butler: Option<String>,
    /// A label for the audit stream (the key's configured name), never the key itself.
    pub key_name: String,
    /// An auditor's reason for this request's reads (auditor keys only).
    pub audit_reason: Option<String>,
}

impl Caller {
    /// The `actor` recorded in `memory_events` for this caller's mutations.
    pub fn actor(&self) -> String {
        format!("{}:{}", self.role.as_str(), self.key_name)
    }

    /// Refuses callers that may not see memory content.
    pub fn require_memory_access(&self) -> MemoryResult<()> {
        match self.role {
            Role::Butler | Role::Admin | Role::Auditor => Ok(()),
            Role::Operator => Err(MemoryError::new(
                ErrorCode::OperatorKey,
                "operator keys cannot read or write memory content",
            )),
            Role::Orchestrator => Err(MemoryError::new(
                ErrorCode::OrchestratorKey,
                "orchestrator keys reach their orchestrator's memory graph (orchestrator_* tools) only",
            )),
        }
    }

    /// Refuses callers that may not change memory: operators, and auditors, who only read.
    pub fn require_writer(&self) -> MemoryResult<()> {
        match self.role {
            Role::Butler | Role::Admin => Ok(()),
            Role::Auditor => Err(auditor_reads_only()),
            Role::Operator | Role::Orchestrator => self.require_memory_access(),
        }
    }

    /// Refuses callers without admin rights in their tenant.
    pub fn require_admin(&self) -> MemoryResult<()> {
        match self.role {
            Role::Admin => Ok(()),
            Role::Auditor => Err(auditor_reads_only()),
            Role::Butler | Role::Operator | Role::Orchestrator => Err(MemoryError::new(
                ErrorCode::AdminOnly,
                "this operation needs an admin key",
            )),
        }
    }

    /// Refuses callers that may not read what only admins read (the audit stream, dead
    /// letters): admins and auditors may.
    pub fn require_admin_read(&self) -> MemoryResult<()> {
        match self.role {
            Role::Auditor => Ok(()),
            _ => self.require_admin(),
        }
    }

    /// Whether this caller's reads change nothing, not even reference counts (an
    /// auditor's must not weigh in retrieval).
    pub fn reads_leave_no_trace(&self) -> bool {
        self.role == Role::Auditor
    }

    /// The butler a write is attributed to. A bound key writes as its butler and may not
    /// name another; an unbound key writes as the butler it names, or as none.
    pub fn acting_butler(&self, requested: Option<&str>) -> MemoryResult<Option<String>> {
        self.require_writer()?;
        self.reading_as(requested)
    }

    /// The butler a read acts as: [`Caller::acting_butler`]'s rule, for every caller that
    /// may read (an auditor reads as the butler it names, or as none).
    pub fn reading_as(&self, requested: Option<&str>) -> MemoryResult<Option<String>> {
        self.require_memory_access()?;
        match (&self.butler, requested) {
            (Some(bound), Some(asked)) if bound != asked => Err(MemoryError::new(
                ErrorCode::OtherButler,
                format!("this key is bound to butler `{bound}` and cannot act as `{asked}`"),
            )),
            (Some(bound), _) => Ok(Some(bound.clone())),
            (None, asked) => Ok(asked.map(str::to_owned)),
        }
    }

    /// Checks that this caller, acting as `butler`, may use `scope`.
    pub fn check_scope(&self, scope: &str, butler: Option<&str>) -> MemoryResult<()> {
        match self.role {
            Role::Admin | Role::Auditor => Ok(()),
            Role::Operator | Role::Orchestrator => self.require_memory_access(),
            Role::Butler if scope == GLOBAL_SCOPE || Some(scope) == butler => Ok(()),
            Role::Butler => Err(MemoryError::new(
                ErrorCode::ScopeForbidden,
                format!(
                    "a butler key may use scope `global` or its own butler's scope, not `{scope}`"
                ),
            )),
        }
    }

    /// Whether this caller, acting as `butler`, may read a record of `scope` (facts and
    /// rules) or owned by butler `owner` (episodes, which have no scope).
    pub fn may_read(&self, butler: Option<&str>, scope: Option<&str>, owner: Option<&str>) -> bool {
        match self.role {
            Role::Admin | Role::Auditor => true,
            Role::Operator | Role::Orchestrator => false,
            Role::Butler => match scope {
                Some(scope) => scope == GLOBAL_SCOPE || (butler.is_some() && Some(scope) == butler),
                None => butler.is_some() && owner == butler,
            },
        }
    }

    /// The shard that owns rows written by this caller as `butler`.
    pub fn shard(&self, butler: Option<&str>) -> ShardKey {
        ShardKey::for_butler(&self.tenant_id, butler)
    }
}

impl Caller {
    /// The orchestrator whose memory graph this caller's call acts on: its tenant
    /// (DECISIONS.md #1), whatever the call names. Orchestrator and admin keys read and
    /// write it, auditors read it; naming another orchestrator is `cross_orchestrator`
    /// (the engine logs it).
    pub fn orchestrator(&self, requested: Option<&str>, writes: bool) -> MemoryResult<&str> {
        match self.role {
            Role::Orchestrator | Role::Admin => {}
            Role::Auditor if !writes => {}
            Role::Auditor => return Err(auditor_reads_only()),
            Role::Butler | Role::Operator => {
                return Err(MemoryError::new(
                    ErrorCode::NotAnOrchestrator,
                    "an orchestrator's memory needs that orchestrator's key (or its admin's)",
                ));
            }
        }
        match requested {
            Some(asked) if asked != self.tenant_id => Err(MemoryError::new(
                ErrorCode::CrossOrchestrator,
                format!("this key cannot reach orchestrator `{asked}`'s memory"),
            )),
            _ => Ok(&self.tenant_id),
        }
    }
}

fn auditor_reads_only() -> MemoryError {
    MemoryError::new(
        ErrorCode::AuditorReadsOnly,
        "auditor keys read; they never change memory or run admin operations",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn butler_key(bound: Option<&str>) -> Caller {
        Caller {
            tenant_id: "t1".into(),
            role: Role::Butler,
            butler: bound.map(str::to_owned),
            key_name: "k".into(),
            audit_reason: None,
        }
    }

    #[test]
    fn bound_key_cannot_act_as_another_butler() {
        let caller = butler_key(Some("health"));
        assert_eq!(
            caller.acting_butler(None).unwrap().as_deref(),
            Some("health")
        );
        assert_eq!(
            caller.acting_butler(Some("health")).unwrap().as_deref(),
            Some("health")
        );
        let err = caller.acting_butler(Some("general")).unwrap_err();
        assert_eq!(err.class(), crate::error::ErrorClass::Forbidden);
    }

    #[test]
    fn butler_scopes_are_global_and_own() {
        let caller = butler_key(Some("health"));
        assert!(caller.check_scope("global", Some("health")).is_ok());
        assert!(caller.check_scope("health", Some("health")).is_ok());
        assert!(caller.check_scope("finance", Some("health")).is_err());
    }

    #[test]
    fn operator_sees_no_memory() {
        let caller = Caller {
            role: Role::Operator,
            ..butler_key(None)
        };
        assert!(caller.acting_butler(None).is_err());
        assert!(!caller.may_read(None, Some("global"), None));
    }

    #[test]
    fn bound_butler_reads_only_its_episodes_and_scopes() {
        let caller = butler_key(Some("health"));
        let acting = caller.acting_butler(None).unwrap();
        let acting = acting.as_deref();
        assert!(caller.may_read(acting, None, Some("health")));
        assert!(!caller.may_read(acting, None, Some("general")));
        assert!(caller.may_read(acting, Some("global"), None));
        assert!(caller.may_read(acting, Some("health"), None));
        assert!(!caller.may_read(acting, Some("general"), None));
    }
}
