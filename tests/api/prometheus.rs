//! `/metrics` as Prometheus reads it: `promtool check metrics` (Debian's `prometheus`
//! package, installed by scripts/setup) finds nothing to say; every family has its help
//! text; latencies are histograms; the counters alerts watch exist before their first event;
//! the process and build figures are there.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::json;

use crate::helpers::*;

fn promtool(args: &[&str], stdin: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is installed by scripts/setup (Debian's prometheus package)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[tokio::test]
async fn promtool_finds_nothing_to_say_about_the_metrics() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    mcp.ok(
        "memory_store_episode",
        json!({"content": "Checked the smoke alarm.", "butler": "health"}),
    )
    .await;
    let found = mcp
        .ok("memory_search", json!({"query": "smoke alarm"}))
        .await;
    assert!(found["count"].as_u64().unwrap() > 0, "{found}");
    let body = app.metrics().await;
    let (ok, said) = promtool(&["check", "metrics"], &body);
    assert!(
        ok && said.trim().is_empty(),
        "promtool says:\n{said}\n---\n{body}"
    );

    // A family is rendered once it has a series; then with its help text.
    let rendered = butler_memory::telemetry::catalogue::FAMILIES
        .iter()
        .filter(|f| body.contains(&format!("# TYPE {} ", f.name)))
        .inspect(|f| assert!(body.contains(&format!("# HELP {} ", f.name)), "{}", f.name))
        .count();
    assert!(rendered >= 20, "only {rendered} families rendered:\n{body}");
    assert!(!body.contains(" summary\n"), "a summary is left:\n{body}");
    assert!(body.contains("# TYPE butler_memory_request_duration_seconds histogram"));
    for series in [
        "butler_memory_degraded_reads_total{tool=\"search\"}",
        "butler_memory_writes_refused_total{reason=\"in_flight\"}",
        "butler_memory_sweeps_total{outcome=\"failed\"}",
        "butler_memory_requests_total{tool=\"memory_forget\",class=\"ok\"}",
        "butler_memory_supersessions_total{path=\"store_fact\"}",
        "butler_memory_rule_inversions_total{path=\"feedback\"}",
        "butler_memory_empty_reads_total{tool=\"context\"}",
    ] {
        assert!(
            body.contains(series),
            "{series} missing before its first event"
        );
    }
    // §9.2: retrieval quality of the search above, and the tables and indexes for bloat.
    for series in [
        "butler_memory_read_results_bucket{tool=\"search\"",
        "butler_memory_result_diversity_bucket{tool=\"search\"",
        "butler_memory_db_relation_bytes{relation=\"episodes\",kind=\"table\"}",
        "butler_memory_db_relation_bytes{relation=\"episodes_embedding\",kind=\"index\"}",
        "butler_memory_db_rows{table=\"episodes\",state=\"dead\"}",
    ] {
        assert!(body.contains(series), "{series} missing:\n{body}");
    }
    let version = env!("CARGO_PKG_VERSION");
    assert!(body.contains(&format!(
        "butler_memory_build_info{{version=\"{version}\"}} 1"
    )));
    for process in [
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        assert!(body.contains(&format!("\n{process} ")), "{process} missing");
    }
    app.stop().await;
}

/// The alert rules of memory_butler.md §9.3 (`config/alerts.yml`) load, pass their unit
/// tests (`config/alerts.test.yml`), and name only families the service exports.
#[test]
fn the_alert_rules_load_pass_their_tests_and_name_real_families() {
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    for args in [
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts.test.yml"],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&config)
            .output()
            .expect("promtool is installed by scripts/setup");
        assert!(
            out.status.success(),
            "promtool {args:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let rules = std::fs::read_to_string(config.join("alerts.yml")).unwrap();
    let families = butler_memory::telemetry::catalogue::FAMILIES;
    let mut named = 0;
    for (at, _) in rules.match_indices("butler_memory_") {
        let name: String = rules[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        let family = name.strip_suffix("_bucket").unwrap_or(&name);
        assert!(
            families.iter().any(|f| f.name == family),
            "alerts.yml names {name}, which the service does not export"
        );
        named += 1;
    }
    assert!(named >= 8, "{named}");
}
