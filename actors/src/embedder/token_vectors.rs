//! Late interaction: a text as the model's vector for each of its tokens (before pooling),
//! and how well a passage's tokens cover a query's, the measure of the second stage
//! (`domain::rerank`; it reads the passage's side from a sketch, `token_sketch.rs`, which
//! approximates [`max_sim`] here). A pooled embedding averages a turn into one point; matched token by
//! token, each word of the question finds the passage's word closest to it in context,
//! whatever else the passage says (ColBERT's MaxSim, here with the same model's tokens).

use std::collections::HashSet;
use std::sync::LazyLock;

use super::DIMENSIONS;

/// Snowball's English stop words, the list PostgreSQL's `english` text search
/// configuration drops from the keyword path's documents and queries.
static STOP_WORDS: LazyLock<HashSet<&'static str>> =
    LazyLock::new(|| include_str!("english.stop").split_whitespace().collect());

/// One text's token vectors: a row of [`DIMENSIONS`] floats per token (special tokens
/// left out), each of unit length, and which of them carry the text's content.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenVectors {
    rows: Vec<f32>,
    content: Vec<bool>,
}

impl TokenVectors {
    /// Token vectors from `rows` (concatenated, [`DIMENSIONS`] each), made unit length, and
    /// the tokens' text (a word piece; `##` marks a piece that continues a word).
    pub fn new(mut rows: Vec<f32>, tokens: &[&str]) -> TokenVectors {
        assert_eq!(rows.len(), tokens.len() * DIMENSIONS, "a row per token");
        for row in rows.chunks_exact_mut(DIMENSIONS) {
            super::minilm::normalize(row);
        }
        TokenVectors {
            rows,
            content: tokens.iter().map(|t| carries_content(t)).collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.content.len()
    }

    pub fn is_empty(&self) -> bool {
        self.content.is_empty()
    }

    fn rows(&self) -> impl Iterator<Item = &[f32]> {
        self.rows.chunks_exact(DIMENSIONS)
    }

    /// The rows that stand for the text: its content tokens, or every token of a text that
    /// has none ("what is it?"). A question is matched by them, and a passage sketched by
    /// them: a question's content word finds its best match among the passage's content
    /// words, and the passage's function words and punctuation would only be stored and read.
    pub(crate) fn content_rows(&self) -> impl Iterator<Item = &[f32]> {
        let all = !self.content.contains(&true);
        self.rows()
            .zip(&self.content)
            .filter(move |(_, content)| all || **content)
            .map(|(row, _)| row)
    }
}

/// Whether a token carries content: a whole word, alphanumeric, not a stop word. The
/// question's function words ("what", "did", "the") and punctuation match something in
/// every passage and only blur the measure (LoCoMo R@10 +0.8 points for leaving them out,
/// docs/benchmarks.md, "A second stage"); a word's continuation pieces are left to its
/// first piece, which the model reads in the word's context.
fn carries_content(token: &str) -> bool {
    !token.is_empty()
        && token.chars().all(char::is_alphanumeric)
        && !STOP_WORDS.contains(token.to_lowercase().as_str())
}

/// How well `passage` covers `query`: the mean, over the query's content tokens, of each
/// one's best cosine among the passage's content tokens (0 for an empty passage or query). The
/// exact measure: what the sketches' tests compare with.
#[cfg(test)]
pub fn max_sim(query: &TokenVectors, passage: &TokenVectors) -> f32 {
    if passage.is_empty() {
        return 0.0;
    }
    let (mut sum, mut count) = (0f32, 0usize);
    for q in query.content_rows() {
        let best = passage
            .content_rows()
            .map(|p| q.iter().zip(p).map(|(a, b)| a * b).sum::<f32>())
            .fold(f32::MIN, f32::max);
        sum += best;
        count += 1;
    }
    if count == 0 { 0.0 } else { sum / count as f32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A unit row along axis `axis`.
    fn axis(axis: usize) -> Vec<f32> {
        let mut row = vec![0f32; DIMENSIONS];
        row[axis] = 2.0; // made unit length by `new`
        row
    }

    fn text(tokens: &[(&str, usize)]) -> TokenVectors {
        let rows = tokens.iter().flat_map(|(_, a)| axis(*a)).collect();
        let words: Vec<&str> = tokens.iter().map(|(t, _)| *t).collect();
        TokenVectors::new(rows, &words)
    }

    #[test]
    fn content_is_whole_words_that_are_not_stop_words() {
        assert!(carries_content("pottery"));
        assert!(carries_content("Paris"));
        assert!(carries_content("2023"));
        for token in ["the", "What", "did", "?", "##s", ""] {
            assert!(!carries_content(token), "{token}");
        }
    }

    /// Each content word of the query takes its best match; function words do not count.
    #[test]
    fn max_sim_averages_each_content_words_best_match() {
        let query = text(&[("what", 0), ("pottery", 1), ("class", 2), ("?", 3)]);
        let both = text(&[("she", 0), ("took", 4), ("pottery", 1), ("class", 2)]);
        let one = text(&[("a", 0), ("pottery", 1), ("fair", 5)]);
        let none = text(&[("what", 0), ("?", 3)]);
        assert!((max_sim(&query, &both) - 1.0).abs() < 1e-6);
        assert!((max_sim(&query, &one) - 0.5).abs() < 1e-6);
        assert!(
            max_sim(&query, &none).abs() < 1e-6,
            "function words alone match nothing"
        );
        assert_eq!(max_sim(&query, &text(&[])), 0.0);
    }

    /// A query of function words only is matched by all of them rather than by nothing.
    #[test]
    fn a_query_without_content_words_uses_every_token() {
        let query = text(&[("what", 0), ("is", 1), ("it", 2)]);
        let passage = text(&[("it", 2)]);
        assert!((max_sim(&query, &passage) - 1.0 / 3.0).abs() < 1e-6);
    }
}
