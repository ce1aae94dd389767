//! What each scheduled call says: which tool (drawn by weight), for which butler, with which
//! texts. Texts are made of everyday words, a share with non-ASCII ones, of the scenario's
//! lengths; every written text is distinct (a counter in it), prompts are fresh or repeat
//! one of a small pool, facts cycle through a few subjects per butler so that most writes
//! supersede an earlier one.

use rand::Rng as _;
use rand::rngs::SmallRng;
use serde_json::{Value, json};

use super::scenario::{Content, MixEntry, Scenario, Session, Tool};
use super::target::Shard;

const WORDS: &[&str] = &[
    "dinner",
    "garden",
    "meeting",
    "train",
    "doctor",
    "birthday",
    "invoice",
    "flight",
    "recipe",
    "weekend",
    "coffee",
    "report",
    "school",
    "concert",
    "budget",
    "holiday",
    "walk",
    "market",
    "letter",
    "project",
    "call",
    "gift",
    "museum",
    "tennis",
    "dentist",
    "kitchen",
    "rent",
    "parcel",
    "river",
    "library",
    "morning",
    "evening",
    "plan",
    "remember",
    "booked",
    "asked",
    "prefers",
    "moved",
    "bought",
    "cancelled",
    "visited",
    "finished",
    "started",
    "with",
    "the",
    "for",
    "after",
    "before",
    "next",
    "last",
    "friday",
    "monday",
    "sister",
    "manager",
    "friend",
];

const UNICODE_WORDS: &[&str] = &[
    "café",
    "naïve",
    "Grüße",
    "façade",
    "東京",
    "北京の駅",
    "Москва",
    "καλημέρα",
    "😊",
    "🎉",
    "São Paulo",
    "jalapeño",
    "smörgåsbord",
    "مرحبا",
    "नमस्ते",
];

const SUBJECTS: usize = 8;
const PREDICATES: &[&str] = &["prefers", "lives_in", "works_on", "allergic_to"];

/// One call to make.
pub struct Call {
    pub tool: Tool,
    /// The index of the shard (butler) it is for.
    pub shard: usize,
    /// The tool's name as called (a rule mark is helpful or harmful).
    pub name: &'static str,
    pub key: String,
    pub args: Value,
    /// Episodes it stores (0 for reads).
    pub episodes: usize,
}

/// Draws calls for a scenario.
pub struct Workload {
    mix: Vec<MixEntry>,
    total_weight: f64,
    content: Content,
    unicode_share: f64,
    repeat_share: f64,
    stated_time_share: f64,
    prompts: Vec<String>,
    sessions: usize,
    session: Session,
    started_sessions: u64,
    shards: Vec<Shard>,
    written: u64,
}

impl Workload {
    /// `shards`: every butler of the population, with the key it calls with and, once set
    /// up, the rule its marks rate.
    pub fn new(scenario: &Scenario, shards: Vec<Shard>, rng: &mut SmallRng) -> Workload {
        let content = scenario.content.clone();
        let stated_time = scenario.prompts.stated_time;
        let prompts = (0..scenario.prompts.pool)
            .map(|_| prompt(rng, scenario.content.unicode, stated_time))
            .collect();
        Workload {
            total_weight: scenario.mix.iter().map(|m| m.weight).sum(),
            mix: scenario.mix.clone(),
            unicode_share: content.unicode,
            content,
            repeat_share: scenario.prompts.repeat,
            stated_time_share: stated_time,
            prompts,
            sessions: scenario.population.sessions,
            session: scenario.session.clone(),
            started_sessions: 0,
            shards,
            written: 0,
        }
    }

    /// The calls of the next arrival, each with its delay after it (in seconds): one call,
    /// or a session's calls.
    pub fn draw(&mut self, rng: &mut SmallRng) -> Vec<(f64, Call)> {
        let mut pick = rng.random::<f64>() * self.total_weight;
        let entry = self
            .mix
            .iter()
            .find(|m| {
                pick -= m.weight;
                pick < 0.0
            })
            .unwrap_or(&self.mix[self.mix.len() - 1])
            .clone();
        let index = rng.random_range(0..self.shards.len());
        if entry.tool != Tool::Session {
            return vec![(0.0, self.call(entry.tool, entry.batch, index, rng))];
        }
        self.started_sessions += 1;
        let session_id = format!("load-session-{}", self.started_sessions);
        let mut calls = vec![(0.0, self.call(Tool::MemoryContext, 1, index, rng))];
        for i in 1..=self.session.episodes {
            let mut episode = self.call(Tool::MemoryStoreEpisode, 1, index, rng);
            episode.args["session_id"] = json!(session_id);
            calls.push((self.session.think_secs * i as f64, episode));
        }
        calls
    }

    /// One call of `tool` for shard `index`.
    fn call(&mut self, tool: Tool, batch: usize, index: usize, rng: &mut SmallRng) -> Call {
        let shard = self.shards[index].clone();
        let (name, args, episodes) = match tool {
            Tool::MemoryStoreEpisode => {
                let episode = self.episode(rng, &shard);
                ("memory_store_episode", episode, 1)
            }
            Tool::MemoryIngestBatch => {
                let episodes: Vec<Value> = (0..batch).map(|_| self.episode(rng, &shard)).collect();
                (
                    "memory_ingest_batch",
                    json!({ "episodes": episodes }),
                    batch,
                )
            }
            Tool::MemoryContext => (
                "memory_context",
                json!({"trigger_prompt": self.prompt(rng), "butler": shard.butler}),
                0,
            ),
            Tool::MemoryContextBatch => {
                let requests: Vec<Value> = (0..batch)
                    .map(|_| json!({"trigger_prompt": self.prompt(rng), "butler": shard.butler}))
                    .collect();
                ("memory_context_batch", json!({ "requests": requests }), 0)
            }
            Tool::MemorySearch => (
                "memory_search",
                json!({"query": self.prompt(rng), "butler": shard.butler}),
                0,
            ),
            Tool::MemoryRecall => (
                "memory_recall",
                json!({"topic": self.prompt(rng), "butler": shard.butler}),
                0,
            ),
            Tool::MemoryStoreFact => {
                let content = self.text(rng);
                (
                    "memory_store_fact",
                    json!({"subject": format!("person {}", rng.random_range(0..SUBJECTS)),
                           "predicate": PREDICATES[rng.random_range(0..PREDICATES.len())],
                           "content": content, "butler": shard.butler}),
                    0,
                )
            }
            Tool::Session => unreachable!("a session is drawn as its calls"),
            Tool::MemoryMarkRule => {
                let name = if rng.random_bool(0.8) {
                    "memory_mark_helpful"
                } else {
                    "memory_mark_harmful"
                };
                (
                    name,
                    json!({"rule_id": shard.rule_id, "butler": shard.butler}),
                    0,
                )
            }
        };
        Call {
            tool,
            shard: index,
            name,
            key: shard.key,
            args,
            episodes,
        }
    }

    fn episode(&mut self, rng: &mut SmallRng, shard: &Shard) -> Value {
        let mut episode = json!({"content": self.text(rng), "butler": shard.butler});
        if self.sessions > 0 {
            episode["session_id"] =
                json!(format!("session-{}", rng.random_range(0..self.sessions)));
        }
        episode
    }

    /// A distinct text of the scenario's length.
    fn text(&mut self, rng: &mut SmallRng) -> String {
        self.written += 1;
        let length = rng.random_range(self.content.min_chars..=self.content.max_chars);
        let mut text = format!("#{} ", self.written);
        let unicode = rng.random_bool(self.unicode_share);
        while text.chars().count() < length {
            let word = if unicode && rng.random_bool(0.3) {
                UNICODE_WORDS[rng.random_range(0..UNICODE_WORDS.len())]
            } else {
                WORDS[rng.random_range(0..WORDS.len())]
            };
            text.push_str(word);
            text.push(' ');
        }
        text.chars()
            .take(length)
            .collect::<String>()
            .trim_end()
            .to_owned()
    }

    fn prompt(&mut self, rng: &mut SmallRng) -> String {
        if rng.random_bool(self.repeat_share) {
            self.prompts[rng.random_range(0..self.prompts.len())].clone()
        } else {
            prompt(rng, self.unicode_share, self.stated_time_share)
        }
    }
}

/// Times a prompt may end with: some hold the memories a run has just stored, some none.
const STATED_TIMES: &[&str] = &[
    "today",
    "this week",
    "yesterday",
    "last week",
    "in March",
    "three days ago",
];

/// A short question of everyday words, ending with a time in `stated_time_share` of them.
fn prompt(rng: &mut SmallRng, unicode_share: f64, stated_time_share: f64) -> String {
    let words = rng.random_range(3..9);
    let unicode = rng.random_bool(unicode_share);
    let mut out: Vec<&str> = (0..words)
        .map(|_| WORDS[rng.random_range(0..WORDS.len())])
        .collect();
    if unicode {
        out.push(UNICODE_WORDS[rng.random_range(0..UNICODE_WORDS.len())]);
    }
    // Not drawn at 0: a scenario without times makes the calls it made before.
    if stated_time_share > 0.0 && rng.random_bool(stated_time_share) {
        let time = STATED_TIMES[rng.random_range(0..STATED_TIMES.len())];
        return format!("What about the {} {time}?", out.join(" "));
    }
    format!("What about the {}?", out.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn scenario(mix: &str) -> Scenario {
        Scenario::parse(&format!(
            "duration_secs = 1\narrival = {{ shape = \"constant\", rate = 1 }}\n\
             content = {{ min_chars = 20, max_chars = 40, unicode = 0.5 }}\nmix = {mix}"
        ))
        .unwrap()
    }

    fn shards() -> Vec<Shard> {
        (0..3)
            .map(|i| Shard {
                tenant: "t".into(),
                butler: format!("b{i}"),
                key: format!("k{i}"),
                rule_id: None,
            })
            .collect()
    }

    #[test]
    fn the_mix_follows_its_weights_and_texts_their_lengths() {
        let s = scenario(
            r#"[{ tool = "memory_store_episode", weight = 3 }, { tool = "memory_search", weight = 1 }]"#,
        );
        let mut rng = SmallRng::seed_from_u64(1);
        let mut workload = Workload::new(&s, shards(), &mut rng);
        let calls: Vec<Call> = (0..4000)
            .flat_map(|_| workload.draw(&mut rng))
            .map(|(_, call)| call)
            .collect();
        let writes = calls.iter().filter(|c| c.episodes == 1).count();
        assert!((2850..3150).contains(&writes), "{writes}");
        let mut texts = std::collections::HashSet::new();
        for call in calls.iter().filter(|c| c.episodes == 1) {
            let text = call.args["content"].as_str().unwrap();
            assert!((15..=40).contains(&text.chars().count()), "{text}");
            assert!(texts.insert(text.to_owned()), "every text is distinct");
        }
        assert!(texts.iter().any(|t| !t.is_ascii()), "some carry Unicode");
    }

    #[test]
    fn a_share_of_prompts_ends_with_a_time() {
        let mut s = scenario(r#"[{ tool = "memory_search", weight = 1 }]"#);
        s.prompts.repeat = 0.0;
        s.prompts.stated_time = 0.5;
        let mut rng = SmallRng::seed_from_u64(4);
        let mut workload = Workload::new(&s, shards(), &mut rng);
        let queries: Vec<String> = (0..400)
            .flat_map(|_| workload.draw(&mut rng))
            .map(|(_, call)| call.args["query"].as_str().unwrap().to_owned())
            .collect();
        let timed = queries
            .iter()
            .filter(|q| STATED_TIMES.iter().any(|t| q.ends_with(&format!(" {t}?"))))
            .count();
        assert!((160..240).contains(&timed), "{timed} of 400");
    }

    #[test]
    fn batches_hold_their_size() {
        let s = scenario(r#"[{ tool = "memory_ingest_batch", weight = 1, batch = 7 }]"#);
        let mut rng = SmallRng::seed_from_u64(2);
        let (_, call) = Workload::new(&s, shards(), &mut rng)
            .draw(&mut rng)
            .remove(0);
        assert_eq!(call.args["episodes"].as_array().unwrap().len(), 7);
        assert_eq!(call.episodes, 7);
    }

    #[test]
    fn a_session_is_its_context_then_its_episodes_think_time_apart() {
        let mut s = scenario(r#"[{ tool = "session", weight = 1 }]"#);
        s.session = Session {
            episodes: 3,
            think_secs: 2.5,
        };
        let mut rng = SmallRng::seed_from_u64(3);
        let mut workload = Workload::new(&s, shards(), &mut rng);
        let calls = workload.draw(&mut rng);
        let at: Vec<f64> = calls.iter().map(|(t, _)| *t).collect();
        assert_eq!(at, vec![0.0, 2.5, 5.0, 7.5]);
        assert_eq!(calls[0].1.name, "memory_context");
        let session = &calls[1].1.args["session_id"];
        assert!(
            calls[1..]
                .iter()
                .all(|(_, c)| c.name == "memory_store_episode"
                    && &c.args["session_id"] == session
                    && c.shard == calls[0].1.shard)
        );
        let next = workload.draw(&mut rng);
        assert_ne!(&next[1].1.args["session_id"], session, "a new session");
    }
}
