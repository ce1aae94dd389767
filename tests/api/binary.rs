//! The real binary, run as a process: `serve` started and waited for until ready (its log
//! lines kept), called over plain JSON-RPC, stopped by a signal; other commands run to
//! their end; and the configuration such a process starts from.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;

pub(crate) struct Service {
    pub(crate) child: Child,
    pub(crate) base: String,
    /// Every log line so far.
    pub(crate) lines: Arc<Mutex<Vec<String>>>,
}

impl Service {
    /// Starts `butler-memory serve` and waits for its "ready" log line.
    pub(crate) fn start(config: &Path) -> Service {
        Service::start_with(config, &[])
    }

    /// [`Service::start`] with environment overrides (`BUTLER_MEMORY_*`).
    pub(crate) fn start_with(config: &Path, env: &[(&str, &str)]) -> Service {
        // This process talks to the child over reqwest, which needs a TLS provider chosen.
        butler_memory_actors::install_tls_provider();
        let mut child = Command::new(env!("CARGO_BIN_EXE_butler-memory"))
            .arg("serve")
            .arg("--config")
            .arg(config)
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary starts");
        let lines = Arc::new(Mutex::new(Vec::<String>::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let seen = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(event) = serde_json::from_str::<Value>(&line)
                    && event["fields"]["message"] == "butler-memory ready"
                {
                    let _ = tx.send(
                        event["fields"]["address"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    );
                }
                seen.lock().unwrap().push(line);
            }
        });
        let address = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| {
                panic!(
                    "service did not become ready:\n{}",
                    lines.lock().unwrap().join("\n")
                )
            });
        Service {
            child,
            base: format!("http://{address}"),
            lines,
        }
    }

    pub(crate) async fn call(&self, tool: &str, args: Value) -> (bool, Value) {
        self.call_as(TENANT_A_HEALTH, tool, args).await
    }

    pub(crate) async fn call_as(&self, key: &str, tool: &str, args: Value) -> (bool, Value) {
        self.call_with(key, &[], tool, args).await
    }

    /// [`Service::call_as`] with more request headers (a `traceparent`).
    pub(crate) async fn call_with(
        &self,
        key: &str,
        headers: &[(&str, &str)],
        tool: &str,
        args: Value,
    ) -> (bool, Value) {
        let mut request = reqwest::Client::new()
            .post(format!("{}/mcp", self.base))
            .header("Authorization", format!("Bearer {key}"))
            .header("Accept", "application/json, text/event-stream");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response: Value = request
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": tool, "arguments": args}}))
            .send()
            .await
            .expect("the service answers")
            .json()
            .await
            .expect("a JSON-RPC answer");
        let result = &response["result"];
        (
            result["isError"] == true,
            result["structuredContent"].clone(),
        )
    }

    /// Stops it as a signal would (waiting off the async workers, which may be serving
    /// something it still talks to); answers every log line.
    pub(crate) async fn stop(self) -> Vec<String> {
        signal(self.child.id() as i32, "TERM");
        let lines = self.lines.clone();
        let status = tokio::task::spawn_blocking(move || {
            let mut service = self;
            service.child.wait().unwrap()
        })
        .await
        .unwrap();
        assert!(status.success(), "{status}");
        lines.lock().unwrap().clone()
    }

    /// The service's `/metrics` text.
    pub(crate) async fn metrics(&self) -> String {
        reqwest::get(format!("{}/metrics", self.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub(crate) async fn readyz(&self) -> (u16, Value) {
        let response = reqwest::get(format!("{}/readyz", self.base)).await.unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }
}

/// Runs a `butler-memory` command other than `serve` to its end.
pub(crate) fn run_cli(config: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_butler-memory"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .output()
        .expect("the binary runs")
}

pub(crate) fn signal(pid: i32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(ok.success(), "kill -{sig} {pid}");
}

/// Writes a configuration for the real binary: the embedded default under `dir/data`, the
/// test assets, one butler key of tenant-a, the heuristic extractor unless `extra` has a
/// `[consolidation]` table (one file cannot have two). Returns its path.
pub(crate) fn write_config(dir: &Path, extra: &str) -> std::path::PathBuf {
    let data_dir = dir.join("data");
    let extractor = if extra.contains("[consolidation]") {
        ""
    } else {
        butler_memory::testkit::HEURISTIC_EXTRACTOR_TOML
    };
    let config_path = dir.join("config.toml");
    std::fs::write(
        &config_path,
        format!(
            r#"
listen = "127.0.0.1:0"
data_dir = "{data}"
{assets}
[database]
# A busy CI host can take over a second to open a connection while tests run beside it;
# readiness keeps its own 2 s bound on the ping.
acquire_timeout_ms = 5000
[log]
format = "json"
level = "info"
[auth]
bootstrap_admin_key = false
[[auth.keys]]
key = "{key}"
tenant = "tenant-a"
role = "butler"
butler = "health"
[[auth.keys]]
key = "{admin}"
tenant = "tenant-a"
role = "admin"
{extractor}
{extra}
"#,
            data = data_dir.display(),
            assets = butler_memory::testkit::assets_toml(),
            key = TENANT_A_HEALTH,
            admin = TENANT_A_ADMIN,
        ),
    )
    .unwrap();
    config_path
}
