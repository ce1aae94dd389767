//! What consolidation asks a model, one episode at a time, and the answer's shape: a system
//! prompt, worked examples as earlier turns of the chat, a JSON schema the server holds the
//! answer to, and the episode's message. Written for a 1.5-billion-parameter model as much as
//! for a hosted one: plain text rather than JSON in, few fields out, the time as the
//! episode's own words, known facts by short labels (F1, F2) rather than ids.
//!
//! The system prompt and the examples come first and never change, so a llama.cpp server
//! keeps them cached between calls; what changes (the shard's facts, the episode) comes last.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::domain::extraction::KnownFact;
use crate::domain::permanence::Permanence;

/// The most known facts one message carries (labelled F1 to F8).
pub const MAX_KNOWN: usize = 8;
/// The most known rules one message carries.
pub const MAX_KNOWN_RULES: usize = 4;
/// The most predicates in use one message names.
pub const MAX_PREDICATES: usize = 30;
/// The most facts and rules one answer may give (the schema's bounds).
const MAX_FACTS: usize = 6;
const MAX_RULES: usize = 3;

const SYSTEM: &str = "You turn one episode from a personal assistant's memory into facts and \
rules. The episode is a note the assistant wrote about its user, or one turn of a conversation \
(\"Name: text\"). Earlier turns, when shown, are context only: extract only what the episode \
itself says.

Facts: what the episode says about a person that is worth remembering later: identity, family, \
health, home, work, possessions, habits, likes and dislikes, plans, events in their life.
- subject: who it is about: \"user\" for the assistant's user, the speaker, or a person named in \
the episode. Give each fact to the person it is about: a fact about someone's mother has the \
mother as subject.
- predicate: a short snake_case verb (lives_in, works_as, likes, dislikes, has_child, attended, \
plans_to). Reuse a predicate in use when one fits.
- object: the value with its details, in a few words. Keep negation: \"doesn't like X\" is \
dislikes X.
- kind: permanent (identity, family, health), stable (home, work, habits, preferences), \
standard (interests, projects, possessions), volatile (current state, plans), ephemeral (what \
happened today).
- time: the exact words of the episode that say when (\"last month\", \"in 2024\", \
\"yesterday\"), else \"\".
- contradicts: the label of the known fact this fact makes false (F1, F2, ...), else \"\". A \
fact that changes a known fact keeps its subject and predicate.

Rules: a standing instruction or preference about how the assistant should act, written as an \
instruction to the assistant. A rule never just restates a fact. A rule the episode repeats is \
written exactly as the known rule.

Greetings, thanks, questions and small talk give nothing. Extract nothing you are unsure of. \
Answer with JSON only.";

/// Worked examples: (the user's message, the answer). Their names are unlike anyone's in
/// a shard, so a name copied from them fails the grounding check instead of passing as real.
const EXAMPLES: &[(&str, &str)] = &[
    (
        "Known facts:
F1: user | lives_in | Leeds
F2: user | likes | jazz
Predicates in use: lives_in, likes, works_as
Episode (2025-03-10, speaker: user):
User moved to Glasgow two weeks ago and no longer likes jazz. Her brother Bartek is a dentist. \
Please never send her voice messages.",
        r#"{"facts": [{"subject": "user", "predicate": "lives_in", "object": "Glasgow", "kind": "stable", "time": "two weeks ago", "contradicts": "F1"}, {"subject": "user", "predicate": "dislikes", "object": "jazz", "kind": "stable", "time": "", "contradicts": "F2"}, {"subject": "user", "predicate": "has_brother", "object": "Bartek", "kind": "permanent", "time": "", "contradicts": ""}, {"subject": "Bartek", "predicate": "works_as", "object": "dentist", "kind": "stable", "time": "", "contradicts": ""}], "rules": ["Never send the user voice messages."]}"#,
    ),
    (
        "Known facts: (none)
Predicates in use: (none)
Earlier turns (context only):
Pell: How was your weekend?
Episode (2024-07-14, speaker: Ruta):
Ruta: Hi Pell! Sad one, my dad passed away on Saturday. I've been taking pottery classes to \
cope. Running doesn't help me anymore.",
        r#"{"facts": [{"subject": "Ruta", "predicate": "lost", "object": "her father, who died", "kind": "permanent", "time": "on Saturday", "contradicts": ""}, {"subject": "Ruta", "predicate": "takes", "object": "pottery classes to cope with grief", "kind": "standard", "time": "", "contradicts": ""}, {"subject": "Ruta", "predicate": "dislikes", "object": "running", "kind": "volatile", "time": "", "contradicts": ""}], "rules": []}"#,
    ),
    (
        "Known facts: (none)
Predicates in use: takes, lost
Earlier turns (context only):
Ruta: Hi Pell! Sad one, my dad passed away on Saturday.
Episode (2024-07-14, speaker: Pell):
Pell: Oh no, I'm so sorry Ruta. That's so hard. Sending you a hug!",
        r#"{"facts": [], "rules": []}"#,
    ),
];

/// One episode as the model reads it.
pub struct EpisodeMessage<'a> {
    /// The shard's facts most related to the episode, labelled F1, F2, ... in this order.
    pub known: &'a [&'a KnownFact],
    /// The shard's rules most related to the episode.
    pub rules: &'a [&'a str],
    /// Predicates the shard uses, most used first.
    pub predicates: &'a [&'a str],
    /// The turns before it in its session, oldest first.
    pub earlier: &'a [String],
    /// When it happened (YYYY-MM-DD).
    pub date: String,
    /// Its speaker as written, or "user".
    pub speaker: &'a str,
    /// The text (or one part of a long one).
    pub text: &'a str,
}

impl EpisodeMessage<'_> {
    /// The user message.
    pub fn render(&self) -> String {
        let mut out = String::from("Known facts:");
        if self.known.is_empty() {
            out.push_str(" (none)");
        }
        for (i, f) in self.known.iter().enumerate() {
            out.push_str(&format!(
                "\nF{}: {} | {} | {}",
                i + 1,
                f.subject,
                f.predicate,
                one_line(&f.content)
            ));
        }
        if !self.rules.is_empty() {
            out.push_str("\nKnown rules:");
            for rule in self.rules {
                out.push_str("\n- ");
                out.push_str(&one_line(rule));
            }
        }
        out.push_str("\nPredicates in use: ");
        if self.predicates.is_empty() {
            out.push_str("(none)");
        }
        out.push_str(&self.predicates.join(", "));
        if !self.earlier.is_empty() {
            out.push_str("\nEarlier turns (context only):");
            for turn in self.earlier {
                out.push('\n');
                out.push_str(&one_line(turn));
            }
        }
        out.push_str(&format!(
            "\nEpisode ({}, speaker: {}):\n{}",
            self.date, self.speaker, self.text
        ));
        out
    }

    /// The chat: the system prompt, the examples, then this episode.
    pub fn messages(&self) -> Vec<Value> {
        let mut messages = vec![json!({"role": "system", "content": SYSTEM})];
        for (user, answer) in EXAMPLES {
            messages.push(json!({"role": "user", "content": user}));
            messages.push(json!({"role": "assistant", "content": answer}));
        }
        messages.push(json!({"role": "user", "content": self.render()}));
        messages
    }
}

/// A text on one line: a known fact or an earlier turn must not break the message's layout.
fn one_line(text: &str) -> String {
    const MAX_CHARS: usize = 300;
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}

/// The answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    pub facts: Vec<AnswerFact>,
    pub rules: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerFact {
    pub subject: String,
    pub predicate: String,
    pub object: String,
    pub kind: Permanence,
    pub time: String,
    /// A known fact's label (`F2`), or empty.
    pub contradicts: String,
}

/// The JSON schema the answer is held to: every field required (a strict schema), the
/// kinds and labels as enums, so a server that enforces the schema cannot answer a label
/// that was not given.
pub fn schema(known: usize) -> Value {
    let labels: Vec<String> = std::iter::once(String::new())
        .chain((1..=known.min(MAX_KNOWN)).map(|i| format!("F{i}")))
        .collect();
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["facts", "rules"],
        "properties": {
            "facts": {"type": "array", "maxItems": MAX_FACTS, "items": {
                "type": "object",
                "additionalProperties": false,
                "required": ["subject", "predicate", "object", "kind", "time", "contradicts"],
                "properties": {
                    "subject": {"type": "string"},
                    "predicate": {"type": "string"},
                    "object": {"type": "string"},
                    "kind": {"enum": Permanence::ALL.iter().map(|p| p.as_str()).collect::<Vec<_>>()},
                    "time": {"type": "string"},
                    "contradicts": {"enum": labels},
                },
            }},
            "rules": {"type": "array", "maxItems": MAX_RULES, "items": {"type": "string"}},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest instance of the schema subset `schema` uses, with every array holding
    /// one item: what a model held to the schema (`strict`) could answer.
    fn instance(schema: &Value) -> Value {
        if let Some(values) = schema["enum"].as_array() {
            return values.last().unwrap().clone();
        }
        match schema["type"].as_str() {
            Some("object") => {
                let properties = schema["properties"].as_object().expect("properties");
                let required: Vec<&str> = schema["required"]
                    .as_array()
                    .expect("required")
                    .iter()
                    .map(|k| k.as_str().unwrap())
                    .collect();
                for key in properties.keys() {
                    assert!(
                        required.contains(&key.as_str()),
                        "strict mode requires {key}"
                    );
                }
                properties
                    .iter()
                    .map(|(k, v)| (k.clone(), instance(v)))
                    .collect::<serde_json::Map<_, _>>()
                    .into()
            }
            Some("array") => json!([instance(&schema["items"])]),
            Some("string") => json!("x"),
            other => panic!("a schema type the answer does not use: {other:?}"),
        }
    }

    /// What the schema asks the model for is exactly what the answer parses, and every
    /// worked example is an answer the schema allows.
    #[test]
    fn the_schema_and_the_examples_match_the_answer() {
        let answer = instance(&schema(2));
        let parsed: Answer =
            serde_json::from_value(answer.clone()).unwrap_or_else(|e| panic!("{e}: {answer:#}"));
        assert_eq!(parsed.facts[0].contradicts, "F2");
        assert_eq!(parsed.rules.len(), 1);
        for (_, example) in EXAMPLES {
            let parsed: Answer = serde_json::from_str(example).expect(example);
            for fact in parsed.facts {
                assert!(fact.contradicts.is_empty() || fact.contradicts.starts_with('F'));
            }
        }
    }

    #[test]
    fn the_message_labels_known_facts_and_keeps_each_on_one_line() {
        let known = KnownFact {
            id: uuid::Uuid::nil(),
            subject: "sam".into(),
            predicate: "lives_in".into(),
            content: "Lisbon,\nnear the river".into(),
        };
        let earlier = vec!["Sam: hi\nthere".to_owned()];
        let message = EpisodeMessage {
            known: &[&known],
            rules: &["Never call Sam after 6pm."],
            predicates: &["lives_in", "likes"],
            earlier: &earlier,
            date: "2026-05-02".into(),
            speaker: "Sam",
            text: "Sam: I moved to Porto.",
        };
        assert_eq!(
            message.render(),
            "Known facts:\nF1: sam | lives_in | Lisbon, near the river\n\
             Known rules:\n- Never call Sam after 6pm.\n\
             Predicates in use: lives_in, likes\n\
             Earlier turns (context only):\nSam: hi there\n\
             Episode (2026-05-02, speaker: Sam):\nSam: I moved to Porto."
        );
        assert_eq!(message.messages().len(), 2 + 2 * EXAMPLES.len());
    }
}
