//! Context assembly (memory_butler.md §6.4): the memory block a butler gets before a
//! session, as deterministic sectioned text within a hard token budget.
//!
//! Lines come in ranked order per section. Each section first fills up to its quota (a
//! share of the budget), then leftover budget goes to the sections in order. A section
//! always takes a prefix of its ranked lines, so overflow drops the lowest-ranked
//! candidates first. Tokens are counted by a real tokenizer, and the finished text is
//! counted once more, so the budget holds for any tokenizer, not just additive ones.
//!
//! What a tokenizer undercounts cannot carry the block past its budget: a line counts at
//! least one token per [`BYTES_PER_TOKEN`] bytes whatever the tokenizer says (a long run
//! without spaces is a single unknown token to WordPiece, and would otherwise fill the
//! consuming model's window), and a memory's text is cut to `max_line_bytes` in its line.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use super::search::Hit;

/// The fewest bytes a token of the block stands for: a line costs at least its length
/// divided by this. Real text runs four to five bytes a token in the tokenizers we know, so
/// this floor only bites on text no model reads as words.
pub const BYTES_PER_TOKEN: usize = 8;

/// What a piece of the block costs of the budget: its tokens, and never less than one per
/// [`BYTES_PER_TOKEN`] bytes.
fn cost(counter: &dyn TokenCounter, text: &str) -> usize {
    counter
        .count(text)
        .max(text.len().div_ceil(BYTES_PER_TOKEN))
}

/// Counts tokens the way the model that reads the context will.
pub trait TokenCounter: Send + Sync {
    fn count(&self, text: &str) -> usize;

    /// Whether no token spans a newline, so that text made of newline-separated pieces
    /// counts as the sum of its pieces: then a block's count is the sum of its lines'
    /// counts, and the block need not be tokenized again whole.
    fn additive(&self) -> bool {
        false
    }
}

/// The three sections, in output order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Facts,
    Rules,
    Episodes,
}

impl Section {
    pub const ALL: [Section; 3] = [Section::Facts, Section::Rules, Section::Episodes];

    fn heading(self) -> &'static str {
        match self {
            Section::Facts => "\n### What You Know (Facts)\n",
            Section::Rules => "\n### How To Behave (Rules)\n",
            Section::Episodes => "\n### Recent Context (Episodes)\n",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

const HEADER: &str = "## Your Memory\n";

/// One rendered memory: its id and its line (ending in a newline).
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub id: Uuid,
    pub text: String,
}

/// Share of the budget each section may fill before leftovers are shared.
#[derive(Debug, Clone, Copy)]
pub struct Quotas {
    pub facts: f64,
    pub rules: f64,
    pub episodes: f64,
}

impl Quotas {
    fn share(&self, section: Section) -> f64 {
        match section {
            Section::Facts => self.facts,
            Section::Rules => self.rules,
            Section::Episodes => self.episodes,
        }
    }
}

/// The assembled block and what went into it.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ContextBlock {
    pub text: String,
    pub sections: IncludedIds,
    pub tokens_used: usize,
    pub token_budget: usize,
    /// Candidates considered.
    pub candidates: usize,
    /// Candidates left out for lack of budget.
    pub dropped: usize,
}

/// The block and whether relevance had to do without embeddings.
#[derive(Debug, Clone)]
pub struct ContextOutcome {
    pub block: ContextBlock,
    pub degraded: bool,
    /// The second stage is on but did not answer in time (not cached).
    pub rerank_skipped: bool,
}

/// The ids included, per section, in output order.
#[derive(Debug, Clone, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct IncludedIds {
    pub facts: Vec<Uuid>,
    pub rules: Vec<Uuid>,
    pub episodes: Vec<Uuid>,
}

/// Assembles the block from ranked lines per section (`[facts, rules, episodes]`).
pub fn assemble(
    sections: [Vec<Line>; 3],
    budget: usize,
    quotas: Quotas,
    counter: &dyn TokenCounter,
) -> ContextBlock {
    let candidates = sections.iter().map(Vec::len).sum();
    let header_cost = cost(counter, HEADER);
    let heading_cost: Vec<usize> = Section::ALL
        .iter()
        .map(|s| cost(counter, s.heading()))
        .collect();
    // Counted when first considered: lines past the first one that does not fit never are
    // (a block takes a hundred lines of several hundred candidates).
    let mut line_cost: Vec<Vec<Option<usize>>> = sections
        .iter()
        .map(|lines| vec![None; lines.len()])
        .collect();

    let mut taken = [0usize; 3];
    let mut used = [0usize; 3];
    let mut total = 0usize;
    // Order in which lines were taken, to undo the latest first if the final count is over.
    let mut history: Vec<Section> = Vec::new();
    let mut fill = |section: Section,
                    limit: usize,
                    taken: &mut [usize; 3],
                    used: &mut [usize; 3],
                    total: &mut usize| {
        let i = section.index();
        while taken[i] < sections[i].len() {
            let line = *line_cost[i][taken[i]]
                .get_or_insert_with(|| cost(counter, &sections[i][taken[i]].text));
            let cost = line
                + if taken[i] == 0 { heading_cost[i] } else { 0 }
                + if *total == 0 { header_cost } else { 0 };
            if used[i] + cost > limit || *total + cost > budget {
                break;
            }
            taken[i] += 1;
            used[i] += cost;
            *total += cost;
            history.push(section);
        }
    };
    for section in Section::ALL {
        let quota = (budget as f64 * quotas.share(section)).floor() as usize;
        fill(section, quota, &mut taken, &mut used, &mut total);
    }
    for section in Section::ALL {
        fill(section, budget, &mut taken, &mut used, &mut total);
    }

    let mut text = render(&sections, &taken);
    let mut tokens = if counter.additive() {
        // The block is the header, headings and lines that were counted: their sum is its
        // cost (no token spans a line, and the byte floor holds line by line).
        debug_assert!(counter.count(&text) <= total, "an additive counter");
        total
    } else {
        cost(counter, &text)
    };
    // A tokenizer that merges across line boundaries can make the whole cost more than the
    // sum of its parts: drop the latest lines until it fits.
    while tokens > budget {
        let Some(section) = history.pop() else { break };
        taken[section.index()] -= 1;
        text = render(&sections, &taken);
        tokens = cost(counter, &text);
    }

    let ids = |s: Section| {
        sections[s.index()][..taken[s.index()]]
            .iter()
            .map(|l| l.id)
            .collect()
    };
    let included: usize = taken.iter().sum();
    ContextBlock {
        text,
        sections: IncludedIds {
            facts: ids(Section::Facts),
            rules: ids(Section::Rules),
            episodes: ids(Section::Episodes),
        },
        tokens_used: tokens,
        token_budget: budget,
        candidates,
        dropped: candidates - included,
    }
}

fn render(sections: &[Vec<Line>; 3], taken: &[usize; 3]) -> String {
    if taken.iter().all(|&n| n == 0) {
        return String::new();
    }
    let mut text = String::from(HEADER);
    for section in Section::ALL {
        let lines = &sections[section.index()][..taken[section.index()]];
        if !lines.is_empty() {
            text.push_str(section.heading());
            for line in lines {
                text.push_str(&line.text);
            }
        }
    }
    text
}

/// `- user dietary restriction: Lactose intolerant [stable, global, confirmed 12d ago]`,
/// its content cut to `max_bytes`.
pub fn fact_line(hit: &Hit, now: DateTime<Utc>, max_bytes: usize) -> Line {
    let c = &hit.candidate;
    let subject = c.subject.as_deref().unwrap_or("");
    let predicate = c.predicate.as_deref().unwrap_or("").replace('_', " ");
    Line {
        id: c.id,
        text: format!(
            "- {} {}: {} [{}, {}, {}confirmed {} ago]\n",
            one_line(subject),
            one_line(&predicate),
            clip(&c.content, max_bytes),
            c.permanence.as_deref().unwrap_or("standard"),
            c.scope.as_deref().unwrap_or("global"),
            // Only a read in a time window finds a fact no longer true: it says so.
            c.valid_until
                .map(|until| format!("true until {}, ", until.format("%Y-%m-%d")))
                .unwrap_or_default(),
            age(c.last_confirmed_at, now)
        ),
    }
}

/// `- Always confirm before sending [proven, global]`, or for an anti-pattern
/// `- Avoid: ANTI-PATTERN: Do NOT … [anti_pattern, global]`, its content cut to `max_bytes`.
pub fn rule_line(hit: &Hit, max_bytes: usize) -> Line {
    let c = &hit.candidate;
    let maturity = c.maturity.as_deref().unwrap_or("candidate");
    let prefix = if maturity == "anti_pattern" {
        "Avoid: "
    } else {
        ""
    };
    Line {
        id: c.id,
        text: format!(
            "- {prefix}{} [{maturity}, {}]\n",
            clip(&c.content, max_bytes),
            c.scope.as_deref().unwrap_or("global")
        ),
    }
}

/// `- [2h ago] User asked to reschedule the dentist appointment`, its content cut to
/// `max_bytes`.
pub fn episode_line(hit: &Hit, now: DateTime<Utc>, max_bytes: usize) -> Line {
    let c = &hit.candidate;
    Line {
        id: c.id,
        text: format!(
            "- [{} ago] {}\n",
            age(c.happened_at(), now),
            clip(&c.content, max_bytes)
        ),
    }
}

/// One memory, one line: newlines and runs of whitespace become single spaces, so that
/// stored text cannot break the block's structure.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// [`one_line`], cut to at most `max_bytes` (at a character boundary, marked `…`).
fn clip(text: &str, max_bytes: usize) -> String {
    let mut line = one_line(text);
    if line.len() > max_bytes {
        let mut end = max_bytes.saturating_sub('…'.len_utf8());
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        line.truncate(end);
        line.push('…');
    }
    line
}

/// A short age: `5m`, `3h`, `12d`.
pub fn age(since: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let minutes = (now - since).num_minutes().max(0);
    match minutes {
        m if m < 60 => format!("{m}m"),
        m if m < 48 * 60 => format!("{}h", m / 60),
        m => format!("{}d", m / (24 * 60)),
    }
}

/// Counts whitespace-separated words, and no token spans a line (as wordpiece on
/// whitespace): enough to check a budget in unit tests without a tokenizer file.
#[cfg(test)]
pub struct Words;

#[cfg(test)]
impl TokenCounter for Words {
    fn count(&self, text: &str) -> usize {
        text.split_whitespace().count()
    }

    fn additive(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Counts characters over four, rounded up: not additive across lines, like BPE merges.
    struct Chunks;
    impl TokenCounter for Chunks {
        fn count(&self, text: &str) -> usize {
            text.len().div_ceil(4)
        }
    }

    fn lines(prefix: &str, n: usize, words: usize) -> Vec<Line> {
        (0..n)
            .map(|i| Line {
                id: Uuid::from_u128((prefix.len() * 1000 + i) as u128),
                text: format!("- {prefix}{i} {}\n", "w ".repeat(words)),
            })
            .collect()
    }

    const EVEN: Quotas = Quotas {
        facts: 0.5,
        rules: 0.3,
        episodes: 0.2,
    };

    /// A line the tokenizer counts as one token (one long "word") still costs its bytes:
    /// the block's text stays within eight bytes a token of budget.
    #[test]
    fn text_a_tokenizer_undercounts_still_pays_its_bytes() {
        let long = Line {
            id: Uuid::from_u128(1),
            text: format!("- {}\n", "z".repeat(5000)),
        };
        assert_eq!(Words.count(&long.text), 2, "two words to this tokenizer");
        let short = lines("f", 3, 2);
        let block = assemble(
            [
                vec![long].into_iter().chain(short).collect(),
                vec![],
                vec![],
            ],
            100,
            EVEN,
            &Words,
        );
        assert!(
            block.text.len() <= 100 * BYTES_PER_TOKEN,
            "{}",
            block.text.len()
        );
        assert!(block.tokens_used <= 100);
        assert_eq!(
            block.sections.facts.len(),
            0,
            "the long line, first, does not fit"
        );
    }

    #[test]
    fn a_long_memory_is_cut_to_its_line_at_a_character_boundary() {
        assert_eq!(clip("short  text", 100), "short text");
        let cut = clip(&"é".repeat(100), 11);
        assert!(cut.len() <= 11, "{cut}");
        assert!(cut.ends_with('…'), "{cut}");
        assert!(cut.starts_with("éééé"), "{cut}");
    }

    #[test]
    fn sections_appear_in_order_with_their_headings() {
        let block = assemble(
            [lines("f", 2, 1), lines("rr", 1, 1), lines("eee", 1, 1)],
            1000,
            EVEN,
            &Words,
        );
        let f = block.text.find("### What You Know (Facts)").unwrap();
        let r = block.text.find("### How To Behave (Rules)").unwrap();
        let e = block.text.find("### Recent Context (Episodes)").unwrap();
        assert!(block.text.starts_with("## Your Memory\n"));
        assert!(f < r && r < e);
        assert_eq!(block.dropped, 0);
        assert_eq!(block.sections.facts.len(), 2);
    }

    #[test]
    fn empty_memory_is_an_empty_block() {
        let block = assemble([vec![], vec![], vec![]], 100, EVEN, &Words);
        assert_eq!(block.text, "");
        assert_eq!(block.tokens_used, 0);
    }

    #[test]
    fn leftover_budget_flows_to_sections_with_more_candidates() {
        // Only facts exist: they may use the whole budget, not just their 50%.
        let block = assemble([lines("f", 50, 3), vec![], vec![]], 100, EVEN, &Words);
        assert!(block.tokens_used > 50, "{}", block.tokens_used);
        assert!(block.tokens_used <= 100);
    }

    #[test]
    fn quotas_keep_room_for_every_section() {
        let block = assemble(
            [
                lines("f", 100, 3),
                lines("rr", 100, 3),
                lines("eee", 100, 3),
            ],
            200,
            EVEN,
            &Words,
        );
        assert!(!block.sections.rules.is_empty());
        assert!(!block.sections.episodes.is_empty());
    }

    #[test]
    fn overflow_drops_the_lowest_ranked_first() {
        let facts = lines("f", 10, 2);
        let block = assemble([facts.clone(), vec![], vec![]], 20, EVEN, &Words);
        let n = block.sections.facts.len();
        assert!(n < 10);
        let expected: Vec<Uuid> = facts[..n].iter().map(|l| l.id).collect();
        assert_eq!(
            block.sections.facts, expected,
            "a prefix of the ranked list"
        );
        assert_eq!(block.dropped, 10 - n);
    }

    #[test]
    fn ages_are_short() {
        let now = DateTime::parse_from_rfc3339("2026-06-10T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(age(now - chrono::Duration::minutes(5), now), "5m");
        assert_eq!(age(now - chrono::Duration::hours(2), now), "2h");
        assert_eq!(age(now - chrono::Duration::days(12), now), "12d");
        assert_eq!(age(now + chrono::Duration::days(1), now), "0m");
    }

    proptest! {
        #[test]
        fn the_budget_is_never_exceeded(
            budget in 0usize..400,
            sizes in proptest::collection::vec((0usize..30, 0usize..12), 3),
            share in (0.0f64..1.0, 0.0f64..1.0, 0.0f64..1.0),
            additive in any::<bool>(),
        ) {
            let sections = [
                lines("f", sizes[0].0, sizes[0].1),
                lines("rr", sizes[1].0, sizes[1].1),
                lines("eee", sizes[2].0, sizes[2].1),
            ];
            let quotas = Quotas { facts: share.0, rules: share.1, episodes: share.2 };
            let counter: &dyn TokenCounter = if additive { &Words } else { &Chunks };
            let block = assemble(sections.clone(), budget, quotas, counter);
            prop_assert!(block.tokens_used <= budget);
            prop_assert_eq!(block.tokens_used, counter.count(&block.text));
            // Deterministic: the same input gives the same bytes.
            prop_assert_eq!(&assemble(sections.clone(), budget, quotas, counter), &block);
            // Each section is a prefix of its ranked lines.
            for (ids, lines) in [
                (&block.sections.facts, &sections[0]),
                (&block.sections.rules, &sections[1]),
                (&block.sections.episodes, &sections[2]),
            ] {
                let prefix: Vec<Uuid> = lines[..ids.len()].iter().map(|l| l.id).collect();
                prop_assert_eq!(ids, &prefix);
            }
        }
    }
}
