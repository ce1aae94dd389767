//! Query widening by the model's word vectors: a keyword query also looks for the words of
//! the tenant's memories that the model places next to the query's own ("instrument" finds
//! "violin", "guitar"; "pet" finds "dog"), at a fraction of their weight.
//!
//! Keyword search finds only the words a question uses, and the question seldom uses the
//! memory's: "what instruments does she play?" against "I've been practising the violin".
//! The dense list may find such a memory, but a long turn's vector holds much besides the
//! violin. Each word of a tenant's vocabulary (`store/vocabulary.rs`) carries the vector
//! the model gives it alone; the nearest words of a query word, above a likeness floor,
//! join the keyword query weighted by that likeness, so that a memory holding one scores
//! below a memory holding the query's own word but above one holding neither. The
//! vocabulary is the tenant's own (what it has written), so no word list, language or
//! domain is assumed; measured on LoCoMo in docs/benchmarks.md ("Query words widened by the
//! model's word vectors").

use serde::Deserialize;

/// One neighbour of a query word in the tenant's vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct Neighbour {
    /// The query word (lexeme) it neighbours.
    pub of: String,
    pub lexeme: String,
    /// Cosine similarity of the two words' vectors.
    pub likeness: f64,
}

/// `[retrieval.widening]`: whether keyword queries are widened, and how far.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Widening {
    /// Also whether the indexer keeps the tenants' vocabularies: off, it adds no words.
    pub enabled: bool,
    /// At most this many words a query word.
    pub words_per_word: usize,
    /// Least likeness a word needs.
    pub min_likeness: f64,
    /// What a word weighs against the query's own, times its likeness.
    pub weight: f64,
    /// At most this many of a query's words are widened (`widened_query_words`): a long
    /// prompt's widening costs as much as a question's.
    pub max_query_words: usize,
}

/// Which of a query's words (`lexemes`) are widened: all of them, or for a query of more
/// than `max`, the `max` longest (ties by the word). A word's length is known before any
/// count is, and longer words are the rarer ones (a prompt's "need", "like" and "time" are
/// short), so the words a long prompt is widened by are those that say most about it.
pub fn widened_query_words(lexemes: &[String], max: usize) -> Vec<String> {
    let mut words = lexemes.to_vec();
    if words.len() > max {
        words.sort_by(|a, b| {
            b.chars()
                .count()
                .cmp(&a.chars().count())
                .then_with(|| a.cmp(b))
        });
        words.truncate(max);
    }
    words
}

/// The words `query` (its lexemes) is widened with, each with its weight, from the
/// `neighbours` of its words (any order): for each query word, its nearest words that are
/// not query words themselves and at least `min_likeness` alike, up to `words_per_word`;
/// a word near several query words weighs by the nearest. In the order first found, by
/// query word and then nearness.
pub fn widen(query: &[String], neighbours: &[Neighbour], widening: Widening) -> Vec<(String, f64)> {
    let mut nearest: Vec<&Neighbour> = neighbours
        .iter()
        .filter(|n| n.likeness >= widening.min_likeness && !query.contains(&n.lexeme))
        .collect();
    nearest.sort_by(|a, b| {
        a.of.cmp(&b.of)
            .then(b.likeness.total_cmp(&a.likeness))
            .then(a.lexeme.cmp(&b.lexeme))
    });
    let mut words: Vec<(String, f64)> = Vec::new();
    let mut taken: Option<(&str, usize)> = None;
    for n in nearest {
        let count = match taken {
            Some((of, count)) if of == n.of => count,
            _ => 0,
        };
        if count >= widening.words_per_word {
            continue;
        }
        taken = Some((&n.of, count + 1));
        let weight = widening.weight * n.likeness;
        match words.iter_mut().find(|(w, _)| *w == n.lexeme) {
            Some((_, w)) => *w = w.max(weight),
            None => words.push((n.lexeme.clone(), weight)),
        }
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn near(of: &str, lexeme: &str, likeness: f64) -> Neighbour {
        Neighbour {
            of: of.into(),
            lexeme: lexeme.into(),
            likeness,
        }
    }

    const WIDENING: Widening = Widening {
        enabled: true,
        words_per_word: 2,
        min_likeness: 0.5,
        weight: 0.3,
        max_query_words: 12,
    };

    #[test]
    fn a_long_query_is_widened_by_its_longest_words() {
        let words = |ws: &[&str]| ws.iter().map(|w| w.to_string()).collect::<Vec<_>>();
        let query = words(&["need", "instrument", "time", "concert", "band"]);
        assert_eq!(widened_query_words(&query, 5), query);
        assert_eq!(
            widened_query_words(&query, 3),
            words(&["instrument", "concert", "band"])
        );
        assert!(widened_query_words(&query, 0).is_empty());
    }

    #[test]
    fn each_query_word_brings_its_nearest_words_above_the_floor() {
        let query = vec!["instrument".to_owned(), "play".to_owned()];
        let neighbours = [
            near("instrument", "instrument", 1.0),
            near("instrument", "piano", 0.65),
            near("instrument", "violin", 0.69),
            near("instrument", "guitar", 0.70),
            near("instrument", "tool", 0.45),
            near("play", "play", 1.0),
            near("play", "instrument", 0.6),
            near("play", "game", 0.55),
        ];
        let words = widen(&query, &neighbours, WIDENING);
        // Two a word, nearest first; never a query word; none below the floor.
        assert_eq!(
            words,
            [
                ("guitar".to_owned(), 0.3 * 0.70),
                ("violin".to_owned(), 0.3 * 0.69),
                ("game".to_owned(), 0.3 * 0.55),
            ]
        );
    }

    #[test]
    fn a_word_near_two_query_words_weighs_by_the_nearer() {
        let query = vec!["dog".to_owned(), "pet".to_owned()];
        let neighbours = [near("pet", "puppi", 0.6), near("dog", "puppi", 0.8)];
        assert_eq!(
            widen(&query, &neighbours, WIDENING),
            [("puppi".to_owned(), 0.3 * 0.8)]
        );
    }

    #[test]
    fn nothing_alike_enough_widens_nothing() {
        let query = vec!["tax".to_owned()];
        assert!(widen(&query, &[near("tax", "violin", 0.2)], WIDENING).is_empty());
        assert!(widen(&query, &[], WIDENING).is_empty());
    }
}
