//! The edge of butler-memory: configuration, authentication, the MCP endpoint and the
//! operator endpoints around the engine in `butler_memory_actors`.

pub mod api;
pub mod app_state;
pub mod auth;
pub mod backup;
pub mod bundle_files;
pub mod config;
pub mod dashboard;
pub mod database_target;
pub mod database_watch;
pub mod http;
pub mod load;
pub mod mcp;
pub mod purge_command;
pub mod replica_command;
pub mod replica_watch;
pub mod rotate_keys;
pub mod startup;
pub mod stdio;
pub mod telemetry;
#[cfg(feature = "testkit")]
pub mod testkit;
