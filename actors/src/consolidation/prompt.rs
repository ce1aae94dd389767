//! What consolidation asks a model, one episode at a time, and the answer's shape: a system
//! prompt, worked examples as earlier turns of the chat, a JSON schema the server holds the
//! answer to, and the episode's message. Written for a 1.5-billion-parameter model as much as
//! for a hosted one: plain text rather than JSON in, few fields out, the time as the
//! episode's own words, known facts by short labels (F1, F2) rather than ids, and the
//! subjects it may choose from listed in the schema (the user, the speaker, the names the
//! episode has), so that a server that holds the answer to it cannot invent one.
//!
//! What is in it was measured on a 1.5B model (docs/benchmarks.md, "Consolidation"): the
//! turns before the episode and a list of the shard's predicates were left out (the model
//! took facts from the other speaker's turn, and wrote facts for the listed predicates), the
//! episode's date too (it wrote dates into `time`); a plain-sentence `statement` first halved
//! the wrong facts; rules come before facts, and the empty example first.
//!
//! The system prompt and the examples come first and never change, so a llama.cpp server
//! keeps them cached between calls; what changes (the shard's facts, the episode) comes last.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::domain::extraction::KnownFact;
use crate::domain::grounding::names_in;
use crate::domain::permanence::Permanence;

/// The most known facts one message carries (labelled F1 to F8).
pub const MAX_KNOWN: usize = 8;
/// The most known rules one message carries.
pub const MAX_KNOWN_RULES: usize = 4;
/// The most facts and rules one answer may give (the schema's bounds).
const MAX_FACTS: usize = 5;
const MAX_RULES: usize = 2;

const SYSTEM: &str = r#"You turn one episode from a personal assistant's memory into rules and facts. The episode is a note the assistant wrote about its user, or one turn of a conversation ("Name: text"). Known facts are context only: take rules and facts from the episode alone.

Rules: only when the episode gives an instruction or a preference about how, when or how often the assistant should do something (reminders, calls, meetings, deliveries, answers, code). Write each as an instruction to the assistant ("Always ...", "Never ...", "Do not ..."). A one-off task is not a rule, and neither is anything about a person's life (habits, hobbies, plans, family, work): those are facts. Most episodes have no rule.

Facts: what the episode states about a person that is worth remembering later: identity, family, health, home, work, possessions, habits, interests, feelings, plans, events in their life. Never add anything the episode does not say.
- statement: the fact as one short plain sentence.
- subject: who the fact is about: "user" for the assistant's user, the speaker, or a person named in the episode. When the episode names a relative or friend ("her brother Bartek"), facts about that person have the name as subject.
- predicate: a short snake_case verb (lives_in, works_as, likes, dislikes, has_child, attended, plans_to). Never said, mentioned, asked or told: state what was said.
- object: the value with its details, in a few words. Keep negation: "doesn't like X" is dislikes X.
- kind: permanent (identity, family, health), stable (home, work, habits), standard (interests, projects, possessions), volatile (current state, plans), ephemeral (what happened today).
- time: the exact words of the episode that say when it happened or became true ("last month", "in 2024", "yesterday"), else "".
- contradicts: the label of the known fact that is no longer true because of this fact (F1, F2, ...), else "". A new value for a known fact keeps its subject and predicate.

Greetings, thanks, questions and small talk give nothing. Answer with JSON only."#;

/// Worked examples: (the user's message, the answer). Their names are unlike anyone's in
/// a shard; the schema's subjects are the episode's own words, so a name a model copies from
/// them cannot be a subject.
const EXAMPLES: &[(&str, &str)] = &[
    (
        r#"Known facts:
F1: Ruta | lost | her father, who died
Episode (speaker: Pell):
Pell: Oh no, I'm so sorry Ruta. That's so hard. Sending you a hug! How are you holding up?"#,
        r#"{"rules": [], "facts": []}"#,
    ),
    (
        r#"Known facts:
F1: user | lives_in | Leeds
Episode (speaker: user):
User moved to Glasgow two weeks ago. Her brother Bartek is a dentist and has asthma. She swims every Tuesday. She can't stand long emails and wants invoices sent on the first of the month."#,
        r#"{"rules": ["Keep emails to the user short.", "Send the user's invoices on the first of the month."], "facts": [{"statement": "The user lives in Glasgow.", "subject": "user", "predicate": "lives_in", "object": "Glasgow", "kind": "stable", "time": "two weeks ago", "contradicts": "F1"}, {"statement": "The user's brother is Bartek.", "subject": "user", "predicate": "has_brother", "object": "Bartek", "kind": "permanent", "time": "", "contradicts": ""}, {"statement": "Bartek is a dentist.", "subject": "Bartek", "predicate": "works_as", "object": "dentist", "kind": "stable", "time": "", "contradicts": ""}, {"statement": "Bartek has asthma.", "subject": "Bartek", "predicate": "has", "object": "asthma", "kind": "permanent", "time": "", "contradicts": ""}, {"statement": "The user swims every Tuesday.", "subject": "user", "predicate": "swims", "object": "every Tuesday", "kind": "stable", "time": "", "contradicts": ""}]}"#,
    ),
    (
        r#"Known facts:
F1: Ruta | likes | running
Episode (speaker: Ruta):
Ruta: Thanks, Pell! Sad news here: my dad passed away on Saturday. I've been taking pottery classes to cope, running doesn't help me anymore. Have you tried pottery?"#,
        r#"{"rules": [], "facts": [{"statement": "Ruta's father died on Saturday.", "subject": "Ruta", "predicate": "lost", "object": "her father, who died", "kind": "permanent", "time": "on Saturday", "contradicts": ""}, {"statement": "Ruta takes pottery classes to cope with grief.", "subject": "Ruta", "predicate": "takes", "object": "pottery classes to cope with grief", "kind": "standard", "time": "", "contradicts": ""}, {"statement": "Running no longer helps Ruta.", "subject": "Ruta", "predicate": "dislikes", "object": "running, which no longer helps her", "kind": "volatile", "time": "", "contradicts": "F1"}]}"#,
    ),
];

/// One episode as the model reads it.
pub struct EpisodeMessage<'a> {
    /// The shard's facts most related to the episode, labelled F1, F2, ... in this order.
    pub known: &'a [&'a KnownFact],
    /// The shard's rules most related to the episode.
    pub rules: &'a [&'a str],
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
        out.push_str(&format!(
            "\nEpisode (speaker: {}):\n{}",
            self.speaker, self.text
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

/// A text on one line: a known fact or rule must not break the message's layout.
fn one_line(text: &str) -> String {
    const MAX_CHARS: usize = 300;
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line,
    }
}

/// The subjects an answer may name: the user, the speaker, and the names the episode has.
pub fn subject_choices(speaker: &str, text: &str) -> Vec<String> {
    let mut choices = vec!["user".to_owned()];
    if !speaker.eq_ignore_ascii_case("user") {
        choices.push(speaker.to_owned());
    }
    for name in names_in(text) {
        if !choices.iter().any(|c| c.eq_ignore_ascii_case(&name)) {
            choices.push(name);
        }
    }
    choices
}

/// The answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    pub rules: Vec<String>,
    pub facts: Vec<AnswerFact>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerFact {
    /// The fact as a plain sentence: what the model understood (kept with the fact).
    pub statement: String,
    pub subject: String,
    pub predicate: String,
    pub object: String,
    pub kind: Permanence,
    pub time: String,
    /// A known fact's label (`F2`), or empty.
    pub contradicts: String,
}

/// The JSON schema the answer is held to, as sent: every field required (a strict schema);
/// the subjects, kinds and labels as enums, so a server that enforces the schema cannot
/// answer a subject the episode does not have or a label that was not given. Written as
/// text because its order is the answer's: a model held to it writes the statement before
/// the subject, the subject before the object (in a map's alphabetical order it wrote the
/// object first, and swapped subjects and objects).
const SCHEMA: &str = r#"{
  "type": "object", "additionalProperties": false, "required": ["rules", "facts"],
  "properties": {
    "rules": {"type": "array", "maxItems": MAX_RULES, "items": {"type": "string"}},
    "facts": {"type": "array", "maxItems": MAX_FACTS, "items": {
      "type": "object", "additionalProperties": false,
      "required": ["statement", "subject", "predicate", "object", "kind", "time", "contradicts"],
      "properties": {
        "statement": {"type": "string"},
        "subject": {"enum": SUBJECTS},
        "predicate": {"type": "string"},
        "object": {"type": "string"},
        "kind": {"enum": KINDS},
        "time": {"type": "string"},
        "contradicts": {"enum": LABELS}
      }
    }}
  }
}"#;

/// [`SCHEMA`] for an episode with `known` labelled facts and these `subjects`.
pub fn schema(known: usize, subjects: &[String]) -> Box<RawValue> {
    let labels: Vec<String> = std::iter::once(String::new())
        .chain((1..=known.min(MAX_KNOWN)).map(|i| format!("F{i}")))
        .collect();
    let kinds: Vec<&str> = Permanence::ALL.iter().map(|p| p.as_str()).collect();
    let json = |list: &[String]| serde_json::to_string(list).expect("strings serialise");
    // The episode's words go in last: nothing is looked for in them.
    let text = SCHEMA
        .replace("MAX_RULES", &MAX_RULES.to_string())
        .replace("MAX_FACTS", &MAX_FACTS.to_string())
        .replace(
            "KINDS",
            &json(&kinds.iter().map(|k| k.to_string()).collect::<Vec<_>>()),
        )
        .replace("LABELS", &json(&labels))
        .replace("SUBJECTS", &json(subjects));
    RawValue::from_string(text).expect("the schema's template is JSON")
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
        let schema: Value =
            serde_json::from_str(schema(2, &["user".to_owned(), "Sam".to_owned()]).get()).unwrap();
        let answer = instance(&schema);
        let parsed: Answer =
            serde_json::from_value(answer.clone()).unwrap_or_else(|e| panic!("{e}: {answer:#}"));
        assert_eq!(parsed.facts[0].contradicts, "F2");
        assert_eq!(parsed.facts[0].subject, "Sam");
        assert_eq!(parsed.rules.len(), 1);
        for (user, example) in EXAMPLES {
            let parsed: Answer = serde_json::from_str(example).expect(example);
            let speaker = user
                .split_once("(speaker: ")
                .and_then(|(_, rest)| rest.split_once(')'))
                .map_or("user", |(speaker, _)| speaker);
            let episode = user.split_once("):\n").map_or("", |(_, text)| text);
            let subjects = subject_choices(speaker, episode);
            for fact in parsed.facts {
                assert!(
                    subjects.contains(&fact.subject),
                    "{} not in {subjects:?}",
                    fact.subject
                );
                assert!(fact.contradicts.is_empty() || fact.contradicts.starts_with('F'));
            }
        }
    }

    /// A model held to the schema answers in its order: the schema as sent keeps the
    /// statement before the subject and the subject before the object, rules before facts.
    #[test]
    fn the_schema_is_sent_in_the_order_it_is_written() {
        let sent = schema(0, &["user".to_owned(), "KINDS\"".to_owned()]);
        let text = sent.get();
        let at = |key: &str| text.find(&format!("\"{key}\": {{")).unwrap();
        assert!(at("rules") < at("facts"));
        assert!(at("statement") < at("subject") && at("subject") < at("predicate"));
        assert!(at("predicate") < at("object") && at("object") < at("kind"));
        // An episode's word is a value, whatever it says.
        let parsed: Value = serde_json::from_str(text).unwrap();
        let subject = &parsed["properties"]["facts"]["items"]["properties"]["subject"];
        assert_eq!(subject["enum"][1], "KINDS\"");
        assert_eq!(
            parsed["properties"]["facts"]["items"]["properties"]["contradicts"]["enum"],
            json!([""])
        );
    }

    #[test]
    fn the_subjects_are_the_user_the_speaker_and_the_names_of_the_episode() {
        assert_eq!(
            subject_choices(
                "user",
                "Sam's husband is called Tiago; he works at Santa Maria."
            ),
            ["user", "Sam", "Tiago", "Santa", "Maria"]
        );
        assert_eq!(
            subject_choices(
                "Caroline",
                "Caroline: Hey Mel! I went to the LGBTQ group. Thanks!"
            ),
            ["user", "Caroline", "Mel", "LGBTQ"]
        );
    }

    #[test]
    fn the_message_labels_known_facts_and_keeps_each_on_one_line() {
        let known = KnownFact {
            id: uuid::Uuid::nil(),
            subject: "sam".into(),
            predicate: "lives_in".into(),
            content: "Lisbon,\nnear the river".into(),
        };
        let message = EpisodeMessage {
            known: &[&known],
            rules: &["Never call Sam after 6pm."],
            speaker: "Sam",
            text: "Sam: I moved to Porto.",
        };
        assert_eq!(
            message.render(),
            "Known facts:\nF1: sam | lives_in | Lisbon, near the river\n\
             Known rules:\n- Never call Sam after 6pm.\n\
             Episode (speaker: Sam):\nSam: I moved to Porto."
        );
        assert_eq!(message.messages().len(), 2 + 2 * EXAMPLES.len());
    }
}
