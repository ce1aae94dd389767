//! What the in-process benchmarks share, one concept per file: a private service on the
//! embedded PostgreSQL in a temporary directory and its MCP client ([`service`]), a seeded
//! random source ([`rng`]), latency percentiles ([`latency`]), a PostgreSQL server's CPU
//! ([`postgres_cpu`]), the machine's CPU accounting
//! (the load generator's, re-exported) and the JSON output ([`output`]). Each bench includes this index with
//! `#[path = "support/mod.rs"] mod support;` and uses the names it re-exports.

// Each bench binary compiles this module on its own and uses a subset of it (and of the
// names re-exported below).
#![allow(dead_code, unused_imports)]

mod latency;
mod output;
mod postgres_cpu;
mod rng;
mod service;

pub use butler_memory::load::machine_cpu::{CpuUse, MachineCpu};
pub use latency::Latency;
pub use output::{round3, write_json};
pub use postgres_cpu::{postgres_cpu_seconds, process_cpu_seconds};
pub use rng::Rng;
pub use service::{Key, McpClient, Service, extra_toml};
