//! An OpenAI-compatible chat-completions client: llama.cpp (the local model's server among
//! them), vLLM, Ollama, or a hosted model, over HTTP or HTTPS (rustls; the system's roots and
//! an optional `ca_file`). Consolidation's extractors and the orchestrator memory's call it.
//!
//! The model is asked for JSON matching a schema (`response_format: json_schema`) at
//! temperature 0. Each way a call fails is classified ([`ExtractError::kind`]): timeouts,
//! transport errors, 408, 429 and 5xx are transient; malformed output is an invalid answer;
//! any other 4xx refuses the input itself.

use std::time::Duration;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::config::LlmConfig;
use crate::domain::consolidation_status::AttemptFailure;
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
    /// The local model is starting or restarting.
    #[error("{0}")]
    NotReady(String),
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
            ExtractError::Timeout(_)
            | ExtractError::Transport(_)
            | ExtractError::Client(_)
            | ExtractError::NotReady(_) => AttemptFailure::Transient,
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

/// A chat-completions request, its fields in the order the protocol documents them.
#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    temperature: u8,
    messages: &'a [Value],
    response_format: ResponseFormat<'a>,
}

#[derive(Serialize)]
struct ResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: NamedSchema<'a>,
}

#[derive(Serialize)]
struct NamedSchema<'a> {
    name: &'a str,
    strict: bool,
    schema: &'a RawValue,
}

/// An OpenAI-compatible chat-completions client asked for JSON under a schema: what
/// consolidation's extractors (`model_extractor.rs`) and the orchestrator memory's extractor
/// (`ingest/memory_extractor.rs`) call.
pub struct ChatClient {
    http: reqwest::Client,
    /// The configured endpoint's base URL (`.../v1`); the local model's comes with each call.
    base_url: String,
    model: String,
    api_key: Option<String>,
    timeout: Duration,
    max_response_bytes: usize,
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
            base_url: config.base_url.clone(),
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
        let messages = [
            json!({"role": "system", "content": system}),
            json!({"role": "user", "content": user}),
        ];
        let schema = serde_json::value::to_raw_value(&schema)
            .map_err(|e| ExtractError::Client(format!("the schema: {e}")))?;
        self.chat_json(&self.base_url, &messages, name, &schema)
            .await
    }

    /// Asks the model at `base_url` to continue `messages` with JSON matching `schema`
    /// (sent as it is written: a model answers in its order), at temperature 0; answers the
    /// JSON, not yet held to the schema.
    pub async fn chat_json(
        &self,
        base_url: &str,
        messages: &[Value],
        name: &str,
        schema: &RawValue,
    ) -> Result<Value, ExtractError> {
        let request = ChatRequest {
            model: &self.model,
            temperature: 0,
            messages,
            response_format: ResponseFormat {
                kind: "json_schema",
                json_schema: NamedSchema {
                    name,
                    strict: true,
                    schema,
                },
            },
        };
        let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        let mut call = self.http.post(&url).json(&request).timeout(self.timeout);
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The schema goes out byte for byte: its order is the order the model answers in.
    #[test]
    fn the_request_carries_the_schema_as_written() {
        let schema = RawValue::from_string(r#"{"b": 1, "a": 2}"#.to_owned()).unwrap();
        let request = ChatRequest {
            model: "m",
            temperature: 0,
            messages: &[json!({"role": "user", "content": "hi"})],
            response_format: ResponseFormat {
                kind: "json_schema",
                json_schema: NamedSchema {
                    name: "n",
                    strict: true,
                    schema: &schema,
                },
            },
        };
        let body = serde_json::to_string(&request).unwrap();
        assert!(body.contains(r#""schema":{"b": 1, "a": 2}"#), "{body}");
        assert!(
            body.contains(r#""response_format":{"type":"json_schema""#),
            "{body}"
        );
    }

    /// A `ca_file` that cannot be read, or holds no certificate, stops the client from being
    /// built (so the service from starting), naming the file.
    #[test]
    fn a_ca_file_without_certificates_is_refused_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let error = ChatClient::new(&config(Some(missing))).err().unwrap();
        assert!(error.to_string().contains("missing.pem"), "{error}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let error = ChatClient::new(&config(Some(empty))).err().unwrap();
        assert!(error.to_string().contains("no PEM certificate"), "{error}");
        assert!(ChatClient::new(&config(None)).is_ok());
    }
}
