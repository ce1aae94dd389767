//! The REST API's reads under `/api` over HTTP against the real service: lists page by
//! page in a stable order while rows are inserted, filters (and a 400 for a bad one),
//! exactly the MCP visibility per key (scopes, butlers, tenants, roles), records with their
//! links and provenance, search, and reads that change nothing. Writes: `rest_writes.rs`;
//! the OpenAPI document: `openapi.rs`.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::helpers::*;

pub(crate) async fn get(app: &TestApp, key: Option<&str>, path: &str) -> (u16, Value) {
    let mut request = reqwest::Client::new().get(app.url(path));
    if let Some(key) = key {
        request = request.header("Authorization", format!("Bearer {key}"));
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn ok(app: &TestApp, key: &str, path: &str) -> Value {
    let (status, body) = get(app, Some(key), path).await;
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// Every id of a list, page by page (`size` a page), inserting a fact after the first page.
async fn walk(app: &TestApp, key: &str, list: &str, size: u32, health: &McpClient) -> Vec<String> {
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let separator = if list.contains('?') { '&' } else { '?' };
        let path = match &cursor {
            Some(c) => format!("{list}{separator}limit={size}&cursor={c}"),
            None => format!("{list}{separator}limit={size}"),
        };
        let page = ok(app, key, &path).await;
        assert!(page_ids(&page).len() <= size as usize);
        if cursor.is_none() {
            // A write while someone pages lands before the cursor: no page shifts.
            health
                .ok(
                    "memory_store_fact",
                    json!({"subject": "user", "predicate": "late", "content": "Written while paging"}),
                )
                .await;
        }
        all.extend(page_ids(&page));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return all,
        }
    }
}

#[tokio::test]
async fn lists_records_and_stats_follow_the_keys_visibility_and_page_stably() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let general = app.client(TENANT_A_GENERAL).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let mut facts = Vec::new();
    for n in 0..5 {
        let fact = health
            .ok(
                "memory_store_fact",
                json!({"subject": format!("friend {n}"), "predicate": "birthday",
                       "content": format!("Born in month {n}"), "permanence": "permanent"}),
            )
            .await;
        facts.push(fact["id"].as_str().unwrap().to_owned());
    }
    let replaced = health
        .ok(
            "memory_store_fact",
            json!({"subject": "friend 0", "predicate": "birthday", "content": "Born in month 11"}),
        )
        .await;
    let private = general
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "salary", "content": "Paid monthly", "scope": "general"}),
        )
        .await;
    let private = private["id"].as_str().unwrap().to_owned();
    let rule = health
        .ok(
            "memory_store_rule",
            json!({"content": "Send birthday wishes in the morning"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for (client, butler) in [(&health, "health"), (&general, "general")] {
        client
            .ok(
                "memory_store_episode",
                json!({"content": format!("{butler} talked about birthdays"), "butler": butler}),
            )
            .await;
    }
    let elsewhere = app
        .client(TENANT_B_HEALTH)
        .await
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "city", "content": "Lives in Oslo"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Pages: stable, newest first, nothing twice or missed; the total on every page.
    let first = ok(&app, TENANT_A_ADMIN, "/api/memory/facts").await;
    assert_eq!(first["total"], 7, "{first}");
    let walked = walk(&app, TENANT_A_ADMIN, "/api/memory/facts", 2, &health).await;
    assert_eq!(walked.len(), 7, "{walked:?}");
    assert_eq!(walked.iter().collect::<BTreeSet<_>>().len(), 7);
    let mut newest_first = walked.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(walked, newest_first);

    // Filters.
    let by_subject = ok(&app, TENANT_A_ADMIN, "/api/memory/facts?subject=Friend%200").await;
    assert_eq!(by_subject["total"], 2, "{by_subject}");
    let superseded = ok(
        &app,
        TENANT_A_ADMIN,
        "/api/memory/facts?validity=superseded",
    )
    .await;
    assert_eq!(page_ids(&superseded), vec![facts[0].clone()]);
    let permanent = ok(
        &app,
        TENANT_A_ADMIN,
        "/api/memory/facts?permanence=permanent&validity=active",
    )
    .await;
    assert_eq!(permanent["total"], 4);
    let words = ok(&app, TENANT_A_ADMIN, "/api/memory/facts?q=month%2011").await;
    assert_eq!(
        page_ids(&words),
        vec![replaced["id"].as_str().unwrap().to_owned()]
    );
    let confident = ok(
        &app,
        TENANT_A_ADMIN,
        "/api/memory/facts?min_confidence=0.99",
    )
    .await;
    assert!(confident["total"].as_i64().unwrap() >= 6);
    // In a butler's view (what it sees: `butler_view.rs`), `source_butler` is a filter too.
    let by_butler = ok(
        &app,
        TENANT_A_ADMIN,
        "/api/butlers/general/memory/facts?source_butler=general",
    )
    .await;
    assert_eq!(page_ids(&by_butler), vec![private.clone()]);
    for (path, code) in [
        ("/api/memory/facts?validity=bogus", "invalid_arguments"),
        ("/api/memory/facts?colour=blue", "invalid_arguments"),
        ("/api/memory/facts?limit=0", "invalid_limit"),
        ("/api/memory/facts?limit=201", "invalid_limit"),
        (
            "/api/memory/facts?min_confidence=2",
            "invalid_min_confidence",
        ),
        ("/api/memory/facts?cursor=yesterday", "invalid_arguments"),
        ("/api/memory/episodes?from=last%20week", "invalid_arguments"),
        ("/api/memory/facts/not-a-uuid", "invalid_arguments"),
        ("/api/memory/facts?scope=bad%20name!", "invalid_name"),
    ] {
        let (status, body) = get(&app, Some(TENANT_A_ADMIN), path).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some(code)),
            "{path}: {body}"
        );
        assert_eq!(body["class"], "invalid_input");
    }

    // Exactly what each key may see.
    let as_health = walk(&app, TENANT_A_HEALTH, "/api/memory/facts", 50, &health).await;
    assert!(!as_health.contains(&private), "another butler's scope");
    assert!(!as_health.contains(&elsewhere), "another tenant");
    let health_episodes = ok(&app, TENANT_A_HEALTH, "/api/memory/episodes").await;
    assert_eq!(health_episodes["total"], 1, "{health_episodes}");
    let all_episodes = ok(&app, TENANT_A_ADMIN, "/api/memory/episodes").await;
    assert_eq!(all_episodes["total"], 2);
    let (status, body) = get(
        &app,
        Some(TENANT_A_HEALTH),
        "/api/butlers/general/memory/episodes",
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("other_butler")),
        "{body}"
    );
    let (status, body) = get(
        &app,
        Some(TENANT_A_HEALTH),
        &format!("/api/memory/facts/{private}"),
    )
    .await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")));
    let (status, _) = get(
        &app,
        Some(TENANT_A_ADMIN),
        &format!("/api/memory/facts/{elsewhere}"),
    )
    .await;
    assert_eq!(status, 404);
    let (status, body) = get(&app, Some(OPERATOR), "/api/memory/facts").await;
    assert_eq!((status, body["code"].as_str()), (403, Some("operator_key")));
    let (status, _) = get(&app, None, "/api/memory/facts").await;
    assert_eq!(status, 401);
    // The audit stream: a butler key sees the events of what it may see, an admin all.
    let theirs = ok(&app, TENANT_A_HEALTH, "/api/memory/activity?limit=1000").await;
    let entities: BTreeSet<String> = theirs["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["entity_id"].as_str().unwrap().to_owned())
        .collect();
    assert!(entities.contains(&facts[1]), "its own facts' events");
    assert!(!entities.contains(&private), "not another butler's scope");
    let all = ok(&app, TENANT_A_ADMIN, "/api/memory/activity?limit=1000").await;
    let every = all["events"].as_array().unwrap().len();
    assert!(every > entities.len(), "admins see more");
    assert!(all.to_string().contains(&private));
    let (status, body) = get(&app, Some(OPERATOR), "/api/memory/activity").await;
    assert_eq!((status, body["code"].as_str()), (403, Some("operator_key")));

    // A record with its links, and reading it changes nothing.
    let detail = ok(
        &app,
        TENANT_A_ADMIN,
        &format!("/api/memory/facts/{}", replaced["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(detail["content"], "Born in month 11");
    assert_eq!(detail["links"]["outbound"][0]["relation"], "supersedes");
    let rule_detail = ok(&app, TENANT_A_ADMIN, &format!("/api/memory/rules/{rule}")).await;
    assert_eq!(rule_detail["reference_count"], 0, "{rule_detail}");
    let rules = ok(
        &app,
        TENANT_A_HEALTH,
        "/api/memory/rules?maturity=candidate",
    )
    .await;
    assert_eq!(page_ids(&rules), vec![rule.clone()]);
    let after = ok(&app, TENANT_A_ADMIN, &format!("/api/memory/rules/{rule}")).await;
    assert_eq!(after["reference_count"], 0, "browsing bumps nothing");

    // Stats and the stream, as the tools answer them.
    let stats = ok(&app, TENANT_A_ADMIN, "/api/memory/stats").await;
    let tool_stats = admin.ok("memory_stats", json!({})).await;
    assert_eq!(stats["facts"], tool_stats["facts"]);
    let activity = ok(&app, TENANT_A_ADMIN, "/api/memory/activity?limit=3").await;
    assert_eq!(activity["events"].as_array().unwrap().len(), 3);
    let next = activity["next_cursor"].as_str().unwrap();
    let more = ok(
        &app,
        TENANT_A_ADMIN,
        &format!("/api/memory/activity?since={next}&limit=3"),
    )
    .await;
    assert!(
        more["events"][0]["id"].as_i64().unwrap() > activity["events"][2]["id"].as_i64().unwrap()
    );
    app.stop().await;
}

#[tokio::test]
async fn provenance_history_and_search_show_why_a_record_exists() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let id = |v: Value| v["id"].as_str().unwrap().to_owned();
    let episode = id(health
        .ok(
            "memory_store_episode",
            json!({"content": "Ana said she moved to Lisbon", "butler": "health"}),
        )
        .await);
    let first = id(health
        .ok(
            "memory_store_fact",
            json!({"subject": "ana", "predicate": "city", "content": "Lives in Porto", "source_episode_id": episode}),
        )
        .await);
    let second = id(health
        .ok(
            "memory_store_fact",
            json!({"subject": "ana", "predicate": "city", "content": "Lives in Lisbon"}),
        )
        .await);
    let rule = id(health
        .ok(
            "memory_store_rule",
            json!({"content": "Ask Ana about Lisbon", "source_episode_id": episode}),
        )
        .await);
    for _ in 0..2 {
        health
            .ok("memory_mark_helpful", json!({"rule_id": rule}))
            .await;
    }
    health
        .ok(
            "memory_mark_harmful",
            json!({"rule_id": rule, "reason": "too late"}),
        )
        .await;

    let of_second = ok(
        &app,
        TENANT_A_ADMIN,
        &format!("/api/memory/facts/{second}/provenance"),
    )
    .await;
    let versions: Vec<&str> = of_second["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["content"].as_str().unwrap())
        .collect();
    assert_eq!(versions, vec!["Lives in Porto", "Lives in Lisbon"]);
    assert_eq!(of_second["content"], "Lives in Lisbon");
    let of_first = ok(
        &app,
        TENANT_A_ADMIN,
        &format!("/api/memory/facts/{first}/provenance"),
    )
    .await;
    assert_eq!(of_first["source_episode"]["id"], episode.as_str());
    let kinds: Vec<&str> = of_first["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["fact_created", "fact_superseded"]);
    let of_episode = ok(
        &app,
        TENANT_A_HEALTH,
        &format!("/api/memory/episodes/{episode}/provenance"),
    )
    .await;
    let derived: BTreeSet<&str> = of_episode["derived"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(derived, BTreeSet::from([first.as_str(), rule.as_str()]));
    let (status, _) = get(
        &app,
        Some(TENANT_A_GENERAL),
        &format!("/api/memory/episodes/{episode}/provenance"),
    )
    .await;
    assert_eq!(status, 404, "another butler's episode");

    // A rule's applications, newest first, page by page.
    let page = ok(
        &app,
        TENANT_A_ADMIN,
        &format!("/api/memory/rules/{rule}/applications?limit=2"),
    )
    .await;
    assert_eq!(page["total"], 3);
    assert_eq!(page["items"][0]["outcome"], "harmful");
    let cursor = page["next_cursor"].as_str().unwrap();
    let rest = ok(
        &app,
        TENANT_A_ADMIN,
        &format!("/api/memory/rules/{rule}/applications?limit=2&cursor={cursor}"),
    )
    .await;
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    assert!(rest["next_cursor"].is_null());

    // Search across types, changing nothing.
    let found = ok(
        &app,
        TENANT_A_ADMIN,
        "/api/memory/search?q=Lisbon&mode=keyword",
    )
    .await;
    assert!(found["count"].as_u64().unwrap() >= 2, "{found}");
    let facts_only = ok(
        &app,
        TENANT_A_ADMIN,
        "/api/memory/search?q=Lisbon&mode=keyword&types=fact",
    )
    .await;
    assert!(
        facts_only["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["type"] == "fact")
    );
    let after = ok(&app, TENANT_A_ADMIN, &format!("/api/memory/facts/{second}")).await;
    assert_eq!(
        after["reference_count"], 0,
        "a person searching bumps nothing"
    );
    let (status, body) = get(
        &app,
        Some(TENANT_A_ADMIN),
        "/api/memory/search?q=x&types=fact,bogus",
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("unknown_value")),
        "{body}"
    );
    app.stop().await;
}

#[tokio::test]
async fn the_timeline_counts_each_day_what_came_in_and_what_the_lifecycle_did() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let general = app.client(TENANT_A_GENERAL).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    for content in [
        "Hi, my name is Ada. I'm allergic to peanuts.",
        "We chatted about the weather.",
    ] {
        health
            .ok(
                "memory_store_episode",
                json!({"content": content, "butler": "health"}),
            )
            .await;
    }
    general
        .ok(
            "memory_store_episode",
            json!({"content": "The bill was paid.", "butler": "general"}),
        )
        .await;
    let report = admin
        .ok("memory_run_sweep", json!({"kinds": ["consolidation"]}))
        .await;
    let changed: u64 = report["reports"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r["changes"].as_object().unwrap().values())
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert!(changed > 0, "{report}");

    let timeline = ok(&app, TENANT_A_ADMIN, "/api/memory/timeline?days=7").await;
    let days = timeline["days"].as_array().unwrap();
    assert_eq!(days.len(), 7, "every day of the window, oldest first");
    let today = days.last().unwrap();
    assert_eq!(today["episodes"]["consolidated"], 3, "{timeline}");
    assert_eq!(
        today["runs"]["consolidation"], 2,
        "one run per shard: {timeline}"
    );
    assert_eq!(today["changes"]["consolidation"], changed, "{timeline}");
    assert!(
        days[..6]
            .iter()
            .all(|d| d["episodes"].as_object().unwrap().is_empty())
    );

    // A butler key counts its own butler's episodes; the window is bounded.
    let own = ok(&app, TENANT_A_HEALTH, "/api/memory/timeline").await;
    let own_today = own["days"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(own["days"].as_array().unwrap().len(), 14);
    assert_eq!(own_today["episodes"]["consolidated"], 2, "{own}");
    let foreign = ok(&app, TENANT_B_HEALTH, "/api/memory/timeline").await;
    let foreign_today = foreign["days"].as_array().unwrap().last().unwrap().clone();
    assert!(foreign_today["episodes"].as_object().unwrap().is_empty());
    for bad in ["days=0", "days=91", "days=many", "colour=red"] {
        let (status, body) = get(
            &app,
            Some(TENANT_A_ADMIN),
            &format!("/api/memory/timeline?{bad}"),
        )
        .await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (status, _) = get(&app, Some(OPERATOR), "/api/memory/timeline").await;
    assert_eq!(status, 403);
    app.stop().await;
}
