//! The LLM extractor's endpoint seen from outside: an answer longer than allowed cut off as
//! it arrives, a hosted model reached over TLS only when its certificate is trusted, and a
//! model that echoes secrets back stored with them redacted.

use serde_json::{Value, json};
use sqlx::PgConnection;

use crate::consolidation::{consolidate, episode_state, llm_config};
use crate::helpers::*;
use crate::llm_server::{Script, llm_server, llm_server_tls};

/// An app started with `config` whose health butler stored `content`, after one
/// consolidation run: the app, the run's report, and a connection to look at what it left.
async fn one_episode_consolidated(config: &str, content: &str) -> (TestApp, Value, PgConnection) {
    let app = spawn_app_with(config).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    mcp.ok(
        "memory_store_episode",
        json!({"content": content, "butler": "health"}),
    )
    .await;
    let report = consolidate(&admin).await;
    let db = app.sql().await;
    (app, report, db)
}

/// An endpoint answering without end is cut off at `max_response_bytes` as the answer
/// arrives: an invalid answer, retried like one, with nothing stored.
#[tokio::test]
async fn an_answer_longer_than_allowed_is_cut_off_and_invalid() {
    let server = llm_server(vec![Script::Flood]).await;
    let config = format!("{}max_response_bytes = 65536\n", llm_config(&server));
    let (app, report, mut db) = one_episode_consolidated(&config, "My name is Ada.").await;
    let (status, attempts, error) = episode_state(&mut db).await;
    assert_eq!((status.as_str(), attempts), ("pending", 1), "{report}");
    let error = error.unwrap_or_default();
    assert!(error.contains("longer than 65536 bytes"), "{error}");
    let facts: i64 = sqlx::query_scalar("SELECT count(*) FROM facts")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(facts, 0);
    app.stop().await;
}

/// A hosted model is reached over TLS: the endpoint's certificate is checked against the
/// system's roots and `ca_file`, here a CA made for the test.
#[tokio::test]
async fn the_llm_extractor_reaches_an_https_endpoint_trusted_through_its_ca_file() {
    let (server, ca_pem) = llm_server_tls(vec![Script::Happy]).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca_pem).unwrap();
    let config = format!("{}ca_file = {:?}\n", llm_config(&server), ca_file);
    let (app, report, mut db) =
        one_episode_consolidated(&config, "Had oolong tea after a long day.").await;
    let (status, _, error) = episode_state(&mut db).await;
    assert_eq!(status, "consolidated", "{report} {error:?}");
    let tea: i64 =
        sqlx::query_scalar("SELECT count(*) FROM facts WHERE predicate = 'favourite_tea'")
            .fetch_one(&mut db)
            .await
            .unwrap();
    assert_eq!(tea, 1);
    assert_eq!(server.requests.lock().unwrap().len(), 1);
    app.stop().await;
}

/// Without the CA, the same endpoint's certificate is refused: a failed attempt whose
/// reason names the certificate, and no request reaches the server.
#[tokio::test]
async fn an_https_endpoint_whose_certificate_is_not_trusted_is_refused() {
    let (server, _) = llm_server_tls(vec![Script::Happy]).await;
    let (app, report, mut db) =
        one_episode_consolidated(&llm_config(&server), "Had oolong tea after a long day.").await;
    let (status, attempts, error) = episode_state(&mut db).await;
    assert_eq!((status.as_str(), attempts), ("pending", 1), "{report}");
    let error = error.unwrap_or_default().to_lowercase();
    assert!(error.contains("certificate"), "{error}");
    assert!(server.requests.lock().unwrap().is_empty());
    app.stop().await;
}

/// An extractor can echo a secret back: its facts and rules are redacted like a butler's
/// writes, and their events say which detectors fired.
#[tokio::test]
async fn an_extractors_echoed_secrets_are_redacted() {
    let server = llm_server(vec![Script::LeakSecrets]).await;
    let (app, report, mut db) = one_episode_consolidated(
        &llm_config(&server),
        "Talked about their cloud key and the gym membership.",
    )
    .await;
    let changes = &report["reports"][0]["changes"];
    assert_eq!(changes["facts_created"], 1, "{report}");
    assert_eq!(changes["rules_created"], 1, "{report}");
    let fact: String = sqlx::query_scalar("SELECT content FROM facts WHERE predicate = 'aws_key'")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(fact, "Their key is [api_key]");
    let rule: String = sqlx::query_scalar("SELECT content FROM rules")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(rule, "Charge card [payment_card] every month");
    let redacted: Vec<Value> = sqlx::query_scalar(
        "SELECT payload->'redacted' FROM memory_events
         WHERE event_type IN ('fact_created', 'rule_created') ORDER BY id",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    // The fact's key twice: in its content and in the statement kept with it.
    assert_eq!(
        redacted,
        vec![json!({"api_key": 2}), json!({"payment_card": 1})]
    );
    let statement: String =
        sqlx::query_scalar("SELECT metadata->>'statement' FROM facts WHERE predicate = 'aws_key'")
            .fetch_one(&mut db)
            .await
            .unwrap();
    assert!(!statement.contains("AKIA"), "{statement}");
    app.stop().await;
}
