//! The memory bulletin (issue 23): made for every message, in its six sections, every line
//! citing its memories, within its token limit with goals, todos and decisions kept last,
//! the same bytes for the same state, written as a snapshot; when it cannot be made, the
//! last successful one with a warning, never an error. And the reference orchestrator loop
//! of the spec's end-to-end tests: a message's memory recalled by the next message's
//! bulletin, a workflow step's output changing the next bulletin, a diagnostics request
//! answered with bounded evidence and its provenance.

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::Utc;
use serde_json::{Value, json};

use crate::helpers::*;

/// The bulletin for `message`.
async fn bulletin(client: &McpClient, message: &str) -> Value {
    let mut answer = client
        .ok("orchestrator_bulletin", json!({"message": message}))
        .await;
    answer.as_object_mut().unwrap().remove("request_context");
    answer
}

fn section<'a>(bulletin: &'a Value, name: &str) -> Vec<&'a str> {
    bulletin["sections"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"] == name)
        .flat_map(|s| s["lines"].as_array().unwrap())
        .map(|l| l["text"].as_str().unwrap())
        .collect()
}

fn seed() -> Value {
    butler_memory::testkit::orchestrator_scenario::billing_export()
}

#[tokio::test]
async fn a_bulletin_has_its_sections_cites_every_line_and_is_deterministic() {
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let app = spawn_app_at("", clock).await;
    let one = app.client(ORCHESTRATOR_ONE).await;
    // Nothing known yet: an empty bulletin, no warning.
    let empty = bulletin(&one, "What is the status of the billing export?").await;
    assert_eq!(empty["text"], "");
    assert!(empty.get("warning").is_none(), "{empty}");

    let seeded = one.ok("orchestrator_remember", seed()).await;
    app.engine().flush().await.unwrap();
    let b = bulletin(&one, "Where is the billing database?").await;
    assert!(b.get("warning").is_none(), "{b}");
    let names: Vec<&str> = b["sections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "knowledge_summary",
            "active_goals",
            "open_todos",
            "recent_decisions",
            "preference_profile",
            "conflicts_and_uncertainties",
        ]
    );
    assert!(
        section(&b, "knowledge_summary")[0]
            .starts_with("The billing database is replicated to Dublin [")
    );
    assert!(section(&b, "active_goals")[0].starts_with("Ship the billing export by Friday ["));
    assert!(section(&b, "conflicts_and_uncertainties")[0].contains(" contradicts "));
    // Every line cites its memories by id, and every cited id is one of the orchestrator's.
    let ids: Vec<&str> = seeded["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["memoryId"].as_str().unwrap())
        .collect();
    for line in b["sections"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["lines"].as_array().unwrap())
    {
        let cited = line["memoryIds"].as_array().unwrap();
        assert!(!cited.is_empty(), "{line}");
        for id in cited {
            let id = id.as_str().unwrap();
            assert!(
                ids.contains(&id) && line["text"].as_str().unwrap().contains(id),
                "{line}"
            );
        }
    }
    assert!(b["tokens"].as_u64().unwrap() > 0);
    // The same state, the same bytes; and the snapshot holds them.
    let again = bulletin(&one, "Where is the billing database?").await;
    assert_eq!(
        serde_json::to_string(&again).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    let dir = app
        .service
        .data_dir()
        .join("orchestrators/orch-one/memory/bulletins");
    let snapshot = std::fs::read_to_string(dir.join("latest.md")).unwrap();
    assert_eq!(snapshot, b["text"].as_str().unwrap());
    // An auditor reads a bulletin too, and leaves no snapshot of it behind.
    std::fs::remove_file(dir.join("latest.md")).unwrap();
    let investigation = [("X-Audit-Tenant", "orch-one"), ("X-Audit-Reason", "case 7")];
    let (failed, audited) = crate::auditor::call(
        &app,
        AUDITOR,
        &investigation,
        "orchestrator_bulletin",
        json!({"message": "What is left for the billing export?"}),
    )
    .await;
    assert!(!failed, "{audited}");
    assert!(
        audited["text"]
            .as_str()
            .unwrap()
            .contains("## active_goals"),
        "{audited}"
    );
    assert!(!dir.join("latest.md").exists());
    app.stop().await;
}

#[tokio::test]
async fn the_limit_holds_and_goals_todos_and_decisions_are_kept_last() {
    let app = spawn_app_with("[memory]\nbulletin_max_tokens = 60\n").await;
    let one = app.client(ORCHESTRATOR_ONE).await;
    one.ok("orchestrator_remember", seed()).await;
    app.engine().flush().await.unwrap();
    let b = bulletin(&one, "Where is the billing database?").await;
    assert!(b["tokens"].as_u64().unwrap() <= 60, "{b}");
    assert!(b["droppedLines"].as_u64().unwrap() > 0, "{b}");
    assert_eq!(section(&b, "active_goals").len(), 1, "{b}");
    assert!(section(&b, "knowledge_summary").is_empty(), "{b}");
    assert!(section(&b, "preference_profile").is_empty(), "{b}");
    app.stop().await;
}

#[tokio::test]
async fn a_bulletin_that_cannot_be_made_is_the_last_one_with_a_warning() {
    let app = spawn_app().await;
    let one = app.client(ORCHESTRATOR_ONE).await;
    one.ok("orchestrator_remember", seed()).await;
    let good = bulletin(&one, "billing export").await;
    assert!(good.get("warning").is_none());
    // The store breaks under it: the answer is the last bulletin, not an error.
    sqlx::query("ALTER TABLE orchestrator_edges RENAME TO orchestrator_edges_gone")
        .execute(&mut app.sql().await)
        .await
        .unwrap();
    let fallback = bulletin(&one, "something else entirely").await;
    assert!(
        fallback["warning"]
            .as_str()
            .unwrap()
            .contains("the last successful bulletin"),
        "{fallback}"
    );
    assert_eq!(fallback["text"], good["text"]);
    // Another orchestrator, with no bulletin yet: an empty one, with a warning.
    let other = bulletin(&app.client(ORCHESTRATOR_TWO).await, "billing export").await;
    assert_eq!(other["text"], "");
    assert!(
        other["warning"]
            .as_str()
            .unwrap()
            .contains("an empty bulletin")
    );
    // Memory turned off: empty, with the reason.
    let off = spawn_app_with("[memory]\nenabled = false\n").await;
    let answer = bulletin(&off.client(ORCHESTRATOR_ONE).await, "billing").await;
    assert_eq!(answer["text"], "");
    assert!(
        answer["warning"]
            .as_str()
            .unwrap()
            .contains("memory.enabled")
    );
    // A caller's own mistakes are still errors.
    let refused = one
        .err(
            "orchestrator_bulletin",
            json!({"orchestratorId": "orch-two", "message": "billing"}),
        )
        .await;
    assert_eq!(refused["code"], "cross_orchestrator");
    off.stop().await;
    app.stop().await;
}

/// A small reference orchestrator: each channel message gets a bulletin before its context
/// is assembled, and what a message, a workflow step or a diagnostics run produces is
/// written back as text for the service to read memories out of (`orchestrator_capture`).
struct Orchestrator {
    client: McpClient,
}

impl Orchestrator {
    /// Channel message -> bulletin -> the context a selector or step prompt would get.
    async fn on_message(&self, conversation: &str, text: &str) -> String {
        let b = bulletin(&self.client, text).await;
        // Inbound transcript capture.
        self.capture(
            json!({"sourceType": "channel_transcript", "conversationId": conversation,
                   "capturedBy": "user"}),
            text,
        )
        .await;
        format!("{}\n## message\n{text}", b["text"].as_str().unwrap())
    }

    /// A workflow step's output written back.
    async fn on_step_output(&self, run: &str, step: &str, output: &str) -> Value {
        self.capture(
            json!({"sourceType": "workflow_output", "workflowRunId": run, "stepId": step,
                   "capturedBy": "extractor"}),
            output,
        )
        .await
    }

    /// A diagnostics finding written back.
    async fn on_finding(&self, finding: &str) -> Value {
        self.capture(
            json!({"sourceType": "diagnostics", "capturedBy": "system"}),
            finding,
        )
        .await
    }

    async fn capture(&self, source: Value, text: &str) -> Value {
        self.client
            .ok(
                "orchestrator_capture",
                json!({"source": source, "text": text}),
            )
            .await
    }
}

#[tokio::test]
async fn the_reference_orchestrator_loop_remembers_across_messages_and_steps() {
    let app = spawn_app().await;
    let orchestrator = Orchestrator {
        client: app.client(ORCHESTRATOR_ONE).await,
    };
    // Message A creates a memory that message B, in another channel, recalls.
    orchestrator
        .on_message(
            "slack-ops",
            "The payroll service moved to the Oslo data centre",
        )
        .await;
    app.engine().flush().await.unwrap();
    let context = orchestrator
        .on_message("email-cfo", "Which data centre runs payroll now?")
        .await;
    assert!(
        context.contains("The payroll service moved to the Oslo data centre ["),
        "{context}"
    );

    // A workflow step's output (a decision and a todo) changes the next bulletin.
    let output = orchestrator
        .on_step_output(
            "run-9",
            "plan",
            "## Plan\nDecision: Payroll runs are frozen until the Oslo audit ends\n\
             - [ ] Book the Oslo audit with the auditors\n- [x] Tell finance\n",
        )
        .await;
    let types: Vec<&str> = output["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["Decision", "Todo"], "{output}");
    let context = orchestrator
        .on_message("slack-ops", "Can we run payroll today?")
        .await;
    let decisions = context.find("## recent_decisions").unwrap();
    let todos = context.find("## open_todos").unwrap();
    assert!(context[decisions..].contains("Payroll runs are frozen until the Oslo audit ends"));
    assert!(context[todos..decisions].contains("Book the Oslo audit with the auditors"));

    // A diagnostics run's finding is written back; a later diagnostics request gets bounded
    // evidence, each with its provenance.
    orchestrator
        .on_finding("The payroll job failed at 02:00 because the Oslo VPN tunnel was down")
        .await;
    app.engine().flush().await.unwrap();
    let evidence = orchestrator
        .client
        .ok(
            "orchestrator_recall",
            json!({"query": "why is payroll not running, why did the job fail", "limit": 4}),
        )
        .await;
    let memories = evidence["memories"].as_array().unwrap();
    assert!(!memories.is_empty() && memories.len() <= 4, "{evidence}");
    assert!(
        memories.iter().any(|m| m["content"]
            == "Payroll runs are frozen until the Oslo audit ends"
            && m["source"]["workflowRunId"] == "run-9"
            && m["source"]["stepId"] == "plan"),
        "{evidence}"
    );
    assert!(
        memories.iter().any(|m| m["type"] == "Observation"
            && m["source"]["sourceType"] == "diagnostics"
            && m["content"].as_str().unwrap().contains("VPN tunnel")),
        "{evidence}"
    );
    app.stop().await;
}
