//! Hybrid recall over an orchestrator's graph (issue 23): the vector and full-text rankings
//! merged with their provenance for citation and the edges among what was recalled; across
//! the orchestrator's conversations and channels, never another orchestrator's; an
//! unresolved contradiction weighs less; superseded and retracted memories are not
//! recalled; the same state gives the same answer.

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::Utc;
use serde_json::{Value, json};

use crate::helpers::*;

fn said_in(conversation: &str) -> Value {
    json!({"sourceType": "channel_transcript", "conversationId": conversation, "capturedBy": "user"})
}

async fn remember(client: &McpClient, conversation: &str, memories: Value) -> Value {
    client
        .ok(
            "orchestrator_remember",
            json!({"source": said_in(conversation), "memories": memories}),
        )
        .await
}

fn recalled(answer: &Value) -> Vec<String> {
    answer["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn recall_merges_meaning_and_words_with_provenance_and_edges() {
    let app = spawn_app().await;
    let one = app.client(ORCHESTRATOR_ONE).await;
    one.ok(
        "orchestrator_remember",
        json!({
            "source": said_in("chan-1"),
            "memories": [
                {"ref": "pdf", "type": "Preference", "content": "The user wants every report delivered as a PDF file"},
                {"ref": "launch", "type": "Goal", "content": "Launch the mobile app before the spring conference"},
                {"ref": "cert", "type": "Todo", "content": "Renew the TLS certificate of the billing API"},
                {"type": "Decision", "content": "Deployments happen on Tuesdays after the code freeze"},
            ],
            "edges": [{"from": "cert", "to": "launch", "edgeType": "PartOf"}],
        }),
    )
    .await;
    app.engine().flush().await.unwrap();

    // Meaning: no word of the question is in the preference but "report"; the vector finds it.
    let answer = one
        .ok(
            "orchestrator_recall",
            json!({"query": "Which document format should reports be sent in?"}),
        )
        .await;
    let first = &answer["memories"][0];
    assert_eq!(
        first["content"], "The user wants every report delivered as a PDF file",
        "{answer}"
    );
    assert_eq!(first["scores"]["vectorRank"], 1, "{first}");
    assert_eq!(first["source"]["conversationId"], "chan-1");
    assert!(first["memoryId"].is_string() && first["score"].as_f64().unwrap() > 0.0);

    // Words: an exact term ranks its memory first in the full-text list too.
    let answer = one
        .ok(
            "orchestrator_recall",
            json!({"query": "certificate renewal for the launch"}),
        )
        .await;
    let contents = recalled(&answer);
    let cert = contents
        .iter()
        .position(|c| c.contains("certificate"))
        .unwrap();
    assert_eq!(
        answer["memories"][cert]["scores"]["textRank"], 1,
        "{answer}"
    );
    // The edge between two recalled memories comes with them.
    let launch = contents
        .iter()
        .position(|c| c.contains("mobile app"))
        .unwrap();
    let (cert_id, launch_id) = (
        answer["memories"][cert]["memoryId"].clone(),
        answer["memories"][launch]["memoryId"].clone(),
    );
    let edges = answer["edges"].as_array().unwrap();
    assert!(
        edges
            .iter()
            .any(|e| e["fromMemoryId"] == cert_id && e["toMemoryId"] == launch_id),
        "{answer}"
    );
    // A limit, within `memory.retrieval.top_n`.
    let two = one
        .ok(
            "orchestrator_recall",
            json!({"query": "report app certificate", "limit": 2}),
        )
        .await;
    assert_eq!(two["memories"].as_array().unwrap().len(), 2);
    let refused = one
        .err("orchestrator_recall", json!({"query": "x", "limit": 21}))
        .await;
    assert_eq!(refused["code"], "invalid_limit");
    app.stop().await;
}

#[tokio::test]
async fn recall_spans_the_orchestrators_conversations_and_never_another_orchestrator() {
    let app = spawn_app().await;
    let one = app.client(ORCHESTRATOR_ONE).await;
    let two = app.client(ORCHESTRATOR_TWO).await;
    remember(
        &one,
        "slack-1",
        json!([{"type": "Fact", "content": "The staging database lives in Frankfurt"}]),
    )
    .await;
    remember(
        &one,
        "email-7",
        json!([{"type": "Fact", "content": "The production database lives in Dublin"}]),
    )
    .await;
    remember(
        &two,
        "slack-1",
        json!([{"type": "Fact", "content": "The analytics database lives in Oregon"}]),
    )
    .await;
    app.engine().flush().await.unwrap();
    let query = json!({"query": "where does the database live"});
    let mine = recalled(&one.ok("orchestrator_recall", query.clone()).await);
    assert_eq!(mine.len(), 2, "{mine:?}");
    assert!(mine.iter().all(|c| !c.contains("Oregon")), "{mine:?}");
    let theirs = recalled(&two.ok("orchestrator_recall", query).await);
    assert_eq!(theirs, ["The analytics database lives in Oregon"]);
    let refused = two
        .err(
            "orchestrator_recall",
            json!({"orchestratorId": "orch-one", "query": "database"}),
        )
        .await;
    assert_eq!(refused["code"], "cross_orchestrator");
    app.stop().await;
}

#[tokio::test]
async fn contradicted_superseded_and_retracted_memories_weigh_as_they_should() {
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let app = spawn_app_at("", clock).await;
    let one = app.client(ORCHESTRATOR_ONE).await;
    let first = remember(
        &one,
        "chan-1",
        json!([{"type": "Preference", "content": "Send the weekly report on Monday morning"}]),
    )
    .await;
    let monday = first["memories"][0]["memoryId"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = one
        .ok(
            "orchestrator_remember",
            json!({"source": said_in("chan-2"),
                   "memories": [{"ref": "friday", "type": "Preference",
                                 "content": "Send the weekly report on Friday afternoon"}],
                   "edges": [{"from": "friday", "to": monday, "edgeType": "Contradicts"}]}),
        )
        .await;
    let friday = second["memories"][0]["memoryId"]
        .as_str()
        .unwrap()
        .to_owned();
    app.engine().flush().await.unwrap();
    let query = json!({"query": "when is the weekly report sent"});
    let answer = one.ok("orchestrator_recall", query.clone()).await;
    for m in answer["memories"].as_array().unwrap() {
        assert_eq!(m["scores"]["contradicted"], true, "{m}");
        let s = &m["scores"];
        // The score is the relevance weighed by each modifier, the penalty included.
        let half = |x: &Value| 0.5 + 0.5 * x.as_f64().unwrap();
        let expected = s["relevance"].as_f64().unwrap()
            * half(&s["importance"])
            * half(&s["recency"])
            * half(&s["confidence"])
            * 0.7;
        assert!(
            (m["score"].as_f64().unwrap() - expected).abs() < 1e-9,
            "{m}"
        );
    }
    // The same state, the same answer, to the byte (but the request's own id).
    let bytes = |mut a: Value| {
        a.as_object_mut().unwrap().remove("request_context");
        serde_json::to_string(&a).unwrap()
    };
    let again = one.ok("orchestrator_recall", query.clone()).await;
    assert_eq!(bytes(again), bytes(answer));

    // Resolved: Friday's preference is retracted; Monday's is no longer contradicted, and
    // the retracted one is not recalled.
    one.ok(
        "orchestrator_set_status",
        json!({"memoryId": friday, "status": "retracted", "reason": "misread"}),
    )
    .await;
    let answer = one.ok("orchestrator_recall", query.clone()).await;
    assert_eq!(
        recalled(&answer),
        ["Send the weekly report on Monday morning"]
    );
    assert_eq!(answer["memories"][0]["scores"]["contradicted"], false);

    // Superseded: the newer one is recalled, the older not.
    remember(
        &one,
        "chan-3",
        json!([{"type": "Preference", "content": "Send the weekly report on Thursday",
                "supersedes": [monday]}]),
    )
    .await;
    app.engine().flush().await.unwrap();
    let answer = one.ok("orchestrator_recall", query).await;
    assert_eq!(recalled(&answer), ["Send the weekly report on Thursday"]);
    app.stop().await;
}
