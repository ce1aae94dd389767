//! Redaction before persistence, end to end with the real binary: secrets in every field a
//! write stores are masked, hashed, dropped or refused as the policy says; the answer and
//! the event say what fired; and no secret is anywhere afterwards: not in a full dump of the
//! database, not in a log line, not in `/metrics`.

use serde_json::{Value, json};

use crate::binary::{Service, write_config};
use crate::helpers::*;

const CARD: &str = "4111 1111 1111 1111";
const AWS_KEY: &str = "AKIAIOSFODNN7EXAMPLE";
const EMAIL: &str = "jane.doe@example.com";
const SSN: &str = "536-22-1234";
const EMPLOYEE: &str = "EMP-004211";
const PRIVATE_KEY_BODY: &str = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC";

/// Every secret, in the forms it could be stored in.
fn secrets() -> Vec<String> {
    vec![
        CARD.into(),
        CARD.replace(' ', ""),
        AWS_KEY.into(),
        EMAIL.into(),
        SSN.into(),
        EMPLOYEE.into(),
        PRIVATE_KEY_BODY.into(),
    ]
}

fn assert_no_secret(place: &str, text: &str) {
    for secret in secrets() {
        assert!(!text.contains(&secret), "{secret} found in {place}");
    }
}

#[tokio::test]
async fn secrets_are_redacted_everywhere_a_write_stores_text() {
    let (database, _) = fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        r#"
[redaction]
hash_key = "a test key, long enough"
detectors = { email = "hash", private_key = "refuse" }
custom = [{ name = "employee_id", pattern = '\bEMP-\d{6}\b', action = "drop" }]
"#,
    );
    let service = Service::start_with(&config, &[("BUTLER_MEMORY_DATABASE_URL", &database)]);

    // Masked (card, key, SSN by default), hashed (e-mail, as configured), dropped (a custom
    // detector: its metadata value goes).
    let (failed, episode) = service
        .call(
            "memory_store_episode",
            json!({
                "butler": "health",
                "content": format!("Jane ({EMAIL}) paid with {CARD}, key {AWS_KEY}, ssn {SSN}."),
                "metadata": {"employee": EMPLOYEE, "contact": EMAIL, "note": "kept"},
            }),
        )
        .await;
    assert!(!failed, "{episode}");
    let content = episode["content"].as_str().unwrap();
    let email_token = content
        .split_whitespace()
        .find(|w| w.contains("[email:"))
        .unwrap()
        .trim_matches(|c| c == '(' || c == ')')
        .to_owned();
    assert_eq!(
        content,
        format!("Jane ({email_token}) paid with [payment_card], key [api_key], ssn [us_ssn].")
    );
    assert_eq!(
        episode["metadata"],
        json!({"contact": email_token, "note": "kept"})
    );

    // The same e-mail hashes the same in a fact, so the two still match.
    let (failed, fact) = service
        .call_as(
            TENANT_A_HEALTH,
            "memory_store_fact",
            json!({"subject": "jane", "predicate": "email", "content": format!("Her mail is {EMAIL}"),
                   "tags": [EMAIL]}),
        )
        .await;
    assert!(!failed, "{fact}");
    assert_eq!(fact["content"], format!("Her mail is {email_token}"));
    assert_eq!(fact["tags"], json!([email_token]));

    // Batches too.
    let (failed, batch) = service
        .call(
            "memory_ingest_batch",
            json!({"episodes": [{"butler": "health", "content": format!("Card on file: {CARD}")}]}),
        )
        .await;
    assert!(!failed, "{batch}");

    // Refused: nothing stored, the detector named, the secret not repeated.
    let (failed, refused) = service
        .call(
            "memory_store_rule",
            json!({"content": format!("Use this key: -----BEGIN PRIVATE KEY-----\n{PRIVATE_KEY_BODY}\n-----END PRIVATE KEY-----")}),
        )
        .await;
    assert!(failed, "{refused}");
    assert_eq!(refused["class"], "invalid_input");
    assert_eq!(refused["code"], "redaction_refused");
    assert!(refused["message"].as_str().unwrap().contains("private_key"));

    // The events say which detectors fired and how often.
    let (failed, page) = service
        .call_as(
            TENANT_A_ADMIN,
            "memory_activity_stream",
            json!({"limit": 50}),
        )
        .await;
    assert!(!failed, "{page}");
    let redacted: Vec<Value> = page["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["payload"]["redacted"].clone())
        .collect();
    assert_eq!(
        redacted,
        vec![
            json!({"api_key": 1, "email": 2, "employee_id": 1, "payment_card": 1, "us_ssn": 1}),
            json!({"email": 2}),
            json!({"payment_card": 1}),
        ],
        "{page}"
    );

    // Nowhere afterwards: metrics, the database, the log.
    let metrics = service.metrics().await;
    assert_no_secret("/metrics", &metrics);
    assert!(metrics.contains("butler_memory_redactions_total{detector=\"payment_card\"} 2"));
    assert!(metrics.contains("butler_memory_redaction_refusals_total 1"));
    let dump = pg_dump(&database);
    assert!(dump.contains("[payment_card]"), "the dump holds the data");
    assert_no_secret("the database dump", &dump);

    let log = service.stop().await.join("\n");
    assert!(log.contains("redaction_refused"), "the refusal is logged");
    assert_no_secret("the log", &log);
}
