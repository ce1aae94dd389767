//! Query intent (memory_butler.md §6.5, issue 24): what kind of lookup a query is, read from
//! the way it is asked, and how that shifts ranking. An identity question ("what is my
//! name") is answered by a standing fact, not by last week's chat; a procedure question
//! ("how should I deploy") by a rule; a temporal one ("when did we move") by the episode
//! of that time, however old, so recency must not pull newer, unrelated ones above it.
//!
//! The cues are English question forms and function words, the same for any conversation;
//! no topic, name or date format is in them. A query with no cue, or cues of two intents,
//! is `General` and ranked as configured. How each intent ranks is `intent_routing.rs`.

super::string_enum! {
    /// The kind of lookup a query is.
    Intent {
        /// Who or what something is: names, relations, where someone lives or works.
        Identity => "identity",
        /// What someone likes, wants or avoids.
        Preference => "preference",
        /// How to do something, or what should be done.
        Procedure => "procedure",
        /// When something happened, or what happened at a time.
        Temporal => "temporal",
        /// None of the above, or more than one.
        General => "general",
    }
}

/// Words that ask for a time. Not "may": a modal verb far more often than a month.
const TEMPORAL_WORDS: &[&str] = &[
    "when",
    "ago",
    "yesterday",
    "today",
    "tonight",
    "tomorrow",
    "since",
    "until",
    "during",
    "date",
    "dates",
    "year",
    "years",
    "month",
    "months",
    "week",
    "weeks",
    "weekend",
    "january",
    "february",
    "march",
    "april",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "morning",
    "evening",
    "night",
    "recently",
    "lately",
    "earlier",
];

/// Word pairs that ask for a time.
const TEMPORAL_PAIRS: &[(&str, &str)] = &[
    ("what", "time"),
    ("what", "day"),
    ("how", "long"),
    ("last", "time"),
    ("first", "time"),
];

/// Words that ask what someone likes or wants.
const PREFERENCE_WORDS: &[&str] = &[
    "prefer",
    "prefers",
    "preferred",
    "preference",
    "preferences",
    "favorite",
    "favourite",
    "favorites",
    "favourites",
    "like",
    "likes",
    "love",
    "loves",
    "enjoy",
    "enjoys",
    "hate",
    "hates",
    "dislike",
    "dislikes",
    "want",
    "wants",
    "allergic",
    "allergy",
    "avoid",
    "avoids",
];

/// Openings that ask how to do something or what should be done.
const PROCEDURE_OPENINGS: &[&[&str]] = &[
    &["how", "do", "i"],
    &["how", "do", "we"],
    &["how", "do", "you"],
    &["how", "should"],
    &["how", "to"],
    &["how", "can"],
    &["should", "i"],
    &["should", "we"],
    &["what", "steps"],
    &["what", "is", "the", "best", "way"],
    &["what's", "the", "best", "way"],
];

/// Words that ask how something is done.
const PROCEDURE_WORDS: &[&str] = &[
    "steps",
    "procedure",
    "process",
    "workflow",
    "instructions",
    "guideline",
    "guidelines",
    "policy",
    "rule",
    "rules",
    "always",
    "never",
];

/// Openings that ask who or what someone or something is.
const IDENTITY_OPENINGS: &[&[&str]] = &[
    &["who"],
    &["whose"],
    &["what", "is", "my"],
    &["what's", "my"],
    &["what", "is", "the", "name"],
    &["where", "do", "i"],
    &["where", "does"],
    &["where", "is"],
    &["how", "old"],
];

/// Words that ask for a name or a relation.
const IDENTITY_WORDS: &[&str] = &[
    "name",
    "named",
    "called",
    "birthday",
    "age",
    "wife",
    "husband",
    "partner",
    "son",
    "daughter",
    "mother",
    "father",
    "brother",
    "sister",
    "live",
    "lives",
    "job",
    "occupation",
    "nationality",
    "identity",
];

impl Intent {
    fn parse_alias(_: &str) -> Option<Self> {
        None
    }

    /// The intent of `query`: the one intent its cues point to, else `General`.
    pub fn of(query: &str) -> Intent {
        let words: Vec<String> = query
            .split(|c: char| !(c.is_alphanumeric() || c == '\''))
            .filter(|w| !w.is_empty())
            .map(|w| w.to_lowercase())
            .collect();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let has = |list: &[&str]| words.iter().any(|w| list.contains(w));
        let opens = |openings: &[&[&str]]| openings.iter().any(|o| words.starts_with(o));
        let pair = |pairs: &[(&str, &str)]| {
            words
                .windows(2)
                .any(|w| pairs.iter().any(|(a, b)| w[0] == *a && w[1] == *b))
        };
        // A year or a day of the month written as digits asks for a time too.
        let number_of_time = words.iter().any(|w| {
            w.len() == 4
                && w.chars().all(|c| c.is_ascii_digit())
                && (w.starts_with("19") || w.starts_with("20"))
        });
        let cues = [
            (
                Intent::Temporal,
                has(TEMPORAL_WORDS) || pair(TEMPORAL_PAIRS) || number_of_time,
            ),
            (
                Intent::Procedure,
                opens(PROCEDURE_OPENINGS) || has(PROCEDURE_WORDS),
            ),
            (Intent::Preference, has(PREFERENCE_WORDS)),
            (
                Intent::Identity,
                opens(IDENTITY_OPENINGS) || has(IDENTITY_WORDS),
            ),
        ];
        let mut found = cues.iter().filter(|(_, cued)| *cued).map(|(i, _)| *i);
        match (found.next(), found.next()) {
            (Some(one), None) => one,
            _ => Intent::General,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn each_kind_of_question_is_recognised() {
        for (query, intent) in [
            ("When did we move to the new office?", Intent::Temporal),
            ("what happened in 2023", Intent::Temporal),
            ("How long ago was the outage", Intent::Temporal),
            ("What is my name?", Intent::Identity),
            ("who is the on-call engineer", Intent::Identity),
            ("where does the user work", Intent::Identity),
            ("Which coffee do I prefer", Intent::Preference),
            ("favourite editor", Intent::Preference),
            ("How should I deploy the service?", Intent::Procedure),
            ("steps to rotate a key", Intent::Procedure),
            ("database connection pool size", Intent::General),
        ] {
            assert_eq!(Intent::of(query), intent, "{query}");
        }
    }

    /// Cues of two intents are no intent: ranking stays as configured.
    #[test]
    fn mixed_cues_are_general() {
        assert_eq!(Intent::of("when did I start to like jazz"), Intent::General);
        assert_eq!(
            Intent::of("who do I call when the pager fires"),
            Intent::General
        );
    }

    /// Cues are whole words: a word that contains one is not one.
    #[test]
    fn cues_are_whole_words() {
        assert_eq!(Intent::of("whenever possible"), Intent::General);
        assert_eq!(Intent::of("the likelihood of rain"), Intent::General);
        assert_eq!(Intent::of(""), Intent::General);
    }
}
