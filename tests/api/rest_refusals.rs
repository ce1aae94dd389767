//! What the REST API answers a request it cannot serve: for every route of its endpoint
//! table, malformed requests (bad and unknown JSON, oversized bodies, ids that are not
//! UUIDs, unknown query parameters, methods it does not route) are refused in the error
//! shape with a 4xx, never a 500; every answer, refusals included, tells browsers and
//! proxies to store nothing; and another tenant's id is a 404 that the access log records
//! with the tenant that asked (the real binary's log).

use std::time::Duration;

use butler_memory::api::{ENDPOINTS, Endpoint};
use serde_json::{Value, json};

use crate::binary::{Service, write_config};
use crate::helpers::*;

/// One malformed request: what it sends, and what is wrong with it.
struct Malformed {
    what: &'static str,
    method: String,
    path: String,
    body: Option<Vec<u8>>,
}

/// The malformed variants of one endpoint (`id` stands for a record that exists), each
/// of which it must refuse: unknown query parameters where it reads a query, a bad id or
/// name where its path has one, bad bodies where it reads one, and a method it lacks.
fn malformed(endpoint: &Endpoint, id: &str) -> Vec<Malformed> {
    let method = endpoint.method.to_uppercase();
    let template = endpoint.path;
    let mut base = template.replace("{id}", id).replace("{name}", "health");
    if template.ends_with("/search") {
        base.push_str("?q=tea");
    }
    // A body it would accept, so that only the part under test is wrong.
    let fine_body = endpoint
        .body
        .map(|_| br#"{"content": "x", "reason": "y"}"#.to_vec());
    let case = |what, method: &str, path: String, body: Option<Vec<u8>>| Malformed {
        what,
        method: method.to_owned(),
        path,
        body,
    };
    let mut cases = Vec::new();
    if endpoint.query.is_some() {
        let separator = if base.contains('?') { '&' } else { '?' };
        let path = format!("{base}{separator}colour=blue");
        cases.push(case(
            "an unknown query parameter",
            &method,
            path,
            fine_body.clone(),
        ));
    }
    if template.contains("{id}") {
        let path = base.replace(id, "not-a-uuid");
        cases.push(case(
            "an id that is not a UUID",
            &method,
            path,
            fine_body.clone(),
        ));
    }
    if template.contains("{name}") {
        let path = base.replace("/health/", "/bad%20name!/");
        cases.push(case("a name that is not a name", &method, path, None));
    }
    if endpoint.body.is_some() {
        let oversized = json!({"content": "x".repeat(3 * 1024 * 1024), "reason": "y"});
        for (what, body) in [
            ("a body that is not JSON", b"{\"content\": ".to_vec()),
            (
                "a body with an unknown field",
                br#"{"content": "x", "reason": "y", "colour": "blue"}"#.to_vec(),
            ),
            ("a JSON body of the wrong type", b"[1, 2, 3]".to_vec()),
            ("an oversized body", serde_json::to_vec(&oversized).unwrap()),
        ] {
            cases.push(case(what, &method, base.clone(), Some(body)));
        }
    }
    cases.push(case("a method it does not route", "PATCH", base, None));
    cases
}

#[tokio::test]
async fn malformed_requests_to_every_api_route_are_refused_never_a_500() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let id = |v: Value| v["id"].as_str().unwrap().to_owned();
    let fact = id(health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "tea", "content": "Oolong"}),
        )
        .await);
    let rule = id(health
        .ok("memory_store_rule", json!({"content": "Offer tea"}))
        .await);
    let episode = id(health
        .ok(
            "memory_store_episode",
            json!({"content": "Made tea", "butler": "health"}),
        )
        .await);
    let client = reqwest::Client::new();
    let mut checked = 0;
    for endpoint in ENDPOINTS {
        let id = if endpoint.path.contains("/facts/") {
            &fact
        } else if endpoint.path.contains("/rules/") {
            &rule
        } else {
            &episode
        };
        for case in malformed(endpoint, id) {
            let mut request = client
                .request(case.method.parse().unwrap(), app.url(&case.path))
                .header("Authorization", format!("Bearer {TENANT_A_ADMIN}"));
            if let Some(body) = case.body {
                request = request
                    .header("Content-Type", "application/json")
                    .body(body);
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let cache = response
                .headers()
                .get("cache-control")
                .map(|v| v.to_str().unwrap().to_owned());
            let body: Value = response.json().await.unwrap_or(Value::Null);
            let context = format!(
                "{} {} ({}): {status} {body}",
                case.method, case.path, case.what
            );
            assert!((400..500).contains(&status), "{context}");
            assert_eq!(cache.as_deref(), Some("no-store"), "{context}");
            if status == 405 {
                assert_eq!(case.what, "a method it does not route", "{context}");
            } else {
                assert_eq!(body["class"], "invalid_input", "{context}");
                assert!(body["code"].is_string(), "{context}");
            }
            checked += 1;
        }
    }
    assert!(checked > 3 * ENDPOINTS.len(), "{checked} requests");
    // Refused before a handler runs (no key), and answered (a read): stored by no one.
    for key in [None, Some(TENANT_A_ADMIN)] {
        let mut request = client.get(app.url("/api/memory/facts"));
        if let Some(key) = key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.headers()["cache-control"], "no-store", "{key:?}");
    }
    app.stop().await;
}

/// Another tenant's id is answered as if it did not exist, and the access log line of
/// that answer names the 404, its class and the tenant of the key that asked.
#[tokio::test]
async fn another_tenants_id_is_not_found_and_logged_with_the_asking_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let tenant_b = format!(
        "[[auth.keys]]\nkey = \"{TENANT_B_HEALTH}\"\ntenant = \"tenant-b\"\nrole = \"butler\"\nbutler = \"health\"\n"
    );
    let config = write_config(dir.path(), &tenant_b);
    let service = Service::start(&config);
    let (failed, foreign) = service
        .call_as(
            TENANT_B_HEALTH,
            "memory_store_fact",
            json!({"subject": "bob", "predicate": "city", "content": "Bob lives in Oslo"}),
        )
        .await;
    assert!(!failed, "{foreign}");
    let foreign = foreign["id"].as_str().unwrap();
    let response = reqwest::Client::new()
        .get(format!("{}/api/memory/facts/{foreign}", service.base))
        .header("Authorization", format!("Bearer {TENANT_A_ADMIN}"))
        .header("X-Request-Id", "foreign-id-1")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "not_found", "{body}");
    assert!(!body.to_string().contains("Oslo"));

    let line = eventually(Duration::from_secs(10), || async {
        let lines = service.lines.lock().unwrap().clone();
        lines
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["fields"]["request_id"] == "foreign-id-1")
            .ok_or_else(|| "no log line of the request yet".to_owned())
    })
    .await
    .unwrap();
    let fields = &line["fields"];
    assert_eq!(line["level"], "INFO", "{line}");
    assert_eq!(fields["status"], 404, "{line}");
    assert_eq!(fields["class"], "not_found", "{line}");
    assert_eq!(fields["tenant"], "tenant-a", "{line}");
    assert_eq!(
        fields["path"],
        format!("/api/memory/facts/{foreign}"),
        "{line}"
    );
    service.stop().await;
}
