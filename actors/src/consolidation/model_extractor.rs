//! Extraction by a language model, one episode per call: the `llm` extractor's endpoint and
//! the local model both answer `prompt.rs`'s question. Each episode's message carries the
//! shard's facts and rules most related to it; a long episode is read in parts. What the
//! model answers is checked item by item (`domain/grounding.rs`) before it joins the batch's
//! extraction: an item that fails a check is dropped and counted, the rest of the answer
//! stands. A new predicate that is an existing one with other endings (`lived_in` for
//! `lives_in`) becomes the existing one, so that supersession finds the fact it updates.

use std::collections::HashMap;

use super::llm_client::{ChatClient, ExtractError};
use super::prompt::{Answer, EpisodeMessage, MAX_KNOWN, MAX_KNOWN_RULES, schema, subject_choices};
use crate::domain::extraction::{Extraction, KnownFact, SourceEpisode};
use crate::domain::grounding::{
    CandidateFact, Ground, Rejection, USER, check_fact, check_rule, speaker_and_text,
};
use crate::domain::relation::Relation;

/// The longest part of an episode one call reads, in characters (about 600 tokens): the
/// prompt, the part and the answer stay well within the model's context.
const MAX_PART_CHARS: usize = 2400;

/// What the model is asked with, for one batch.
pub struct Reference<'a> {
    pub facts: &'a [KnownFact],
    pub rules: &'a [String],
    /// The shard's predicates, most used first: the vocabulary a new one is matched to.
    pub predicates: Vec<&'a str>,
}

impl<'a> Reference<'a> {
    pub fn new(facts: &'a [KnownFact], rules: &'a [String]) -> Reference<'a> {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for f in facts {
            *counts.entry(f.predicate.as_str()).or_default() += 1;
        }
        let mut predicates: Vec<(&str, usize)> = counts.into_iter().collect();
        predicates.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        Reference {
            facts,
            rules,
            predicates: predicates.into_iter().map(|(p, _)| p).collect(),
        }
    }
}

/// Asks a model about each episode and checks what it answers.
pub struct ModelExtractor {
    client: ChatClient,
}

impl ModelExtractor {
    pub fn new(client: ChatClient) -> ModelExtractor {
        ModelExtractor { client }
    }

    /// Extracts from one episode through the model at `base_url`, adding what passes the
    /// checks to `out` (and what fails to its counts).
    pub async fn extract_episode(
        &self,
        base_url: &str,
        episode: &SourceEpisode,
        reference: &Reference<'_>,
        out: &mut Extraction,
    ) -> Result<(), ExtractError> {
        let started = std::time::Instant::now();
        let (speaker, _) = speaker_and_text(&episode.content);
        let speaker_name = episode
            .content
            .split_once(": ")
            .filter(|_| speaker.is_some())
            .map_or(USER, |(name, _)| name.trim());
        let ground = Ground {
            episode_id: episode.id,
            text: &episode.content,
            speaker: speaker.as_deref(),
            happened_at: episode.happened_at,
        };
        let known = related_facts(&episode.content, reference.facts);
        let rules = related_rules(&episode.content, reference.rules);
        let mut answers = Vec::new();
        for part in parts(&episode.content, MAX_PART_CHARS) {
            let message = EpisodeMessage {
                known: &known,
                rules: &rules,
                speaker: speaker_name,
                text: part,
            };
            let subjects = subject_choices(speaker_name, part);
            let value = self
                .client
                .chat_json(
                    base_url,
                    &message.messages(),
                    "episode_memories",
                    &schema(known.len(), &subjects),
                )
                .await?;
            let answer: Answer = serde_json::from_value(value).map_err(|e| {
                ExtractError::Invalid(format!("the content does not match the schema: {e}"))
            })?;
            answers.push(answer);
        }
        let mut facts = Vec::new();
        for answer in &answers {
            for item in &answer.facts {
                let candidate = CandidateFact {
                    subject: item.subject.clone(),
                    predicate: item.predicate.clone(),
                    content: item.object.clone(),
                    permanence: item.kind,
                    since: item.time.clone(),
                };
                let mut fact = match check_fact(&candidate, &ground) {
                    Ok(fact) => fact,
                    Err(why) => {
                        reject(out, why);
                        continue;
                    }
                };
                if let Some(known) = label(&item.contradicts, &known) {
                    // "No longer true" answered with the old value: the model meant the
                    // change, but the fact it gave is the one it contradicts.
                    if same_words(&known.content, &fact.content) {
                        reject(out, Rejection::ContradictionRestated);
                        continue;
                    }
                    fact.relations.push((Relation::Contradicts, known.id));
                }
                fact.predicate = in_vocabulary(&fact.predicate, &reference.predicates);
                fact.statement = Some(item.statement.trim().to_owned()).filter(|s| !s.is_empty());
                let same = |f: &crate::domain::extraction::ExtractedFact| {
                    f.subject == fact.subject
                        && f.predicate == fact.predicate
                        && f.content.eq_ignore_ascii_case(&fact.content)
                };
                if !facts.iter().any(same) {
                    facts.push(fact);
                }
            }
        }
        for answer in &answers {
            for rule in &answer.rules {
                match check_rule(rule, &facts, &ground) {
                    // The same advice twice in other words ("Do not remind the user more
                    // than once", "Never remind the user about the same thing again") is
                    // one rule.
                    Ok(rule)
                        if !out.rules.iter().any(|r| {
                            r.content == rule.content
                                || (r.source_episode_id == rule.source_episode_id
                                    && overlap(&r.content, &rule.content) >= 0.5)
                        }) =>
                    {
                        out.rules.push(rule)
                    }
                    Ok(_) => {}
                    Err(why) => reject(out, why),
                }
            }
        }
        out.facts.extend(facts);
        metrics::histogram!("butler_memory_extraction_seconds")
            .record(started.elapsed().as_secs_f64());
        Ok(())
    }
}

fn reject(out: &mut Extraction, why: Rejection) {
    *out.rejected.entry(why.as_str().to_owned()).or_default() += 1;
    metrics::counter!("butler_memory_extraction_rejected_total", "reason" => why.as_str())
        .increment(1);
}

/// The share of two texts' words they have in common (of all the words either has).
fn overlap(a: &str, b: &str) -> f64 {
    let a: std::collections::HashSet<String> = content_words(a).into_iter().collect();
    let b: std::collections::HashSet<String> = content_words(b).into_iter().collect();
    let union = a.union(&b).count();
    if union == 0 {
        return 0.0;
    }
    a.intersection(&b).count() as f64 / union as f64
}

/// Whether two texts have the same words, whatever their case and punctuation.
fn same_words(a: &str, b: &str) -> bool {
    content_words(a) == content_words(b)
}

/// A predicate's words with their endings cut (`lives`, `lived`, `living` → `liv`).
fn stems(predicate: &str) -> Vec<String> {
    predicate
        .split('_')
        .map(|word| {
            let mut stem = word;
            for ending in ["ing", "ed", "es", "s", "e"] {
                if stem.len() >= ending.len() + 3
                    && let Some(cut) = stem.strip_suffix(ending)
                {
                    stem = cut;
                    break;
                }
            }
            stem.to_owned()
        })
        .collect()
}

/// The shard's own predicate when `predicate` is one of them with other endings, else
/// `predicate`.
fn in_vocabulary(predicate: &str, vocabulary: &[&str]) -> String {
    let wanted = stems(predicate);
    vocabulary
        .iter()
        .find(|known| stems(known) == wanted)
        .map_or_else(|| predicate.to_owned(), |known| (*known).to_owned())
}

/// The known fact a label (`F2`) names, among those the message gave.
fn label<'a>(text: &str, known: &[&'a KnownFact]) -> Option<&'a KnownFact> {
    let n: usize = text.trim().strip_prefix(['F', 'f'])?.parse().ok()?;
    known.get(n.checked_sub(1)?).copied()
}

/// The lowercase words of a text that say something (three letters or more).
fn content_words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_lowercase)
        .collect()
}

/// The known facts most related to an episode: those about someone it names first, then by
/// the words they share with it; at most [`MAX_KNOWN`], none that shares nothing.
pub fn related_facts<'a>(text: &str, facts: &'a [KnownFact]) -> Vec<&'a KnownFact> {
    let episode: std::collections::HashSet<String> = content_words(text).into_iter().collect();
    let scored: Vec<(usize, usize, &KnownFact)> = facts
        .iter()
        .enumerate()
        .filter_map(|(i, f)| {
            let subject = content_words(&f.subject);
            let about = (!subject.is_empty() && subject.iter().all(|w| episode.contains(w)))
                || f.subject == USER;
            let shared = content_words(&format!("{} {}", f.predicate, f.content))
                .iter()
                .filter(|w| episode.contains(*w))
                .count();
            let score = usize::from(about) * 2 + shared * 3 + usize::from(about && shared > 0);
            (shared > 0 || (about && f.subject != USER)).then_some((score, i, f))
        })
        .collect();
    best(scored, MAX_KNOWN)
}

/// Scored items `(score, place in the shard's order, item)`, best first and among equals
/// in the shard's order (most recently confirmed first), at most `n`.
fn best<T>(mut scored: Vec<(usize, usize, T)>, n: usize) -> Vec<T> {
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    scored
        .into_iter()
        .take(n)
        .map(|(_, _, item)| item)
        .collect()
}

/// The known rules that share most words with an episode, at most [`MAX_KNOWN_RULES`]: a
/// rule the episode repeats can then be written as it is known, which confirms it.
pub fn related_rules<'a>(text: &str, rules: &'a [String]) -> Vec<&'a str> {
    let episode: std::collections::HashSet<String> = content_words(text).into_iter().collect();
    let scored: Vec<(usize, usize, &str)> = rules
        .iter()
        .enumerate()
        .filter_map(|(i, rule)| {
            let shared = content_words(rule)
                .iter()
                .filter(|w| episode.contains(*w))
                .count();
            (shared >= 2).then_some((shared, i, rule.as_str()))
        })
        .collect();
    best(scored, MAX_KNOWN_RULES)
}

/// A text in parts of at most `max` characters, cut after a sentence or a line where one
/// ends in the second half of a part, else at a space.
pub fn parts(text: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while rest.chars().count() > max {
        let limit = rest.char_indices().nth(max).map_or(rest.len(), |(i, _)| i);
        let window = &rest[..limit];
        let half = window.len() / 2;
        let cut = window
            .rmatch_indices(['.', '!', '?', '\n'])
            .map(|(i, m)| i + m.len())
            .find(|&i| i >= half)
            .or_else(|| window.rfind(' ').filter(|&i| i > 0))
            .unwrap_or(limit);
        out.push(rest[..cut].trim());
        rest = rest[cut..].trim_start();
    }
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known(subject: &str, predicate: &str, content: &str) -> KnownFact {
        KnownFact {
            id: uuid::Uuid::now_v7(),
            subject: subject.into(),
            predicate: predicate.into(),
            content: content.into(),
        }
    }

    #[test]
    fn related_facts_are_about_who_the_episode_names_or_share_its_words() {
        let facts = vec![
            known("tiago", "works_as", "nurse"),
            known("user", "allergic_to", "shellfish"),
            known("ana", "has_condition", "diabetes"),
            known("user", "lives_in", "Lisbon"),
        ];
        let related = related_facts("Sam said Tiago moved to Porto, away from Lisbon.", &facts);
        let contents: Vec<&str> = related.iter().map(|f| f.content.as_str()).collect();
        assert_eq!(contents, ["Lisbon", "nurse"]);
        assert!(related_facts("Nothing in common here.", &facts).is_empty());
    }

    #[test]
    fn related_rules_share_words_with_the_episode() {
        let rules = vec![
            "Never call Sam after 6pm".to_owned(),
            "Offer tea after lunch".to_owned(),
            "Do not call during lunch".to_owned(),
        ];
        // Most words shared first; one word shared ("after") is not enough.
        let related = related_rules("Sam asked me not to call after dinner.", &rules);
        assert_eq!(
            related,
            ["Never call Sam after 6pm", "Do not call during lunch"]
        );
    }

    #[test]
    fn a_new_predicate_becomes_the_shards_when_only_its_endings_differ() {
        let vocabulary = ["lives_in", "works_as", "likes"];
        assert_eq!(in_vocabulary("lived_in", &vocabulary), "lives_in");
        assert_eq!(in_vocabulary("living_in", &vocabulary), "lives_in");
        assert_eq!(in_vocabulary("worked_as", &vocabulary), "works_as");
        assert_eq!(in_vocabulary("liked", &vocabulary), "likes");
        assert_eq!(in_vocabulary("dislikes", &vocabulary), "dislikes");
        assert_eq!(in_vocabulary("moved_to", &vocabulary), "moved_to");
    }

    #[test]
    fn the_same_advice_in_other_words_overlaps() {
        let a = "Do not remind the user more than once about the same thing.";
        let b = "Never remind the user about the same thing again.";
        assert!(overlap(a, b) >= 0.5, "{}", overlap(a, b));
        assert!(overlap(a, "Always deliver weekly grocery orders on Sundays.") < 0.5);
        assert_eq!(overlap("", ""), 0.0);
    }

    #[test]
    fn a_label_names_a_given_fact_or_none() {
        let facts = [known("a", "b", "c"), known("d", "e", "f")];
        let given: Vec<&KnownFact> = facts.iter().collect();
        assert_eq!(
            label("F2", &given).map(|f| &f.subject),
            Some(&facts[1].subject)
        );
        assert!(label("F3", &given).is_none());
        assert!(label("F0", &given).is_none());
        assert!(label("", &given).is_none());
    }

    #[test]
    fn a_long_text_is_read_in_parts_cut_at_sentences() {
        let text = "One sentence here. ".repeat(300);
        let cut = parts(&text, 1000);
        assert!(cut.len() >= 5);
        for part in &cut {
            assert!(part.chars().count() <= 1000);
            assert!(part.ends_with('.'), "{part}");
        }
        let joined: String = cut.join(" ");
        assert_eq!(
            joined.split_whitespace().count(),
            text.split_whitespace().count()
        );
        assert_eq!(parts("short", 1000), ["short"]);
        // No sentence end: cut at a space; no space either: cut at the limit.
        assert!(
            parts(&"word ".repeat(500), 1000)
                .iter()
                .all(|p| !p.ends_with(' '))
        );
        assert_eq!(parts(&"x".repeat(2500), 1000).len(), 3);
    }
}
