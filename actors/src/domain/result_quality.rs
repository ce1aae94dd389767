//! How good a read's answer looks, without knowing the right answer (memory_butler.md §9.2,
//! "retrieval quality metrics"): whether it found anything, how confident the knowledge it
//! returned is, and how diverse its top results are. Diversity is the share of distinct
//! sources among the results: an episode's session (or the episode itself outside one), a
//! fact's subject, a rule itself. Ten turns of one conversation score 0.1; ten memories from
//! ten places score 1.

use std::collections::HashSet;

use super::memory_type::MemoryType;
use super::search::Hit;

/// Distinct sources over results, in (0, 1]; `None` for no results.
pub fn diversity(hits: &[Hit]) -> Option<f64> {
    if hits.is_empty() {
        return None;
    }
    let sources: HashSet<(MemoryType, &str)> = hits.iter().map(source).collect();
    Some(sources.len() as f64 / hits.len() as f64)
}

/// The effective confidence of each fact and rule among the results (episodes have none).
pub fn confidences(hits: &[Hit]) -> impl Iterator<Item = f64> + '_ {
    hits.iter()
        .filter(|h| h.candidate.memory_type() != MemoryType::Episode)
        .map(|h| h.scores.confidence)
}

fn source(hit: &Hit) -> (MemoryType, &str) {
    let c = &hit.candidate;
    let kind = c.memory_type();
    let place = match kind {
        MemoryType::Episode => c.session_id.as_deref(),
        MemoryType::Fact => c.subject.as_deref(),
        MemoryType::Rule => None,
    };
    // A record that is its own source is named by its content: distinct enough for
    // counting, and borrowed (an id would have to be formatted into a new string).
    (kind, place.unwrap_or(&c.content))
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use serde_json::Value;
    use uuid::Uuid;

    use super::*;
    use crate::domain::search::{Candidate, ComponentScores};

    fn hit(kind: MemoryType, session: Option<&str>, subject: Option<&str>, content: &str) -> Hit {
        let now = Utc::now();
        Hit {
            candidate: Candidate {
                id: Uuid::new_v4(),
                content: content.into(),
                confidence: 0.9,
                subject: subject.map(str::to_owned),
                session_id: session.map(str::to_owned),
                metadata: Value::Null,
                signal: 0.5,
                ..Candidate::fixture(kind, 0, now)
            },
            score: 0.5,
            scores: ComponentScores {
                confidence: if kind == MemoryType::Episode {
                    1.0
                } else {
                    0.7
                },
                ..ComponentScores::blank()
            },
        }
    }

    #[test]
    fn one_conversation_is_not_diverse_and_many_places_are() {
        let same: Vec<Hit> = (0..4)
            .map(|i| hit(MemoryType::Episode, Some("s1"), None, &format!("turn {i}")))
            .collect();
        assert_eq!(diversity(&same), Some(0.25));
        let spread = vec![
            hit(MemoryType::Episode, Some("s1"), None, "a"),
            hit(MemoryType::Episode, None, None, "b"),
            hit(MemoryType::Fact, None, Some("user"), "c"),
            hit(MemoryType::Rule, None, None, "d"),
        ];
        assert_eq!(diversity(&spread), Some(1.0));
        // Two facts about one subject are one source.
        let facts = vec![
            hit(MemoryType::Fact, None, Some("user"), "x"),
            hit(MemoryType::Fact, None, Some("user"), "y"),
        ];
        assert_eq!(diversity(&facts), Some(0.5));
        assert_eq!(diversity(&[]), None);
    }

    #[test]
    fn confidences_are_those_of_knowledge_only() {
        let hits = vec![
            hit(MemoryType::Episode, None, None, "a"),
            hit(MemoryType::Fact, None, Some("user"), "b"),
        ];
        assert_eq!(confidences(&hits).collect::<Vec<_>>(), vec![0.7]);
    }
}
