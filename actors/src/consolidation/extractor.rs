//! The extractor consolidation uses, as `consolidation.extractor` selects it: `heuristic`
//! (deterministic, no model) or `llm` (any OpenAI-compatible chat-completions endpoint:
//! `llm_client.rs`). Whatever an extractor answers is validated against the batch before
//! anything is persisted (`domain/extraction.rs`); every failure is a failed attempt, retried
//! with backoff and dead-lettered after `consolidation.max_attempts`.

use super::llm_client::{ExtractError, LlmExtractor};
use crate::config::{ConsolidationConfig, ExtractorKind};
use crate::domain::extraction::{Extraction, KnownFact, SourceEpisode};
use crate::domain::heuristic_extractor;

/// The configured extractor.
pub enum Extractor {
    Heuristic,
    Llm(LlmExtractor),
}

impl Extractor {
    /// The configured extractor; fails only when the LLM client cannot be built.
    pub fn from_config(config: &ConsolidationConfig) -> Result<Extractor, ExtractError> {
        match config.extractor {
            ExtractorKind::Heuristic => Ok(Extractor::Heuristic),
            ExtractorKind::Llm => Ok(Extractor::Llm(LlmExtractor::new(&config.llm)?)),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Extractor::Heuristic => "heuristic",
            Extractor::Llm(_) => "llm",
        }
    }

    /// Extracts from one batch, with the shard's live facts and rules as reference.
    pub async fn extract(
        &self,
        batch: &[SourceEpisode],
        facts: &[KnownFact],
        rules: &[String],
    ) -> Result<Extraction, ExtractError> {
        match self {
            Extractor::Heuristic => Ok(heuristic_extractor::extract(batch)),
            Extractor::Llm(llm) => llm.extract(batch, facts, rules).await,
        }
    }
}
