//! A query's words: its lexemes as the full-text index holds them and, when the keyword
//! query is widened (`domain::widening`), the nearest words of its longest ones in the
//! tenant's vocabulary, in one statement. A keyword list cannot start before both are known,
//! so asked one after the other they were two round trips in a row on every read of a text
//! not seen before; on a busy machine each waits its turn for a core (docs/benchmarks.md,
//! "One round trip fewer before the keyword list").

use super::Store;
use crate::domain::widening::Neighbour;
use crate::error::MemoryResult;

/// Whose vocabulary a query's words are looked up in, and how far.
#[derive(Debug, Clone, Copy)]
pub struct WordsAsked<'a> {
    pub tenant_id: &'a str,
    /// The model version whose word vectors are compared.
    pub version: i16,
    /// How many of the query's words are widened: its longest, as
    /// `domain::widening::widened_query_words` picks them.
    pub max_words: usize,
    /// Nearest words a word brings (`Store::word_neighbours`).
    pub per_word: usize,
}

/// A query's distinct lexemes (words with a quote or backslash left out: they never come
/// from ordinary text, and leaving them out keeps every tsquery built from the words a plain
/// list of literals).
macro_rules! query_lexemes {
    () => {
        "SELECT DISTINCT lexeme FROM unnest(tsvector_to_array(to_tsvector('english', $1))) AS lexeme
         WHERE lexeme !~ '[''\\\\]'"
    };
}

impl Store {
    /// `text`'s distinct words as the full-text index holds them (English stemming), in
    /// byte order; with `asked`, also the nearest words in the tenant's vocabulary of the
    /// words widening picks among them, as `word_neighbours` gives them for those words.
    #[tracing::instrument(target = "otel", name = "db.query_words", skip_all, fields(db.system.name = "postgresql", db.operation.name = "SELECT"))]
    pub async fn query_words(
        &self,
        text: &str,
        asked: Option<WordsAsked<'_>>,
    ) -> MemoryResult<(Vec<String>, Vec<Neighbour>)> {
        let Some(asked) = asked.filter(|a| a.per_word > 0 && a.max_words > 0) else {
            let mut lexemes: Vec<String> = sqlx::query_scalar(query_lexemes!())
                .bind(text)
                .fetch_all(self.pool())
                .await?;
            lexemes.sort_unstable();
            return Ok((lexemes, Vec::new()));
        };
        // The widened words are the longest, ties by byte order (`COLLATE "C"`), as
        // `widened_query_words` picks them. Each looks at `per_word` neighbours more than
        // there can be widened words, since those come first when near: a few more than
        // `word_neighbours` looks at when it knows their number, which `widen` leaves out,
        // and a depth the planner sees (the vocabulary's index serves an ORDER BY with a
        // known LIMIT). A row with no neighbour is a lexeme.
        let rows: Vec<(String, Option<String>, Option<f64>)> = sqlx::query_as(concat!(
            "WITH q AS MATERIALIZED (",
            query_lexemes!(),
            "),
             asked AS MATERIALIZED (
                 SELECT lexeme FROM q ORDER BY char_length(lexeme) DESC, lexeme COLLATE \"C\"
                 LIMIT $4)
             SELECT lexeme, NULL::text, NULL::float8 FROM q
             UNION ALL
             SELECT w.lexeme, n.lexeme, 1 - n.distance
             FROM word_vectors w
             CROSS JOIN LATERAL (
                 SELECT v.lexeme, (v.embedding <=> w.embedding)::float8 AS distance
                 FROM word_vectors v
                 WHERE v.tenant_id = $2 AND v.embedding_version_id = $3
                 ORDER BY v.embedding <=> w.embedding
                 LIMIT $5) n
             WHERE w.tenant_id = $2 AND w.embedding_version_id = $3
               AND w.lexeme IN (SELECT lexeme FROM asked)"
        ))
        .bind(text)
        .bind(asked.tenant_id)
        .bind(asked.version)
        .bind(i64::try_from(asked.max_words).unwrap_or(i64::MAX))
        .bind(i64::try_from(asked.per_word.saturating_add(asked.max_words)).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await?;
        let mut lexemes = Vec::new();
        let mut neighbours = Vec::new();
        for (of, lexeme, likeness) in rows {
            match (lexeme, likeness) {
                (Some(lexeme), Some(likeness)) => neighbours.push(Neighbour {
                    of,
                    lexeme,
                    likeness,
                }),
                _ => lexemes.push(of),
            }
        }
        lexemes.sort_unstable();
        Ok((lexemes, neighbours))
    }
}
