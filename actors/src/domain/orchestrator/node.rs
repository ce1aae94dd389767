//! A memory node of an orchestrator's graph (orchestrator_memory_subsystem.md, "Memory
//! Node"): its type, status and bounds, and the normalised text it holds. What these types
//! refuse the database refuses too (migration 29's checks).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::source::Source;
use crate::domain::text::{Limits, check_content};
use crate::error::{ErrorCode, MemoryError, MemoryResult};

crate::domain::string_enum! {
    /// What a node records.
    NodeType {
        /// Something true about the world or the user.
        Fact => "Fact",
        /// How the user likes things done.
        Preference => "Preference",
        /// A choice made, to be remembered and not reopened.
        Decision => "Decision",
        /// Who someone or something is.
        Identity => "Identity",
        /// Something that happened.
        Event => "Event",
        /// Something noticed, not yet a fact.
        Observation => "Observation",
        /// An outcome being worked towards.
        Goal => "Goal",
        /// A task still to do.
        Todo => "Todo",
    }
}

impl NodeType {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}

crate::domain::string_enum! {
    /// Whether a node still holds. Only `active` nodes are recalled; the others stay, with
    /// their edges, for provenance.
    NodeStatus {
        Active => "active",
        /// Replaced by a newer node (an `Updates` edge points from it to this one).
        Superseded => "superseded",
        /// Withdrawn: it was wrong.
        Retracted => "retracted",
    }
}

impl NodeStatus {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }
}

/// The highest importance.
pub const MAX_IMPORTANCE: i16 = 100;
/// The importance of a node given none.
pub const DEFAULT_IMPORTANCE: i16 = 50;
/// The confidence of a node given none.
pub const DEFAULT_CONFIDENCE: f64 = 0.8;
/// The longest summary, in characters; a summary derived from the content is cut shorter.
pub const MAX_SUMMARY_CHARS: usize = 280;
/// How long a derived summary may be, in characters, before it is cut at a word.
const DERIVED_SUMMARY_CHARS: usize = 160;

/// A node to write, validated: normalised text, bounds held.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNode {
    pub node_type: NodeType,
    pub importance: i16,
    pub content: String,
    pub summary: String,
    pub confidence: f64,
}

impl NewNode {
    /// Validates a node as a caller or an extractor gives it: `content` normalised (see
    /// `normalise`), `summary` normalised or derived from the content when absent.
    pub fn new(
        node_type: NodeType,
        content: &str,
        summary: Option<&str>,
        importance: Option<i64>,
        confidence: Option<f64>,
        limits: &Limits,
    ) -> MemoryResult<NewNode> {
        let content = normalised("content", content, limits)?;
        let summary = match summary {
            Some(summary) => {
                let summary = normalised("summary", summary, limits)?;
                if summary.chars().count() > MAX_SUMMARY_CHARS {
                    return Err(MemoryError::new(
                        ErrorCode::ContentTooLarge,
                        format!("`summary` is longer than {MAX_SUMMARY_CHARS} characters"),
                    ));
                }
                summary
            }
            None => derive_summary(&content),
        };
        let importance = match importance {
            None => DEFAULT_IMPORTANCE,
            Some(i) if (0..=i64::from(MAX_IMPORTANCE)).contains(&i) => i as i16,
            Some(i) => {
                return Err(MemoryError::new(
                    ErrorCode::InvalidImportance,
                    format!("`importance` is {i}; a node's is an integer from 0 to 100"),
                ));
            }
        };
        let confidence = match confidence {
            None => DEFAULT_CONFIDENCE,
            Some(c) if (0.0..=1.0).contains(&c) => c,
            Some(c) => {
                return Err(MemoryError::new(
                    ErrorCode::InvalidConfidence,
                    format!("`confidence` is {c}; a node's is from 0.0 to 1.0"),
                ));
            }
        };
        Ok(NewNode {
            node_type,
            importance,
            content,
            summary,
            confidence,
        })
    }

    /// What makes two nodes the same memory: their type and content. Writing a node again
    /// (a file dropped twice, a retried call) finds the first rather than adding a second.
    pub fn fingerprint(&self) -> Vec<u8> {
        let mut hash = Sha256::new();
        hash.update(self.node_type.as_str());
        hash.update([0]);
        hash.update(&self.content);
        hash.finalize().to_vec()
    }
}

/// A node as stored, with its provenance.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    pub memory_id: Uuid,
    pub orchestrator_id: String,
    #[serde(rename = "type")]
    pub node_type: NodeType,
    pub importance: i16,
    pub content: String,
    pub summary: String,
    pub confidence: f64,
    pub source: Source,
    pub status: NodeStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Plain text as nodes hold it: Unicode whitespace runs become one space (a line break
/// stays one line break), control characters go, the ends are trimmed. Two captures of the
/// same words then have the same fingerprint whatever their layout.
pub fn normalise(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut pending: Option<char> = None;
    for c in text.chars() {
        if c == '\n' || c == '\r' {
            pending = Some('\n');
        } else if c.is_whitespace() {
            pending.get_or_insert(' ');
        } else if c.is_control() {
            continue;
        } else {
            if let Some(space) = pending.take()
                && !out.is_empty()
            {
                out.push(space);
            }
            out.push(c);
        }
    }
    out
}

/// `text` checked as content and normalised: blank once normalised (control characters
/// only) is empty.
fn normalised(field: &str, text: &str, limits: &Limits) -> MemoryResult<String> {
    let text = normalise(&check_content(field, text, limits)?);
    if text.is_empty() {
        return Err(MemoryError::new(
            ErrorCode::EmptyContent,
            format!("`{field}` holds no text once control characters are taken out"),
        ));
    }
    Ok(text)
}

/// A summary from the content: its first line, cut at a word before
/// `DERIVED_SUMMARY_CHARS` with an ellipsis when longer.
fn derive_summary(content: &str) -> String {
    let line = content.lines().next().unwrap_or(content);
    if line.chars().count() <= DERIVED_SUMMARY_CHARS {
        return line.to_owned();
    }
    let cut: String = line.chars().take(DERIVED_SUMMARY_CHARS).collect();
    let at_word = match cut.rfind(' ') {
        Some(space) if space > DERIVED_SUMMARY_CHARS / 2 => &cut[..space],
        _ => cut.as_str(),
    };
    format!("{}…", at_word.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(content: &str) -> MemoryResult<NewNode> {
        NewNode::new(
            NodeType::Fact,
            content,
            None,
            None,
            None,
            &Limits::default(),
        )
    }

    #[test]
    fn every_node_type_and_status_parses_and_nothing_else() {
        let types = [
            "Fact",
            "Preference",
            "Decision",
            "Identity",
            "Event",
            "Observation",
            "Goal",
            "Todo",
        ];
        assert_eq!(NodeType::ALL.len(), 8);
        for (t, text) in NodeType::ALL.iter().zip(types) {
            assert_eq!(text.parse::<NodeType>().unwrap(), *t);
            assert_eq!(t.as_str(), text);
        }
        for bad in ["fact", "FACT", "Task", "", "Goal "] {
            let err = bad.parse::<NodeType>().unwrap_err();
            assert_eq!(err.code, ErrorCode::UnknownValue, "{bad}");
        }
        for (s, text) in NodeStatus::ALL
            .iter()
            .zip(["active", "superseded", "retracted"])
        {
            assert_eq!(text.parse::<NodeStatus>().unwrap(), *s);
        }
        assert!("deleted".parse::<NodeStatus>().is_err());
    }

    #[test]
    fn importance_and_confidence_hold_their_bounds() {
        let limits = Limits::default();
        let with = |importance, confidence| {
            NewNode::new(
                NodeType::Goal,
                "ship it",
                None,
                importance,
                confidence,
                &limits,
            )
        };
        for ok in [0, 1, 50, 100] {
            assert_eq!(with(Some(ok), None).unwrap().importance, ok as i16);
        }
        for bad in [-1, 101, 1000, i64::MIN] {
            let err = with(Some(bad), None).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidImportance, "{bad}");
        }
        for ok in [0.0, 0.5, 1.0] {
            assert_eq!(with(None, Some(ok)).unwrap().confidence, ok);
        }
        for bad in [-0.01, 1.01, f64::NAN, f64::INFINITY] {
            let err = with(None, Some(bad)).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidConfidence, "{bad}");
        }
        let defaults = with(None, None).unwrap();
        assert_eq!(
            (defaults.importance, defaults.confidence),
            (DEFAULT_IMPORTANCE, DEFAULT_CONFIDENCE)
        );
    }

    #[test]
    fn content_is_normalised_plain_text() {
        assert_eq!(normalise("  a \t b\u{a0}c  "), "a b c");
        assert_eq!(normalise("one\r\n\r\n  two\u{7}"), "one\ntwo");
        let a = node("Use   the blue\tdeploy key").unwrap();
        let b = node("Use the blue deploy key\n").unwrap();
        assert_eq!(a.content, "Use the blue deploy key");
        assert_eq!(a.fingerprint(), b.fingerprint());
        // The same words as another type are another memory.
        let goal = NewNode::new(
            NodeType::Goal,
            "Use the blue deploy key",
            None,
            None,
            None,
            &Limits::default(),
        )
        .unwrap();
        assert_ne!(goal.fingerprint(), a.fingerprint());
        assert_eq!(node(" \n\t").unwrap_err().code, ErrorCode::EmptyContent);
        assert_eq!(
            node("\u{7}\u{1b}").unwrap_err().code,
            ErrorCode::EmptyContent
        );
        assert_eq!(
            node("nul \0 byte").unwrap_err().code,
            ErrorCode::InvalidCharacters
        );
    }

    #[test]
    fn a_summary_is_given_or_derived_from_the_first_line() {
        let n = node("Release on Friday\nafter the freeze lifts").unwrap();
        assert_eq!(n.summary, "Release on Friday");
        let long = "word ".repeat(100);
        let n = node(&long).unwrap();
        assert!(n.summary.ends_with('…'));
        assert!(n.summary.chars().count() <= DERIVED_SUMMARY_CHARS + 1);
        let too_long = "x".repeat(MAX_SUMMARY_CHARS + 1);
        let err = NewNode::new(
            NodeType::Fact,
            "c",
            Some(&too_long),
            None,
            None,
            &Limits::default(),
        )
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::ContentTooLarge);
    }
}
