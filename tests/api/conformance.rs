//! Official MCP SDKs against the real service, as a user wires them: the Python SDK (pinned
//! in tests/conformance/requirements.txt) and the TypeScript SDK (pinned by
//! tests/conformance/package-lock.json), both installed by scripts/setup. Each connects with
//! a bearer key, lists the tools a butler key may call, stores an episode, reads it back and
//! gets a classified tool error.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::helpers::*;

fn conformance_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

/// Runs `program script URL KEY` and returns the script's JSON report.
async fn report(app: &TestApp, program: PathBuf, script: PathBuf) -> Value {
    let url = app.url("/mcp");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&program)
            .arg(&script)
            .arg(url)
            .arg(TENANT_A_HEALTH)
            .output()
            .unwrap_or_else(|e| panic!("{} (installed by scripts/setup): {e}", program.display()))
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["ok"], true, "{report}");
    assert_eq!(report["refused"], "empty_content");
    report
}

#[tokio::test]
async fn the_python_sdk_connects_lists_stores_reads_and_is_refused() {
    let app = spawn_app().await;
    let python = butler_memory::testkit::deps_dir().join("python/bin/python");
    report(&app, python, conformance_dir().join("python_sdk.py")).await;
    app.stop().await;
}

#[tokio::test]
async fn the_typescript_sdk_connects_lists_stores_reads_and_is_refused() {
    let app = spawn_app().await;
    // Node resolves the SDK next to the script: run a copy beside .deps/node/node_modules.
    let node_dir = butler_memory::testkit::deps_dir().join("node");
    let script = node_dir.join(format!("typescript_sdk-{}.mjs", std::process::id()));
    std::fs::copy(conformance_dir().join("typescript_sdk.mjs"), &script).unwrap();
    let found = report(&app, PathBuf::from("node"), script.clone()).await;
    let _ = std::fs::remove_file(&script);
    assert!(found["tools"].as_u64().unwrap() > 10, "{found}");
    app.stop().await;
}
