//! The heuristic extractor: deterministic, no model. It reads each sentence of an episode
//! for a few explicit first-person forms and imperatives, and nothing else:
//!
//! | form | becomes |
//! |---|---|
//! | "my name is X" | fact `name`, permanent |
//! | "my birthday is X" | fact `birthday`, permanent |
//! | "I'm / I am allergic to X" | fact `allergic_to_<x>`, permanent |
//! | "I live in X" | fact `lives_in`, stable |
//! | "I work at / for X" | fact `works_at`, stable |
//! | "I prefer X" | fact `prefers_<x>`, stable |
//! | "remember that X" | fact `note_<x>`, standard |
//! | a sentence starting "always X" / "never X" | rule "Always X" / "Never X" |
//!
//! The subject is `user`, or the speaker when the episode reads "Name: text". It does not
//! understand negation ("I don't live in Paris" is skipped only because it does not match),
//! paraphrase, third-person statements, updates phrased as changes, or anything implicit:
//! that is what the LLM extractor is for.

use super::extraction::{
    ExtractedFact, ExtractedRule, Extraction, MAX_ITEMS_PER_EPISODE, SourceEpisode,
};
use super::grounding::{USER, speaker_and_text};
use super::permanence::Permanence;

/// Longest captured value, in characters.
const MAX_VALUE_CHARS: usize = 160;

/// Extracts what the explicit forms say.
pub fn extract(batch: &[SourceEpisode]) -> Extraction {
    let mut out = Extraction::default();
    for episode in batch {
        let (speaker, text) = speaker_and_text(&episode.content);
        let subject = speaker.unwrap_or_else(|| USER.to_owned());
        let before = out.facts.len() + out.rules.len();
        for sentence in sentences(text) {
            // The first items of a very long episode are kept, within what one may yield.
            if out.facts.len() + out.rules.len() - before >= MAX_ITEMS_PER_EPISODE {
                break;
            }
            let lower = sentence.to_lowercase();
            if let Some(fact) = fact_in(&subject, sentence, &lower, episode) {
                if !out.facts.contains(&fact) {
                    out.facts.push(fact);
                }
                continue;
            }
            for word in ["always ", "never "] {
                if lower.starts_with(word) && sentence.len() > word.len() + 2 {
                    let rule = ExtractedRule {
                        content: capitalise(sentence),
                        source_episode_id: episode.id,
                    };
                    if !out.rules.contains(&rule) {
                        out.rules.push(rule);
                    }
                }
            }
        }
    }
    out
}

fn sentences(text: &str) -> impl Iterator<Item = &str> {
    text.split(['.', '!', '?', '\n', ';'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// The patterns: (lowercase prefix, predicate, content prefix, permanence, importance,
/// whether the predicate is qualified by the value).
const FORMS: &[(&str, &str, &str, Permanence, f64, bool)] = &[
    (
        "my name is ",
        "name",
        "Name is",
        Permanence::Permanent,
        8.0,
        false,
    ),
    (
        "my birthday is ",
        "birthday",
        "Birthday is",
        Permanence::Permanent,
        8.0,
        false,
    ),
    (
        "i'm allergic to ",
        "allergic_to",
        "Allergic to",
        Permanence::Permanent,
        9.0,
        true,
    ),
    (
        "i am allergic to ",
        "allergic_to",
        "Allergic to",
        Permanence::Permanent,
        9.0,
        true,
    ),
    (
        "i live in ",
        "lives_in",
        "Lives in",
        Permanence::Stable,
        7.0,
        false,
    ),
    (
        "i work at ",
        "works_at",
        "Works at",
        Permanence::Stable,
        6.0,
        false,
    ),
    (
        "i work for ",
        "works_at",
        "Works at",
        Permanence::Stable,
        6.0,
        false,
    ),
    (
        "i prefer ",
        "prefers",
        "Prefers",
        Permanence::Stable,
        6.0,
        true,
    ),
    (
        "remember that ",
        "note",
        "",
        Permanence::Standard,
        6.0,
        true,
    ),
];

fn fact_in(
    subject: &str,
    sentence: &str,
    lower: &str,
    episode: &SourceEpisode,
) -> Option<ExtractedFact> {
    for (prefix, predicate, lead, permanence, importance, qualified) in FORMS {
        // The form may open the sentence or follow a comma ("Hi, my name is Ada").
        let at = if lower.starts_with(prefix) {
            0
        } else if let Some(i) = lower.find(&format!(", {prefix}")) {
            i + 2
        } else {
            continue;
        };
        // Offsets come from the lowercased text; a sentence whose case mapping changes
        // byte lengths is skipped rather than cut in the wrong place.
        let Some(rest) = sentence.get(at + prefix.len()..) else {
            continue;
        };
        if lower.len() != sentence.len() {
            continue;
        }
        // The value runs to the end of its clause.
        let value = rest
            .split(',')
            .next()
            .unwrap_or_default()
            .trim()
            .trim_end_matches(':')
            .trim();
        if value.is_empty() || value.chars().count() > MAX_VALUE_CHARS {
            continue;
        }
        let predicate = if *qualified {
            format!("{predicate}_{}", slug(value))
        } else {
            (*predicate).to_owned()
        };
        let content = if lead.is_empty() {
            capitalise(value)
        } else {
            format!("{lead} {value}")
        };
        return Some(ExtractedFact {
            subject: subject.to_owned(),
            predicate,
            content,
            permanence: *permanence,
            importance: *importance,
            source_episode_id: episode.id,
            supersedes_fact_id: None,
            // The heuristic reads no dates: true from when the episode was told.
            valid_from: None,
            relations: Vec::new(),
            statement: None,
        });
    }
    None
}

/// The first words of a value as a predicate qualifier: "Thai food at lunch" -> "thai_food_at".
fn slug(value: &str) -> String {
    value
        .split_whitespace()
        .take(3)
        .map(|w| {
            w.chars()
                .filter(|c| c.is_alphanumeric())
                .collect::<String>()
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join("_")
}

fn capitalise(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn run(text: &str) -> Extraction {
        extract(&[SourceEpisode {
            id: Uuid::nil(),
            content: text.to_owned(),
            happened_at: chrono::DateTime::UNIX_EPOCH,
        }])
    }

    fn facts(text: &str) -> Vec<(String, String, String)> {
        run(text)
            .facts
            .into_iter()
            .map(|f| (f.subject, f.predicate, f.content))
            .collect()
    }

    fn triple(s: &str, p: &str, c: &str) -> (String, String, String) {
        (s.to_owned(), p.to_owned(), c.to_owned())
    }

    #[test]
    fn the_explicit_forms() {
        let table = [
            (
                "My name is Ada Lovelace.",
                triple("user", "name", "Name is Ada Lovelace"),
            ),
            ("Hi, my name is Bo", triple("user", "name", "Name is Bo")),
            (
                "I live in Oslo, as you know",
                triple("user", "lives_in", "Lives in Oslo"),
            ),
            (
                "I'm allergic to peanuts!",
                triple("user", "allergic_to_peanuts", "Allergic to peanuts"),
            ),
            (
                "I am allergic to shellfish",
                triple("user", "allergic_to_shellfish", "Allergic to shellfish"),
            ),
            (
                "i live in Lyon",
                triple("user", "lives_in", "Lives in Lyon"),
            ),
            (
                "I work at the city hospital.",
                triple("user", "works_at", "Works at the city hospital"),
            ),
            (
                "I prefer window seats",
                triple("user", "prefers_window_seats", "Prefers window seats"),
            ),
            (
                "My birthday is March 3",
                triple("user", "birthday", "Birthday is March 3"),
            ),
            (
                "Remember that the gate code is 4411",
                triple("user", "note_the_gate_code", "The gate code is 4411"),
            ),
            (
                "Caroline: I live in Boston",
                triple("caroline", "lives_in", "Lives in Boston"),
            ),
        ];
        for (text, expected) in table {
            assert_eq!(facts(text), vec![expected], "{text}");
        }
    }

    #[test]
    fn imperatives_become_rules() {
        let out = run("Always confirm before booking. never call after 9pm");
        let rules: Vec<String> = out.rules.into_iter().map(|r| r.content).collect();
        assert_eq!(
            rules,
            vec!["Always confirm before booking", "Never call after 9pm"]
        );
    }

    #[test]
    fn what_it_does_not_catch() {
        for text in [
            "I don't live in Paris anymore",
            "She lives in Rome",
            "We talked about moving to Berlin",
            "My name",
            "Always",
            "The user seems to like tea",
        ] {
            let out = run(text);
            assert!(
                out.facts.is_empty() && out.rules.is_empty(),
                "{text}: {out:?}"
            );
        }
    }

    #[test]
    fn repeats_in_a_batch_are_one_item_and_validation_holds() {
        let batch = vec![
            SourceEpisode {
                id: Uuid::from_u128(1),
                content: "My name is Ada".into(),
                happened_at: chrono::DateTime::UNIX_EPOCH,
            },
            SourceEpisode {
                id: Uuid::from_u128(1),
                content: "My name is Ada".into(),
                happened_at: chrono::DateTime::UNIX_EPOCH,
            },
        ];
        let out = extract(&batch);
        assert_eq!(out.facts.len(), 1);
        let limits = crate::domain::text::Limits::default();
        assert!(out.clone().validated(&batch, &[], &limits).is_ok());
        assert!(out.validated(&[], &[], &limits).is_err());
    }

    #[test]
    fn a_long_episode_yields_no_more_than_an_episode_may() {
        let content: String = (0..100)
            .map(|i| format!("Always check item {i}. "))
            .collect();
        let batch = vec![SourceEpisode {
            id: Uuid::from_u128(1),
            content,
            happened_at: chrono::DateTime::UNIX_EPOCH,
        }];
        let out = extract(&batch);
        assert_eq!(out.rules.len(), MAX_ITEMS_PER_EPISODE);
        assert_eq!(out.rules[0].content, "Always check item 0");
        let limits = crate::domain::text::Limits::default();
        assert!(out.validated(&batch, &[], &limits).is_ok());
    }
}
