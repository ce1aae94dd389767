//! What consolidation extracts from a batch of episodes: new facts and new rules, each
//! tied to the episode it came from. Extractors (the heuristic one, the LLM client) produce
//! this structure, and it is validated before anything is persisted.

use serde::Serialize;
use uuid::Uuid;

use super::permanence::Permanence;
use super::text::{Limits, check_content, normalize_key};

/// The most facts and rules one episode may yield: an episode is a session's worth of
/// text, and an answer claiming more than this from it is a model gone astray, whose output
/// would flood the shard (each item is a row, an embedding and an event).
pub const MAX_ITEMS_PER_EPISODE: usize = 32;

/// An episode as an extractor sees it.
#[derive(Debug, Clone)]
pub struct SourceEpisode {
    pub id: Uuid,
    pub content: String,
    /// When it happened (`Episode::occurred_at`): what its "yesterday" or "in March" is
    /// read against.
    pub happened_at: chrono::DateTime<chrono::Utc>,
}

/// A fact to store (through the same supersession path as `memory_store_fact`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExtractedFact {
    pub subject: String,
    pub predicate: String,
    pub content: String,
    pub permanence: Permanence,
    pub importance: f64,
    pub source_episode_id: Uuid,
    /// The existing fact this one updates (it must be among the known facts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub supersedes_fact_id: Option<Uuid>,
    /// When it became true, as the episode states it; `None`: when the episode happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_from: Option<chrono::DateTime<chrono::Utc>>,
    /// Known facts this one supports or contradicts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub relations: Vec<(super::relation::Relation, Uuid)>,
    /// The fact as a plain sentence, as a model understood the episode (kept in the fact's
    /// metadata, for whoever checks it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statement: Option<String>,
}

/// A rule to store as a candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExtractedRule {
    pub content: String,
    pub source_episode_id: Uuid,
}

/// Everything extracted from one batch.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Extraction {
    pub facts: Vec<ExtractedFact>,
    pub rules: Vec<ExtractedRule>,
    /// Known facts the batch confirms.
    pub confirmations: Vec<Uuid>,
    /// Items the extractor answered that failed a check (`domain/grounding.rs`), by reason:
    /// dropped, not stored.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub rejected: std::collections::BTreeMap<String, u64>,
}

/// A live fact of the shard, given to the extractor as reference.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct KnownFact {
    pub id: Uuid,
    pub subject: String,
    pub predicate: String,
    pub content: String,
}

impl Extraction {
    /// Checks the output against the batch it came from (every item names one of the
    /// batch's episodes, every fact id one of the known facts) and puts its text in the
    /// form `memory_store_fact` would: subjects and predicates normalised, contents
    /// trimmed, all within the configured limits.
    pub fn validated(
        mut self,
        batch: &[SourceEpisode],
        facts: &[KnownFact],
        limits: &Limits,
    ) -> Result<Extraction, String> {
        self.check(batch, facts)?;
        for (i, f) in self.facts.iter_mut().enumerate() {
            let field = |name: &str| format!("facts[{i}].{name}");
            f.subject =
                normalize_key(&field("subject"), &f.subject, limits).map_err(|e| e.message)?;
            f.predicate =
                normalize_key(&field("predicate"), &f.predicate, limits).map_err(|e| e.message)?;
            f.content =
                check_content(&field("content"), &f.content, limits).map_err(|e| e.message)?;
        }
        for (i, r) in self.rules.iter_mut().enumerate() {
            r.content = check_content(&format!("rules[{i}].content"), &r.content, limits)
                .map_err(|e| e.message)?;
        }
        Ok(self)
    }

    fn check(&self, batch: &[SourceEpisode], facts: &[KnownFact]) -> Result<(), String> {
        for episode in batch {
            let items = self
                .facts
                .iter()
                .map(|f| f.source_episode_id)
                .chain(self.rules.iter().map(|r| r.source_episode_id))
                .filter(|id| *id == episode.id)
                .count();
            if items > MAX_ITEMS_PER_EPISODE {
                return Err(format!(
                    "{items} facts and rules from episode {}; at most {MAX_ITEMS_PER_EPISODE}",
                    episode.id
                ));
            }
        }
        let known = |id: &Uuid| batch.iter().any(|e| e.id == *id);
        let known_fact = |id: &Uuid| facts.iter().any(|f| f.id == *id);
        for (i, id) in self.confirmations.iter().enumerate() {
            if !known_fact(id) {
                return Err(format!("confirmations[{i}] is not one of the known facts"));
            }
        }
        for (i, f) in self.facts.iter().enumerate() {
            if !known(&f.source_episode_id) {
                return Err(format!("facts[{i}] names an episode outside the batch"));
            }
            for (relation, id) in &f.relations {
                if !known_fact(id) {
                    return Err(format!("facts[{i}] {relation} a fact that is not known"));
                }
                if !matches!(
                    relation,
                    super::relation::Relation::Supports | super::relation::Relation::Contradicts
                ) {
                    return Err(format!(
                        "facts[{i}] names relation {relation}; only supports and contradicts"
                    ));
                }
            }
            if let Some(id) = &f.supersedes_fact_id
                && !known_fact(id)
            {
                return Err(format!("facts[{i}] supersedes a fact that is not known"));
            }
            if !(0.0..=10.0).contains(&f.importance) {
                return Err(format!("facts[{i}].importance is outside 0 to 10"));
            }
        }
        for (i, r) in self.rules.iter().enumerate() {
            if !known(&r.source_episode_id) {
                return Err(format!("rules[{i}] names an episode outside the batch"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> Vec<SourceEpisode> {
        vec![SourceEpisode {
            id: Uuid::from_u128(7),
            content: "x".into(),
            happened_at: chrono::DateTime::UNIX_EPOCH,
        }]
    }

    fn fact(subject: &str, predicate: &str, content: &str) -> ExtractedFact {
        ExtractedFact {
            subject: subject.into(),
            predicate: predicate.into(),
            content: content.into(),
            permanence: Permanence::Stable,
            importance: 5.0,
            source_episode_id: Uuid::from_u128(7),
            supersedes_fact_id: None,
            valid_from: None,
            relations: Vec::new(),
            statement: None,
        }
    }

    #[test]
    fn text_is_put_in_stored_form_and_bad_references_are_refused() {
        let limits = Limits::default();
        let out = Extraction {
            facts: vec![fact("  The User ", "Dietary  Restriction", "  Vegetarian ")],
            ..Extraction::default()
        }
        .validated(&batch(), &[], &limits)
        .unwrap();
        assert_eq!(out.facts[0].subject, "the user");
        assert_eq!(out.facts[0].predicate, "dietary restriction");
        assert_eq!(out.facts[0].content, "Vegetarian");

        let empty = Extraction {
            facts: vec![fact("user", " ", "x")],
            ..Extraction::default()
        };
        assert!(empty.validated(&batch(), &[], &limits).is_err());
        let unknown = Extraction {
            confirmations: vec![Uuid::from_u128(99)],
            ..Extraction::default()
        };
        assert!(
            unknown
                .validated(&batch(), &[], &limits)
                .unwrap_err()
                .contains("confirmations[0]")
        );
        let mut elsewhere = fact("user", "p", "c");
        elsewhere.source_episode_id = Uuid::from_u128(8);
        let outside = Extraction {
            facts: vec![elsewhere],
            ..Extraction::default()
        };
        assert!(outside.validated(&batch(), &[], &limits).is_err());
    }

    #[test]
    fn an_episode_yields_a_bounded_number_of_items() {
        let limits = Limits::default();
        let answer = |n: usize| Extraction {
            facts: (0..n)
                .map(|i| fact("user", &format!("p{i}"), "c"))
                .collect(),
            ..Extraction::default()
        };
        assert!(
            answer(MAX_ITEMS_PER_EPISODE)
                .validated(&batch(), &[], &limits)
                .is_ok()
        );
        let error = answer(MAX_ITEMS_PER_EPISODE + 1)
            .validated(&batch(), &[], &limits)
            .unwrap_err();
        assert!(error.contains("at most 32"), "{error}");
    }
}
