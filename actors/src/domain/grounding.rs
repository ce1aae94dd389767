//! What a model's extraction must be true to before it is stored: every fact is about the
//! user, the episode's speaker or someone the episode names; the time it gives is words of
//! the episode, resolved by the service against when the episode happened; a rule is advice,
//! not a fact repeated. A small model copies names from its examples and fills fields it has
//! nothing for; these checks turn that into a dropped item (counted by reason), never a
//! stored fact.

use chrono::{DateTime, Utc};

use super::extraction::{ExtractedFact, ExtractedRule};
use super::permanence::Permanence;
use super::stated_time::StatedTime;

/// An item as a model answered it, before the checks.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateFact {
    pub subject: String,
    pub predicate: String,
    pub content: String,
    pub permanence: Permanence,
    /// Words of the episode saying when it became true ("last month"), or empty.
    pub since: String,
}

/// The episode an item must be grounded in.
#[derive(Debug, Clone, Copy)]
pub struct Ground<'a> {
    pub episode_id: uuid::Uuid,
    pub text: &'a str,
    /// Who speaks, when the episode reads "Name: text" (lowercase).
    pub speaker: Option<&'a str>,
    pub happened_at: DateTime<Utc>,
}

/// Why an item was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Rejection {
    /// The subject is not the user, the speaker or a name in the episode.
    UngroundedSubject,
    /// Subject, predicate or content is empty once normalised.
    Empty,
    /// The content only repeats the subject or the predicate.
    Trivial,
    /// A rule that is not advice for the assistant (too short, a sentence about someone, or a
    /// fact's words).
    NotARule,
    /// What someone said rather than what is so (`said`, `mentioned`, `asked`).
    ReportedSpeech,
    /// The episode does not say it: most of the content's words are not in it, or a kinship
    /// the episode does not name (`has_brother` for a husband).
    Unsupported,
    /// The fact said to contradict a known one repeats that one's content.
    ContradictionRestated,
}

impl Rejection {
    pub fn as_str(self) -> &'static str {
        match self {
            Rejection::UngroundedSubject => "ungrounded_subject",
            Rejection::Empty => "empty",
            Rejection::Trivial => "trivial",
            Rejection::NotARule => "not_a_rule",
            Rejection::ReportedSpeech => "reported_speech",
            Rejection::Unsupported => "unsupported",
            Rejection::ContradictionRestated => "contradiction_restated",
        }
    }
}

/// Who the user is, as a subject.
pub const USER: &str = "user";

/// Words that stand for the one speaking (or the user), not for someone named.
const SELF_WORDS: &[&str] = &["i", "me", "myself", "speaker", "the speaker"];
const USER_WORDS: &[&str] = &["user", "the user"];

/// "Caroline: I moved" -> (Some("caroline"), "I moved"); otherwise (None, whole text). A
/// speaker is a short name: capitalised words of letters, digits, '-', '_' or '.' ("Dr. Ana",
/// not "Reminder set").
pub fn speaker_and_text(content: &str) -> (Option<String>, &str) {
    if let Some((name, rest)) = content.split_once(": ")
        && !name.trim().is_empty()
        && name.len() <= 40
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_' | '.'))
        && name
            .split_whitespace()
            .all(|w| w.starts_with(|c: char| c.is_uppercase() || c.is_ascii_digit()))
    {
        return (Some(name.trim().to_lowercase()), rest);
    }
    (None, content)
}

/// Capitalised words that are not names: pronouns, articles, conjunctions, auxiliaries,
/// question words, greetings, interjections and instructions that open a sentence.
const NOT_NAMES: &str = "i i'm i've i'd i'll im a an the my me we our us you your he his him \
    she her it its they their them this that these those yes no yeah yep nope hey hi hello oh \
    ok okay wow thanks thank sorry please congrats cool great awesome nice good well so and \
    but or if when what why how who where which do does did don't can can't will would should \
    could just also not there here then than now today yesterday tomorrow really totally \
    absolutely definitely always never user";

/// The words of an episode that may be names: capitalised, not a word that opens any
/// sentence ("The", "Hey", "Never"), "Sam's" as "Sam"; in order, each once.
pub fn names_in(text: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || matches!(c, '\'' | '-'))) {
        let word = word
            .trim_matches(|c| c == '\'' || c == '-')
            .trim_end_matches("'s");
        let capitalised = word.chars().next().is_some_and(char::is_uppercase);
        let lower = word.to_lowercase();
        if capitalised
            && word.chars().count() > 1
            && !NOT_NAMES.split_whitespace().any(|n| n == lower)
            && !names.iter().any(|n| n.eq_ignore_ascii_case(word))
        {
            names.push(word.to_owned());
        }
    }
    names
}

/// The episode's words, lowercase, split on anything but letters and digits.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// A subject in stored form (lowercase, spaces collapsed), with "I" read as the speaker
/// and "the user" as the user; `None` when it is not grounded in the episode.
pub fn grounded_subject(subject: &str, ground: &Ground<'_>) -> Option<String> {
    let subject = subject.split_whitespace().collect::<Vec<_>>().join(" ");
    let lower = subject.to_lowercase();
    if SELF_WORDS.contains(&lower.as_str()) {
        return Some(ground.speaker.unwrap_or(USER).to_owned());
    }
    if USER_WORDS.contains(&lower.as_str()) {
        return Some(USER.to_owned());
    }
    if ground.speaker == Some(lower.as_str()) {
        return Some(lower);
    }
    if is_time(&lower, ground.happened_at) {
        return None;
    }
    let episode = words(ground.text);
    let mut subject_words = words(&lower);
    // "Sam's mother": the possessive's "s" is not a word to find.
    subject_words.retain(|w| w != "s" && w != "the");
    let known = |w: &String| {
        episode.contains(w) || w == USER || ground.speaker.is_some_and(|s| words(s).contains(w))
    };
    (!subject_words.is_empty() && subject_words.iter().all(known)).then_some(lower)
}

/// Words for a time, which a small model sometimes makes the subject ("last month stopped
/// drinking coffee: Sam"): a time the service reads, or a month's or a day's name alone.
fn is_time(subject: &str, at: DateTime<Utc>) -> bool {
    const NAMES: &str = "january february march april may june july august september october \
        november december monday tuesday wednesday thursday friday saturday sunday today \
        tonight tomorrow yesterday now morning evening weekend";
    StatedTime::find(subject, at).is_some()
        || words(subject).iter().all(|w| {
            NAMES.split_whitespace().any(|n| n == w) || w.chars().all(|c| c.is_ascii_digit())
        })
}

/// Verbs of saying: a fact that someone said, mentioned or asked something is about the
/// conversation, not about them.
fn is_reported_speech(predicate: &str) -> bool {
    const VERBS: &str = "say says said tell tells told mention mentions mentioned ask asks \
        asked reply replies replied greet greets greeted thank thanks thanked talk talks talked \
        wonder wonders wondered";
    predicate
        .split('_')
        .next()
        .is_some_and(|verb| VERBS.split_whitespace().any(|v| v == verb))
}

/// Kinships and the words an episode names them by: a predicate that names one needs one of
/// its words in the episode (a small model copies `has_brother` from an example for a
/// husband).
const KINSHIPS: &[(&str, &str)] = &[
    ("brother", "brother brothers bro"),
    ("sister", "sister sisters sis"),
    ("husband", "husband hubby spouse"),
    ("wife", "wife spouse"),
    ("spouse", "spouse husband wife married"),
    ("mother", "mother mom mum mama mommy mummy"),
    ("father", "father dad papa daddy"),
    ("parent", "parent parents mother father mom mum dad"),
    ("son", "son sons"),
    ("daughter", "daughter daughters"),
    ("child", "child children kid kids son daughter baby"),
    ("grandmother", "grandmother grandma granny"),
    ("grandfather", "grandfather grandpa"),
    ("aunt", "aunt auntie"),
    ("uncle", "uncle"),
    ("cousin", "cousin cousins"),
    ("niece", "niece"),
    ("nephew", "nephew"),
    ("boyfriend", "boyfriend partner"),
    ("girlfriend", "girlfriend partner"),
    ("partner", "partner boyfriend girlfriend husband wife"),
];

/// Whether the episode says what a fact's content and predicate claim: at least half of the
/// content's words (of three letters or more) are in it, the same or with the same first
/// five letters ("married", "marriage"); and any kinship its predicate names is.
fn supported(content: &str, predicate: &str, episode: &str) -> bool {
    let episode = words(episode);
    let has = |w: &str| {
        let stem: String = w.chars().take(5).collect();
        episode
            .iter()
            .any(|e| e == w || (stem.chars().count() == 5 && e.starts_with(&stem)))
    };
    for part in predicate.split('_') {
        let kin = KINSHIPS
            .iter()
            .find(|(k, _)| part == *k || part.strip_suffix('s') == Some(k));
        if let Some((_, names)) = kin
            && !names.split_whitespace().any(has)
        {
            return false;
        }
    }
    let content_words: Vec<String> = words(content)
        .into_iter()
        .filter(|w| w.chars().count() >= 3)
        .collect();
    let found = content_words.iter().filter(|w| has(w)).count();
    found * 2 >= content_words.len()
}

/// A predicate in stored form: lowercase words joined by `_` (`works_as`), whatever
/// spacing or case the model used.
pub fn predicate_key(predicate: &str) -> String {
    words(predicate).join("_")
}

/// Checks one fact against its episode and puts it in the form it is stored in.
pub fn check_fact(
    candidate: &CandidateFact,
    ground: &Ground<'_>,
) -> Result<ExtractedFact, Rejection> {
    let content = candidate.content.split_whitespace().collect::<Vec<_>>();
    let content = content.join(" ");
    let predicate = predicate_key(&candidate.predicate);
    if candidate.subject.trim().is_empty() || predicate.is_empty() || content.is_empty() {
        return Err(Rejection::Empty);
    }
    let subject =
        grounded_subject(&candidate.subject, ground).ok_or(Rejection::UngroundedSubject)?;
    let content_key = words(&content).join("_");
    if content_key == predicate_key(&subject) || content_key == predicate {
        return Err(Rejection::Trivial);
    }
    if is_reported_speech(&predicate) {
        return Err(Rejection::ReportedSpeech);
    }
    if !supported(&content, &predicate, ground.text) {
        return Err(Rejection::Unsupported);
    }
    // The time is the episode's words, read against when it happened; words that are not
    // in the episode, or that state no time, leave the episode's own time.
    let since = candidate.since.trim();
    let valid_from = (!since.is_empty()
        && ground.text.to_lowercase().contains(&since.to_lowercase()))
    .then(|| StatedTime::find(since, ground.happened_at))
    .flatten()
    .map(|t| t.since);
    Ok(ExtractedFact {
        subject,
        predicate,
        content,
        permanence: candidate.permanence,
        importance: importance_of(candidate.permanence),
        source_episode_id: ground.episode_id,
        supersedes_fact_id: None,
        valid_from,
        relations: Vec::new(),
        statement: None,
    })
}

/// Words a sentence about someone starts with, never an instruction: pronouns, articles,
/// possessives, and the user.
const DESCRIPTION_OPENERS: &[&str] = &[
    "i", "we", "he", "she", "they", "it", "his", "her", "their", "its", "my", "our", "the", "a",
    "an", "this", "that", "user", "users",
];

/// A rule's text, checked: an instruction of a few words, not a sentence about someone (it
/// opens with a pronoun, an article, the user, the speaker, a name of the episode or the
/// subject of a fact) and not one of `facts` restated.
pub fn check_rule(
    content: &str,
    facts: &[ExtractedFact],
    ground: &Ground<'_>,
) -> Result<ExtractedRule, Rejection> {
    let content = content.split_whitespace().collect::<Vec<_>>().join(" ");
    let rule_words = words(&content);
    if rule_words.len() < 3 {
        return Err(Rejection::NotARule);
    }
    let first = rule_words[0].as_str();
    let about_someone = DESCRIPTION_OPENERS.contains(&first)
        || ground
            .speaker
            .is_some_and(|s| words(s).first().map(String::as_str) == Some(first))
        || names_in(ground.text)
            .iter()
            .any(|n| n.to_lowercase() == first)
        || facts
            .iter()
            .any(|f| words(&f.subject).first().map(String::as_str) == Some(first));
    if about_someone {
        return Err(Rejection::NotARule);
    }
    let restates = facts.iter().any(|f| {
        let fact = words(&format!(
            "{} {} {}",
            f.subject,
            f.predicate.replace('_', " "),
            f.content
        ));
        fact == rule_words
    });
    if restates {
        return Err(Rejection::NotARule);
    }
    Ok(ExtractedRule {
        content,
        source_episode_id: ground.episode_id,
    })
}

/// How much a fact weighs in retrieval, from how long it stays true: identity and health
/// above habits, habits above today's events.
fn importance_of(permanence: Permanence) -> f64 {
    match permanence {
        Permanence::Permanent => 8.0,
        Permanence::Stable => 7.0,
        Permanence::Standard => 5.0,
        Permanence::Volatile => 4.0,
        Permanence::Ephemeral => 3.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ground(text: &str) -> Ground<'_> {
        Ground {
            episode_id: uuid::Uuid::from_u128(1),
            text,
            speaker: None,
            happened_at: "2026-05-20T10:00:00Z".parse().unwrap(),
        }
    }

    fn fact(subject: &str, predicate: &str, content: &str, since: &str) -> CandidateFact {
        CandidateFact {
            subject: subject.into(),
            predicate: predicate.into(),
            content: content.into(),
            permanence: Permanence::Stable,
            since: since.into(),
        }
    }

    #[test]
    fn a_subject_is_the_user_the_speaker_or_named_in_the_episode() {
        let text = "Sam's husband is called Tiago; he works as a nurse.";
        let g = ground(text);
        assert_eq!(grounded_subject("Tiago", &g).as_deref(), Some("tiago"));
        assert_eq!(
            grounded_subject("Sam's husband", &g).as_deref(),
            Some("sam's husband")
        );
        assert_eq!(grounded_subject("The User", &g).as_deref(), Some("user"));
        assert_eq!(grounded_subject("I", &g).as_deref(), Some("user"));
        // A name from a prompt's example, not from the episode.
        assert_eq!(grounded_subject("Maria", &g), None);
        assert_eq!(grounded_subject("Tiago Silva", &g), None);
        // A time is not whom a fact is about.
        let dated =
            ground("Sam stopped drinking coffee last month; her passport expires in June 2027.");
        assert_eq!(grounded_subject("last month", &dated), None);
        assert_eq!(grounded_subject("June", &dated), None);
        assert_eq!(grounded_subject("2027", &dated), None);
        assert_eq!(
            grounded_subject("Sam's passport", &dated).as_deref(),
            Some("sam's passport")
        );
        let (speaker, rest) = speaker_and_text("Caroline: I went to a support group.");
        let g = Ground {
            speaker: speaker.as_deref(),
            ..ground(rest)
        };
        assert_eq!(
            grounded_subject("Caroline", &g).as_deref(),
            Some("caroline")
        );
        assert_eq!(grounded_subject("me", &g).as_deref(), Some("caroline"));
        assert_eq!(grounded_subject("Melanie", &g), None);
    }

    #[test]
    fn names_are_capitalised_words_that_do_not_open_any_sentence() {
        assert_eq!(
            names_in("Sam's husband is called Tiago; he works at Santa Maria. Never call him."),
            ["Sam", "Tiago", "Santa", "Maria"]
        );
        assert_eq!(
            names_in("Caroline: Hey Mel! I went to the LGBTQ group. Thanks!"),
            ["Caroline", "Mel", "LGBTQ"]
        );
    }

    #[test]
    fn a_speaker_is_a_short_name_before_a_colon() {
        assert_eq!(
            speaker_and_text("Dr. Ana: hi").0.as_deref(),
            Some("dr. ana")
        );
        assert_eq!(speaker_and_text("Reminder set: renew it").0, None);
        assert_eq!(speaker_and_text("Note (urgent): renew it").0, None);
        assert_eq!(speaker_and_text("no colon here").0, None);
    }

    #[test]
    fn a_fact_is_put_in_stored_form_and_dated_by_the_episodes_words() {
        let g = ground("Sam told me she stopped drinking coffee last month.");
        let f = check_fact(
            &fact("Sam", "Stopped Drinking", " coffee ", "last month"),
            &g,
        )
        .unwrap();
        assert_eq!(
            (f.subject.as_str(), f.predicate.as_str()),
            ("sam", "stopped_drinking")
        );
        assert_eq!(f.content, "coffee");
        assert_eq!(
            f.valid_from.unwrap().to_rfc3339(),
            "2026-04-01T00:00:00+00:00"
        );
        // Words the episode does not have, or that state no time, leave the episode's time.
        let f = check_fact(&fact("Sam", "stopped", "coffee", "in 2019"), &g).unwrap();
        assert_eq!(f.valid_from, None);
        let f = check_fact(&fact("Sam", "stopped", "coffee", "told"), &g).unwrap();
        assert_eq!(f.valid_from, None);
    }

    #[test]
    fn empty_trivial_and_ungrounded_facts_are_dropped() {
        let g = ground("Sam runs 5k every Saturday.");
        assert_eq!(
            check_fact(&fact("Sam", "runs", " ", ""), &g).unwrap_err(),
            Rejection::Empty
        );
        assert_eq!(
            check_fact(&fact("Sam", "runs", "runs", ""), &g).unwrap_err(),
            Rejection::Trivial
        );
        assert_eq!(
            check_fact(&fact("Maria", "runs", "5k", ""), &g).unwrap_err(),
            Rejection::UngroundedSubject
        );
    }

    #[test]
    fn a_fact_the_episode_does_not_say_is_dropped() {
        let g = ground("Sam's husband is called Tiago; he works as a nurse at Santa Maria.");
        assert!(check_fact(&fact("Tiago", "works_as", "nurse at Santa Maria", ""), &g).is_ok());
        // A kinship the episode does not name, copied from an example.
        assert_eq!(
            check_fact(&fact("Sam", "has_brother", "Tiago", ""), &g).unwrap_err(),
            Rejection::Unsupported
        );
        assert!(check_fact(&fact("Sam", "has_husband", "Tiago", ""), &g).is_ok());
        // A known fact's content carried onto an episode that does not say it.
        assert_eq!(
            check_fact(&fact("Tiago", "likes", "hiking in the mountains", ""), &g).unwrap_err(),
            Rejection::Unsupported
        );
        // What was said is not what is so.
        assert_eq!(
            check_fact(&fact("Sam", "mentioned", "her husband Tiago", ""), &g).unwrap_err(),
            Rejection::ReportedSpeech
        );
        // The same word with another ending is the same word.
        let g = ground("Caroline is researching adoption agencies.");
        assert!(check_fact(&fact("Caroline", "researches", "adoption agency", ""), &g).is_ok());
    }

    #[test]
    fn a_rule_is_advice_not_a_fact_repeated() {
        let g = ground("Sam hates calls after 6pm.");
        let f = check_fact(&fact("Sam", "hates", "calls after 6pm", ""), &g).unwrap();
        assert!(check_rule("Do not call Sam after 6pm", std::slice::from_ref(&f), &g).is_ok());
        assert_eq!(
            check_rule("Sam hates calls after 6pm", std::slice::from_ref(&f), &g).unwrap_err(),
            Rejection::NotARule
        );
        assert_eq!(
            check_rule("Be nice", &[], &g).unwrap_err(),
            Rejection::NotARule
        );
        // A sentence about someone is not an instruction.
        for description in [
            "Sam runs 5k every Saturday morning",
            "The user prefers tea",
            "She hates calls after 6pm",
        ] {
            let facts = [check_fact(&fact("Sam", "runs", "5k", ""), &g).unwrap()];
            assert_eq!(
                check_rule(description, &facts, &g).unwrap_err(),
                Rejection::NotARule,
                "{description}"
            );
        }
        assert!(check_rule("Never book the user before 10am", &[], &g).is_ok());
        // A name of the episode opening it, without a fact about its bearer.
        let g = ground("Sam prefers morning meetings. Never book her before 10am.");
        assert_eq!(
            check_rule("Sam prefers morning meetings", &[], &g).unwrap_err(),
            Rejection::NotARule
        );
        assert!(check_rule("Never book Sam before 10am", &[], &g).is_ok());
    }
}
