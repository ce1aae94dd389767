//! A load scenario as a TOML file (`config/scenarios/`, documented in docs/load.md): how
//! calls arrive, which tools in which proportions, over how many tenants and butlers, what
//! the texts look like, and the thresholds the run must hold.

use serde::Deserialize;

use super::arrival::Arrival;
use super::threshold::Threshold;

/// A whole scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Its name, in the report.
    #[serde(default)]
    pub name: String,
    /// How long calls are scheduled, warm-up included.
    pub duration_secs: f64,
    /// Calls of the first seconds are made but not counted (caches and pools warm up).
    #[serde(default)]
    pub warmup_secs: f64,
    /// Seeds every draw: the same scenario and seed make the same calls.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Calls in flight at most. A call due while this many are unanswered waits for one to
    /// finish; its latency still counts from when it was due, and the wait is reported as
    /// client saturation (never turned into a lower rate).
    #[serde(default = "default_max_in_flight")]
    pub max_in_flight: usize,
    pub arrival: Arrival,
    #[serde(default)]
    pub population: Population,
    #[serde(default)]
    pub content: Content,
    #[serde(default)]
    pub prompts: Prompts,
    #[serde(default)]
    pub session: Session,
    /// The tools called, with their weights.
    pub mix: Vec<MixEntry>,
    /// Conditions the run must meet, e.g. `memory_context p95 < 250ms`.
    #[serde(default)]
    pub thresholds: Vec<Threshold>,
    #[serde(default)]
    pub verify: Verify,
}

fn default_seed() -> u64 {
    1
}

fn default_max_in_flight() -> usize {
    256
}

/// Who calls: tenants, butlers per tenant, sessions per butler.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Population {
    pub tenants: usize,
    /// Butlers per tenant: one shard each.
    pub butlers: usize,
    /// Session ids each butler's episodes cycle through (0: none sent).
    pub sessions: usize,
}

impl Default for Population {
    fn default() -> Self {
        Population {
            tenants: 1,
            butlers: 4,
            sessions: 4,
        }
    }
}

/// The texts written.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Content {
    pub min_chars: usize,
    pub max_chars: usize,
    /// The share of texts that carry non-ASCII words (accents, CJK, emoji).
    pub unicode: f64,
}

impl Default for Content {
    fn default() -> Self {
        Content {
            min_chars: 60,
            max_chars: 240,
            unicode: 0.1,
        }
    }
}

/// The prompts and queries of reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Prompts {
    /// The share of reads that repeat an earlier prompt (a cache may answer them); the rest
    /// are fresh.
    pub repeat: f64,
    /// How many distinct prompts the repeated ones are drawn from.
    pub pool: usize,
    /// The share of prompts that end with a time ("from yesterday", "in March"): the
    /// service then also searches that time (docs/tools.md, "A time the query states").
    pub stated_time: f64,
}

impl Default for Prompts {
    fn default() -> Self {
        Prompts {
            repeat: 0.3,
            pool: 20,
            stated_time: 0.0,
        }
    }
}

/// A butler's session, the mix's `session` entry: its context at the start, then its
/// episodes one by one, `think_secs` apart. Every call of it is due at a time fixed when the
/// session starts (open-loop: a slow answer delays none of them).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Session {
    pub episodes: usize,
    pub think_secs: f64,
}

impl Default for Session {
    fn default() -> Self {
        Session {
            episodes: 4,
            think_secs: 5.0,
        }
    }
}

/// One tool of the mix.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixEntry {
    pub tool: Tool,
    pub weight: f64,
    /// Episodes per `memory_ingest_batch` (at most the service's
    /// `writes.max_ingest_batch`), prompts per `memory_context_batch` (at most 64).
    #[serde(default = "default_batch")]
    pub batch: usize,
}

fn default_batch() -> usize {
    10
}

/// The tools a scenario may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    MemoryStoreEpisode,
    MemoryIngestBatch,
    MemoryContext,
    MemoryContextBatch,
    MemorySearch,
    MemoryRecall,
    /// A fact about one of a few subjects per butler, so that most writes supersede one.
    MemoryStoreFact,
    /// A helpful or harmful mark on a rule the run stored at its start.
    MemoryMarkRule,
    /// Not a tool: a session's calls (`[session]`), each counted under its own tool.
    Session,
}

impl Tool {
    /// The tool's name as called (a mark is `memory_mark_helpful` or `_harmful`, counted
    /// together).
    pub fn name(self) -> &'static str {
        match self {
            Tool::MemoryStoreEpisode => "memory_store_episode",
            Tool::MemoryIngestBatch => "memory_ingest_batch",
            Tool::MemoryContext => "memory_context",
            Tool::MemoryContextBatch => "memory_context_batch",
            Tool::MemorySearch => "memory_search",
            Tool::MemoryRecall => "memory_recall",
            Tool::MemoryStoreFact => "memory_store_fact",
            Tool::MemoryMarkRule => "memory_mark_rule",
            Tool::Session => "session",
        }
    }

    /// The tool of `name` (as [`Tool::name`] spells it).
    pub fn named(name: &str) -> Option<Tool> {
        Tool::ALL.into_iter().find(|t| t.name() == name)
    }

    pub const ALL: [Tool; 9] = [
        Tool::MemoryStoreEpisode,
        Tool::MemoryIngestBatch,
        Tool::MemoryContext,
        Tool::MemoryContextBatch,
        Tool::MemorySearch,
        Tool::MemoryRecall,
        Tool::MemoryStoreFact,
        Tool::MemoryMarkRule,
        Tool::Session,
    ];

    /// Whether its answer acknowledges episodes (which the verifier reads back).
    pub fn stores_episodes(self) -> bool {
        matches!(self, Tool::MemoryStoreEpisode | Tool::MemoryIngestBatch)
    }
}

/// What is checked after the load, through the public API.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Verify {
    /// The share of acknowledged episodes read back with `memory_get` (1.0: all).
    pub sample: f64,
    /// How long to wait for the embedding backlog to drain (read from `/metrics`).
    pub drain_timeout_secs: f64,
}

impl Default for Verify {
    fn default() -> Self {
        Verify {
            sample: 1.0,
            drain_timeout_secs: 120.0,
        }
    }
}

impl Scenario {
    /// The scenario in `text`, or every problem with it.
    pub fn parse(text: &str) -> Result<Scenario, String> {
        let scenario: Scenario = toml::from_str(text).map_err(|e| e.to_string())?;
        let problems = scenario.problems();
        if problems.is_empty() {
            Ok(scenario)
        } else {
            Err(problems.join("; "))
        }
    }

    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |ok: bool, why: &str| {
            if !ok {
                out.push(why.to_owned());
            }
        };
        check(
            self.duration_secs > 0.0 && self.duration_secs.is_finite(),
            "duration_secs must be positive",
        );
        check(
            (0.0..self.duration_secs).contains(&self.warmup_secs),
            "warmup_secs must be at least 0 and less than duration_secs",
        );
        check(self.max_in_flight > 0, "max_in_flight must be at least 1");
        check(
            self.population.tenants > 0 && self.population.butlers > 0,
            "population.tenants and population.butlers must be at least 1",
        );
        check(
            self.content.min_chars > 0 && self.content.min_chars <= self.content.max_chars,
            "content.min_chars must be at least 1 and at most content.max_chars",
        );
        check(
            (0.0..=1.0).contains(&self.content.unicode),
            "content.unicode must be between 0 and 1",
        );
        check(
            (0.0..=1.0).contains(&self.prompts.repeat)
                && (0.0..=1.0).contains(&self.prompts.stated_time)
                && self.prompts.pool > 0,
            "prompts.repeat and prompts.stated_time must be between 0 and 1 and prompts.pool \
             at least 1",
        );
        check(!self.mix.is_empty(), "mix must name at least one tool");
        check(
            self.mix
                .iter()
                .all(|m| m.weight > 0.0 && m.weight.is_finite()),
            "every mix weight must be positive",
        );
        check(
            self.mix.iter().all(|m| match m.tool {
                Tool::MemoryContextBatch => (1..=64).contains(&m.batch),
                _ => (1..=1000).contains(&m.batch),
            }),
            "a mix entry's batch must be 1 to 1000 (memory_context_batch: 1 to 64)",
        );
        check(
            self.session.think_secs >= 0.0 && self.session.think_secs.is_finite(),
            "session.think_secs must be at least 0",
        );
        check(
            (0.0..=1.0).contains(&self.verify.sample),
            "verify.sample must be between 0 and 1",
        );
        if let Err(why) = self.arrival.check() {
            out.push(format!("arrival: {why}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        duration_secs = 10
        arrival = { shape = "constant", rate = 50 }
        mix = [{ tool = "memory_store_episode", weight = 1 }]
    "#;

    #[test]
    fn a_minimal_scenario_gets_the_defaults() {
        let s = Scenario::parse(MINIMAL).unwrap();
        assert_eq!(s.population.butlers, 4);
        assert_eq!(s.verify.sample, 1.0);
        assert_eq!(s.mix[0].tool, Tool::MemoryStoreEpisode);
    }

    #[test]
    fn every_problem_is_named_at_once() {
        let bad = MINIMAL.replace("duration_secs = 10", "duration_secs = 0\nwarmup_secs = 5");
        let why = Scenario::parse(&bad).unwrap_err();
        assert!(why.contains("duration_secs"), "{why}");
        assert!(why.contains("warmup_secs"), "{why}");
        let unknown = format!("{MINIMAL}\nrate = 3");
        assert!(
            Scenario::parse(&unknown)
                .unwrap_err()
                .contains("unknown field")
        );
        let tool = MINIMAL.replace("memory_store_episode", "memory_nothing");
        assert!(Scenario::parse(&tool).is_err());
    }

    #[test]
    fn the_committed_scenarios_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/scenarios");
        let mut parsed = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            Scenario::parse(&text).unwrap_or_else(|why| panic!("{}: {why}", path.display()));
            parsed += 1;
        }
        assert!(parsed >= 4, "{parsed}");
    }

    #[test]
    fn tool_names_round_trip() {
        for tool in Tool::ALL {
            assert_eq!(Tool::named(tool.name()), Some(tool));
        }
    }
}
