//! What reads typed memories out of a dropped text file or a captured text, as
//! `memory.ingest.extractor` selects it: `deterministic` (the visible structure:
//! `domain/orchestrator/extract.rs`) or `llm` (the OpenAI-compatible endpoint of
//! `[consolidation.llm]`, asked for typed memories under a JSON schema).
//!
//! A model's answer is held to the schema and mapped to the same typed inputs as everything
//! else, then validated like a tool call's. When the model cannot read a text — its answer
//! is not valid, it refuses the input, or the text is longer than it is sent — the
//! deterministic extractor reads it instead, and the caller is told (a manifest's
//! `warnings`). A model that does not answer now (a timeout, 429, 5xx) is the caller's to
//! wait for: a dropped file stays in `ingest/` for the next pass.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::consolidation::{ChatClient, ExtractError};
use crate::domain::consolidation_status::AttemptFailure;
use crate::domain::orchestrator::edge::EdgeType;
use crate::domain::orchestrator::extract::{Extracted, extract};
use crate::domain::orchestrator::graph_write::{EdgeInput, NodeInput};
use crate::domain::orchestrator::node::NodeType;
use crate::domain::orchestrator::settings::MemoryExtractorKind;

/// The longest text sent to a model, in bytes; a longer one is read deterministically.
pub const MAX_MODEL_INPUT_BYTES: usize = 32 * 1024;

/// The most memories taken from one answer (a write's bound).
const MAX_MODEL_MEMORIES: usize = crate::domain::orchestrator::graph_write::MAX_WRITE_ITEMS;

const SYSTEM_PROMPT: &str = "You read a document an orchestrator (a process that routes \
channel messages to workflows) was given, and list what it should remember, as JSON matching \
the schema. Each memory has a type: Goal (an outcome being worked towards), Todo (an open task; \
finished tasks are not memories), Decision (a choice made), Preference (how someone likes things \
done), Fact (something true), Identity (who someone or something is), Event (something that \
happened), Observation (something noticed). content is one self-contained sentence in the \
document's words; importance 0-100; confidence 0-1. edges link memories by their index in \
memories: a todo that is part of a goal is PartOf it (from the todo to the goal); RelatedTo, \
CausedBy and Contradicts as the document says. Leave out what is not worth remembering; invent \
nothing.";

/// The configured extractor.
pub(crate) enum MemoryExtractor {
    Deterministic,
    Llm(ChatClient),
}

/// What an extractor read, and how.
#[derive(Debug)]
pub(crate) struct Reading {
    pub extracted: Extracted,
    /// `deterministic` or `llm`.
    pub extractor: &'static str,
    /// Why the model's reading was not used, when it was asked and was not.
    pub warning: Option<String>,
}

impl std::fmt::Debug for MemoryExtractor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemoryExtractor::Deterministic => "MemoryExtractor::Deterministic",
            MemoryExtractor::Llm(_) => "MemoryExtractor::Llm",
        })
    }
}

impl MemoryExtractor {
    /// The extractor `kind` names; fails only when the LLM client cannot be built.
    pub fn new(
        kind: MemoryExtractorKind,
        llm: &crate::config::LlmConfig,
    ) -> Result<MemoryExtractor, ExtractError> {
        Ok(match kind {
            MemoryExtractorKind::Deterministic => MemoryExtractor::Deterministic,
            MemoryExtractorKind::Llm => MemoryExtractor::Llm(ChatClient::new(llm)?),
        })
    }

    /// Reads `text`, each memory at most `max_bytes` long. Fails only when the model does
    /// not answer now (the caller decides whether to wait or to read deterministically).
    pub async fn read(&self, text: &str, max_bytes: usize) -> Result<Reading, ExtractError> {
        let deterministic = |warning: Option<String>| Reading {
            extracted: extract(text, max_bytes),
            extractor: "deterministic",
            warning,
        };
        let MemoryExtractor::Llm(client) = self else {
            return Ok(deterministic(None));
        };
        if text.len() > MAX_MODEL_INPUT_BYTES {
            return Ok(deterministic(Some(format!(
                "{} bytes: longer than the {MAX_MODEL_INPUT_BYTES} sent to the model; read by the deterministic extractor",
                text.len()
            ))));
        }
        let user = json!({"document": text}).to_string();
        match client
            .complete_json(SYSTEM_PROMPT, &user, "memories", answer_schema())
            .await
            .and_then(|answer| from_answer(answer, max_bytes))
        {
            Ok(extracted) => Ok(Reading {
                extracted,
                extractor: "llm",
                warning: None,
            }),
            Err(e) if e.kind() == AttemptFailure::Transient => Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "the model could not read a text; read by the deterministic extractor");
                Ok(deterministic(Some(format!(
                    "{e}; read by the deterministic extractor"
                ))))
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    memories: Vec<AnswerMemory>,
    edges: Vec<AnswerEdge>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerMemory {
    #[serde(rename = "type")]
    node_type: NodeType,
    content: String,
    importance: Option<i64>,
    confidence: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerEdge {
    from: usize,
    to: usize,
    #[serde(rename = "edgeType")]
    edge_type: EdgeType,
}

fn answer_schema() -> Value {
    let types: Vec<&str> = NodeType::ALL.iter().map(|t| t.as_str()).collect();
    let edge_types: Vec<&str> = EdgeType::ALL
        .iter()
        .map(|t| t.as_str())
        .filter(|t| *t != "Updates")
        .collect();
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["memories", "edges"],
        "properties": {
            "memories": {"type": "array", "items": {
                "type": "object", "additionalProperties": false,
                "required": ["type", "content", "importance", "confidence"],
                "properties": {
                    "type": {"enum": types},
                    "content": {"type": "string"},
                    "importance": {"type": ["integer", "null"]},
                    "confidence": {"type": ["number", "null"]},
                }}},
            "edges": {"type": "array", "items": {
                "type": "object", "additionalProperties": false,
                "required": ["from", "to", "edgeType"],
                "properties": {
                    "from": {"type": "integer"},
                    "to": {"type": "integer"},
                    "edgeType": {"enum": edge_types},
                }}},
        },
    })
}

/// The typed inputs of a model's answer. Bounds are checked later with everything else's;
/// what cannot be a memory here (empty or too long content, an edge naming no memory of
/// the answer or its own end) is left out rather than failing the whole text.
fn from_answer(answer: Value, max_bytes: usize) -> Result<Extracted, ExtractError> {
    let answer: Answer = serde_json::from_value(answer).map_err(|e| {
        ExtractError::Invalid(format!("the content does not match the schema: {e}"))
    })?;
    let mut kept = Vec::new();
    let mut index_of = vec![None; answer.memories.len()];
    for (i, m) in answer.memories.into_iter().enumerate() {
        let content = m.content.trim();
        if content.is_empty() || content.len() > max_bytes || kept.len() == MAX_MODEL_MEMORIES {
            continue;
        }
        index_of[i] = Some(kept.len());
        kept.push(NodeInput {
            reference: Some(format!("m{}", kept.len())),
            node_type: m.node_type,
            content: content.to_owned(),
            summary: None,
            importance: m.importance,
            confidence: m.confidence,
            supersedes: Vec::new(),
        });
    }
    let edges = answer
        .edges
        .into_iter()
        .filter_map(|e| {
            let from = (*index_of.get(e.from)?)?;
            let to = (*index_of.get(e.to)?)?;
            (from != to && e.edge_type != EdgeType::Updates).then(|| EdgeInput {
                from: format!("m{from}"),
                to: format!("m{to}"),
                edge_type: e.edge_type,
                weight: None,
                reason: None,
            })
        })
        .take(MAX_MODEL_MEMORIES)
        .collect();
    Ok(Extracted {
        memories: kept,
        edges,
        done_items: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_becomes_typed_inputs_and_what_cannot_be_is_left_out() {
        let answer = json!({
            "memories": [
                {"type": "Goal", "content": " Ship it ", "importance": 90, "confidence": null},
                {"type": "Todo", "content": "", "importance": null, "confidence": null},
                {"type": "Todo", "content": "Write tests", "importance": null, "confidence": 0.7},
            ],
            "edges": [
                {"from": 2, "to": 0, "edgeType": "PartOf"},
                {"from": 1, "to": 0, "edgeType": "PartOf"},
                {"from": 0, "to": 0, "edgeType": "RelatedTo"},
                {"from": 9, "to": 0, "edgeType": "RelatedTo"},
            ],
        });
        let read = from_answer(answer, 4096).unwrap();
        let memories: Vec<_> = read
            .memories
            .iter()
            .map(|m| (m.node_type, m.content.as_str(), m.reference.as_deref()))
            .collect();
        assert_eq!(
            memories,
            [
                (NodeType::Goal, "Ship it", Some("m0")),
                (NodeType::Todo, "Write tests", Some("m1")),
            ]
        );
        assert_eq!(read.edges.len(), 1);
        assert_eq!(
            (read.edges[0].from.as_str(), read.edges[0].to.as_str()),
            ("m1", "m0")
        );
    }

    #[test]
    fn an_answer_outside_the_schema_is_invalid() {
        for bad in [
            json!({"memories": [{"type": "Wish", "content": "x", "importance": null, "confidence": null}], "edges": []}),
            json!({"memories": [], "edges": [], "mood": "happy"}),
            json!({"memories": []}),
        ] {
            let err = from_answer(bad, 4096).unwrap_err();
            assert_eq!(err.kind(), AttemptFailure::InvalidAnswer, "{err}");
        }
    }

    #[test]
    fn every_schema_field_is_required_as_strict_mode_asks() {
        let schema = answer_schema();
        for part in [
            &schema,
            &schema["properties"]["memories"]["items"],
            &schema["properties"]["edges"]["items"],
        ] {
            let properties: Vec<&String> = part["properties"].as_object().unwrap().keys().collect();
            let required: Vec<&str> = part["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap())
                .collect();
            assert_eq!(properties.len(), required.len(), "{part}");
        }
    }
}
