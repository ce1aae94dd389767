//! What consolidation extracts from a batch of episodes: new facts and new rules, each
//! tied to the episode it came from. Extractors (heuristic today; an LLM one is the open
//! part of the consolidation issue) produce this structure, and it is validated before
//! anything is persisted.

use serde::Serialize;
use uuid::Uuid;

use super::permanence::Permanence;

/// An episode as an extractor sees it.
#[derive(Debug, Clone)]
pub struct SourceEpisode {
    pub id: Uuid,
    pub content: String,
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
    /// Known facts this one supports or contradicts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub relations: Vec<(super::relation::Relation, Uuid)>,
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
    /// Checks the output against the batch it came from: every item names one of the
    /// batch's episodes and has non-empty text within the size limit.
    pub fn validate(
        &self,
        batch: &[SourceEpisode],
        facts: &[KnownFact],
        max_chars: usize,
    ) -> Result<(), String> {
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
            for (field, value) in [
                ("subject", &f.subject),
                ("predicate", &f.predicate),
                ("content", &f.content),
            ] {
                if value.trim().is_empty() || value.chars().count() > max_chars {
                    return Err(format!("facts[{i}].{field} is empty or too long"));
                }
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
            if r.content.trim().is_empty() || r.content.chars().count() > max_chars {
                return Err(format!("rules[{i}].content is empty or too long"));
            }
        }
        Ok(())
    }
}
