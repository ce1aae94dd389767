//! `butler-memory load`, the shipped load tester, as a deployment pipeline runs it: a short
//! scenario against a service it spawns passes its thresholds and reports every tool; a
//! breached threshold exits 99; against a running service (`--url` and a keys file) it
//! verifies through the public API, and catches an acknowledged write that was never stored
//! (the test kit's lost-write drill); against a fleet's instances (`--url a,b`) it spreads
//! the calls over them; a URL that does not answer, or a key it refuses, stops it before the
//! clock with a line that says which.

use std::path::Path;

use serde_json::{Value, json};

use crate::binary::{Service, run_cli, write_config};
use crate::helpers::*;

/// A scenario of every tool, `seconds` long, with `thresholds`.
fn scenario(dir: &Path, name: &str, seconds: u32, thresholds: &[&str]) -> std::path::PathBuf {
    let thresholds: Vec<String> = thresholds.iter().map(|t| format!("{t:?}")).collect();
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            r#"
name = "{name}"
duration_secs = {seconds}
warmup_secs = 1
arrival = {{ shape = "poisson", rate = 25 }}
population = {{ tenants = 2, butlers = 2, sessions = 3 }}
content = {{ min_chars = 30, max_chars = 200, unicode = 0.3 }}
mix = [
    {{ tool = "memory_store_episode", weight = 40 }},
    {{ tool = "memory_ingest_batch", weight = 5, batch = 5 }},
    {{ tool = "memory_context", weight = 15 }},
    {{ tool = "memory_context_batch", weight = 5, batch = 3 }},
    {{ tool = "memory_search", weight = 10 }},
    {{ tool = "memory_recall", weight = 5 }},
    {{ tool = "memory_store_fact", weight = 10 }},
    {{ tool = "memory_mark_rule", weight = 10 }},
    {{ tool = "session", weight = 5 }},
]
session = {{ episodes = 2, think_secs = 0.5 }}
thresholds = [{}]
[verify]
drain_timeout_secs = 60
"#,
            thresholds.join(", ")
        ),
    )
    .unwrap();
    path
}

/// `butler-memory load --scenario S --json J` and `extra` arguments, with the spawned
/// service's (or the target's) configuration `config`.
fn load(
    config: &Path,
    scenario: &Path,
    json: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut args = vec![
        "load",
        "--scenario",
        scenario.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run_cli(config, &args, env)
}

fn report(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("the JSON report")).unwrap()
}

#[tokio::test]
async fn a_short_scenario_against_a_spawned_service_passes_and_reports_every_tool() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _) = fresh_database().await;
    // The spawned service's configuration: the test assets; the load sets its own keys,
    // listener and data directory.
    let config = write_config(dir.path(), "");
    let scenario = scenario(
        dir.path(),
        "short",
        // CI's ten-second scenario.
        10,
        &[
            // Evaluated, not a speed test: far beyond any latency of a working service.
            "memory_store_episode p99 < 60s",
            "errors rate < 1%",
            "lost == 0",
            "duplicated == 0",
        ],
    );
    let json = dir.path().join("report.json");
    let html = dir.path().join("report.html");
    let out = load(
        &config,
        &scenario,
        &json,
        &["--html", html.to_str().unwrap()],
        &[("BUTLER_MEMORY_DATABASE_URL", &database)],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("PASS lost == 0"), "{stdout}");
    let report = report(&json);
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tool"].as_str().unwrap())
        .collect();
    for tool in [
        "memory_store_episode",
        "memory_context",
        "memory_search",
        "memory_store_fact",
    ] {
        assert!(tools.contains(&tool), "{tool} missing from {tools:?}");
    }
    let episodes = &report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tool"] == "memory_store_episode")
        .unwrap();
    assert!(episodes["p99_ms"].as_f64().unwrap() > 0.0, "{episodes}");
    assert!(
        report["read_back"]["checked"].as_u64().unwrap() > 20,
        "{report}"
    );
    assert_eq!(report["read_back"]["lost"], 0);
    assert!(
        report["server"]["butler_memory_requests_total"]
            .as_f64()
            .unwrap()
            > 50.0
    );
    assert!(
        report["timeline"].as_array().unwrap().len() >= 3,
        "{report}"
    );
    assert!(
        report["thresholds"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["ok"] == json!(true))
    );
    // The page for people: its tables and a plot per view, drawn (lines, labelled axes).
    let page = std::fs::read_to_string(&html).unwrap();
    for heading in [
        "Throughput",
        "memory_context: latency over time",
        "Errors per time bucket",
        "Latency distribution",
    ] {
        assert!(page.contains(heading), "{heading}");
    }
    let plots = page.matches("<svg").count();
    assert!(plots >= 3 + tools.len(), "{plots} plots");
    assert!(
        page.matches("<polyline").count() >= plots,
        "every plot has its lines"
    );
    assert!(page.contains("PASS") && !page.contains("could not be drawn"));
}

#[tokio::test]
async fn a_breached_threshold_exits_99_and_says_which() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _) = fresh_database().await;
    let config = write_config(dir.path(), "");
    let scenario = scenario(
        dir.path(),
        "strict",
        2,
        &["memory_search p50 < 1us", "lost == 0"],
    );
    let json = dir.path().join("report.json");
    let out = load(
        &config,
        &scenario,
        &json,
        &[],
        &[("BUTLER_MEMORY_DATABASE_URL", &database)],
    );
    assert_eq!(
        out.status.code(),
        Some(99),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("FAIL memory_search p50 < 1us"));
    let thresholds = report(&json)["thresholds"].clone();
    assert_eq!(thresholds[0]["ok"], false, "{thresholds}");
    assert_eq!(thresholds[1]["ok"], true, "{thresholds}");
    // A scenario that does not parse is a usage error, not a breach.
    std::fs::write(dir.path().join("bad.toml"), "duration_secs = 0").unwrap();
    let out = run_cli(
        &config,
        &[
            "load",
            "--scenario",
            dir.path().join("bad.toml").to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("arrival"));
}

#[tokio::test]
async fn against_a_running_service_it_verifies_through_the_api_and_catches_a_lost_write() {
    let dir = tempfile::tempdir().unwrap();
    let (database, _) = fresh_database().await;
    let config = write_config(dir.path(), "");
    // Every 7th acknowledged episode was never stored (the test kit's drill).
    let service = Service::start_with(
        &config,
        &[
            ("BUTLER_MEMORY_DATABASE_URL", &database),
            ("TESTKIT_LOSE_ACKNOWLEDGED_EVERY", "7"),
        ],
    );
    let keys = dir.path().join("keys.toml");
    std::fs::write(
        &keys,
        format!(
            "[[keys]]\ntenant = \"tenant-a\"\nbutler = \"health\"\nkey = \"{TENANT_A_HEALTH}\"\n"
        ),
    )
    .unwrap();
    let scenario = scenario(dir.path(), "remote", 3, &["lost == 0"]);
    let json = dir.path().join("report.json");
    let out = load(
        &config,
        &scenario,
        &json,
        &["--url", &service.base, "--keys", keys.to_str().unwrap()],
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(99),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = report(&json);
    let lost = report["read_back"]["lost"].as_u64().unwrap();
    let checked = report["read_back"]["checked"].as_u64().unwrap();
    // Only single-episode writes go through the drill: about one in seven of them.
    assert!(
        lost > 0 && lost * 4 < checked,
        "lost {lost} of {checked}: {report}"
    );
    assert_eq!(report["read_back"]["unverified"], 0);
    assert_eq!(report["target"], json!(service.base));
    service.stop().await;
}

#[tokio::test]
async fn against_two_instances_it_spreads_the_calls_and_verifies_through_either() {
    let (database, _) = fresh_database().await;
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let env = [("BUTLER_MEMORY_DATABASE_URL", database.as_str())];
    let a = Service::start_with(&write_config(one.path(), ""), &env);
    let b = Service::start_with(&write_config(two.path(), ""), &env);
    let keys = one.path().join("keys.toml");
    std::fs::write(
        &keys,
        format!(
            "[[keys]]\ntenant = \"tenant-a\"\nbutler = \"health\"\nkey = \"{TENANT_A_HEALTH}\"\n"
        ),
    )
    .unwrap();
    let scenario = scenario(one.path(), "fleet", 3, &["lost == 0"]);
    let json = one.path().join("report.json");
    let both = format!("{},{}", a.base, b.base);
    let out = load(
        &one.path().join("config.toml"),
        &scenario,
        &json,
        &["--url", &both, "--keys", keys.to_str().unwrap()],
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = report(&json);
    assert_eq!(report["read_back"]["lost"], 0, "{report}");
    assert_eq!(report["read_back"]["unverified"], 0, "{report}");
    assert!(report["read_back"]["checked"].as_u64().unwrap() > 0);
    // Each instance answered part of the load.
    for service in [&a, &b] {
        let metrics = service.metrics().await;
        let calls: f64 = metrics
            .lines()
            .filter(|l| l.starts_with("butler_memory_requests_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        assert!(calls > 10.0, "{} answered {calls} calls", service.base);
    }
    b.stop().await;
    a.stop().await;
}

#[tokio::test]
async fn a_url_that_does_not_answer_or_a_refused_key_stops_it_before_the_clock() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let scenario = scenario(dir.path(), "unchecked", 3, &[]);
    let json = dir.path().join("report.json");
    let keys_file = |name: &str, key: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!("[[keys]]\ntenant = \"tenant-a\"\nbutler = \"health\"\nkey = \"{key}\"\n"),
        )
        .unwrap();
        path
    };
    let good = keys_file("good.toml", TENANT_A_HEALTH);
    // A port nothing listens on.
    let nowhere = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let out = load(
        &config,
        &scenario,
        &json,
        &["--url", &nowhere, "--keys", good.to_str().unwrap()],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{nowhere}/mcp cannot be reached"))
            && stderr.contains("no load was sent"),
        "{stderr}"
    );
    assert!(!json.exists(), "no report for a run that did not start");

    let (database, _) = fresh_database().await;
    let service = Service::start_with(&config, &[("BUTLER_MEMORY_DATABASE_URL", &database)]);
    let wrong = keys_file("wrong.toml", "not-a-key-this-service-knows-000000");
    let out = load(
        &config,
        &scenario,
        &json,
        &["--url", &service.base, "--keys", wrong.to_str().unwrap()],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("refuses the key of tenant tenant-a (HTTP 401"),
        "{stderr}"
    );
    assert!(!json.exists(), "no report for a run that did not start");
    // The same service with the right key: the check lets the load through.
    let out = load(
        &config,
        &scenario,
        &json,
        &["--url", &service.base, "--keys", good.to_str().unwrap()],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = report(&json);
    assert!(
        report["read_back"]["checked"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert_eq!(report["read_back"]["lost"], 0);
    service.stop().await;
}
