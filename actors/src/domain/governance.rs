//! An admin's decisions about a rule (the dashboard's playbook, memory_project_plan.md):
//! promote or demote it one maturity step against its evidence, disable it (it keeps its
//! state and history but never reaches retrieval) or enable it again. Each is an audited
//! transition with its own event type and a reason.

use serde::Deserialize;

use super::event::EventType;
use super::maturity::Maturity;
use crate::error::{ErrorCode, MemoryError, MemoryResult};

super::string_enum! {
    /// What an admin does to a rule.
    Governance {
        Promote => "promote",
        Demote => "demote",
        Disable => "disable",
        Enable => "enable",
    }
}

impl Governance {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }

    /// The event that records it.
    pub fn event_type(self) -> EventType {
        match self {
            Governance::Promote => EventType::RulePromoted,
            Governance::Demote => EventType::RuleDemoted,
            Governance::Disable => EventType::RuleDisabled,
            Governance::Enable => EventType::RuleEnabled,
        }
    }

    /// The maturity a promotion or demotion moves `from` to. Anti-patterns are judged by
    /// their harm, not moved by hand: forget or rewrite them instead.
    pub fn next_maturity(self, from: Maturity) -> MemoryResult<Maturity> {
        let next = match (self, from) {
            (Governance::Promote, Maturity::Candidate) => Maturity::Established,
            (Governance::Promote, Maturity::Established) => Maturity::Proven,
            (Governance::Demote, Maturity::Proven) => Maturity::Established,
            (Governance::Demote, Maturity::Established) => Maturity::Candidate,
            _ => {
                return Err(MemoryError::new(
                    ErrorCode::NoSuchTransition,
                    format!("a rule that is {from} cannot be {self}d"),
                ));
            }
        };
        Ok(next)
    }
}

/// An admin's decision with its reason (`POST /api/memory/rules/{id}/{decision}`).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GovernanceRequest {
    /// Why; recorded with the event.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maturity_moves_one_step_and_never_out_of_an_anti_pattern() {
        use Governance::*;
        use Maturity::*;
        assert_eq!(Promote.next_maturity(Candidate).unwrap(), Established);
        assert_eq!(Promote.next_maturity(Established).unwrap(), Proven);
        assert_eq!(Demote.next_maturity(Proven).unwrap(), Established);
        assert_eq!(Demote.next_maturity(Established).unwrap(), Candidate);
        for (decision, from) in [
            (Promote, Proven),
            (Demote, Candidate),
            (Promote, AntiPattern),
            (Demote, AntiPattern),
        ] {
            assert_eq!(
                decision.next_maturity(from).unwrap_err().code,
                ErrorCode::NoSuchTransition
            );
        }
    }
}
