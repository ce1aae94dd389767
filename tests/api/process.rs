//! The real binary on the embedded default: first start initialises PostgreSQL, a crash of
//! the service (and of PostgreSQL's guard) leaves an orphan that the next start stops,
//! acknowledged writes survive `kill -9`, and `/readyz` answers 503 while the database is down.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::binary::{Service, signal, write_config};
use crate::helpers::*;

fn postmaster_pid(data_dir: &Path) -> i32 {
    let text =
        std::fs::read_to_string(data_dir.join("postgres/postmaster.pid")).expect("postmaster.pid");
    text.lines().next().unwrap().trim().parse().unwrap()
}

fn alive(pid: i32) -> bool {
    // A zombie is as dead as it gets for our purposes.
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|s| !s.contains("State:\tZ"))
        .unwrap_or(false)
}

fn parent_of(pid: i32) -> i32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    eventually(Duration::from_secs(60), || {
        std::future::ready(if condition() {
            Ok(())
        } else {
            Err(format!("still waiting for {what}"))
        })
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn embedded_postgres_lifecycle_crash_recovery_and_readiness() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let config_path = write_config(dir.path(), "");
    let config = base_config("");
    assert!(
        config
            .edge
            .auth
            .keys
            .iter()
            .any(|k| k.key.expose() == TENANT_A_HEALTH)
    );

    // First start initialises the cluster.
    let mut first = Service::start(&config_path);
    assert!(data_dir.join("postgres/PG_VERSION").is_file());
    let (failed, episode) = first
        .call(
            "memory_store_episode",
            json!({"content": "acknowledged before the crash", "butler": "health"}),
        )
        .await;
    assert!(!failed, "{episode}");

    // Crash everything but PostgreSQL: the service and the guard that would stop it.
    let orphan = postmaster_pid(&data_dir);
    let guard = parent_of(orphan);
    signal(guard, "KILL");
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    assert!(alive(orphan), "PostgreSQL outlived its parent: an orphan");

    // The next start stops the orphan, starts its own PostgreSQL, and has the data. (It does
    // not restart a PostgreSQL that stops: this test takes the database away below.)
    let mut second = Service::start_with(
        &config_path,
        &[("BUTLER_MEMORY_EMBEDDED_POSTGRES__MAX_RESTARTS", "0")],
    );
    wait_until("the orphan to exit", || !alive(orphan)).await;
    let current = postmaster_pid(&data_dir);
    assert_ne!(current, orphan);
    let (failed, got) = second
        .call(
            "memory_get",
            json!({"type": "episode", "id": episode["id"]}),
        )
        .await;
    assert!(!failed, "{got}");
    assert_eq!(got["content"], "acknowledged before the crash");
    assert_eq!(second.readyz().await.0, 200);

    // Take the database away: readiness says so, and calls fail fast and classified.
    signal(current, "INT");
    wait_until("PostgreSQL to stop", || !alive(current)).await;
    let (status, body) = second.readyz().await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["failing"], json!(["database", "migrations"]));
    assert_eq!(body["checks"]["embedder"]["ok"], true);
    let started = Instant::now();
    let (failed, error) = second
        .call(
            "memory_store_episode",
            json!({"content": "while down", "butler": "health"}),
        )
        .await;
    assert!(failed);
    assert_eq!(error["class"], "unavailable", "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "errors are fast, never a hang"
    );

    // A normal stop exits cleanly.
    signal(second.child.id() as i32, "TERM");
    let status = second.child.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn acknowledged_writes_survive_kill_9_in_the_middle_of_a_burst() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = write_config(dir.path(), "");
    let mut first = Service::start(&config_path);
    let base = Arc::new(first.base.clone());

    // Eight writers send single episodes and batches back to back; every acknowledged id is
    // kept. The service is killed while they are still writing.
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut writers = Vec::new();
    for w in 0..8 {
        let (acked, base) = (acked.clone(), base.clone());
        writers.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            for i in 0.. {
                let (tool, args) = if i % 4 == 3 {
                    let episodes: Vec<Value> = (0..20)
                        .map(|j| json!({"content": format!("burst {w}/{i}/{j}"), "butler": "health"}))
                        .collect();
                    ("memory_ingest_batch", json!({"episodes": episodes}))
                } else {
                    (
                        "memory_store_episode",
                        json!({"content": format!("burst {w}/{i}"), "butler": "health"}),
                    )
                };
                let sent = client
                    .post(format!("{base}/mcp"))
                    .header("Authorization", format!("Bearer {TENANT_A_HEALTH}"))
                    .header("Accept", "application/json, text/event-stream")
                    .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                  "params": {"name": tool, "arguments": args}}))
                    .send()
                    .await;
                let Ok(response) = sent else { return };
                let Ok(body) = response.json::<Value>().await else { return };
                let result = &body["result"];
                if result["isError"] == true {
                    continue;
                }
                let content = &result["structuredContent"];
                let mut acked = acked.lock().unwrap();
                match content["ids"].as_array() {
                    Some(ids) => acked.extend(ids.iter().map(|v| v.as_str().unwrap().to_owned())),
                    None => acked.push(content["id"].as_str().unwrap().to_owned()),
                }
            }
        }));
    }
    wait_until("a few hundred acknowledged writes", || {
        acked.lock().unwrap().len() >= 300
    })
    .await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();

    // After a restart every acknowledged episode is there, and the embedding backlog drains.
    let second = Service::start(&config_path);
    for id in &acked {
        let (failed, got) = second
            .call("memory_get", json!({"type": "episode", "id": id}))
            .await;
        assert!(!failed, "acknowledged episode {id} lost: {got}");
    }
    // The embedding backlog drains.
    let stats = eventually(Duration::from_secs(120), || async {
        let (_, stats) = second.call("memory_stats", json!({})).await;
        if stats["episodes"]["unembedded"] == 0 {
            Ok(stats)
        } else {
            Err(stats.to_string())
        }
    })
    .await
    .unwrap();
    assert!(stats["episodes"]["total"].as_u64().unwrap() >= acked.len() as u64);
    let mut second = second;
    signal(second.child.id() as i32, "TERM");
    assert!(second.child.wait().unwrap().success());
}

#[tokio::test]
async fn a_crash_in_the_middle_of_consolidation_leaves_nothing_half_done() {
    use crate::llm_server::{Script, llm_server};
    // The first extraction hangs (the service is killed while it waits); after the restart
    // the endpoint answers.
    let server = llm_server(vec![Script::Hang, Script::Happy]).await;
    let dir = tempfile::tempdir().unwrap();
    let config_path = write_config(
        dir.path(),
        &format!(
            "[lifecycle]\ncatch_up_missed_runs = false\n[consolidation]\nextractor = \"llm\"\n\
             [consolidation.llm]\nbase_url = \"{}\"\nmodel = \"m\"\ntimeout_ms = 20000\n",
            server.base_url
        ),
    );
    let mut first = Service::start(&config_path);
    let (failed, _) = first
        .call(
            "memory_store_episode",
            json!({"content": "Ada had oolong tea.", "butler": "health"}),
        )
        .await;
    assert!(!failed);
    let sweep = {
        let base = first.base.clone();
        tokio::spawn(async move {
            let _ = reqwest::Client::new()
                .post(format!("{base}/mcp"))
                .header("Authorization", format!("Bearer {TENANT_A_ADMIN}"))
                .header("Accept", "application/json, text/event-stream")
                .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                              "params": {"name": "memory_run_sweep",
                                         "arguments": {"kinds": ["consolidation"]}}}))
                .send()
                .await;
        })
    };
    let requests = server.requests.clone();
    wait_until("the extraction request", || {
        !requests.lock().unwrap().is_empty()
    })
    .await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let _ = sweep.await;

    // Nothing of the interrupted job is there; running again consolidates exactly once.
    let second = Service::start(&config_path);
    let (_, stats) = second
        .call_as(TENANT_A_ADMIN, "memory_stats", json!({}))
        .await;
    assert_eq!(
        stats["episodes"]["breakdown"]["consolidation_status"]["pending"], 1,
        "{stats}"
    );
    assert_eq!(stats["facts"]["total"], 0, "{stats}");
    for _ in 0..2 {
        let (failed, report) = second
            .call_as(
                TENANT_A_ADMIN,
                "memory_run_sweep",
                json!({"kinds": ["consolidation"]}),
            )
            .await;
        assert!(!failed, "{report}");
    }
    let (_, stats) = second
        .call_as(TENANT_A_ADMIN, "memory_stats", json!({}))
        .await;
    assert_eq!(
        stats["episodes"]["breakdown"]["consolidation_status"]["consolidated"], 1,
        "{stats}"
    );
    assert_eq!(
        stats["facts"]["total"], 1,
        "one fact, extracted once: {stats}"
    );
    assert_eq!(stats["rules"]["total"], 1, "{stats}");
    let mut second = second;
    signal(second.child.id() as i32, "TERM");
    assert!(second.child.wait().unwrap().success());
}

/// A PostgreSQL that dies is started again by the service, and nothing acknowledged is lost;
/// one that keeps dying is given up on, loudly. While the database is down every call fails
/// at once as `unavailable`, and a stop takes seconds, not minutes.
#[tokio::test]
async fn a_dead_postgres_is_restarted_then_given_up_on_and_calls_fail_fast_meanwhile() {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = dir.path().join("data");
    let config_path = write_config(dir.path(), "");
    // One restart allowed: the second death is given up on.
    let mut service = Service::start_with(
        &config_path,
        &[("BUTLER_MEMORY_EMBEDDED_POSTGRES__MAX_RESTARTS", "1")],
    );
    let (failed, acked) = service
        .call(
            "memory_store_episode",
            json!({"content": "acknowledged before the crash", "butler": "health"}),
        )
        .await;
    assert!(!failed, "{acked}");

    // First death: restarted, with the acknowledged episode there.
    let first = postmaster_pid(&data_dir);
    signal(first, "KILL");
    eventually(Duration::from_secs(60), || async {
        let (status, body) = service.readyz().await;
        let pid = std::fs::read_to_string(data_dir.join("postgres/postmaster.pid")).ok();
        match (status, pid) {
            (200, Some(pid)) if !pid.starts_with(&format!("{first}\n")) => Ok(()),
            _ => Err(format!("{status} {body}")),
        }
    })
    .await
    .unwrap();
    let (failed, got) = service
        .call("memory_get", json!({"type": "episode", "id": acked["id"]}))
        .await;
    assert!(!failed, "{got}");
    assert_eq!(got["content"], "acknowledged before the crash");
    let (failed, again) = service
        .call(
            "memory_store_episode",
            json!({"content": "after the restart", "butler": "health"}),
        )
        .await;
    assert!(!failed, "{again}");

    // Second death: the budget is spent. The service says so and fails fast.
    signal(postmaster_pid(&data_dir), "KILL");
    let body = eventually(Duration::from_secs(10), || async {
        let (status, body) = service.readyz().await;
        let error = body["checks"]["database"]["error"].as_str().unwrap_or("");
        if status == 503 && error.contains("no longer restarts") {
            Ok(body)
        } else {
            Err(format!("{status} {body}"))
        }
    })
    .await
    .unwrap();
    assert_eq!(body["failing"][0], "database", "{body}");
    for (tool, args) in [
        (
            "memory_store_episode",
            json!({"content": "while down", "butler": "health"}),
        ),
        ("memory_search", json!({"query": "crash"})),
        (
            "memory_context",
            json!({"trigger_prompt": "crash", "butler": "health"}),
        ),
    ] {
        let started = Instant::now();
        let (failed, error) = service.call(tool, args).await;
        let took = started.elapsed();
        assert!(failed, "{tool}: {error}");
        assert_eq!(error["class"], "unavailable", "{tool}: {error}");
        assert!(took < Duration::from_millis(1000), "{tool} took {took:?}");
    }
    let logged = service.lines.lock().unwrap().join("\n");
    assert!(
        logged.contains("no longer restarts it"),
        "the give-up is logged as an error:\n{logged}"
    );

    // A stop with the database gone takes seconds.
    let started = Instant::now();
    signal(service.child.id() as i32, "TERM");
    let status = service.child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stopped in {:?}",
        started.elapsed()
    );
}

/// Each request leaves one access log line (ids, tool, outcome class, tenant, status,
/// latency; never what was stored), and a stop is logged the moment the signal arrives,
/// before the drain.
#[tokio::test]
async fn requests_leave_an_access_line_and_a_stop_is_logged_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config_path = write_config(dir.path(), "");
    let mut service = Service::start(&config_path);
    let response = reqwest::Client::new()
        .post(format!("{}/mcp", service.base))
        .header("Authorization", format!("Bearer {TENANT_A_HEALTH}"))
        .header("Accept", "application/json, text/event-stream")
        .header("X-Request-Id", "access-1")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "memory_store_episode",
                                 "arguments": {"content": "a private note about the garden", "butler": "health"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let access = eventually(Duration::from_secs(10), || async {
        let lines = service.lines.lock().unwrap().clone();
        lines
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| {
                e["target"] == "butler_memory::access" && e["fields"]["request_id"] == "access-1"
            })
            .ok_or_else(|| "no access line yet".to_owned())
    })
    .await
    .unwrap();
    let fields = &access["fields"];
    assert_eq!(fields["tool"], "memory_store_episode", "{access}");
    assert_eq!(fields["class"], "ok", "{access}");
    assert_eq!(fields["tenant"], "tenant-a", "{access}");
    assert_eq!(fields["status"], 200, "{access}");
    assert_eq!(fields["path"], "/mcp", "{access}");
    assert!(fields["ms"].as_f64().is_some(), "{access}");
    let logged = service.lines.lock().unwrap().join("\n");
    assert!(!logged.contains("garden"), "content reached the log");

    let before = service.lines.lock().unwrap().len();
    signal(service.child.id() as i32, "TERM");
    assert!(service.child.wait().unwrap().success());
    let after: Vec<String> = service.lines.lock().unwrap()[before..].to_vec();
    let first = after.first().map(String::as_str).unwrap_or("");
    assert!(
        first.contains("stop requested"),
        "first line after TERM: {first}"
    );
}

/// The README's promise: the binary, on the default configuration (nothing about the
/// dashboard set), serves the dashboard at `/`, which sends a browser without a session to
/// the sign-in page.
#[tokio::test]
async fn the_binary_sends_a_browser_from_the_root_to_sign_in() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(&write_config(dir.path(), ""));
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let root = client
        .get(format!("{}/", service.base))
        .send()
        .await
        .unwrap();
    assert_eq!(root.status(), 303);
    assert_eq!(root.headers()["location"], "/sign-in");
    let form = client
        .get(format!("{}/sign-in", service.base))
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 200);
    assert!(form.text().await.unwrap().contains(r#"name="key""#));
    service.stop().await;
}
