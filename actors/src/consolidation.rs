//! Consolidation's extractors: which kind is configured (`extractor.rs`), the question a
//! model is asked about each episode (`prompt.rs`, `model_extractor.rs`), the local model the
//! service runs itself (`local_model.rs`) and the OpenAI-compatible client (`llm_client.rs`).
//! The deterministic heuristic extractor and the checks a model's answer must pass are pure
//! and live in `domain/`; persisting a job is `store/consolidation.rs`; running it, batch by
//! batch between a shard's writes, is `actors/shard/sweep_run.rs`.

mod extractor;
mod llm_client;
mod local_model;
mod model_extractor;
mod prompt;

pub(crate) use extractor::{ExtractedBy, Extractor};
pub use llm_client::install_tls_provider;
pub(crate) use llm_client::{ChatClient, ExtractError};
