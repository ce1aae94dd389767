//! Browsing an orchestrator's graph page by page (the dashboard's graph view): filters by
//! type, status and words, newest first by id (time-ordered UUIDv7, so nodes written while
//! someone pages land before the cursor and never shift a page), bounded pages, the total.

use serde::Deserialize;
use uuid::Uuid;

use super::node::{NodeStatus, NodeType};

/// Filters of a graph listing.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GraphQuery {
    /// Only nodes of this type.
    #[serde(rename = "type")]
    pub node_type: Option<NodeType>,
    /// Only nodes in this status (default: every status).
    pub status: Option<NodeStatus>,
    /// Only nodes whose words match (full text over summary and content).
    pub q: Option<String>,
    /// Nodes per page (1 to 200, default 50).
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    pub cursor: Option<Uuid>,
}
