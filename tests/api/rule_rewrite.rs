//! Rewriting a rule over REST (`PUT /api/memory/rules/{id}`): the new candidate and the
//! retraction of the rule it replaces are one transaction in the rule's shard. The new rule
//! links `supersedes` to the old one, the old one is retracted with the reason and the new
//! id, both events carry the request's id and the acting key; and rewrites that race for the
//! same rule leave exactly one replacement, never two live rewrites of one rule.

use serde_json::json;

use crate::helpers::*;

#[tokio::test]
async fn a_rule_rewrite_supersedes_and_retracts_in_one_audited_step() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let old = health
        .ok(
            "memory_store_rule",
            json!({"content": "Suggest walks in the morning"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, new) = rest(
        &app,
        TENANT_A_ADMIN,
        "PUT",
        &format!("/api/memory/rules/{old}"),
        Some(json!({"content": "Suggest walks after lunch", "reason": "mornings are busy"})),
        "rewrite-1",
    )
    .await;
    assert_eq!(status, 200, "{new}");
    let new_id = new["id"].as_str().unwrap().to_owned();
    assert_eq!(new["maturity"], "candidate");
    assert_eq!(new["source_butler"], "health", "the same shard's rule");

    let (_, detail) = rest(
        &app,
        TENANT_A_ADMIN,
        "GET",
        &format!("/api/memory/rules/{new_id}"),
        None,
        "read",
    )
    .await;
    let outbound = &detail["links"]["outbound"][0];
    assert_eq!(
        (
            outbound["relation"].as_str(),
            outbound["target_id"].as_str()
        ),
        (Some("supersedes"), Some(old.as_str())),
        "{detail}"
    );
    let (_, retracted) = rest(
        &app,
        TENANT_A_ADMIN,
        "GET",
        &format!("/api/memory/rules/{old}"),
        None,
        "read",
    )
    .await;
    assert_eq!(retracted["validity"], "retracted", "{retracted}");

    let created = events_of(&app, &new_id).await;
    assert_eq!(created.len(), 1, "{created:?}");
    let (kind, actor, request, _) = &created[0];
    assert_eq!(
        (kind.as_str(), actor.as_str(), request.as_deref()),
        ("rule_created", "admin:a-admin", Some("rewrite-1"))
    );
    let old_events = events_of(&app, &old).await;
    let (kind, actor, request, payload) = old_events.last().unwrap();
    assert_eq!(
        (kind.as_str(), actor.as_str(), request.as_deref()),
        ("rule_retracted", "admin:a-admin", Some("rewrite-1"))
    );
    assert_eq!(
        payload["reason"],
        format!("mornings are busy (replaced by rule {new_id})"),
        "{payload}"
    );
    app.stop().await;
}

/// With the new rule and the retraction as two steps, rewrites that passed the "is it
/// live?" check together each stored a replacement: several live rewrites of one rule.
#[tokio::test]
async fn rewrites_racing_for_one_rule_leave_exactly_one_replacement() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let old = health
        .ok(
            "memory_store_rule",
            json!({"content": "Water the plants on Sunday"}),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/api/memory/rules/{old}");
    let rewrites = (0..6).map(|n| {
        let (app, path) = (&app, &path);
        async move {
            rest(
                app,
                TENANT_A_ADMIN,
                "PUT",
                path,
                Some(json!({"content": format!("Water the plants on day {n}")})),
                &format!("race-{n}"),
            )
            .await
        }
    });
    let answers = futures::future::join_all(rewrites).await;
    let won: Vec<_> = answers
        .iter()
        .filter(|(status, _)| *status == 200)
        .collect();
    let statuses: Vec<u16> = answers.iter().map(|(status, _)| *status).collect();
    assert_eq!(won.len(), 1, "one rewrite wins: {statuses:?}");
    for (status, body) in answers.iter().filter(|(status, _)| *status != 200) {
        assert_eq!(
            (*status, body["code"].as_str()),
            (409, Some("not_live")),
            "{body}"
        );
    }
    let replacements: Vec<(String, String)> = sqlx::query_as(
        "SELECT r.id::text, r.validity FROM rules r JOIN memory_links l
           ON l.source_id = r.id AND l.relation = 'supersedes'
         WHERE l.target_id = $1::uuid",
    )
    .bind(&old)
    .fetch_all(&mut app.sql().await)
    .await
    .unwrap();
    assert_eq!(replacements.len(), 1, "{replacements:?}");
    assert_eq!(replacements[0].0, won[0].1["id"].as_str().unwrap());
    assert_eq!(replacements[0].1, "active");
    let retractions = events_of(&app, &old)
        .await
        .into_iter()
        .filter(|(kind, ..)| kind == "rule_retracted")
        .count();
    assert_eq!(retractions, 1);
    app.stop().await;
}
