//! Official MCP SDKs against the real service, as a user wires them: the Python SDK
//! (pinned in tests/conformance/requirements.txt, installed by scripts/setup) connects
//! with a bearer key, lists the tools a butler key may call, stores an episode, reads it
//! back and gets a classified tool error.

use std::process::Command;

use serde_json::Value;

use crate::helpers::*;

#[tokio::test]
async fn the_python_sdk_connects_lists_stores_reads_and_is_refused() {
    let app = spawn_app().await;
    let python = butler_memory::testkit::deps_dir().join("python/bin/python");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/python_sdk.py");
    let url = app.url("/mcp");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .arg(url)
            .arg(TENANT_A_HEALTH)
            .output()
            .expect("the Python SDK is installed by scripts/setup")
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
    app.stop().await;
}
