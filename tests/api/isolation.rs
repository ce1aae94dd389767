//! Scope, butler and tenant isolation on every REST read and dashboard page, and on every
//! admin write: a butler key reading another butler's scope or episodes, and any key
//! reading another tenant's records, finds nothing there: a 404 `not_found` for a record
//! (or its provenance, or its applications), no trace in a list or a search, and a 403
//! `other_butler` where it names another butler's view. An admin's write on another
//! tenant's id is a 404 that changes nothing.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::dashboard::{page, sign_in};
use crate::helpers::*;

/// What one butler wrote: a fact, a rule (applied once) and an episode, all mentioning
/// "zeppelin" so that one search finds them.
struct Written {
    fact: String,
    rule: String,
    episode: String,
}

impl Written {
    fn ids(&self) -> [(&'static str, &str); 3] {
        [
            ("facts", &self.fact),
            ("rules", &self.rule),
            ("episodes", &self.episode),
        ]
    }
}

async fn write(app: &TestApp, key: &str, butler: &str, scope: &str) -> Written {
    let client = app.client(key).await;
    let id = |v: Value| v["id"].as_str().unwrap().to_owned();
    let episode = id(client
        .ok(
            "memory_store_episode",
            json!({"content": format!("{butler} saw a zeppelin"), "butler": butler}),
        )
        .await);
    let fact = id(client
        .ok(
            "memory_store_fact",
            json!({"subject": format!("{butler} pilot"), "predicate": "craft",
                   "content": format!("{butler} flies a zeppelin"), "scope": scope,
                   "source_episode_id": episode}),
        )
        .await);
    let rule = id(client
        .ok(
            "memory_store_rule",
            json!({"content": format!("{butler}: mention the zeppelin"), "scope": scope}),
        )
        .await);
    client
        .ok("memory_mark_helpful", json!({"rule_id": rule}))
        .await;
    Written {
        fact,
        rule,
        episode,
    }
}

/// Tenant A's health butler (global scope), its general butler (its own scope), and tenant
/// B's health butler.
async fn seed(app: &TestApp) -> (Written, Written, Written) {
    (
        write(app, TENANT_A_HEALTH, "health", "global").await,
        write(app, TENANT_A_GENERAL, "general", "general").await,
        write(app, TENANT_B_HEALTH, "health", "global").await,
    )
}

async fn get(app: &TestApp, key: &str, path: &str) -> (u16, Value) {
    rest(app, key, "GET", path, None, "isolation").await
}

#[tokio::test]
async fn no_key_reads_another_butlers_scope_or_another_tenant_over_rest() {
    let app = spawn_app().await;
    let (health, general, elsewhere) = seed(&app).await;
    // Who reads, and what it must not see.
    let readers = [
        (
            "a butler key, another butler's scope",
            TENANT_A_HEALTH,
            &general,
        ),
        ("a butler key, another tenant", TENANT_B_HEALTH, &health),
        ("an admin key, another tenant", TENANT_A_ADMIN, &elsewhere),
    ];
    for (who, key, hidden) in readers {
        // A record, its provenance and (a rule's) applications: as if it did not exist.
        for (kind, id) in hidden.ids() {
            let mut paths = vec![
                format!("/api/memory/{kind}/{id}"),
                format!("/api/memory/{kind}/{id}/provenance"),
            ];
            if kind == "rules" {
                paths.push(format!("/api/memory/rules/{id}/applications"));
            }
            for path in paths {
                let (status, body) = get(&app, key, &path).await;
                assert_eq!(
                    (status, body["code"].as_str()),
                    (404, Some("not_found")),
                    "{who}: {path}: {body}"
                );
                assert!(!body.to_string().contains("zeppelin"), "{who}: {path}");
            }
        }
        // Lists and search: not a trace, while what the key may see is there.
        for path in [
            "/api/memory/facts?limit=200",
            "/api/memory/rules?limit=200",
            "/api/memory/episodes?limit=200",
            "/api/memory/search?q=zeppelin&mode=keyword&limit=50",
            "/api/memory/activity?limit=1000",
        ] {
            let (status, body) = get(&app, key, path).await;
            assert_eq!(status, 200, "{who}: {path}: {body}");
            let text = body.to_string();
            for (kind, id) in hidden.ids() {
                assert!(!text.contains(id), "{who}: {path} shows the {kind} {id}");
            }
            assert!(text.contains("zeppelin"), "{who}: {path} shows its own");
        }
    }

    // Another butler's views, by name: refused, every one of them.
    for view in ["stats", "episodes", "facts", "rules"] {
        let path = format!("/api/butlers/general/memory/{view}");
        let (status, body) = get(&app, TENANT_A_HEALTH, &path).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (403, Some("other_butler")),
            "{path}: {body}"
        );
        assert!(!body.to_string().contains("zeppelin"), "{path}");
    }
    // Another tenant's butler of the same name is another butler: its view is empty.
    for view in ["facts", "rules", "episodes"] {
        let path = format!("/api/butlers/health/memory/{view}");
        let (status, body) = get(&app, TENANT_A_ADMIN, &path).await;
        assert_eq!(status, 200, "{path}");
        assert!(!body.to_string().contains(&elsewhere.fact), "{path}");
        let (_, theirs) = get(&app, TENANT_B_HEALTH, &path).await;
        assert!(!theirs.to_string().contains(&health.fact), "{path}");
    }
    // Asking in another butler's or scope's name is refused outright.
    for path in [
        "/api/memory/search?q=zeppelin&butler=general",
        "/api/memory/facts?scope=general",
        "/api/memory/rules?scope=general",
        "/api/memory/episodes?butler=general",
    ] {
        let (status, body) = get(&app, TENANT_A_HEALTH, path).await;
        assert_eq!(status, 403, "{path}: {body}");
        assert_eq!(body["class"], "forbidden", "{path}: {body}");
    }
    app.stop().await;
}

#[tokio::test]
async fn no_key_sees_another_butlers_scope_or_another_tenant_on_the_dashboard() {
    let app = spawn_app().await;
    let (health, general, elsewhere) = seed(&app).await;
    let as_health = sign_in(&app, TENANT_A_HEALTH).await;
    let as_b = sign_in(&app, TENANT_B_HEALTH).await;
    let as_admin = sign_in(&app, TENANT_A_ADMIN).await;
    let readers = [
        ("a butler key, another butler's scope", &as_health, &general),
        ("a butler key, another tenant", &as_b, &health),
        ("an admin key, another tenant", &as_admin, &elsewhere),
    ];
    for (who, cookie, hidden) in readers {
        for (kind, id) in hidden.ids() {
            let path = format!("/memory/{kind}/{id}");
            let shown = page(&app, Some(cookie), &path).await;
            assert_eq!(shown.status, 404, "{who}: {path}: {}", shown.body);
            assert!(shown.body.contains("not_found"), "{who}: {path}");
            assert!(!shown.body.contains("zeppelin"), "{who}: {path}");
        }
        for path in [
            "/memory/facts",
            "/memory/playbook",
            "/memory/episodes",
            "/memory/search?q=zeppelin",
            "/memory",
        ] {
            let shown = page(&app, Some(cookie), path).await;
            assert_eq!(shown.status, 200, "{who}: {path}");
            for (kind, id) in hidden.ids() {
                assert!(!shown.body.contains(id), "{who}: {path} shows the {kind}");
            }
        }
    }
    // Another butler's page is refused to a butler key; the admin sees it.
    let refused = page(&app, Some(&as_health), "/butlers/general/memory").await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("other_butler"));
    assert!(!refused.body.contains("zeppelin"));
    let shown = page(&app, Some(&as_admin), "/butlers/general/memory").await;
    assert_eq!(shown.status, 200);
    assert!(shown.body.contains(&general.fact), "its facts are listed");
    app.stop().await;
}

/// A tenant's records as the database holds them, and their events.
async fn state_of(app: &TestApp, written: &Written) -> BTreeMap<String, String> {
    let mut sql = app.sql().await;
    let mut state = BTreeMap::new();
    for (kind, id) in written.ids() {
        let row: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT row_to_json(r)::text FROM {kind} r WHERE id = $1::uuid"
        )))
        .bind(id)
        .fetch_one(&mut sql)
        .await
        .unwrap();
        let events: i64 =
            sqlx::query_scalar("SELECT count(*) FROM memory_events WHERE entity_id = $1::uuid")
                .bind(id)
                .fetch_one(&mut sql)
                .await
                .unwrap();
        state.insert(id.to_owned(), format!("{row} / {events} events"));
    }
    state
}

#[tokio::test]
async fn an_admins_write_on_another_tenants_id_is_not_found_and_changes_nothing() {
    let app = spawn_app().await;
    let (_, _, elsewhere) = seed(&app).await;
    // One forgotten of each type, so that a restore would have something to do.
    let tenant_b = app.client(TENANT_B_HEALTH).await;
    let forgotten = write(&app, TENANT_B_HEALTH, "health", "global").await;
    for (kind, id) in forgotten.ids() {
        tenant_b
            .ok(
                "memory_forget",
                json!({"type": kind.trim_end_matches('s'), "id": id}),
            )
            .await;
    }
    // The embedder writes behind each acknowledged write: its rows settle first.
    embedded(&app, "tenant-b").await;
    let before = (
        state_of(&app, &elsewhere).await,
        state_of(&app, &forgotten).await,
    );
    let reason = json!({"reason": "not yours"});
    let mut writes = vec![
        (
            "PUT",
            format!("/api/memory/facts/{}", elsewhere.fact),
            Some(json!({"content": "x"})),
        ),
        (
            "PUT",
            format!("/api/memory/rules/{}", elsewhere.rule),
            Some(json!({"content": "x"})),
        ),
    ];
    for (kind, id) in elsewhere.ids() {
        writes.push(("DELETE", format!("/api/memory/{kind}/{id}?reason=x"), None));
    }
    for (kind, id) in forgotten.ids() {
        writes.push(("POST", format!("/api/memory/{kind}/{id}/restore"), None));
    }
    for decision in ["promote", "demote", "disable", "enable"] {
        let path = format!("/api/memory/rules/{}/{decision}", elsewhere.rule);
        writes.push(("POST", path, Some(reason.clone())));
    }
    for (method, path, body) in writes {
        let (status, answer) = rest(&app, TENANT_A_ADMIN, method, &path, body, "cross").await;
        assert_eq!(
            (status, answer["code"].as_str()),
            (404, Some("not_found")),
            "{method} {path}: {answer}"
        );
    }
    // The dashboard's forms are refused the same way.
    let cookie = sign_in(&app, TENANT_A_ADMIN).await;
    let token = crate::dashboard::csrf(&page(&app, Some(&cookie), "/memory/facts").await.body);
    for (path, form) in [
        (
            format!("/memory/facts/{}/edit", elsewhere.fact),
            vec![("content", "x")],
        ),
        (
            format!("/memory/rules/{}/govern", elsewhere.rule),
            vec![("decision", "disable"), ("reason", "x")],
        ),
        (format!("/memory/fact/{}/forget", elsewhere.fact), vec![]),
        (format!("/memory/rule/{}/restore", forgotten.rule), vec![]),
    ] {
        let mut form = form;
        form.push(("csrf", &token));
        let answer = crate::dashboard::post(&app, &cookie, &path, &form, None).await;
        assert_eq!(answer.status, 404, "{path}: {}", answer.body);
    }
    let after = (
        state_of(&app, &elsewhere).await,
        state_of(&app, &forgotten).await,
    );
    assert_eq!(
        before, after,
        "tenant B's records and events are as they were"
    );
    app.stop().await;
}
