//! The LoCoMo data file, parsed into what the bench stores and asks: each conversation's
//! turns as episodes (in dialogue order, with their `dia_id` in the metadata) and its
//! scored questions with their evidence normalised as the data README's lenient fix says.
//! Kept apart from the bench so that the bench reads as the measurement, and the
//! normalisation, which decides what every recall number means, can be read on its own.
//! The consolidation bench reads the file's observations from here too.

// Each bench binary compiles this module on its own and reads a part of the file.
#![allow(dead_code)]

use std::collections::HashSet;
use std::path::Path;

use anyhow::Context as _;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize)]
struct Sample {
    sample_id: String,
    /// `speaker_a`, `speaker_b`, `session_<N>` (turns), `session_<N>_date_time`.
    conversation: serde_json::Map<String, Value>,
    qa: Vec<Qa>,
    /// `session_<N>_observation` → speaker → `[[text, evidence], ...]`, the evidence a
    /// dia_id, a list of them, or several in one string.
    #[serde(default)]
    observation: serde_json::Map<String, Value>,
}

#[derive(Deserialize)]
struct Turn {
    speaker: String,
    dia_id: String,
    text: String,
    #[serde(default)]
    blip_caption: Option<String>,
}

#[derive(Deserialize)]
struct Qa {
    question: String,
    #[serde(default)]
    evidence: Vec<String>,
    category: u8,
}

/// One turn, ready to store.
pub struct Episode {
    pub dia_id: String,
    pub content: String,
    pub metadata: Value,
    /// When its session took place (RFC 3339, UTC), as an importer would tell the service
    /// (`occurred_at`); `None` when the file's date does not read.
    pub occurred_at: Option<String>,
}

/// One question to score.
pub struct Question {
    pub text: String,
    pub category: u8,
    /// Distinct, canonical dia_ids that exist in the conversation; never empty.
    pub evidence: Vec<String>,
}

/// One of the file's annotated observations: a fact about a speaker, with the turns it
/// comes from.
pub struct Observation {
    pub text: String,
    pub session: u32,
    /// Distinct, canonical dia_ids of the conversation; never empty.
    pub evidence: Vec<String>,
}

/// One conversation, parsed.
pub struct Conversation {
    pub id: String,
    pub episodes: Vec<Episode>,
    pub questions: Vec<Question>,
    pub observations: Vec<Observation>,
}

/// How the evidence lists fared under normalisation (printed so a reader can check them
/// against the data README).
#[derive(Default)]
pub struct EvidenceCounts {
    pub qa_total: usize,
    pub adversarial_skipped: usize,
    /// Category 1-4 questions with no resolvable evidence left.
    pub no_evidence_skipped: usize,
    /// Raw evidence strings of scored categories, as written.
    pub written: usize,
    /// Evidence ids kept (distinct per question) after the lenient fix.
    pub resolved: usize,
    /// Pieces that were not a dia_id or named no real turn (e.g. "D", "D10:19").
    pub dropped: Vec<String>,
}

/// `"D11:26"`, `"D:11:26"`, `"D30:05"` → `"D11:26"`, `"D11:26"`, `"D30:5"`; anything else
/// (`"D"`, `"X1:2"`) → `None`.
fn canonical_dia_id(raw: &str) -> Option<String> {
    let rest = raw.trim().strip_prefix('D')?;
    let rest = rest.strip_prefix(':').unwrap_or(rest);
    let (session, turn) = rest.split_once(':')?;
    let session: u32 = session.parse().ok()?;
    let turn: u32 = turn.parse().ok()?;
    Some(format!("D{session}:{turn}"))
}

/// The lenient evidence fix of the data README: split `"D8:6; D9:17"` and space-separated
/// lists, canonicalise each id, drop what does not name a turn of this conversation, and
/// drop duplicates. Returns the kept ids and the dropped pieces.
fn normalise_evidence(raw: &[String], turns: &HashSet<String>) -> (Vec<String>, Vec<String>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for item in raw {
        for piece in item
            .split([';', ',', ' ', '\t', '\n'])
            .filter(|p| !p.is_empty())
        {
            match canonical_dia_id(piece) {
                Some(id) if turns.contains(&id) => {
                    if !kept.contains(&id) {
                        kept.push(id);
                    }
                }
                _ => dropped.push(piece.to_owned()),
            }
        }
    }
    (kept, dropped)
}

/// A session's `date_time` ("1:56 pm on 8 May, 2023", the data file's form) as RFC 3339.
fn session_time(date: &str) -> Option<String> {
    chrono::NaiveDateTime::parse_from_str(date, "%I:%M %p on %d %B, %Y")
        .ok()
        .map(|t| t.and_utc().to_rfc3339())
}

/// Parses the file at `path` into conversations (the first `limit_conversations`, or all),
/// with the evidence counts.
pub fn load(
    path: &Path,
    limit_conversations: Option<usize>,
) -> anyhow::Result<(Vec<Conversation>, EvidenceCounts)> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let samples: Vec<Sample> =
        serde_json::from_str(&text).context("parsing the LoCoMo file (a JSON list of samples)")?;
    let take = limit_conversations.unwrap_or(samples.len());
    let mut counts = EvidenceCounts::default();
    let mut conversations = Vec::new();
    for sample in samples.into_iter().take(take) {
        // Sessions are the `session_<N>` keys holding a list; conv-26 has date keys with
        // no session, which this ignores.
        let mut sessions: Vec<(u32, Vec<Turn>)> = Vec::new();
        for (key, value) in &sample.conversation {
            let Some(n) = key.strip_prefix("session_").and_then(|n| n.parse().ok()) else {
                continue;
            };
            if value.is_array() {
                let turns = Vec::<Turn>::deserialize(value)
                    .with_context(|| format!("{} {key}", sample.sample_id))?;
                sessions.push((n, turns));
            }
        }
        sessions.sort_by_key(|(n, _)| *n);
        let mut episodes = Vec::new();
        for (n, turns) in sessions {
            let date = sample
                .conversation
                .get(&format!("session_{n}_date_time"))
                .and_then(Value::as_str)
                .unwrap_or("");
            let occurred_at = session_time(date);
            for turn in turns {
                let dia_id = canonical_dia_id(&turn.dia_id).unwrap_or(turn.dia_id);
                let mut content = format!("{}: {}", turn.speaker, turn.text);
                if let Some(caption) = turn.blip_caption.as_deref().filter(|c| !c.is_empty()) {
                    content.push_str(&format!(" [image: {caption}]"));
                }
                let metadata = json!({
                    "dia_id": dia_id,
                    "session": n,
                    "session_date": date,
                    "speaker": turn.speaker,
                });
                episodes.push(Episode {
                    dia_id,
                    content,
                    metadata,
                    occurred_at: occurred_at.clone(),
                });
            }
        }
        let turn_ids: HashSet<String> = episodes.iter().map(|e| e.dia_id.clone()).collect();
        anyhow::ensure!(
            turn_ids.len() == episodes.len(),
            "{}: dia_ids are not unique",
            sample.sample_id
        );
        let mut questions = Vec::new();
        for qa in sample.qa {
            counts.qa_total += 1;
            if !(1..=4).contains(&qa.category) {
                counts.adversarial_skipped += 1;
                continue;
            }
            counts.written += qa.evidence.len();
            let (evidence, dropped) = normalise_evidence(&qa.evidence, &turn_ids);
            counts.resolved += evidence.len();
            counts.dropped.extend(
                dropped
                    .into_iter()
                    .map(|d| format!("{}:{d}", sample.sample_id)),
            );
            if evidence.is_empty() {
                counts.no_evidence_skipped += 1;
                continue;
            }
            questions.push(Question {
                text: qa.question,
                category: qa.category,
                evidence,
            });
        }
        let mut observations = Vec::new();
        for (key, speakers) in &sample.observation {
            let Some(session) = key
                .strip_prefix("session_")
                .and_then(|k| k.strip_suffix("_observation"))
                .and_then(|n| n.parse().ok())
            else {
                continue;
            };
            for items in speakers.as_object().into_iter().flat_map(|m| m.values()) {
                for item in items.as_array().into_iter().flatten() {
                    let (Some(text), Some(evidence)) = (item[0].as_str(), item.get(1)) else {
                        continue;
                    };
                    let raw: Vec<String> = match evidence {
                        Value::String(s) => vec![s.clone()],
                        Value::Array(list) => list
                            .iter()
                            .filter_map(|v| v.as_str().map(str::to_owned))
                            .collect(),
                        _ => Vec::new(),
                    };
                    let (evidence, _) = normalise_evidence(&raw, &turn_ids);
                    if !evidence.is_empty() {
                        observations.push(Observation {
                            text: text.to_owned(),
                            session,
                            evidence,
                        });
                    }
                }
            }
        }
        conversations.push(Conversation {
            id: sample.sample_id,
            episodes,
            questions,
            observations,
        });
    }
    Ok((conversations, counts))
}
