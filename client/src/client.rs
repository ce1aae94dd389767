//! [`MemoryClient`]: the context before a session, the episode after it, and neither ever
//! an error for the caller.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use crate::breaker::Breaker;
use crate::outbox::{Entry, FlushReport, Outbox, OutboxError};
use crate::rpc::{self, Outcome};

/// Where the service is and how patient to be with it.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The `/mcp` endpoint, e.g. `http://127.0.0.1:8150/mcp`.
    pub url: String,
    /// The butler's key.
    pub key: String,
    /// Where undelivered episodes wait (one directory per client).
    pub outbox_dir: PathBuf,
    /// How long a context may take before the session starts without one.
    pub context_deadline: Duration,
    /// How long storing one episode may take before it waits in the outbox.
    pub write_timeout: Duration,
    /// Failures in a row that open the circuit.
    pub breaker_failures: u32,
    /// How long an open circuit keeps calls away before one tries again.
    pub breaker_cooldown: Duration,
    /// The outbox's bounds: episodes, and bytes.
    pub outbox_max_entries: usize,
    pub outbox_max_bytes: u64,
}

impl ClientConfig {
    /// The defaults: a 1 s context deadline, 2 s writes, the circuit open after 3 failures
    /// for 5 s, an outbox of at most 10,000 episodes and 64 MiB.
    pub fn new(
        url: impl Into<String>,
        key: impl Into<String>,
        outbox_dir: impl Into<PathBuf>,
    ) -> Self {
        ClientConfig {
            url: url.into(),
            key: key.into(),
            outbox_dir: outbox_dir.into(),
            context_deadline: Duration::from_secs(1),
            write_timeout: Duration::from_secs(2),
            breaker_failures: 3,
            breaker_cooldown: Duration::from_secs(5),
            outbox_max_entries: 10_000,
            outbox_max_bytes: 64 << 20,
        }
    }
}

/// The client could not be made (its outbox directory cannot be used, or no HTTP client).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Outbox(#[from] OutboxError),
    #[error("the HTTP client cannot be built: {0}")]
    Http(String),
}

/// An episode to record.
#[derive(Debug, Clone, Serialize)]
pub struct Episode {
    pub butler: String,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub importance: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Given one if none: every send of this episode carries the same key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// When it happened (RFC 3339), if not as it is recorded. An episode kept in the outbox
    /// is sent with the time it was recorded, so that it is dated when it happened, not when
    /// the service came back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub occurred_at: Option<String>,
}

impl Episode {
    pub fn new(butler: impl Into<String>, content: impl Into<String>) -> Self {
        Episode {
            butler: butler.into(),
            content: content.into(),
            session_id: None,
            importance: None,
            metadata: None,
            idempotency_key: None,
            occurred_at: None,
        }
    }
}

/// A memory context, or an empty one and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    /// The block to put in the prompt; empty when memory did not answer.
    pub text: String,
    /// Why the block is empty, when it is for a reason other than an empty memory.
    pub missing: Option<String>,
}

/// What became of an episode.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// Stored; `duplicate` when its key had been stored before.
    Stored { id: String, duplicate: bool },
    /// Kept in the outbox, to be sent when the service answers.
    Queued { idempotency_key: String },
    /// Neither: refused by the service as invalid, or the outbox is full or unwritable.
    Dropped { reason: String },
}

/// A fail-open client; share one per process (it is `Sync`).
#[derive(Debug)]
pub struct MemoryClient {
    config: ClientConfig,
    http: reqwest::Client,
    breaker: Mutex<Breaker>,
    outbox: Outbox,
    /// One flush at a time: two would send the same episodes twice (harmless, but wasted).
    flushing: tokio::sync::Mutex<()>,
}

/// Episodes sent per flush before a new episode goes out.
const FLUSH_BATCH: usize = 256;

impl MemoryClient {
    pub fn new(config: ClientConfig) -> Result<MemoryClient, ClientError> {
        // reqwest is built without a TLS provider of its own: ring, unless one was chosen.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| ClientError::Http(e.to_string()))?;
        Ok(MemoryClient {
            outbox: Outbox::open(
                &config.outbox_dir,
                config.outbox_max_entries,
                config.outbox_max_bytes,
            )?,
            breaker: Mutex::new(Breaker::new(
                config.breaker_failures,
                config.breaker_cooldown,
            )),
            flushing: tokio::sync::Mutex::new(()),
            http,
            config,
        })
    }

    /// The memory context for `butler`'s session starting with `trigger_prompt`, within the
    /// deadline; an empty one otherwise.
    pub async fn context(&self, butler: &str, trigger_prompt: &str) -> Context {
        let arguments = json!({"butler": butler, "trigger_prompt": trigger_prompt});
        match self
            .call("memory_context", arguments, self.config.context_deadline)
            .await
        {
            Ok(body) => Context {
                text: body["text"].as_str().unwrap_or_default().to_owned(),
                missing: None,
            },
            Err(why) => Context {
                text: String::new(),
                missing: Some(why),
            },
        }
    }

    /// Records `episode`: stored now, or kept in the outbox (sent before newer episodes once
    /// the service answers), or dropped with the reason. Never an error, never a wait past
    /// the write timeout.
    pub async fn record_episode(&self, mut episode: Episode) -> Recorded {
        let recorded_at = chrono::Utc::now();
        let key = episode
            .idempotency_key
            .get_or_insert_with(|| uuid::Uuid::now_v7().to_string())
            .clone();
        let arguments = serde_json::to_value(&episode).expect("an episode serialises");
        // Older episodes first: what waits in the outbox goes before this one.
        if self.outbox.len() > 0 {
            self.flush_outbox().await;
            if self.outbox.len() > 0 {
                return self.keep(arguments, key, recorded_at);
            }
        }
        match self.store(arguments.clone()).await {
            Outcome::Done(body) => Recorded::Stored {
                id: body["id"].as_str().unwrap_or_default().to_owned(),
                duplicate: body["duplicate"] == true,
            },
            Outcome::Refused { why, .. } => {
                tracing::warn!(reason = %why, "memory refused an episode; dropped");
                Recorded::Dropped { reason: why }
            }
            Outcome::Failed(_) => self.keep(arguments, key, recorded_at),
        }
    }

    /// Sends what waits in the outbox, oldest first, until it is empty or the service stops
    /// answering.
    pub async fn flush_outbox(&self) -> FlushReport {
        let _one = self.flushing.lock().await;
        let mut report = FlushReport::default();
        'flush: loop {
            let batch = self.outbox.oldest(FLUSH_BATCH);
            if batch.is_empty() {
                break;
            }
            for entry in batch {
                match self.deliver(&entry).await {
                    Outcome::Done(_) => {
                        self.outbox.remove(&entry.path);
                        report.sent += 1;
                    }
                    Outcome::Refused { why, .. } => {
                        tracing::warn!(reason = %why, "memory refused a queued episode; dropped");
                        self.outbox.remove(&entry.path);
                        report.dropped += 1;
                    }
                    Outcome::Failed(_) => break 'flush,
                }
            }
        }
        report.remaining = self.outbox.len();
        report
    }

    /// Sends a queued episode dated by when it was recorded (unless its caller dated it). The
    /// time is this host's: should the service find it in its future (this clock ahead of
    /// the service's by more than the skew it allows), the episode is sent again undated,
    /// stored as of its arrival rather than dropped for a clock.
    async fn deliver(&self, entry: &Entry) -> Outcome {
        let Some(recorded_at) = entry
            .recorded_at
            .filter(|_| entry.arguments.get("occurred_at").is_none())
        else {
            return self.store(entry.arguments.clone()).await;
        };
        let mut dated = entry.arguments.clone();
        dated["occurred_at"] = recorded_at
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
            .into();
        match self.store(dated).await {
            Outcome::Refused { code, .. } if code.as_deref() == Some("invalid_time") => {
                tracing::warn!(
                    %recorded_at,
                    "memory found a queued episode's time in its future (this host's clock is \
                     ahead of the service's); sent again undated"
                );
                self.store(entry.arguments.clone()).await
            }
            outcome => outcome,
        }
    }

    async fn store(&self, arguments: Value) -> Outcome {
        self.call_outcome("memory_store_episode", arguments, self.config.write_timeout)
            .await
    }

    /// Episodes waiting in the outbox.
    pub fn pending(&self) -> usize {
        self.outbox.len()
    }

    /// Whether calls are being kept away from a failing service.
    pub fn circuit_open(&self) -> bool {
        self.lock_breaker().is_open()
    }

    /// Keeps an episode for later, with when it was recorded.
    fn keep(
        &self,
        arguments: Value,
        idempotency_key: String,
        recorded_at: chrono::DateTime<chrono::Utc>,
    ) -> Recorded {
        match self.outbox.push(&arguments, recorded_at) {
            Ok(()) => Recorded::Queued { idempotency_key },
            Err(e) => {
                tracing::warn!(error = %e, "an episode could not be kept for later; dropped");
                Recorded::Dropped {
                    reason: e.to_string(),
                }
            }
        }
    }

    async fn call(&self, tool: &str, arguments: Value, timeout: Duration) -> Result<Value, String> {
        match self.call_outcome(tool, arguments, timeout).await {
            Outcome::Done(body) => Ok(body),
            Outcome::Refused { why, .. } | Outcome::Failed(why) => Err(why),
        }
    }

    /// One call through the breaker: refused at once while it is open.
    async fn call_outcome(&self, tool: &str, arguments: Value, timeout: Duration) -> Outcome {
        if !self.lock_breaker().allow(Instant::now()) {
            return Outcome::Failed("the circuit is open: memory failed repeatedly".into());
        }
        let outcome = rpc::call(
            &self.http,
            &self.config.url,
            &self.config.key,
            tool,
            arguments,
            timeout,
        )
        .await;
        let mut breaker = self.lock_breaker();
        match &outcome {
            // A refusal is an answer: the service is there.
            Outcome::Done(_) | Outcome::Refused { .. } => breaker.success(),
            Outcome::Failed(_) => breaker.failure(Instant::now()),
        }
        outcome
    }

    fn lock_breaker(&self) -> std::sync::MutexGuard<'_, Breaker> {
        self.breaker.lock().unwrap_or_else(|p| p.into_inner())
    }
}
