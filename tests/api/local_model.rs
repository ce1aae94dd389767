//! The local model for real (`consolidation.extractor = "local"`): the llama.cpp server and
//! the model scripts/setup installs, run by the service as its child process. Everyday
//! episodes a butler writes become grounded facts and a rule; the model killed is started
//! again and extracts again; a server that dies of SIGILL gives way to the portable runtime;
//! with no runtime at all the heuristic extractor stands in, and `memory_stats` and `/readyz`
//! say so. The answers are checked for structure and grounding, not wording. The protocol's
//! failure classes are tested against a scripted server (`consolidation.rs`).

use std::time::Duration;

use serde_json::{Value, json};

use crate::consolidation::episode_state;
use crate::helpers::*;

/// One model at a time: each loads two gigabytes and computes on both cores.
static ONE_MODEL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A consolidation run may take the model a while: a few seconds per episode.
const RUN_LIMIT: Duration = Duration::from_secs(600);

fn local_config(local: &str) -> String {
    format!(
        "[consolidation]\nextractor = \"local\"\nbatch_size = 5\n\
         [consolidation.local]\nthreads = 2\nstartup_timeout_secs = 180\n{local}"
    )
}

async fn consolidate(admin: &McpClient) -> Value {
    admin
        .try_call_within(
            "memory_run_sweep",
            json!({"kinds": ["consolidation"]}),
            RUN_LIMIT,
        )
        .await
        .expect("the consolidation run answers")
}

async fn extractor_status(admin: &McpClient) -> Value {
    admin.ok("memory_stats", json!({})).await["consolidation_extractor"].clone()
}

/// Every live fact with the text of the episode it came from and what extracted it.
async fn facts_with_sources(db: &mut sqlx::PgConnection) -> Vec<(String, String, String, String)> {
    sqlx::query_as(
        "SELECT f.subject, f.predicate, f.content, e.content FROM facts f
         JOIN episodes e ON e.id = f.source_episode_id
         WHERE f.validity = 'active' ORDER BY f.created_at",
    )
    .fetch_all(db)
    .await
    .unwrap()
}

/// A subject the service may store: the user, or words that all occur in the episode.
fn grounded(subject: &str, episode: &str) -> bool {
    let words = |text: &str| -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty() && *w != "s")
            .map(str::to_lowercase)
            .collect()
    };
    let episode = words(episode);
    subject == "user" || words(subject).iter().all(|w| episode.contains(w))
}

#[tokio::test]
async fn the_local_model_learns_facts_and_rules_and_comes_back_after_a_crash() {
    let _one = ONE_MODEL.lock().await;
    let app = spawn_app_with(&local_config("idle_stop_secs = 0\n")).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    // Started on demand: nothing runs before consolidation needs it.
    let status = extractor_status(&admin).await;
    assert_eq!(status["configured"], "local", "{status}");
    assert_eq!(status["local_model"]["state"], "stopped", "{status}");
    for content in [
        "Sam's husband is called Tiago; he works as a nurse at Santa Maria hospital.",
        "User said they're allergic to shellfish and that they live in Lisbon now.",
        "Sam said: I don't like being reminded more than once about the same thing.",
    ] {
        mcp.ok(
            "memory_store_episode",
            json!({"content": content, "butler": "health"}),
        )
        .await;
    }
    let report = consolidate(&admin).await;
    let changes = &report["reports"][0]["changes"];
    assert_eq!(changes["episodes_consolidated"], 3, "{report}");
    assert!(changes["rules_created"].as_u64() >= Some(1), "{report}");
    let mut db = app.sql().await;
    let facts = facts_with_sources(&mut db).await;
    assert!(facts.len() >= 2, "{facts:?}");
    for (subject, predicate, content, episode) in &facts {
        assert!(
            grounded(subject, episode),
            "{subject} | {predicate} | {content} is not grounded in {episode:?}"
        );
        assert!(!predicate.contains(' '), "{predicate}");
    }
    // What the third-person episode says about the husband is his.
    assert!(
        facts
            .iter()
            .any(|(s, _, c, _)| s == "tiago" && c.to_lowercase().contains("nurse")),
        "{facts:?}"
    );
    let rules: Vec<(String, String)> =
        sqlx::query_as("SELECT content, scope FROM rules WHERE validity = 'active'")
            .fetch_all(&mut db)
            .await
            .unwrap();
    assert!(
        rules
            .iter()
            .any(|(r, scope)| r.to_lowercase().contains("remind") && scope == "health"),
        "a rule in the butler's scope about reminders: {rules:?}"
    );
    let by: Vec<String> = sqlx::query_scalar("SELECT DISTINCT extractor FROM consolidation_jobs")
        .fetch_all(&mut db)
        .await
        .unwrap();
    assert_eq!(by, ["local"]);
    let status = extractor_status(&admin).await;
    assert_eq!(status["active"], "local", "{status}");
    assert_eq!(status["local_model"]["state"], "ready", "{status}");
    assert_eq!(status["local_model"]["runtime"], "llama-server", "{status}");

    // Killed, it is started again; the next episode is extracted by it.
    let pid = status["local_model"]["pid"]
        .as_u64()
        .expect("a pid while ready");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    eventually(Duration::from_secs(180), || async {
        let status = extractor_status(&admin).await;
        let model = &status["local_model"];
        match (model["restarts"].as_u64(), model["state"].as_str()) {
            (Some(1), Some("ready")) if model["pid"].as_u64() != Some(pid) => Ok(()),
            _ => Err(status.to_string()),
        }
    })
    .await
    .unwrap();
    let status = extractor_status(&admin).await;
    assert!(
        status["local_model"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("signal 9")),
        "{status}"
    );
    mcp.ok(
        "memory_store_episode",
        json!({"content": "Sam runs 5k every Saturday morning with a group in Monsanto park.", "butler": "health"}),
    )
    .await;
    let report = consolidate(&admin).await;
    assert_eq!(
        report["reports"][0]["changes"]["episodes_consolidated"], 1,
        "{report}"
    );
    let (state, _, _) = episode_state_of(&mut db, "Monsanto").await;
    assert_eq!(state, "consolidated");
    app.stop().await;
}

async fn episode_state_of(
    db: &mut sqlx::PgConnection,
    words: &str,
) -> (String, i32, Option<String>) {
    sqlx::query_as(
        "SELECT consolidation_status, consolidation_attempts, last_consolidation_error
         FROM episodes WHERE content LIKE '%' || $1 || '%'",
    )
    .bind(words)
    .fetch_one(db)
    .await
    .unwrap()
}

/// A server built for instructions this CPU lacks dies of SIGILL at once (a stand-in that
/// does just that here): the portable runtime serves the model instead, and says why.
#[tokio::test]
async fn a_server_that_dies_of_sigill_gives_way_to_the_portable_runtime() {
    let _one = ONE_MODEL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let server = dir.path().join("llama-server");
    std::fs::write(&server, "#!/bin/sh\nkill -ILL $$\n").unwrap();
    std::fs::set_permissions(&server, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let app = spawn_app_with(&local_config(&format!(
        "server_path = {:?}\n",
        server.display().to_string()
    )))
    .await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    mcp.ok(
        "memory_store_episode",
        json!({"content": "Sam's mother Ana has diabetes and visits every second weekend.", "butler": "health"}),
    )
    .await;
    let report = consolidate(&admin).await;
    assert_eq!(
        report["reports"][0]["changes"]["episodes_consolidated"], 1,
        "{report}"
    );
    let status = extractor_status(&admin).await;
    assert_eq!(status["active"], "local", "{status}");
    assert_eq!(status["local_model"]["runtime"], "portable", "{status}");
    assert!(
        status["local_model"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("SIGILL")),
        "{status}"
    );
    let mut db = app.sql().await;
    let by: Vec<String> = sqlx::query_scalar("SELECT DISTINCT extractor FROM consolidation_jobs")
        .fetch_all(&mut db)
        .await
        .unwrap();
    assert_eq!(by, ["local"]);
    for (subject, predicate, content, episode) in facts_with_sources(&mut db).await {
        assert!(
            grounded(&subject, &episode),
            "{subject} | {predicate} | {content} is not grounded in {episode:?}"
        );
    }
    app.stop().await;
}

/// With no runtime that can run the model, consolidation goes on with the heuristic
/// extractor, and `memory_stats`, `/readyz` and the job say so.
#[tokio::test]
async fn without_a_runtime_the_heuristic_extractor_stands_in_and_says_so() {
    let app = spawn_app_with(&local_config(
        "server_path = \"/nonexistent/llama-server\"\nportable_python = \"\"\n",
    ))
    .await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    mcp.ok(
        "memory_store_episode",
        json!({"content": "I'm allergic to peanuts.", "butler": "health"}),
    )
    .await;
    let report = consolidate(&admin).await;
    assert_eq!(
        report["reports"][0]["changes"]["facts_created"], 1,
        "{report}"
    );
    let status = extractor_status(&admin).await;
    assert_eq!(status["configured"], "local", "{status}");
    assert_eq!(status["active"], "heuristic", "{status}");
    assert_eq!(status["local_model"]["state"], "unavailable", "{status}");
    assert!(
        status["local_model"]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("/nonexistent/llama-server")),
        "{status}"
    );
    let ready: Value = reqwest::get(app.url("/readyz"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["status"], "degraded", "{ready}");
    assert_eq!(ready["consolidation_extractor"]["active"], "heuristic");
    let mut db = app.sql().await;
    let (state, _, _) = episode_state(&mut db).await;
    assert_eq!(state, "consolidated");
    let by: String = sqlx::query_scalar("SELECT extractor FROM consolidation_jobs")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(by, "heuristic");
    app.stop().await;
}
