//! What a file dropped in an orchestrator's ingest folder holds (orchestrator_memory_subsystem.md,
//! "Ingestion", steps 2–3): its kind by extension, the typed memories read out of it —
//! a JSON document's own nodes and edges, or what the deterministic extractor finds in
//! Markdown and text — and, when it holds none that can be written, the machine-readable
//! reasons why (`Reason`), which its rejection manifest lists.

use serde::{Deserialize, Serialize};

use super::extract::Extracted;
use super::graph_write::{EdgeInput, NodeInput, RememberInput};
use super::source::{CapturedBy, Source, SourceType};
use crate::error::MemoryError;

/// The kinds of file the drop-zone reads; any other is rejected unread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    Text,
    Markdown,
    Json,
}

impl FileKind {
    /// The kind a file's name says (`.txt`, `.md`, `.json`, in any case).
    pub fn of(name: &str) -> Option<FileKind> {
        let (stem, extension) = name.rsplit_once('.')?;
        if stem.is_empty() {
            return None;
        }
        match extension.to_ascii_lowercase().as_str() {
            "txt" => Some(FileKind::Text),
            "md" => Some(FileKind::Markdown),
            "json" => Some(FileKind::Json),
            _ => None,
        }
    }
}

/// Why a file was rejected, for machines: a stable `code` (the error codes of the tools
/// where the same check refuses a call, e.g. `importance_out_of_range`), a message for
/// people, and where in the file when that is known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reason {
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
}

impl Reason {
    pub fn new(code: &str, message: impl Into<String>) -> Reason {
        Reason {
            code: code.to_owned(),
            message: message.into(),
            line: None,
            column: None,
        }
    }
}

impl From<MemoryError> for Reason {
    fn from(e: MemoryError) -> Reason {
        Reason::new(e.code.as_str(), e.message)
    }
}

/// A JSON file: the shapes of `orchestrator_remember`, with a source that may name the
/// workflow run or conversation it came from (the rest is the file's).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Document {
    #[serde(default)]
    source: Option<DocumentSource>,
    #[serde(default)]
    memories: Vec<NodeInput>,
    #[serde(default)]
    edges: Vec<EdgeInput>,
}

/// A JSON file's source: each field optional.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct DocumentSource {
    #[serde(default)]
    source_type: Option<SourceType>,
    #[serde(default)]
    source_path: Option<String>,
    #[serde(default)]
    conversation_id: Option<String>,
    #[serde(default)]
    workflow_run_id: Option<String>,
    #[serde(default)]
    step_id: Option<String>,
    #[serde(default)]
    captured_by: Option<CapturedBy>,
}

/// What a file holds, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidates {
    pub input: RememberInput,
    /// Whether the file itself named the source path (a JSON document citing another file):
    /// that path is checked against the workspace like the file's own.
    pub path_given: bool,
    /// Checked checklist items the extractor left out.
    pub done_items: usize,
}

/// The source of a file at `path` (its canonical path): `ingest_file`, from that path,
/// captured by the extractor.
fn file_source(path: &str) -> Source {
    Source {
        source_type: SourceType::IngestFile,
        source_path: Some(path.to_owned()),
        conversation_id: None,
        workflow_run_id: None,
        step_id: None,
        captured_by: CapturedBy::Extractor,
    }
}

/// The typed memories a JSON document at `path` holds: sourced `ingest_file` from that
/// path, captured by `system`, unless the document says otherwise. A document that does
/// not parse, or holds nothing, is refused with its reasons.
pub fn json_candidates(text: &str, path: &str) -> Result<Candidates, Vec<Reason>> {
    let document: Document = serde_json::from_str(text).map_err(|e| {
        vec![Reason {
            line: Some(e.line()),
            column: Some(e.column()),
            ..Reason::new("invalid_json", e.to_string())
        }]
    })?;
    let given = document.source.unwrap_or_default();
    let path_given = given.source_path.is_some();
    let source = Source {
        source_type: given.source_type.unwrap_or(SourceType::IngestFile),
        source_path: given.source_path.or(Some(path.to_owned())),
        conversation_id: given.conversation_id,
        workflow_run_id: given.workflow_run_id,
        step_id: given.step_id,
        captured_by: given.captured_by.unwrap_or(CapturedBy::System),
    };
    not_empty(Candidates {
        input: RememberInput {
            source,
            memories: document.memories,
            edges: document.edges,
        },
        path_given,
        done_items: 0,
    })
}

/// What an extractor read out of a text file at `path`, sourced to it; refused when it is
/// nothing.
pub fn text_candidates(extracted: Extracted, path: &str) -> Result<Candidates, Vec<Reason>> {
    not_empty(Candidates {
        input: RememberInput {
            source: file_source(path),
            memories: extracted.memories,
            edges: extracted.edges,
        },
        path_given: false,
        done_items: extracted.done_items,
    })
}

fn not_empty(read: Candidates) -> Result<Candidates, Vec<Reason>> {
    if read.input.memories.is_empty() && read.input.edges.is_empty() {
        return Err(vec![Reason::new(
            "no_memories",
            "the file holds nothing to remember",
        )]);
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::orchestrator::edge::EdgeType;
    use crate::domain::orchestrator::extract::extract;
    use crate::domain::orchestrator::node::NodeType;

    const PATH: &str = "/srv/o1/memory/ingest/a.json";

    #[test]
    fn kinds_come_from_the_extension() {
        assert_eq!(FileKind::of("notes.MD"), Some(FileKind::Markdown));
        assert_eq!(FileKind::of("a.b.txt"), Some(FileKind::Text));
        assert_eq!(FileKind::of("x.json"), Some(FileKind::Json));
        for other in ["x.pdf", "README", "x.md.bak", ".md"] {
            assert_eq!(FileKind::of(other), None, "{other}");
        }
    }

    #[test]
    fn a_json_document_carries_typed_nodes_edges_and_its_run() {
        let text = r#"{
            "source": {"sourceType": "workflow_output", "workflowRunId": "run-7", "stepId": "s2"},
            "memories": [
                {"ref": "g", "type": "Goal", "content": "Ship it", "importance": 90},
                {"ref": "t", "type": "Todo", "content": "Write tests"}
            ],
            "edges": [{"from": "t", "to": "g", "edgeType": "PartOf"}]
        }"#;
        let read = json_candidates(text, PATH).unwrap();
        let source = &read.input.source;
        assert_eq!(source.source_type, SourceType::WorkflowOutput);
        assert_eq!(source.source_path.as_deref(), Some(PATH));
        assert_eq!(source.workflow_run_id.as_deref(), Some("run-7"));
        assert_eq!(source.captured_by, CapturedBy::System);
        assert!(!read.path_given);
        assert_eq!(read.input.memories[0].node_type, NodeType::Goal);
        assert_eq!(read.input.edges[0].edge_type, EdgeType::PartOf);
    }

    #[test]
    fn json_that_does_not_parse_says_where() {
        let bad = |text: &str| json_candidates(text, PATH).unwrap_err();
        let reasons = bad("{\n  \"memories\": [\n    {\"type\": \"Wish\", \"content\": \"x\"}]}");
        assert_eq!(reasons[0].code, "invalid_json");
        assert_eq!(reasons[0].line, Some(3));
        assert!(
            reasons[0].message.contains("Wish"),
            "{}",
            reasons[0].message
        );
        assert_eq!(bad("{\"memorys\": []}")[0].code, "invalid_json");
        assert_eq!(bad("[1, 2")[0].code, "invalid_json");
        assert_eq!(bad("{}")[0].code, "no_memories");
    }

    #[test]
    fn text_is_read_by_the_extractor_and_sourced_to_the_file() {
        let read = text_candidates(extract("Decision: CSV", 4096), PATH).unwrap();
        assert_eq!(read.input.source.source_type, SourceType::IngestFile);
        assert_eq!(read.input.source.captured_by, CapturedBy::Extractor);
        assert_eq!(read.input.memories[0].node_type, NodeType::Decision);
        let empty = text_candidates(extract(" \n\n- [x] done\n", 4096), PATH).unwrap_err();
        assert_eq!(empty[0].code, "no_memories");
    }
}
