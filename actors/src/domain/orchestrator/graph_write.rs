//! One write to an orchestrator's graph: nodes from one source, the nodes each supersedes,
//! and edges among them and nodes stored before. Validated whole before any of it is
//! written, and written in one transaction (`store/orchestrator_graph.rs`).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::edge::{Edge, EdgeType, EdgeWrite, End};
use super::node::{NewNode, Node, NodeType};
use super::source::Source;
use crate::domain::text::{Limits, check_identifier_text};
use crate::error::{ErrorCode, MemoryError, MemoryResult};

/// The most nodes, and the most edges, one write may carry.
pub const MAX_WRITE_ITEMS: usize = 256;

/// A node as a caller gives it (a memory of `orchestrator_remember`, or of an ingested
/// JSON file).
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(rename = "MemoryParam")]
pub struct NodeInput {
    /// A name this call's edges use for this memory (`from`, `to`); not stored.
    #[serde(default, rename = "ref")]
    pub reference: Option<String>,
    /// What it records.
    #[serde(rename = "type")]
    pub node_type: NodeType,
    /// The memory, as plain text (whitespace is normalised).
    pub content: String,
    /// A short line for bulletins (default: the content's first line, cut at 160 characters).
    #[serde(default)]
    pub summary: Option<String>,
    /// How much it matters, 0 to 100 (default 50).
    #[serde(default)]
    pub importance: Option<i64>,
    /// How sure it is, 0.0 to 1.0 (default 0.8).
    #[serde(default)]
    pub confidence: Option<f64>,
    /// Ids of stored memories this one replaces: each becomes `superseded`, with an
    /// `Updates` edge from this one.
    #[serde(default)]
    pub supersedes: Vec<Uuid>,
}

/// An edge as a caller gives it: each end a stored node's id, or a `ref` of a node of the
/// same write.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(rename = "EdgeParam")]
pub struct EdgeInput {
    /// A stored memory's id, or the `ref` of a memory of this call.
    pub from: String,
    /// A stored memory's id, or the `ref` of a memory of this call.
    pub to: String,
    pub edge_type: EdgeType,
    /// 0.0 to 1.0 (default 1.0).
    #[serde(default)]
    pub weight: Option<f64>,
    /// Why they relate (a contradiction's reason, say).
    #[serde(default)]
    pub reason: Option<String>,
}

/// A write as a caller gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct RememberInput {
    pub source: Source,
    pub memories: Vec<NodeInput>,
    pub edges: Vec<EdgeInput>,
}

impl RememberInput {
    /// Validates every node and edge (see `NewNode::new`, `EdgeWrite::new`) and resolves
    /// the edges' references. A reference is a caller's name, unique in the write, and
    /// never an id (it would be ambiguous).
    pub fn validate(self, limits: &Limits) -> MemoryResult<GraphWrite> {
        let mut references = HashMap::new();
        let mut nodes = Vec::with_capacity(self.memories.len());
        for (i, m) in self.memories.into_iter().enumerate() {
            if let Some(reference) = m.reference {
                check_identifier_text("ref", &reference)?;
                if reference.parse::<Uuid>().is_ok() {
                    return Err(MemoryError::new(
                        ErrorCode::UnknownReference,
                        format!("`ref` {reference:?} is an id: name a write's memory otherwise"),
                    ));
                }
                if references.insert(reference.clone(), i).is_some() {
                    return Err(MemoryError::new(
                        ErrorCode::UnknownReference,
                        format!("`ref` {reference:?} names two memories of the write"),
                    ));
                }
            }
            let node = NewNode::new(
                m.node_type,
                &m.content,
                m.summary.as_deref(),
                m.importance,
                m.confidence,
                limits,
            )?;
            nodes.push(NodeWrite {
                node,
                supersedes: m.supersedes,
            });
        }
        let end = |text: &str| -> MemoryResult<End> {
            if let Ok(id) = text.parse::<Uuid>() {
                return Ok(End::Id(id));
            }
            references.get(text).map(|i| End::Node(*i)).ok_or_else(|| {
                MemoryError::new(
                    ErrorCode::UnknownReference,
                    format!("{text:?} is neither a memory id nor a `ref` of this write"),
                )
            })
        };
        let edges = self
            .edges
            .into_iter()
            .map(|e| {
                EdgeWrite::new(
                    end(&e.from)?,
                    end(&e.to)?,
                    e.edge_type,
                    e.weight,
                    e.reason,
                    limits,
                )
            })
            .collect::<MemoryResult<Vec<_>>>()?;
        GraphWrite::new(self.source, nodes, edges)
    }
}

/// A node to write, and the stored nodes it replaces.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeWrite {
    pub node: NewNode,
    pub supersedes: Vec<Uuid>,
}

/// A validated write.
#[derive(Debug, Clone, PartialEq)]
pub struct GraphWrite {
    pub source: Source,
    pub nodes: Vec<NodeWrite>,
    pub edges: Vec<EdgeWrite>,
}

impl GraphWrite {
    /// Refuses a write with nothing in it, more than `MAX_WRITE_ITEMS` nodes or edges, or an
    /// edge naming a node of the write that is not there.
    pub fn new(
        source: Source,
        nodes: Vec<NodeWrite>,
        edges: Vec<EdgeWrite>,
    ) -> MemoryResult<GraphWrite> {
        if nodes.is_empty() && edges.is_empty() {
            return Err(MemoryError::new(
                ErrorCode::InvalidBatch,
                "a write to the memory graph with no memory and no edge",
            ));
        }
        if nodes.len() > MAX_WRITE_ITEMS || edges.len() > MAX_WRITE_ITEMS {
            return Err(MemoryError::new(
                ErrorCode::InvalidBatch,
                format!("more than {MAX_WRITE_ITEMS} memories or edges in one write"),
            ));
        }
        for end in edges.iter().flat_map(|e| [e.from, e.to]) {
            if let End::Node(i) = end
                && i >= nodes.len()
            {
                return Err(MemoryError::new(
                    ErrorCode::UnknownReference,
                    format!(
                        "an edge names memory #{i} of this write, which has {}",
                        nodes.len()
                    ),
                ));
            }
        }
        Ok(GraphWrite {
            source: source.checked()?,
            nodes,
            edges,
        })
    }
}

/// A record a write stored, or found stored before (`created: false`).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Written<T> {
    #[serde(flatten)]
    pub record: T,
    pub created: bool,
}

/// What a write stored or found: its nodes in the order given, the edges (supersessions'
/// `Updates` edges first), and the nodes it superseded.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Remembered {
    pub memories: Vec<Written<Node>>,
    pub edges: Vec<Written<Edge>>,
    pub superseded: Vec<Uuid>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::orchestrator::edge::EdgeType;
    use crate::domain::orchestrator::node::NodeType;
    use crate::domain::orchestrator::source::{CapturedBy, SourceType};
    use crate::domain::text::Limits;

    fn source() -> Source {
        Source {
            source_type: SourceType::Manual,
            source_path: None,
            conversation_id: None,
            workflow_run_id: None,
            step_id: None,
            captured_by: CapturedBy::User,
        }
    }

    fn node() -> NodeWrite {
        let node = NewNode::new(
            NodeType::Todo,
            "write docs",
            None,
            None,
            None,
            &Limits::default(),
        );
        NodeWrite {
            node: node.unwrap(),
            supersedes: vec![],
        }
    }

    fn edge(from: End, to: End) -> EdgeWrite {
        EdgeWrite::new(from, to, EdgeType::PartOf, None, None, &Limits::default()).unwrap()
    }

    #[test]
    fn a_write_holds_something_and_its_edges_name_its_nodes() {
        let code = |w: MemoryResult<GraphWrite>| w.unwrap_err().code;
        assert_eq!(
            code(GraphWrite::new(source(), vec![], vec![])),
            ErrorCode::InvalidBatch
        );
        let id = End::Id(Uuid::now_v7());
        assert!(GraphWrite::new(source(), vec![node()], vec![edge(End::Node(0), id)]).is_ok());
        assert!(GraphWrite::new(source(), vec![], vec![edge(id, End::Id(Uuid::now_v7()))]).is_ok());
        assert_eq!(
            code(GraphWrite::new(
                source(),
                vec![node()],
                vec![edge(End::Node(1), id)]
            )),
            ErrorCode::UnknownReference
        );
        let many = vec![node(); MAX_WRITE_ITEMS + 1];
        assert_eq!(
            code(GraphWrite::new(source(), many, vec![])),
            ErrorCode::InvalidBatch
        );
        let mut bad_source = source();
        bad_source.source_type = SourceType::IngestFile;
        assert_eq!(
            code(GraphWrite::new(bad_source, vec![node()], vec![])),
            ErrorCode::InvalidSourcePath
        );
    }

    fn input(reference: Option<&str>) -> NodeInput {
        NodeInput {
            reference: reference.map(str::to_owned),
            node_type: NodeType::Goal,
            content: format!("goal {reference:?}"),
            summary: None,
            importance: Some(90),
            confidence: None,
            supersedes: vec![],
        }
    }

    fn link(from: &str, to: &str) -> EdgeInput {
        EdgeInput {
            from: from.into(),
            to: to.into(),
            edge_type: EdgeType::RelatedTo,
            weight: None,
            reason: None,
        }
    }

    #[test]
    fn edges_name_nodes_by_reference_or_by_id() {
        let limits = Limits::default();
        let stored = Uuid::now_v7();
        let write = RememberInput {
            source: source(),
            memories: vec![input(Some("a")), input(None), input(Some("b"))],
            edges: vec![link("a", "b"), link("b", &stored.to_string())],
        }
        .validate(&limits)
        .unwrap();
        assert_eq!(write.nodes.len(), 3);
        assert_eq!(
            (write.edges[0].from, write.edges[0].to),
            (End::Node(0), End::Node(2))
        );
        assert_eq!(write.edges[1].to, End::Id(stored));
        let refused = |memories: Vec<NodeInput>, edges: Vec<EdgeInput>| {
            RememberInput {
                source: source(),
                memories,
                edges,
            }
            .validate(&limits)
            .unwrap_err()
            .code
        };
        assert_eq!(
            refused(vec![input(Some("a"))], vec![link("a", "nowhere")]),
            ErrorCode::UnknownReference
        );
        assert_eq!(
            refused(vec![input(Some("a")), input(Some("a"))], vec![]),
            ErrorCode::UnknownReference
        );
        assert_eq!(
            refused(vec![input(Some(&stored.to_string()))], vec![]),
            ErrorCode::UnknownReference
        );
        assert_eq!(
            refused(vec![input(Some("a"))], vec![link("a", "a")]),
            ErrorCode::SelfLink
        );
    }
}
