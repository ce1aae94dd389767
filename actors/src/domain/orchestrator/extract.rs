//! The deterministic extractor of the ingestion drop-zone (orchestrator_memory_subsystem.md,
//! "Ingestion", step 2): typed candidate memories read out of a Markdown or text file by
//! its visible structure, the same file always giving the same memories.
//!
//! - A labelled line — `Goal:`, `TODO:`, `Decision:`, `Preference:`, `Fact:`, `Event:`,
//!   `Identity:`, `Observation:` or `Note:` (and a few synonyms, any case, bold or in a list)
//!   — is a memory of that type; so is a heading that carries a label (`## Goal: ...`).
//! - An open checklist item (`- [ ] ...`) is a `Todo`; a checked one (`- [x]`) is done and
//!   left out.
//! - A list item under a heading that names a type (`## Decisions`, `## Next steps`) is a
//!   memory of that type.
//! - Any other paragraph is an `Observation`, prefixed with its heading, so that notes with
//!   no markers are still remembered (and found by their heading's words).
//! - A section with exactly one goal gets a `PartOf` edge from each of its todos to it.
//!
//! Code blocks are skipped (a `TODO:` in code is not the user's). Paragraphs longer than a
//! memory may be are split at lines, then words. The same typed text twice is one memory.

use std::collections::HashSet;

use super::edge::EdgeType;
use super::graph_write::{EdgeInput, NodeInput};
use super::node::NodeType;

/// What the extractor read out of one file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Extracted {
    pub memories: Vec<NodeInput>,
    pub edges: Vec<EdgeInput>,
    /// Checked checklist items left out (done work is not an open todo).
    pub done_items: usize,
}

/// Reads typed memories out of `text`, each at most `max_bytes` long.
pub fn extract(text: &str, max_bytes: usize) -> Extracted {
    let mut reader = Reader {
        max_bytes: max_bytes.max(64),
        ..Reader::default()
    };
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if let Some(marker) = fence {
            if trimmed.starts_with(marker) {
                fence = None;
            }
            continue;
        }
        if let Some(marker) = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m)) {
            reader.end_paragraph();
            fence = Some(marker);
            continue;
        }
        reader.line(trimmed);
    }
    reader.end_paragraph();
    reader.end_section();
    reader.out
}

#[derive(Default)]
struct Reader {
    max_bytes: usize,
    out: Extracted,
    /// The current heading's text, and the type it names for its list items.
    heading: Option<String>,
    heading_type: Option<NodeType>,
    /// Indexes of the current section's goals and todos (for `PartOf` edges).
    section_goals: Vec<usize>,
    section_todos: Vec<usize>,
    /// Lines of the paragraph being read.
    paragraph: Vec<String>,
    seen: HashSet<(NodeType, String)>,
}

impl Reader {
    fn line(&mut self, line: &str) {
        if line.is_empty() {
            self.end_paragraph();
            return;
        }
        if let Some(heading) = heading(line) {
            self.end_paragraph();
            self.end_section();
            match labelled(heading) {
                Some((node_type, text)) => {
                    self.heading = Some(text.to_owned());
                    self.heading_type = None;
                    self.push(node_type, text);
                }
                None => {
                    self.heading = Some(heading.to_owned());
                    self.heading_type = section_type(heading);
                }
            }
            return;
        }
        let (item, text) = match list_item(line) {
            Some(text) => (true, text),
            None => (false, line),
        };
        if item {
            match checklist(text) {
                Some((true, _)) => {
                    self.end_paragraph();
                    self.out.done_items += 1;
                    return;
                }
                Some((false, task)) => {
                    self.end_paragraph();
                    self.push(NodeType::Todo, task);
                    return;
                }
                None => {}
            }
        }
        if let Some((node_type, text)) = labelled(text) {
            self.end_paragraph();
            self.push(node_type, text);
            return;
        }
        if item && let Some(node_type) = self.heading_type {
            self.end_paragraph();
            self.push(node_type, text);
            return;
        }
        self.paragraph.push(text.to_owned());
    }

    /// The paragraph read so far, as observations (split when longer than a memory may be).
    fn end_paragraph(&mut self) {
        if self.paragraph.is_empty() {
            return;
        }
        let lines = std::mem::take(&mut self.paragraph);
        let prefix = self
            .heading
            .as_ref()
            .map(|h| format!("{h}: "))
            .unwrap_or_default();
        for chunk in chunks(&lines, self.max_bytes.saturating_sub(prefix.len()).max(32)) {
            self.push(NodeType::Observation, &format!("{prefix}{chunk}"));
        }
    }

    /// Links the section's todos to its goal, when it has exactly one.
    fn end_section(&mut self) {
        let goals = std::mem::take(&mut self.section_goals);
        let todos = std::mem::take(&mut self.section_todos);
        if let [goal] = goals[..] {
            for todo in todos {
                self.out.edges.push(EdgeInput {
                    from: reference(todo),
                    to: reference(goal),
                    edge_type: EdgeType::PartOf,
                    weight: None,
                    reason: Some("a todo in the goal's section".to_owned()),
                });
            }
        }
        self.heading = None;
        self.heading_type = None;
    }

    fn push(&mut self, node_type: NodeType, text: &str) {
        let content = text.trim();
        if content.is_empty() || content.len() > self.max_bytes {
            return;
        }
        let key = (
            node_type,
            content.split_whitespace().collect::<Vec<_>>().join(" "),
        );
        if !self.seen.insert(key) {
            return;
        }
        let index = self.out.memories.len();
        match node_type {
            NodeType::Goal => self.section_goals.push(index),
            NodeType::Todo => self.section_todos.push(index),
            _ => {}
        }
        self.out.memories.push(NodeInput {
            reference: Some(reference(index)),
            node_type,
            content: content.to_owned(),
            summary: None,
            importance: None,
            confidence: None,
            supersedes: Vec::new(),
        });
    }
}

/// The write-local name of the `index`th memory.
fn reference(index: usize) -> String {
    format!("m{index}")
}

/// A Markdown heading's text.
fn heading(line: &str) -> Option<&str> {
    let hashes = line.bytes().take_while(|b| *b == b'#').count();
    if !(1..=6).contains(&hashes) {
        return None;
    }
    let rest = &line[hashes..];
    if !rest.starts_with([' ', '\t']) {
        return None;
    }
    let text = rest.trim().trim_end_matches('#').trim();
    (!text.is_empty()).then_some(text)
}

/// A list item's text (after `-`, `*`, `+` or `1.`/`1)`).
fn list_item(line: &str) -> Option<&str> {
    if let Some(rest) = line.strip_prefix(['-', '*', '+'])
        && rest.starts_with([' ', '\t'])
    {
        return Some(rest.trim_start());
    }
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 && digits <= 9 {
        let rest = &line[digits..];
        if let Some(rest) = rest.strip_prefix(['.', ')'])
            && rest.starts_with([' ', '\t'])
        {
            return Some(rest.trim_start());
        }
    }
    None
}

/// A checklist item: whether it is checked, and its text.
fn checklist(text: &str) -> Option<(bool, &str)> {
    let rest = text.strip_prefix('[')?;
    let (mark, rest) = rest.split_at_checked(1)?;
    let rest = rest.strip_prefix(']')?;
    let done = match mark {
        " " => false,
        "x" | "X" => true,
        _ => return None,
    };
    Some((done, rest.trim()))
}

/// A labelled line (`Decision: ...`, `**TODO:** ...`): its type and its text.
fn labelled(text: &str) -> Option<(NodeType, &str)> {
    let (label, rest) = text.split_once(':')?;
    let label = label.trim().trim_matches(['*', '_']).trim();
    if label.len() > 12 {
        return None;
    }
    let node_type = match label.to_ascii_lowercase().as_str() {
        "goal" | "objective" => NodeType::Goal,
        "todo" | "to do" | "to-do" | "task" | "action" => NodeType::Todo,
        "decision" | "decided" => NodeType::Decision,
        "preference" | "prefers" => NodeType::Preference,
        "fact" => NodeType::Fact,
        "event" => NodeType::Event,
        "identity" => NodeType::Identity,
        "observation" | "note" => NodeType::Observation,
        _ => return None,
    };
    let rest = rest.trim_start_matches(['*', '_']).trim();
    (!rest.is_empty()).then_some((node_type, rest))
}

/// The type a heading names for the list items under it.
fn section_type(heading: &str) -> Option<NodeType> {
    let name = heading.trim().trim_end_matches(':').to_ascii_lowercase();
    Some(match name.as_str() {
        "goals" | "goal" | "objectives" => NodeType::Goal,
        "todo" | "todos" | "to do" | "to-do" | "tasks" | "action items" | "next steps" => {
            NodeType::Todo
        }
        "decisions" | "decision" | "decided" => NodeType::Decision,
        "preferences" | "preference" => NodeType::Preference,
        "facts" => NodeType::Fact,
        "events" | "timeline" => NodeType::Event,
        "identity" | "identities" => NodeType::Identity,
        "observations" => NodeType::Observation,
        _ => return None,
    })
}

/// `lines` joined into chunks of at most `max` bytes: at line ends where possible, else at
/// spaces, else at character boundaries.
fn chunks(lines: &[String], max: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let words = lines.iter().flat_map(|line| {
        let mut parts: Vec<(&str, bool)> = line.split(' ').map(|w| (w, false)).collect();
        if let Some(last) = parts.last_mut() {
            last.1 = true;
        }
        parts
    });
    let mut pending_break = false;
    for (word, line_end) in words {
        let separator = if current.is_empty() {
            ""
        } else if pending_break {
            "\n"
        } else {
            " "
        };
        if current.len() + separator.len() + word.len() > max && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        } else {
            current.push_str(separator);
        }
        let mut word = word;
        while word.len() > max {
            let mut cut = max;
            while !word.is_char_boundary(cut) {
                cut -= 1;
            }
            out.push(word[..cut].to_owned());
            word = &word[cut..];
        }
        current.push_str(word);
        pending_break = line_end;
    }
    if !current.trim().is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed(e: &Extracted) -> Vec<(NodeType, &str)> {
        e.memories
            .iter()
            .map(|m| (m.node_type, m.content.as_str()))
            .collect()
    }

    #[test]
    fn labels_checklists_and_typed_headings_give_typed_memories() {
        let text = "\
# Billing export

Goal: Ship the billing export by Friday
- [ ] Write the CSV writer
- [x] Pick a format
TODO: ask finance about rounding
**Decision:** exports are CSV, not XLSX.

## Preferences
- The finance team reads reports as PDF
- Numbers with two decimals

## Next steps
1. Review the schema
";
        let e = extract(text, 4096);
        assert_eq!(
            typed(&e),
            vec![
                (NodeType::Goal, "Ship the billing export by Friday"),
                (NodeType::Todo, "Write the CSV writer"),
                (NodeType::Todo, "ask finance about rounding"),
                (NodeType::Decision, "exports are CSV, not XLSX."),
                (
                    NodeType::Preference,
                    "The finance team reads reports as PDF"
                ),
                (NodeType::Preference, "Numbers with two decimals"),
                (NodeType::Todo, "Review the schema"),
            ]
        );
        assert_eq!(e.done_items, 1);
        // The goal's section links its two todos to it; the later section has no goal.
        let edges: Vec<_> = e
            .edges
            .iter()
            .map(|e| (e.from.as_str(), e.to.as_str(), e.edge_type))
            .collect();
        assert_eq!(
            edges,
            vec![
                ("m1", "m0", EdgeType::PartOf),
                ("m2", "m0", EdgeType::PartOf)
            ]
        );
    }

    #[test]
    fn prose_becomes_observations_with_its_heading_and_code_is_skipped() {
        let text = "\
## Replication
The billing database is replicated
to Dublin every night.

```
TODO: not a user's todo
```
Another paragraph.
";
        let e = extract(text, 4096);
        assert_eq!(
            typed(&e),
            vec![
                (
                    NodeType::Observation,
                    "Replication: The billing database is replicated\nto Dublin every night."
                ),
                (NodeType::Observation, "Replication: Another paragraph."),
            ]
        );
    }

    #[test]
    fn a_heading_with_a_label_is_a_memory_and_its_sections_goal() {
        let e = extract(
            "## Goal: Migrate to Postgres 17\n- [ ] dump the old cluster\n",
            4096,
        );
        assert_eq!(
            typed(&e),
            vec![
                (NodeType::Goal, "Migrate to Postgres 17"),
                (NodeType::Todo, "dump the old cluster"),
            ]
        );
        assert_eq!(e.edges.len(), 1);
    }

    #[test]
    fn the_same_typed_text_twice_is_one_memory_and_labels_need_a_colon() {
        let e = extract(
            "TODO: call Bob\n\nTODO:   call   Bob\nTODO call Alice\n",
            4096,
        );
        assert_eq!(
            typed(&e),
            vec![
                (NodeType::Todo, "call Bob"),
                (NodeType::Observation, "TODO call Alice"),
            ]
        );
    }

    #[test]
    fn long_paragraphs_are_split_within_the_limit_and_nothing_is_lost() {
        let words: Vec<String> = (0..400).map(|i| format!("word{i}")).collect();
        let text = words.join(" ");
        let e = extract(&text, 200);
        assert!(e.memories.len() > 1);
        let mut seen = Vec::new();
        for m in &e.memories {
            assert!(m.content.len() <= 200, "{} bytes", m.content.len());
            seen.extend(m.content.split_whitespace().map(str::to_owned));
        }
        assert_eq!(seen, words);
        // A word longer than the limit is cut at character boundaries.
        let word: String = (0..100).map(|i| format!("é{i}")).collect();
        let e = extract(&word, 100);
        assert!(e.memories.iter().all(|m| m.content.len() <= 100));
        let joined: String = e.memories.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(joined, word);
    }

    #[test]
    fn the_same_text_gives_the_same_memories() {
        let text = "# A\nGoal: g\n- [ ] t\nsome prose\n";
        assert_eq!(extract(text, 4096), extract(text, 4096));
        assert_eq!(extract("", 4096), Extracted::default());
    }
}
