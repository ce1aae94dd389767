//! An edge of an orchestrator's memory graph (orchestrator_memory_subsystem.md, "Memory
//! Edge"): a typed, weighted relation from one node to another of the same orchestrator.
//! Contradictions are edges, never deletions.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use crate::domain::text::{Limits, check_reason};
use crate::error::{ErrorCode, MemoryError, MemoryResult};

crate::domain::string_enum! {
    /// How one node relates to another.
    EdgeType {
        /// A general association.
        RelatedTo => "RelatedTo",
        /// The source node replaces the target (which is then `superseded`).
        Updates => "Updates",
        /// The two nodes disagree; both stay until one is superseded or retracted.
        Contradicts => "Contradicts",
        /// The source node happened or holds because of the target.
        CausedBy => "CausedBy",
        /// The source node is a part of the target (a todo of a goal).
        PartOf => "PartOf",
    }
}

impl EdgeType {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}

/// The weight of an edge given none.
pub const DEFAULT_WEIGHT: f64 = 1.0;

/// One end of an edge to write: a node stored before, by id, or a node of the same write,
/// by its place in the write's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Id(Uuid),
    Node(usize),
}

/// An edge to write, validated: weight in bounds, reason storable, not from an end to the
/// same end.
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeWrite {
    pub from: End,
    pub to: End,
    pub edge_type: EdgeType,
    pub weight: f64,
    pub reason: Option<String>,
}

impl EdgeWrite {
    pub fn new(
        from: End,
        to: End,
        edge_type: EdgeType,
        weight: Option<f64>,
        reason: Option<String>,
        limits: &Limits,
    ) -> MemoryResult<EdgeWrite> {
        if from == to {
            return Err(self_link());
        }
        let weight = match weight {
            None => DEFAULT_WEIGHT,
            Some(w) if (0.0..=1.0).contains(&w) => w,
            Some(w) => {
                return Err(MemoryError::new(
                    ErrorCode::InvalidWeight,
                    format!("`weight` is {w}; an edge's is from 0.0 to 1.0"),
                ));
            }
        };
        Ok(EdgeWrite {
            from,
            to,
            edge_type,
            weight,
            reason: check_reason("reason", reason, limits)?,
        })
    }

    /// The edge between the nodes its ends turned out to be (a node of the write may be
    /// one stored before): refused if that is one node.
    pub fn between(&self, from: Uuid, to: Uuid) -> MemoryResult<NewEdge> {
        NewEdge::new(from, to, self.edge_type, self.weight, self.reason.clone())
    }
}

/// An edge between two stored nodes, ready to insert.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEdge {
    pub from: Uuid,
    pub to: Uuid,
    pub edge_type: EdgeType,
    pub weight: f64,
    pub reason: Option<String>,
}

impl NewEdge {
    /// `weight` and `reason` as validated by `EdgeWrite::new`; refused if `from` is `to`.
    pub fn new(
        from: Uuid,
        to: Uuid,
        edge_type: EdgeType,
        weight: f64,
        reason: Option<String>,
    ) -> MemoryResult<NewEdge> {
        if from == to {
            return Err(self_link());
        }
        Ok(NewEdge {
            from,
            to,
            edge_type,
            weight,
            reason,
        })
    }
}

fn self_link() -> MemoryError {
    MemoryError::new(
        ErrorCode::SelfLink,
        "an edge (or a supersession) from a memory to itself",
    )
}

/// An edge as stored.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Edge {
    pub edge_id: Uuid,
    pub from_memory_id: Uuid,
    pub to_memory_id: Uuid,
    pub edge_type: EdgeType,
    pub weight: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_edge_type_parses_and_nothing_else() {
        let texts = ["RelatedTo", "Updates", "Contradicts", "CausedBy", "PartOf"];
        assert_eq!(EdgeType::ALL.len(), 5);
        for (t, text) in EdgeType::ALL.iter().zip(texts) {
            assert_eq!(text.parse::<EdgeType>().unwrap(), *t);
        }
        for bad in ["related_to", "Supports", ""] {
            assert_eq!(
                bad.parse::<EdgeType>().unwrap_err().code,
                ErrorCode::UnknownValue
            );
        }
    }

    #[test]
    fn an_edge_joins_two_nodes_with_a_weight_in_bounds() {
        let (a, b) = (End::Id(Uuid::now_v7()), End::Node(0));
        let limits = Limits::default();
        let edge = |from, w| EdgeWrite::new(from, b, EdgeType::PartOf, w, None, &limits);
        assert_eq!(edge(a, None).unwrap().weight, DEFAULT_WEIGHT);
        assert_eq!(edge(a, Some(0.0)).unwrap().weight, 0.0);
        assert_eq!(edge(b, None).unwrap_err().code, ErrorCode::SelfLink);
        for bad in [-0.1, 1.5, f64::NAN] {
            assert_eq!(
                edge(a, Some(bad)).unwrap_err().code,
                ErrorCode::InvalidWeight
            );
        }
        let long = "r".repeat(limits.max_reason_bytes + 1);
        let err = EdgeWrite::new(a, b, EdgeType::Contradicts, None, Some(long), &limits);
        assert_eq!(err.unwrap_err().code, ErrorCode::ContentTooLarge);
        // Ends that differ as written may still be one node once resolved.
        let id = Uuid::now_v7();
        let write = edge(a, None).unwrap();
        assert_eq!(write.between(id, id).unwrap_err().code, ErrorCode::SelfLink);
        assert_eq!(write.between(id, Uuid::now_v7()).unwrap().weight, 1.0);
    }
}
