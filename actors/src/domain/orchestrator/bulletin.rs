//! The memory bulletin (orchestrator_memory_subsystem.md, "Memory Bulletin"): what an
//! orchestrator should have in mind for one message, in six sections, every line citing the
//! memories it comes from, within a token limit counted with the service's tokenizer. When
//! the limit is reached, lines go from the least important sections first — goals, todos and
//! decisions are the last to go — and, within a section, from its end. Pure: the same
//! memories give the same bytes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::node::{Node, NodeType};
use super::recall::Recalled;
use crate::domain::context_block::TokenCounter;

/// The sections, in the order they are printed.
pub const SECTIONS: [&str; 6] = [
    "knowledge_summary",
    "active_goals",
    "open_todos",
    "recent_decisions",
    "preference_profile",
    "conflicts_and_uncertainties",
];

/// Which sections give up lines first when the limit is reached: the last here keep theirs
/// longest (goals, then todos, then decisions).
const DROP_ORDER: [&str; 6] = [
    "knowledge_summary",
    "preference_profile",
    "conflicts_and_uncertainties",
    "recent_decisions",
    "open_todos",
    "active_goals",
];

/// Below this confidence a memory is an uncertainty.
pub const UNCERTAIN_BELOW: f64 = 0.5;

/// What a bulletin is made from.
#[derive(Debug, Clone, Default)]
pub struct BulletinInput {
    /// What recall found for the message, best first.
    pub recalled: Vec<Recalled>,
    /// The orchestrator's active goals, todos, decisions and preferences, most important
    /// (then most recent) first.
    pub standing: Vec<Node>,
    /// Pairs of active memories a `Contradicts` edge joins.
    pub conflicts: Vec<(Node, Node)>,
}

/// One line: its text and the memories it cites.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulletinLine {
    pub text: String,
    pub memory_ids: Vec<Uuid>,
}

/// One section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BulletinSection {
    pub name: String,
    pub lines: Vec<BulletinLine>,
}

/// A bulletin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Bulletin {
    /// The text to put in the prompt.
    pub text: String,
    pub sections: Vec<BulletinSection>,
    /// Every memory cited, in order of first citation.
    pub memory_ids: Vec<Uuid>,
    /// Its size, in the service's tokens; at most the limit.
    pub tokens: usize,
    /// Lines left out to stay within the limit.
    pub dropped_lines: usize,
}

impl Bulletin {
    /// A bulletin with nothing in it (memory off, or nothing known yet).
    pub fn empty() -> Bulletin {
        Bulletin {
            text: String::new(),
            sections: Vec::new(),
            memory_ids: Vec::new(),
            tokens: 0,
            dropped_lines: 0,
        }
    }
}

/// A bulletin as answered: made now, or the fallback and why.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BulletinAnswer {
    #[serde(flatten)]
    pub bulletin: Bulletin,
    /// When it was made (the last successful one's time, for a fallback).
    pub generated_at: Option<DateTime<Utc>>,
    /// Set when this is not a bulletin made for this message: why, and what it is instead
    /// (the last successful bulletin, or an empty one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

fn line(node: &Node) -> BulletinLine {
    BulletinLine {
        text: format!("{} [{}]", node.summary, node.memory_id),
        memory_ids: vec![node.memory_id],
    }
}

/// Builds the bulletin of `input` within `max_tokens`.
pub fn build(input: &BulletinInput, max_tokens: usize, counter: &dyn TokenCounter) -> Bulletin {
    let standing = |t: NodeType| -> Vec<BulletinLine> {
        input
            .standing
            .iter()
            .filter(|n| n.node_type == t)
            .map(line)
            .collect()
    };
    let knowledge: Vec<BulletinLine> = input
        .recalled
        .iter()
        .filter(|r| {
            !matches!(
                r.node.node_type,
                NodeType::Goal | NodeType::Todo | NodeType::Decision | NodeType::Preference
            )
        })
        .map(|r| line(&r.node))
        .collect();
    let mut uncertain: Vec<BulletinLine> = input
        .conflicts
        .iter()
        .map(|(a, b)| BulletinLine {
            text: format!(
                "{} [{}] contradicts {} [{}]",
                a.summary, a.memory_id, b.summary, b.memory_id
            ),
            memory_ids: vec![a.memory_id, b.memory_id],
        })
        .collect();
    uncertain.extend(
        input
            .recalled
            .iter()
            .filter(|r| r.node.confidence < UNCERTAIN_BELOW)
            .map(|r| BulletinLine {
                text: format!(
                    "unsure ({:.2}): {} [{}]",
                    r.node.confidence, r.node.summary, r.node.memory_id
                ),
                memory_ids: vec![r.node.memory_id],
            }),
    );
    let mut sections: Vec<BulletinSection> = SECTIONS
        .iter()
        .map(|name| BulletinSection {
            name: (*name).to_owned(),
            lines: match *name {
                "knowledge_summary" => knowledge.clone(),
                "active_goals" => standing(NodeType::Goal),
                "open_todos" => standing(NodeType::Todo),
                "recent_decisions" => standing(NodeType::Decision),
                "preference_profile" => standing(NodeType::Preference),
                _ => uncertain.clone(),
            },
        })
        .collect();

    // Within the limit: drop lines, least important section first, each from its end.
    let (text, tokens, dropped) = if counter.additive() {
        fit_by_lines(&mut sections, max_tokens, counter)
    } else {
        fit_by_text(&mut sections, max_tokens, counter)
    };
    sections.retain(|s| !s.lines.is_empty());
    let mut memory_ids = Vec::new();
    for id in sections
        .iter()
        .flat_map(|s| &s.lines)
        .flat_map(|l| &l.memory_ids)
    {
        if !memory_ids.contains(id) {
            memory_ids.push(*id);
        }
    }
    Bulletin {
        text,
        sections,
        memory_ids,
        tokens,
        dropped_lines: dropped,
    }
}

/// Fits `sections` within `max_tokens` with a counter that adds up over lines: each line and
/// heading counted once (the counter remembers short lines), a dropped line's count taken
/// off the total. Answers the text, its count and the lines dropped.
fn fit_by_lines(
    sections: &mut [BulletinSection],
    max_tokens: usize,
    counter: &dyn TokenCounter,
) -> (String, usize, usize) {
    let heading = |name: &str| counter.count(&format!("## {name}\n"));
    let mut costs: Vec<Vec<usize>> = sections
        .iter()
        .map(|s| {
            s.lines
                .iter()
                .map(|l| counter.count(&format!("- {}\n", l.text)))
                .collect()
        })
        .collect();
    let mut total: usize = sections
        .iter()
        .zip(&costs)
        .filter(|(_, c)| !c.is_empty())
        .map(|(s, c)| heading(&s.name) + c.iter().sum::<usize>())
        .sum();
    let mut dropped = 0;
    for name in DROP_ORDER {
        let i = sections
            .iter()
            .position(|s| s.name == name)
            .expect("every name of DROP_ORDER is a section");
        while total > max_tokens && sections[i].lines.pop().is_some() {
            total -= costs[i].pop().unwrap_or(0);
            dropped += 1;
            if sections[i].lines.is_empty() {
                total -= heading(&sections[i].name);
            }
        }
    }
    (render(sections), total, dropped)
}

/// Fits `sections` within `max_tokens` with any counter: the whole text counted again after
/// each line dropped.
fn fit_by_text(
    sections: &mut [BulletinSection],
    max_tokens: usize,
    counter: &dyn TokenCounter,
) -> (String, usize, usize) {
    let mut dropped = 0;
    let mut text = render(sections);
    let mut tokens = counter.count(&text);
    'fit: for name in DROP_ORDER {
        while tokens > max_tokens {
            let section = sections
                .iter_mut()
                .find(|s| s.name == name)
                .expect("every name of DROP_ORDER is a section");
            if section.lines.pop().is_none() {
                continue 'fit;
            }
            dropped += 1;
            text = render(sections);
            tokens = counter.count(&text);
        }
    }
    (text, tokens, dropped)
}

/// The text: a heading per section with lines, then its lines.
fn render(sections: &[BulletinSection]) -> String {
    let mut out = String::new();
    for section in sections.iter().filter(|s| !s.lines.is_empty()) {
        out.push_str("## ");
        out.push_str(&section.name);
        out.push('\n');
        for line in &section.lines {
            out.push_str("- ");
            out.push_str(&line.text);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::orchestrator::node::NodeStatus;
    use crate::domain::orchestrator::recall::{RecallScores, Recalled};
    use crate::domain::orchestrator::source::{CapturedBy, Source, SourceType};
    use chrono::Utc;

    /// One token per word: enough to test the limit.
    struct Words;
    impl TokenCounter for Words {
        fn count(&self, text: &str) -> usize {
            text.split_whitespace().count()
        }
    }

    /// The same, saying that it adds up over lines (as the service's tokenizer does).
    struct LineWords;
    impl TokenCounter for LineWords {
        fn count(&self, text: &str) -> usize {
            text.split_whitespace().count()
        }
        fn additive(&self) -> bool {
            true
        }
    }

    #[test]
    fn counting_by_lines_fits_exactly_as_counting_the_text() {
        for limit in [0, 5, 8, 13, 20, 40, 60, 1000] {
            let by_text = build(&input(), limit, &Words);
            let by_lines = build(&input(), limit, &LineWords);
            assert_eq!(by_lines, by_text, "limit {limit}");
            assert_eq!(by_lines.tokens, Words.count(&by_lines.text));
        }
    }

    fn node(id: u128, node_type: NodeType, summary: &str, confidence: f64) -> Node {
        let now = Utc::now();
        Node {
            memory_id: Uuid::from_u128(id),
            orchestrator_id: "o".into(),
            node_type,
            importance: 50,
            content: summary.into(),
            summary: summary.into(),
            confidence,
            source: Source {
                source_type: SourceType::Manual,
                source_path: None,
                conversation_id: None,
                workflow_run_id: None,
                step_id: None,
                captured_by: CapturedBy::User,
            },
            status: NodeStatus::Active,
            created_at: now,
            updated_at: now,
        }
    }

    fn recalled(node: Node) -> Recalled {
        Recalled {
            node,
            score: 1.0,
            scores: RecallScores {
                relevance: 1.0,
                vector_rank: Some(1),
                text_rank: None,
                importance: 0.5,
                recency: 1.0,
                confidence: 0.8,
                contradicted: false,
            },
        }
    }

    fn input() -> BulletinInput {
        BulletinInput {
            recalled: vec![
                recalled(node(1, NodeType::Fact, "the api runs in dublin", 0.9)),
                recalled(node(
                    2,
                    NodeType::Observation,
                    "latency rose last week",
                    0.3,
                )),
            ],
            standing: vec![
                node(3, NodeType::Goal, "ship the export", 0.8),
                node(4, NodeType::Todo, "write the csv writer", 0.8),
                node(5, NodeType::Decision, "exports are csv", 0.8),
                node(6, NodeType::Preference, "reports as pdf", 0.8),
            ],
            conflicts: vec![(
                node(7, NodeType::Preference, "send on monday", 0.8),
                node(8, NodeType::Preference, "send on friday", 0.8),
            )],
        }
    }

    #[test]
    fn every_section_in_order_and_every_line_cites_its_memories() {
        let b = build(&input(), 1000, &Words);
        let names: Vec<&str> = b.sections.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, SECTIONS);
        for line in b.sections.iter().flat_map(|s| &s.lines) {
            assert!(!line.memory_ids.is_empty(), "{line:?}");
            for id in &line.memory_ids {
                assert!(line.text.contains(&id.to_string()), "{line:?}");
            }
        }
        assert!(
            b.text
                .starts_with("## knowledge_summary\n- the api runs in dublin [")
        );
        assert!(b.text.contains("unsure (0.30): latency rose last week"));
        assert!(b.text.contains("send on monday ["));
        assert_eq!(b.memory_ids.len(), 8);
        assert_eq!((b.dropped_lines, b.tokens), (0, Words.count(&b.text)));
    }

    #[test]
    fn the_limit_holds_and_goals_todos_and_decisions_go_last() {
        let full = build(&input(), 1000, &Words);
        let goals_todos_decisions = build(
            &BulletinInput {
                recalled: vec![],
                conflicts: vec![],
                standing: input().standing[..3].to_vec(),
            },
            1000,
            &Words,
        );
        // Just enough for goals, todos and decisions: everything else is dropped.
        let b = build(&input(), goals_todos_decisions.tokens, &Words);
        assert!(b.tokens <= goals_todos_decisions.tokens);
        assert_eq!(b.text, goals_todos_decisions.text);
        assert!(b.dropped_lines > 0 && b.tokens < full.tokens);
        // Tighter still: the decision goes before the todo, the todo before the goal.
        let b = build(&input(), 8, &Words);
        let names: Vec<&str> = b.sections.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["active_goals"]);
        assert!(b.tokens <= 8);
        assert_eq!(build(&input(), 0, &Words).text, "");
    }

    #[test]
    fn the_same_memories_give_the_same_bytes() {
        let a = build(&input(), 40, &Words);
        let b = build(&input(), 40, &Words);
        assert_eq!(a, b);
        assert_eq!(a.text, b.text);
    }
}
