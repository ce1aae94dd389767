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
//! memory written since that contains such a word must still be found. Words a query was
//! widened with (`domain::widening`) score at a fraction of their idf and only if they fit
//! what budget the query's own words leave: one that does not would only add a fraction of
//! a common word's small idf to matches the own words picked, and every scored word is work
//! on every candidate (on a tenant whose every word is common, a fifth more of the keyword
//! statement; docs/benchmarks.md, "Widened words only where they pick").

/// A query word (a stemmed lexeme) and how many of the tenant's memories of one type
/// contain it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueryTerm {
    pub lexeme: String,
    pub document_frequency: f64,
    /// 1 for the query's own words; less for a word the query was widened with
    /// (`domain::widening`), whose idf it scales.
    pub weight: f64,
}

impl QueryTerm {
    fn is_own(&self) -> bool {
        self.weight >= 1.0
    }
}

/// How one keyword search runs.
#[derive(Debug, Clone, PartialEq)]
pub struct KeywordPlan {
    /// Every word that occurs, with its idf (times its weight): all of them score.
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
    /// The plan of `terms`. The query's own words pick first; the words it was widened
    /// with pick with what budget the own words leave, rarest first, and only where the
    /// own words select (a query of common words alone stays a look at recent memories:
    /// its widened words would not make it selective). A widened word that picks nothing
    /// is left out, and so is one found in no memory: it came from the tenant's vocabulary,
    /// not from the query, and another type's memories may hold it while this type's do not.
    pub fn new(terms: &[QueryTerm], documents: f64, common_df: f64) -> Self {
        let (own, widened): (Vec<&QueryTerm>, Vec<&QueryTerm>) = terms
            .iter()
            .filter(|t| t.is_own() || t.document_frequency > 0.0)
            .partition(|t| t.is_own());
        let (occurring, unseen): (Vec<&QueryTerm>, Vec<&QueryTerm>) =
            own.iter().partition(|t| t.document_frequency > 0.0);
        let mut budget = common_df;
        let picked = rarest_within(&occurring, &mut budget);
        let (selective, common): (Vec<&QueryTerm>, Vec<&QueryTerm>) =
            occurring.iter().partition(|t| picked.contains(&t.lexeme));
        let lexemes = |ts: &[&QueryTerm]| ts.iter().map(|t| t.lexeme.clone()).collect::<Vec<_>>();
        let (selection, widened_picked) = if selective.is_empty() && !common.is_empty() {
            // Only common words: the most recent of their matches.
            let mut words = lexemes(&common);
            words.extend(lexemes(&unseen));
            (Selection::RecentCommon(words), Vec::new())
        } else {
            let widened_picked = rarest_within(&widened, &mut budget);
            let mut words = lexemes(&selective);
            words.extend(lexemes(&unseen));
            words.extend(widened_picked.iter().cloned());
            let selection = if words.is_empty() {
                Selection::Nothing
            } else {
                Selection::Selective(words)
            };
            (selection, widened_picked)
        };
        let terms: Vec<&QueryTerm> = own
            .into_iter()
            .chain(
                widened
                    .into_iter()
                    .filter(|t| widened_picked.contains(&t.lexeme)),
            )
            .collect();
        KeywordPlan {
            lexemes: lexemes(&terms),
            idf: terms
                .iter()
                .map(|t| t.weight * idf(documents, t.document_frequency))
                .collect(),
            selection,
        }
    }
}

/// The words of `terms` whose matches together fit `budget`, rarest first (in `terms`'
/// order), taking what they use from it.
fn rarest_within(terms: &[&QueryTerm], budget: &mut f64) -> Vec<String> {
    let mut by_rarity = terms.to_vec();
    by_rarity.sort_by(|a, b| a.document_frequency.total_cmp(&b.document_frequency));
    let mut picked = Vec::new();
    for term in by_rarity {
        if term.document_frequency > *budget {
            break;
        }
        *budget -= term.document_frequency;
        picked.push(term.lexeme.as_str());
    }
    terms
        .iter()
        .filter(|t| picked.contains(&t.lexeme.as_str()))
        .map(|t| t.lexeme.clone())
        .collect()
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
            weight: 1.0,
        }
    }

    fn widened(lexeme: &str, df: f64, weight: f64) -> QueryTerm {
        QueryTerm {
            weight,
            ..term(lexeme, df)
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
    fn widened_words_pick_with_what_the_own_words_leave_and_weigh_less() {
        let plan = KeywordPlan::new(
            &[
                term("instrument", 300.0),
                widened("violin", 500.0, 0.2),
                widened("guitar", 800.0, 0.2),
                widened("piano", 0.0, 0.2),
            ],
            6000.0,
            1000.0,
        );
        // 300 + 500 fit the budget of 1,000; the guitar's 800 more do not: it is left out,
        // as is a widened word in no memory of this type (no unseen word).
        assert_eq!(
            plan.selection,
            Selection::Selective(vec!["instrument".into(), "violin".into()])
        );
        assert_eq!(plan.lexemes, ["instrument", "violin"]);
        assert!((plan.idf[1] - 0.2 * idf(6000.0, 500.0)).abs() < 1e-12);
    }

    #[test]
    fn widened_words_select_when_no_own_word_occurs_but_not_for_common_ones() {
        let plan = KeywordPlan::new(
            &[term("instrument", 0.0), widened("violin", 5.0, 0.2)],
            6000.0,
            1000.0,
        );
        assert_eq!(
            plan.selection,
            Selection::Selective(vec!["instrument".into(), "violin".into()])
        );
        let plan = KeywordPlan::new(
            &[term("user", 5000.0), widened("person", 5.0, 0.2)],
            6000.0,
            1000.0,
        );
        assert_eq!(plan.selection, Selection::RecentCommon(vec!["user".into()]));
        assert_eq!(plan.lexemes, ["user"]);
        assert_eq!(
            KeywordPlan::new(&[widened("violin", 0.0, 0.2)], 10.0, 1000.0).selection,
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
