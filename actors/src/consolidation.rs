//! Consolidation's extractors: which kind is configured, and the OpenAI-compatible LLM
//! client. The deterministic heuristic extractor is pure and lives in
//! `domain/heuristic_extractor.rs`; persisting a job is `store/consolidation.rs`; running it,
//! batch by batch between a shard's writes, is `actors/shard/sweep_run.rs`.

mod extractor;
mod llm_client;

pub(crate) use extractor::Extractor;
pub use llm_client::install_tls_provider;
pub(crate) use llm_client::{ChatClient, ExtractError};
