//! An OpenAI-compatible chat-completions client as a consolidation extractor: llama.cpp,
//! vLLM, Ollama, or a hosted model, over HTTP or HTTPS (rustls; the system's roots and an
//! optional `ca_file`).
//!
//! The model is asked for JSON matching a schema (`response_format: json_schema`), and its
//! answer is parsed strictly. Each way a call fails is classified ([`ExtractError::kind`]):
//! timeouts, transport errors, 408, 429 and 5xx are transient; malformed or schema-invalid
//! output is an invalid answer; any other 4xx refuses the input itself.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::config::LlmConfig;
use crate::domain::consolidation_status::AttemptFailure;
use crate::domain::extraction::{
    ExtractedFact, ExtractedRule, Extraction, KnownFact, SourceEpisode,
};
use crate::domain::permanence::Permanence;
use crate::domain::relation::Relation;
use crate::error::with_causes;

/// Why an extraction failed. Every failure is an attempt, recorded with its reason; its
/// [`kind`](ExtractError::kind) decides what becomes of the episodes.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ExtractError {
    #[error("the extractor did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the extractor is unreachable: {0}")]
    Transport(String),
    #[error("the extractor answered HTTP {status}: {body}")]
    Http { status: u16, body: String },
    #[error("the extractor's answer is not valid: {0}")]
    Invalid(String),
    #[error("the LLM client cannot be built: {0}")]
    Client(String),
}

impl ExtractError {
    /// How consolidation treats this failure.
    pub fn kind(&self) -> AttemptFailure {
        match self {
            ExtractError::Http { status, .. } => match status {
                408 | 429 | 500.. => AttemptFailure::Transient,
                400..=499 => AttemptFailure::Refused,
                // A redirect or an informational answer the client did not follow.
                _ => AttemptFailure::Transient,
            },
            ExtractError::Invalid(_) => AttemptFailure::InvalidAnswer,
            ExtractError::Timeout(_) | ExtractError::Transport(_) | ExtractError::Client(_) => {
                AttemptFailure::Transient
            }
        }
    }
}

/// Makes rustls on ring the process's TLS provider, once; a provider installed before is
/// kept. reqwest is built without a provider of its own (its default, aws-lc-rs, needs a
/// heavy C build), so every process that makes an HTTP client calls this first: the
/// service, its tests and benches.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// An OpenAI-compatible chat-completions client asked for JSON under a schema: what the
/// consolidation extractor (below) and the orchestrator memory's extractor
/// (`ingest/memory_extractor.rs`) both call.
pub struct ChatClient {
    http: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
    timeout: Duration,
    max_response_bytes: usize,
}

/// The consolidation prompt (memory_project_plan.md "Consolidation Engine").
const SYSTEM_PROMPT: &str = "You consolidate a butler's session episodes into long-term memory. \
Read the episodes and answer with JSON only, matching the schema. Extract: new_facts (durable \
knowledge as subject, predicate, content; permanence is one of permanent (identity: name, \
birthday, allergies, family, medical conditions), stable (long-term preferences, work, habits), \
standard (current interests, projects, possessions), volatile (temporary states, short-term \
plans), ephemeral (what happened today); importance 0-10), updated_facts (a new value for one \
of the known facts: give its id as supersedes_fact_id), new_rules (how the butler should behave, \
learned from what worked or failed), and confirmations (ids of known facts the episodes show \
are still true). A new or updated fact may link to known facts it supports or contradicts. \
Each episode gives the date it happened (happened, YYYY-MM-DD, UTC), which dates the \
words it uses (\"yesterday\", \"in March\"). A new or updated fact gives valid_from, the date it \
became true (YYYY-MM-DD), when the episode states one (\"moved in March\" in an episode that \
happened in May), else null. Every item names the \
episode it came from. Do not repeat known facts as new facts; confirm them instead. Extract \
nothing you are not sure of.";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    new_facts: Vec<FactItem>,
    updated_facts: Vec<UpdatedFactItem>,
    new_rules: Vec<RuleItem>,
    confirmations: Vec<Confirmation>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FactItem {
    subject: String,
    predicate: String,
    content: String,
    permanence: Permanence,
    importance: f64,
    source_episode_id: Uuid,
    links: Vec<LinkItem>,
    /// When it became true, if the episode says (a date or a time); absent: when the
    /// episode happened. Read leniently: a value that is not a date is ignored.
    #[serde(default)]
    valid_from: Option<String>,
}

/// A known fact the extracted one supports or contradicts.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkItem {
    relation: Relation,
    fact_id: Uuid,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdatedFactItem {
    supersedes_fact_id: Uuid,
    subject: String,
    predicate: String,
    content: String,
    permanence: Permanence,
    importance: f64,
    source_episode_id: Uuid,
    links: Vec<LinkItem>,
    /// When it became true, if the episode says (a date or a time); absent: when the
    /// episode happened. Read leniently: a value that is not a date is ignored.
    #[serde(default)]
    valid_from: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleItem {
    content: String,
    source_episode_id: Uuid,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Confirmation {
    fact_id: Uuid,
}

/// A fact's stated start, when the model gave one that reads as a time or a date.
fn stated_start(text: Option<&str>) -> Option<chrono::DateTime<chrono::Utc>> {
    let parsed = crate::domain::time_window::parse_valid_from(text?);
    if parsed.is_err() {
        tracing::debug!(
            valid_from = text,
            "an extracted fact's start is not a date; ignored"
        );
    }
    parsed.ok()
}

/// The JSON schema the answer must match.
fn answer_schema() -> Value {
    let fact = |extra: &[(&str, Value)]| {
        let mut properties = json!({
            "subject": {"type": "string"},
            "predicate": {"type": "string"},
            "content": {"type": "string"},
            "permanence": {"enum": ["permanent", "stable", "standard", "volatile", "ephemeral"]},
            "importance": {"type": "number", "minimum": 0, "maximum": 10},
            "source_episode_id": {"type": "string"},
            "valid_from": {"type": ["string", "null"],
                           "description": "the date it became true (YYYY-MM-DD), if the episode states one"},
            "links": {"type": "array", "items": {
                "type": "object", "additionalProperties": false,
                "required": ["relation", "fact_id"],
                "properties": {"relation": {"enum": ["supports", "contradicts"]},
                               "fact_id": {"type": "string"}}}},
        });
        let mut required = vec![
            "subject",
            "predicate",
            "content",
            "permanence",
            "importance",
            "source_episode_id",
            "links",
            "valid_from",
        ];
        for (k, v) in extra {
            properties[*k] = v.clone();
            required.push(k);
        }
        json!({"type": "object", "additionalProperties": false,
               "properties": properties, "required": required})
    };
    json!({
        "type": "object",
        "additionalProperties": false,
        "required": ["new_facts", "updated_facts", "new_rules", "confirmations"],
        "properties": {
            "new_facts": {"type": "array", "items": fact(&[])},
            "updated_facts": {"type": "array", "items": fact(&[("supersedes_fact_id", json!({"type": "string"}))])},
            "new_rules": {"type": "array", "items": {
                "type": "object", "additionalProperties": false,
                "required": ["content", "source_episode_id"],
                "properties": {"content": {"type": "string"}, "source_episode_id": {"type": "string"}}}},
            "confirmations": {"type": "array", "items": {
                "type": "object", "additionalProperties": false, "required": ["fact_id"],
                "properties": {"fact_id": {"type": "string"}}}},
        },
    })
}

/// The consolidation extractor: the chat client with the consolidation prompt and schema.
pub struct LlmExtractor {
    client: ChatClient,
}

impl ChatClient {
    /// A client of `config`'s endpoint (the configuration check made sure it names one).
    pub fn new(config: &LlmConfig) -> Result<ChatClient, ExtractError> {
        install_tls_provider();
        let mut builder = reqwest::Client::builder();
        if let Some(path) = &config.ca_file {
            let pem = std::fs::read(path).map_err(|e| {
                ExtractError::Client(format!("consolidation.llm.ca_file {}: {e}", path.display()))
            })?;
            let certificates = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
                ExtractError::Client(format!("consolidation.llm.ca_file {}: {e}", path.display()))
            })?;
            if certificates.is_empty() {
                return Err(ExtractError::Client(format!(
                    "consolidation.llm.ca_file {}: no PEM certificate in it",
                    path.display()
                )));
            }
            builder = builder.tls_certs_merge(certificates);
        }
        let http = builder
            .build()
            .map_err(|e| ExtractError::Client(e.to_string()))?;
        Ok(ChatClient {
            http,
            url: format!("{}/chat/completions", config.base_url.trim_end_matches('/')),
            model: config.model.clone(),
            api_key: config.api_key.clone().filter(|k| !k.is_empty()),
            timeout: Duration::from_millis(config.timeout_ms),
            max_response_bytes: config.max_response_bytes.get(),
        })
    }

    /// The answer's body, read chunk by chunk and refused past `max_response_bytes`: an
    /// endpoint that streams without end must not fill the service's memory.
    async fn read_body(&self, mut response: reqwest::Response) -> Result<String, ExtractError> {
        let limit = self.max_response_bytes;
        let too_long = || {
            ExtractError::Invalid(format!(
                "the response is longer than {limit} bytes (consolidation.llm.max_response_bytes)"
            ))
        };
        if response.content_length().is_some_and(|n| n > limit as u64) {
            return Err(too_long());
        }
        let mut body = Vec::new();
        loop {
            let chunk = response.chunk().await.map_err(|e| {
                if e.is_timeout() {
                    ExtractError::Timeout(self.timeout)
                } else {
                    ExtractError::Transport(with_causes(&e))
                }
            })?;
            let Some(chunk) = chunk else { break };
            if body.len() + chunk.len() > limit {
                return Err(too_long());
            }
            body.extend_from_slice(&chunk);
        }
        String::from_utf8(body)
            .map_err(|_| ExtractError::Invalid("the response is not UTF-8".into()))
    }

    /// Asks the model, with `system` and `user` messages, for JSON matching `schema`
    /// (`response_format: json_schema`, strict, named `name`); answers the JSON, not yet
    /// held to the schema.
    pub async fn complete_json(
        &self,
        system: &str,
        user: &str,
        name: &str,
        schema: Value,
    ) -> Result<Value, ExtractError> {
        let request = json!({
            "model": self.model,
            "temperature": 0,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "response_format": {"type": "json_schema", "json_schema": {
                "name": name, "strict": true, "schema": schema}},
        });
        let mut call = self
            .http
            .post(&self.url)
            .json(&request)
            .timeout(self.timeout);
        if let Some(key) = &self.api_key {
            call = call.bearer_auth(key);
        }
        let response = call.send().await.map_err(|e| {
            if e.is_timeout() {
                ExtractError::Timeout(self.timeout)
            } else {
                ExtractError::Transport(with_causes(&e))
            }
        })?;
        let status = response.status();
        let body = self.read_body(response).await;
        if !status.is_success() {
            // The status says what happened; the body, when it could be read, says why.
            return Err(ExtractError::Http {
                status: status.as_u16(),
                body: body.unwrap_or_default().chars().take(300).collect(),
            });
        }
        let body = body?;
        let envelope: Value = serde_json::from_str(&body)
            .map_err(|e| ExtractError::Invalid(format!("the response is not JSON: {e}")))?;
        let content = envelope["choices"][0]["message"]["content"]
            .as_str()
            .ok_or_else(|| ExtractError::Invalid("no choices[0].message.content".into()))?;
        serde_json::from_str(content)
            .map_err(|e| ExtractError::Invalid(format!("the content is not JSON: {e}")))
    }
}

impl LlmExtractor {
    /// The extractor of `config`'s endpoint.
    pub fn new(config: &LlmConfig) -> Result<LlmExtractor, ExtractError> {
        Ok(LlmExtractor {
            client: ChatClient::new(config)?,
        })
    }

    pub async fn extract(
        &self,
        batch: &[SourceEpisode],
        facts: &[KnownFact],
        rules: &[String],
    ) -> Result<Extraction, ExtractError> {
        let episodes: Vec<Value> = batch
            .iter()
            .map(|e| {
                json!({
                    "id": e.id,
                    "happened": e.happened_at.format("%Y-%m-%d").to_string(),
                    "content": e.content,
                })
            })
            .collect();
        let user = json!({
            "episodes": episodes,
            "known_facts": facts,
            "known_rules": rules,
        })
        .to_string();
        let value = self
            .client
            .complete_json(SYSTEM_PROMPT, &user, "consolidation", answer_schema())
            .await?;
        let answer: Answer = serde_json::from_value(value).map_err(|e| {
            ExtractError::Invalid(format!("the content does not match the schema: {e}"))
        })?;
        let mut extraction = Extraction::default();
        for f in answer.new_facts {
            extraction.facts.push(ExtractedFact {
                subject: f.subject,
                predicate: f.predicate,
                content: f.content,
                permanence: f.permanence,
                importance: f.importance,
                source_episode_id: f.source_episode_id,
                supersedes_fact_id: None,
                valid_from: stated_start(f.valid_from.as_deref()),
                relations: f
                    .links
                    .into_iter()
                    .map(|l| (l.relation, l.fact_id))
                    .collect(),
            });
        }
        for f in answer.updated_facts {
            extraction.facts.push(ExtractedFact {
                subject: f.subject,
                predicate: f.predicate,
                content: f.content,
                permanence: f.permanence,
                importance: f.importance,
                source_episode_id: f.source_episode_id,
                supersedes_fact_id: Some(f.supersedes_fact_id),
                valid_from: stated_start(f.valid_from.as_deref()),
                relations: f
                    .links
                    .into_iter()
                    .map(|l| (l.relation, l.fact_id))
                    .collect(),
            });
        }
        for r in answer.new_rules {
            extraction.rules.push(ExtractedRule {
                content: r.content,
                source_episode_id: r.source_episode_id,
            });
        }
        extraction.confirmations = answer
            .confirmations
            .into_iter()
            .map(|c| c.fact_id)
            .collect();
        Ok(extraction)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest instance of the schema subset `answer_schema` uses, with every optional
    /// array holding one item: what a model held to the schema (`strict`) could answer.
    fn instance(schema: &Value) -> Value {
        if let Some(values) = schema["enum"].as_array() {
            return values[0].clone();
        }
        // A nullable field (`["string", "null"]`) is answered with its value: a date here.
        if let Some(types) = schema["type"].as_array() {
            assert!(types.iter().any(|t| t == "null"), "{schema}");
            return json!("2026-03-02");
        }
        match schema["type"].as_str() {
            Some("object") => {
                let properties = schema["properties"].as_object().expect("properties");
                let required: Vec<&str> = schema["required"]
                    .as_array()
                    .expect("required")
                    .iter()
                    .map(|k| k.as_str().unwrap())
                    .collect();
                for key in properties.keys() {
                    assert!(
                        required.contains(&key.as_str()),
                        "strict mode requires {key}"
                    );
                }
                properties
                    .iter()
                    .map(|(k, v)| (k.clone(), instance(v)))
                    .collect::<serde_json::Map<_, _>>()
                    .into()
            }
            Some("array") => json!([instance(&schema["items"])]),
            // Every string the answer holds may be an id: a UUID is valid anywhere.
            Some("string") => json!(Uuid::from_u128(7)),
            Some("number") => json!(1.0),
            other => panic!("a schema type the answer does not use: {other:?}"),
        }
    }

    fn config(ca_file: Option<std::path::PathBuf>) -> LlmConfig {
        LlmConfig {
            base_url: "https://127.0.0.1:1/v1".into(),
            model: "m".into(),
            api_key: None,
            timeout_ms: 1000,
            max_response_bytes: std::num::NonZeroUsize::new(1024).unwrap(),
            ca_file,
        }
    }

    /// A `ca_file` that cannot be read, or holds no certificate, stops the client from being
    /// built (so the service from starting), naming the file.
    #[test]
    fn a_ca_file_without_certificates_is_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let error = LlmExtractor::new(&config(Some(missing))).err().unwrap();
        assert!(error.to_string().contains("missing.pem"), "{error}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let error = LlmExtractor::new(&config(Some(empty))).err().unwrap();
        assert!(error.to_string().contains("no PEM certificate"), "{error}");
        assert!(LlmExtractor::new(&config(None)).is_ok());
    }

    /// What the schema asks the model for is exactly what the client parses: an answer held
    /// to the schema is accepted, with its links, and the schema names every field.
    #[test]
    fn an_answer_held_to_the_schema_is_parsed() {
        let answer = instance(&answer_schema());
        let parsed: Answer =
            serde_json::from_value(answer.clone()).unwrap_or_else(|e| panic!("{e}: {answer:#}"));
        assert_eq!(parsed.new_facts[0].links.len(), 1);
        assert_eq!(
            stated_start(parsed.updated_facts[0].valid_from.as_deref()).map(|t| t.to_rfc3339()),
            Some("2026-03-02T00:00:00+00:00".to_owned())
        );
        assert_eq!(stated_start(Some("last spring")), None);
        assert_eq!(parsed.updated_facts[0].links.len(), 1);
        assert_eq!(parsed.new_rules.len(), 1);
        assert_eq!(parsed.confirmations.len(), 1);
    }
}
