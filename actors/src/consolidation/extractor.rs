//! The extractor consolidation uses, as `consolidation.extractor` selects it: `local` (the
//! model the service runs itself, `local_model.rs`), `llm` (any OpenAI-compatible
//! chat-completions endpoint) or `heuristic` (deterministic, no model). Both models answer
//! the same question, one episode at a time (`model_extractor.rs`); while the local model
//! cannot run at all, the heuristic extractor stands in, and says so.
//!
//! Whatever an extractor answers is validated against the batch before anything is
//! persisted (`domain/extraction.rs`); every failure is a failed attempt, retried with
//! backoff and dead-lettered after `consolidation.max_attempts`.

use std::sync::Arc;

use super::llm_client::{ChatClient, ExtractError};
use super::local_model::{LocalModel, ModelUnavailable};
use super::model_extractor::{ModelExtractor, Reference};
use crate::config::{ConsolidationConfig, ExtractorKind, LlmConfig};
use crate::domain::extraction::{Extraction, KnownFact, SourceEpisode};
use crate::domain::extractor_status::{ExtractorStatus, LocalModelState};
use crate::domain::heuristic_extractor;

/// The configured extractor.
pub enum Extractor {
    Heuristic,
    Llm {
        model: ModelExtractor,
        base_url: String,
    },
    Local {
        model: ModelExtractor,
        local: Arc<LocalModel>,
    },
}

impl std::fmt::Debug for Extractor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.configured())
    }
}

/// What extracted a batch, as its job records it.
pub type ExtractedBy = &'static str;

impl Extractor {
    /// The configured extractor; fails only when an LLM client cannot be built. The local
    /// model's keeper starts here (within the service's runtime).
    pub fn from_config(config: &ConsolidationConfig) -> Result<Extractor, ExtractError> {
        match config.extractor {
            ExtractorKind::Heuristic => Ok(Extractor::Heuristic),
            ExtractorKind::Llm => Ok(Extractor::Llm {
                model: ModelExtractor::new(ChatClient::new(&config.llm)?),
                base_url: config.llm.base_url.clone(),
            }),
            ExtractorKind::Local => {
                let local = &config.local;
                let client = ChatClient::new(&LlmConfig {
                    base_url: String::new(),
                    model: "local".to_owned(),
                    api_key: None,
                    timeout_ms: local.timeout_ms,
                    max_response_bytes: config.llm.max_response_bytes,
                    ca_file: None,
                })?;
                Ok(Extractor::Local {
                    model: ModelExtractor::new(client),
                    local: LocalModel::start(local.clone()),
                })
            }
        }
    }

    /// `consolidation.extractor`.
    pub fn configured(&self) -> &'static str {
        match self {
            Extractor::Heuristic => "heuristic",
            Extractor::Llm { .. } => "llm",
            Extractor::Local { .. } => "local",
        }
    }

    /// The extractor as configured and as it runs now.
    pub fn status(&self) -> ExtractorStatus {
        let local_model = match self {
            Extractor::Local { local, .. } => Some(local.status()),
            _ => None,
        };
        let fallen_back = local_model
            .as_ref()
            .is_some_and(|s| s.state == LocalModelState::Unavailable);
        ExtractorStatus {
            configured: self.configured().to_owned(),
            active: if fallen_back {
                "heuristic"
            } else {
                self.configured()
            }
            .to_owned(),
            local_model,
        }
    }

    /// Extracts from one batch, with the shard's live facts and rules as reference; answers the
    /// extraction and what made it (the heuristic extractor, when the local model cannot
    /// run).
    pub async fn extract(
        &self,
        batch: &[SourceEpisode],
        facts: &[KnownFact],
        rules: &[String],
    ) -> Result<(Extraction, ExtractedBy), ExtractError> {
        match self {
            Extractor::Heuristic => Ok((heuristic_extractor::extract(batch), "heuristic")),
            Extractor::Llm { model, base_url } => {
                let reference = Reference::new(facts, rules);
                let mut out = Extraction::default();
                for episode in batch {
                    model
                        .extract_episode(base_url, episode, &reference, &mut out)
                        .await?;
                }
                Ok((out, "llm"))
            }
            Extractor::Local { model, local } => {
                let mut lease = match local.lease().await {
                    Ok(lease) => lease,
                    Err(ModelUnavailable::Never(why)) => {
                        tracing::debug!(reason = %why, "the local model cannot run; extracting with the heuristic extractor");
                        return Ok((heuristic_extractor::extract(batch), "heuristic"));
                    }
                    Err(ModelUnavailable::NotYet(why)) => {
                        return Err(ExtractError::NotReady(why));
                    }
                };
                let reference = Reference::new(facts, rules);
                let mut out = Extraction::default();
                for episode in batch {
                    let turn = lease.turn().await;
                    let first = model
                        .extract_episode(&lease.base_url, episode, &reference, &mut out)
                        .await;
                    drop(turn);
                    if let Err(ExtractError::Transport(why)) = first {
                        // The model died under the call (its keeper restarts it): once more,
                        // on the model as it is now.
                        tracing::info!(reason = %why, "the local model did not answer; asking again once it is back");
                        drop(lease);
                        lease = local.lease().await.map_err(|e| match e {
                            ModelUnavailable::Never(why) | ModelUnavailable::NotYet(why) => {
                                ExtractError::NotReady(why)
                            }
                        })?;
                        let _turn = lease.turn().await;
                        model
                            .extract_episode(&lease.base_url, episode, &reference, &mut out)
                            .await?;
                    } else {
                        first?;
                    }
                }
                Ok((out, "local"))
            }
        }
    }

    /// Stops the local model, if one runs.
    pub async fn shutdown(&self) {
        if let Extractor::Local { local, .. } = self {
            local.shutdown().await;
        }
    }
}
