//! The integration tests: the real service (embedded PostgreSQL with pgvector, the real
//! embedding model) on port 0, driven the way butlers and operators drive it.

mod auditor;
mod auth_and_tenancy;
mod backup;
mod bundle;
mod bursty_writes;
mod butler_client;
mod cli;
mod conformance;
mod consolidation;
mod context;
mod decay_and_maturity;
mod embedding;
mod events;
mod forgetting;
mod helpers;
mod http_limits;
mod invalid_input;
mod llm_server;
mod mcp_endpoint;
mod operator;
mod process;
mod prometheus;
mod purge;
mod redaction;
mod reembedding;
mod request_ids;
mod rest;
mod retrieval;
mod startup;
mod store_tools;
mod supersession;
mod supervision;
mod tool_rights;
mod traces;
