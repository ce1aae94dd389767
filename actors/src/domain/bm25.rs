//! The query side of Okapi BM25: each query word's inverse document frequency, and which
//! words select candidates.
//!
//! Scoring every memory that contains any query word makes a keyword search cost as much
//! as the tenant's largest match set: a word in every episode ("user", a butler's own name)
//! turns each search into a scan of the shard. So, as Elasticsearch's common-terms query
//! does, words are split by document frequency, with a budget of `common_df` matches: the
//! rarest words pick the candidates as long as their document frequencies together stay
//! within it; the others (a word in more than `common_df` memories, or one that would take
//! the sum past it) still add to every score but pick nothing. When no word fits, the
//! candidates are the most recent memories with any of the query's words (twice as many as
//! the search may return, at most `common_df`). Work per search is then bounded by
//! `common_df` matches, whatever the corpus and however many words the query has (several
//! words each in half the memories would otherwise have every search score them all).
//! Words found in no memory when they were counted ("unseen") join whichever selection
//! runs, at the highest weight: counts are reused across writes (`corpus_cache.rs`), and a
//! memory written since that contains such a word must still be found.

/// A query word (a stemmed lexeme) and how many of the tenant's memories of one type
/// contain it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryTerm {
    pub lexeme: String,
    pub document_frequency: f64,
}

/// How one keyword search runs.
#[derive(Debug, Clone, PartialEq)]
pub struct KeywordPlan {
    /// Every word that occurs, with its idf: all of them score.
    pub lexemes: Vec<String>,
    pub idf: Vec<f64>,
    /// What picks the candidates.
    pub selection: Selection,
}

/// Which memories are scored.
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    /// Every memory with any of these (selective) words.
    Selective(Vec<String>),
    /// The most recent memories with any of these (all common) words.
    RecentCommon(Vec<String>),
    /// No query word occurs: nothing can match.
    Nothing,
}

/// Okapi BM25's inverse document frequency (the non-negative variant Lucene uses): rare
/// words weigh more; a word in every one of `documents` memories still weighs a little.
pub fn idf(documents: f64, document_frequency: f64) -> f64 {
    let n = documents.max(document_frequency);
    (1.0 + (n - document_frequency + 0.5) / (document_frequency + 0.5)).ln()
}

impl KeywordPlan {
    pub fn new(terms: &[QueryTerm], documents: f64, common_df: f64) -> Self {
        let (occurring, unseen): (Vec<&QueryTerm>, Vec<&QueryTerm>) =
            terms.iter().partition(|t| t.document_frequency > 0.0);
        // The rarest words first, while their matches together fit the budget.
        let mut by_rarity: Vec<&QueryTerm> = occurring.clone();
        by_rarity.sort_by(|a, b| a.document_frequency.total_cmp(&b.document_frequency));
        let mut budget = common_df;
        let picked: Vec<&str> = by_rarity
            .iter()
            .take_while(|t| {
                budget -= t.document_frequency;
                budget >= 0.0
            })
            .map(|t| t.lexeme.as_str())
            .collect();
        let (selective, common): (Vec<&QueryTerm>, Vec<&QueryTerm>) = occurring
            .iter()
            .partition(|t| picked.contains(&t.lexeme.as_str()));
        let lexemes = |ts: &[&QueryTerm]| ts.iter().map(|t| t.lexeme.clone()).collect::<Vec<_>>();
        let with_unseen = |ts: &[&QueryTerm]| {
            let mut words = lexemes(ts);
            words.extend(lexemes(&unseen));
            words
        };
        let selection = match (selective.is_empty(), common.is_empty(), unseen.is_empty()) {
            (false, _, _) => Selection::Selective(with_unseen(&selective)),
            (true, false, _) => Selection::RecentCommon(with_unseen(&common)),
            (true, true, false) => Selection::Selective(lexemes(&unseen)),
            (true, true, true) => Selection::Nothing,
        };
        KeywordPlan {
            lexemes: lexemes(&terms.iter().collect::<Vec<_>>()),
            idf: terms
                .iter()
                .map(|t| idf(documents, t.document_frequency))
                .collect(),
            selection,
        }
    }
}

/// A tsquery matching any of `lexemes` (already normalised by `to_tsvector`, so no further
/// stemming: each is quoted as a literal).
pub fn any_of(lexemes: &[String]) -> String {
    lexemes
        .iter()
        .map(|l| format!("'{}'", l.replace('\\', "\\\\").replace('\'', "''")))
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(lexeme: &str, df: f64) -> QueryTerm {
        QueryTerm {
            lexeme: lexeme.into(),
            document_frequency: df,
        }
    }

    #[test]
    fn rarer_words_weigh_more_and_none_weighs_below_zero() {
        assert!(idf(1000.0, 1.0) > idf(1000.0, 10.0));
        assert!(idf(1000.0, 10.0) > idf(1000.0, 999.0));
        assert!(idf(1000.0, 1000.0) > 0.0);
        // A stale document count below the frequency must not go negative.
        assert!(idf(10.0, 50.0) > 0.0);
    }

    #[test]
    fn selective_words_pick_candidates_and_common_ones_only_score() {
        let plan = KeywordPlan::new(
            &[
                term("user", 5000.0),
                term("peanut", 3.0),
                term("allergi", 40.0),
            ],
            6000.0,
            1000.0,
        );
        assert_eq!(
            plan.selection,
            Selection::Selective(vec!["peanut".into(), "allergi".into()])
        );
        assert_eq!(plan.lexemes, ["user", "peanut", "allergi"]);
        assert_eq!(plan.idf.len(), 3);
        assert!(plan.idf[1] > plan.idf[2] && plan.idf[2] > plan.idf[0]);
    }

    #[test]
    fn only_common_words_select_the_most_recent_matches() {
        let plan = KeywordPlan::new(&[term("plan", 4000.0), term("meal", 0.0)], 5000.0, 1000.0);
        // A word in no memory when counted is matched too (a newer memory may hold it), at
        // the highest weight.
        assert_eq!(
            plan.selection,
            Selection::RecentCommon(vec!["plan".into(), "meal".into()])
        );
        assert_eq!(plan.lexemes, ["plan", "meal"]);
        assert!(plan.idf[1] > plan.idf[0]);
    }

    #[test]
    fn unseen_words_join_the_selective_ones() {
        let plan = KeywordPlan::new(
            &[
                term("dentist", 2.0),
                term("friday", 0.0),
                term("user", 5000.0),
            ],
            6000.0,
            1000.0,
        );
        assert_eq!(
            plan.selection,
            Selection::Selective(vec!["dentist".into(), "friday".into()])
        );
    }

    #[test]
    fn selective_words_share_one_budget_rarest_first() {
        // Each word alone fits the budget; together they would score 2,400 matches.
        let plan = KeywordPlan::new(
            &[
                term("dinner", 800.0),
                term("sister", 700.0),
                term("river", 900.0),
                term("gift", 150.0),
            ],
            2000.0,
            1000.0,
        );
        assert_eq!(
            plan.selection,
            Selection::Selective(vec!["sister".into(), "gift".into()])
        );
        // All still score.
        assert_eq!(plan.lexemes, ["dinner", "sister", "river", "gift"]);
    }

    #[test]
    fn a_word_exactly_at_the_threshold_is_selective() {
        let plan = KeywordPlan::new(&[term("trip", 1000.0)], 5000.0, 1000.0);
        assert_eq!(plan.selection, Selection::Selective(vec!["trip".into()]));
    }

    #[test]
    fn unseen_words_alone_still_look_and_no_words_match_nothing() {
        assert_eq!(
            KeywordPlan::new(&[term("zebra", 0.0)], 10.0, 1000.0).selection,
            Selection::Selective(vec!["zebra".into()])
        );
        assert_eq!(
            KeywordPlan::new(&[], 10.0, 1000.0).selection,
            Selection::Nothing
        );
    }

    #[test]
    fn lexemes_are_quoted_as_literals() {
        assert_eq!(
            any_of(&["plan".into(), "o'neil".into()]),
            "'plan' | 'o''neil'"
        );
        assert_eq!(any_of(&["a\\b".into()]), "'a\\\\b'");
    }
}
