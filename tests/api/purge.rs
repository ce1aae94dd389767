//! memory_purge end to end: candidates by subject, then the confirmed ones erased from rows,
//! embeddings, links, rule applications, consolidation traces, caches and past events; no
//! trace of the text in a full dump of the database or in any answer; the audit stream keeps
//! every event in order, still replays (to "gone"), and accepts no other rewrite; a butler's
//! and a tenant's purge leave everyone else; only admins purge.

use serde_json::{Value, json};

use crate::events::replay;
use crate::helpers::*;

const AUDIT_KEY: &str = "purge-test-audit-key-0123";

/// Words of what is purged; none may survive it anywhere.
const ERASED: [&str; 5] = ["Quintero", "glaucoma", "penicillin", "Vallecas", "Lakeside"];

fn id(v: &Value) -> String {
    v["id"].as_str().unwrap().to_owned()
}

fn of_entity<'a>(events: &'a [Value], id: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["entity_id"] == id).collect()
}

fn assert_erased(what: &str, text: &str) {
    for word in ERASED {
        assert!(!text.contains(word), "{what} still holds {word:?}");
    }
}

#[tokio::test]
async fn a_purge_by_subject_erases_every_trace_and_keeps_the_audit_honest() {
    let app = spawn_app_with(&format!("[privacy]\naudit_key = \"{AUDIT_KEY}\"\n")).await;
    let health = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let other_tenant = app.client(TENANT_B_HEALTH).await;

    // What is about the subject: an episode (consolidation extracts two facts from it), a
    // fact and the version that superseded it (with metadata), a rule that was applied, and
    // an episode that only mentions the subject.
    let told = id(&health
        .ok(
            "memory_store_episode",
            json!({"content": "Marisol Quintero: I am allergic to penicillin. I live in Vallecas.",
                   "butler": "health"}),
        )
        .await);
    let first = id(&health
        .ok(
            "memory_store_fact",
            json!({"subject": "Marisol Quintero", "predicate": "condition",
                   "content": "glaucoma, diagnosed in March", "source_episode_id": told}),
        )
        .await);
    let second = id(&health
        .ok(
            "memory_store_fact",
            json!({"subject": "Marisol Quintero", "predicate": "condition",
                   "content": "glaucoma, treated with drops", "metadata": {"clinic": "Lakeside Eye"}}),
        )
        .await);
    let rule = id(&health
        .ok(
            "memory_store_rule",
            json!({"content": "When Marisol Quintero calls, ask how the glaucoma drops work"}),
        )
        .await);
    health
        .ok("memory_mark_helpful", json!({"rule_id": rule}))
        .await;
    let mention = id(&health
        .ok(
            "memory_store_episode",
            json!({"content": "Booked a taxi for Marisol Quintero to the eye clinic", "butler": "health"}),
        )
        .await);
    // What must survive: the tenant's other memories, and another tenant's about the same
    // subject.
    let kept = id(&health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "tea", "content": "Drinks oolong"}),
        )
        .await);
    let elsewhere = id(&other_tenant
        .ok(
            "memory_store_fact",
            json!({"subject": "Marisol Quintero", "predicate": "condition", "content": "glaucoma"}),
        )
        .await);
    admin
        .ok("memory_run_sweep", json!({"kinds": ["consolidation"]}))
        .await;
    let mut sql = app.sql().await;
    let extracted: Vec<uuid::Uuid> = sqlx::query_scalar(
        "SELECT id FROM facts WHERE tenant_id = 'tenant-a' AND source_episode_id = $1::uuid
           AND predicate <> 'condition'",
    )
    .bind(&told)
    .fetch_all(&mut sql)
    .await
    .unwrap();
    assert_eq!(
        extracted.len(),
        2,
        "consolidation extracted the episode's facts"
    );
    let job_output: bool = sqlx::query_scalar(
        "SELECT bool_or(output::text LIKE '%Vallecas%') FROM consolidation_jobs WHERE tenant_id = 'tenant-a'",
    )
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert!(job_output, "the job's output quotes the episode");
    // Cached answers exist before the purge.
    let search = json!({"query": "glaucoma drops", "min_confidence": 0});
    let before = health.ok("memory_search", search.clone()).await;
    assert!(before.to_string().contains("glaucoma"), "{before}");
    let events_before = activity(&admin, 1000).await;

    // Only admins purge.
    let refused = health
        .err(
            "memory_purge",
            json!({"subject": "Marisol Quintero", "reason": "asked to"}),
        )
        .await;
    assert_eq!(refused["code"], "admin_only", "{refused}");

    // First the candidates, and nothing is purged.
    let candidates = admin
        .ok(
            "memory_purge",
            json!({"subject": "marisol quintero", "reason": "the user asked to be forgotten"}),
        )
        .await;
    assert_eq!(candidates["dry_run"], true);
    let listed: Vec<String> = candidates["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(id)
        .collect();
    let mut about = vec![
        told.clone(),
        first.clone(),
        second.clone(),
        rule.clone(),
        mention.clone(),
    ];
    about.extend(extracted.iter().map(|u| u.to_string()));
    for wanted in &about {
        assert!(listed.contains(wanted), "{wanted} in {candidates}");
    }
    assert!(!listed.contains(&kept) && !listed.contains(&elsewhere));
    let subject_match = candidates["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == second.as_str())
        .unwrap();
    assert_eq!(subject_match["matched"], "subject");
    assert!(subject_match["preview"].as_str().unwrap().contains("drops"));
    health
        .ok("memory_get", json!({"type": "fact", "id": second}))
        .await;

    // A confirmation names only candidates.
    let stray = admin
        .err(
            "memory_purge",
            json!({"subject": "Marisol Quintero", "confirm": [kept], "reason": "oops"}),
        )
        .await;
    assert_eq!(stray["code"], "not_a_candidate", "{stray}");

    // The confirmed purge. Confirming the newer fact takes its earlier version too.
    let confirm: Vec<&String> = about.iter().filter(|i| **i != first).collect();
    let reason = "the user asked to be forgotten";
    let purged = admin
        .ok(
            "memory_purge",
            json!({"subject": "Marisol Quintero", "confirm": confirm, "reason": reason}),
        )
        .await;
    assert_eq!(purged["dry_run"], false);
    assert_eq!(
        purged["counts"],
        json!({"episodes": 2, "facts": 4, "rules": 1}),
        "{purged}"
    );
    assert!(
        purged["events_rewritten"].as_u64().unwrap() >= 7,
        "{purged}"
    );
    let purge_id = purged["purge_id"].as_str().unwrap().to_owned();
    let hashes: Vec<(String, String)> = purged["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (id(r), r["content_hash"].as_str().unwrap().to_owned()))
        .collect();
    // The hash is HMAC-SHA-256 under the audit key of what was erased: whoever holds the key
    // can check a suspected text against it.
    let (_, rule_hash) = hashes.iter().find(|(i, _)| *i == rule).unwrap();
    let erased = r#"{"tags": [], "content": "When Marisol Quintero calls, ask how the glaucoma drops work", "metadata": {}, "original_content": null}"#;
    assert_eq!(
        rule_hash,
        &butler_memory_actors::purge_content_hash(
            AUDIT_KEY.as_bytes(),
            "tenant-a",
            butler_memory_actors::MemoryType::Rule,
            rule.parse().unwrap(),
            erased
        )
    );

    // Gone from every answer: reads by id, search (whose answers were cached), context.
    for (memory_type, gone) in [
        ("episode", &told),
        ("fact", &first),
        ("fact", &second),
        ("rule", &rule),
    ] {
        let err = admin
            .err("memory_get", json!({"type": memory_type, "id": gone}))
            .await;
        assert_eq!(err["code"], "not_found");
    }
    let found = health.ok("memory_search", search).await;
    assert_erased("memory_search", &found.to_string());
    let context = health
        .ok(
            "memory_context",
            json!({"trigger_prompt": "What about Marisol Quintero and her glaucoma?", "butler": "health"}),
        )
        .await;
    assert_erased("memory_context", &context.to_string());
    assert_eq!(
        other_tenant
            .ok("memory_get", json!({"type": "fact", "id": elsewhere}))
            .await["content"],
        "glaucoma"
    );

    // The stream: every earlier event is still there, in order, its content erased; each
    // purged record ends with its purged event; the rest is untouched.
    let events_after = activity(&admin, 1000).await;
    assert_erased("the audit stream", &json!(events_after).to_string());
    let ids = |events: &[Value]| -> Vec<i64> {
        events.iter().map(|e| e["id"].as_i64().unwrap()).collect()
    };
    assert_eq!(
        ids(&events_after)[..events_before.len()],
        ids(&events_before)[..]
    );
    assert_eq!(events_after.len(), events_before.len() + 7);
    for gone in &about {
        let history = of_entity(&events_after, gone);
        let last = history.last().unwrap();
        assert!(
            last["event_type"].as_str().unwrap().ends_with("_purged"),
            "{last}"
        );
        assert_eq!(last["payload"]["purge_id"], purge_id.as_str());
        assert_eq!(last["payload"]["reason"], reason);
        assert_eq!(last["actor"], "admin:a-admin");
        assert!(history.len() >= 2, "{gone}: {history:?}");
        let owned: Vec<Value> = history.into_iter().cloned().collect();
        assert_eq!(replay(&owned), None, "a purged record replays to gone");
    }
    let created = of_entity(&events_after, &second)[0];
    assert_eq!(created["payload"]["after"]["content"], "[purged]");
    assert_eq!(created["payload"]["after"]["validity"], "active");
    assert_eq!(
        of_entity(&events_after, &kept),
        of_entity(&events_before, &kept)
    );

    // No trace in a full dump of the database, while what was kept is there.
    let dump = pg_dump(&app.database().0);
    assert!(dump.contains("oolong") && dump.contains("[purged]"));
    let without_other_tenant: String = dump
        .lines()
        .filter(|line| !line.contains("tenant-b"))
        .collect::<Vec<_>>()
        .join("\n");
    assert_erased("the database dump", &without_other_tenant);

    // The stream still refuses every other change, even with the purge's flag set.
    for statement in [
        "UPDATE memory_events SET payload = '{}' WHERE tenant_id = 'tenant-a'",
        "DELETE FROM memory_events WHERE tenant_id = 'tenant-a'",
        "TRUNCATE memory_events",
    ] {
        let err = sqlx::query(statement).execute(&mut sql).await.unwrap_err();
        assert!(
            err.to_string().contains("append-only"),
            "{statement}: {err}"
        );
    }
    let err = sqlx::query(
        "DO $$ BEGIN
             PERFORM set_config('butler_memory.purging', 'on', true);
             UPDATE memory_events SET payload = payload || '{\"reason\": \"forged\"}'
             WHERE tenant_id = 'tenant-a';
         END $$",
    )
    .execute(&mut sql)
    .await
    .unwrap_err();
    assert!(err.to_string().contains("append-only"), "{err}");

    // Purging what is gone finds nothing.
    let again = admin
        .err(
            "memory_purge",
            json!({"type": "fact", "id": second, "reason": "twice"}),
        )
        .await;
    assert_eq!(again["code"], "not_found");
    app.stop().await;
}

#[tokio::test]
async fn purging_a_butler_or_the_tenant_leaves_everyone_else() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let general = app.client(TENANT_A_GENERAL).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let other_tenant = app.client(TENANT_B_HEALTH).await;
    for (client, butler) in [(&health, "health"), (&general, "general")] {
        for n in 0..3 {
            client
                .ok(
                    "memory_store_episode",
                    json!({"content": format!("{butler} episode {n}"), "butler": butler}),
                )
                .await;
        }
        client
            .ok(
                "memory_store_fact",
                json!({"subject": "user", "predicate": format!("{butler}_pref"), "content": "tea"}),
            )
            .await;
    }
    admin
        .ok(
            "memory_store_rule",
            json!({"content": "A rule of the tenant, no butler's"}),
        )
        .await;
    let theirs = id(&other_tenant
        .ok(
            "memory_store_episode",
            json!({"content": "health episode of tenant b", "butler": "health"}),
        )
        .await);

    let dry = admin
        .ok(
            "memory_purge",
            json!({"butler": "health", "reason": "retired", "dry_run": true}),
        )
        .await;
    assert_eq!(
        dry["counts"],
        json!({"episodes": 3, "facts": 1, "rules": 0})
    );
    assert_eq!(dry["records"].as_array().unwrap().len(), 4);
    let purged = admin
        .ok(
            "memory_purge",
            json!({"butler": "health", "reason": "retired"}),
        )
        .await;
    assert_eq!(purged["counts"], dry["counts"]);
    let after = admin.ok("memory_stats", json!({})).await;
    assert_eq!(after["episodes"]["total"], 3, "{after}");
    assert_eq!(after["facts"]["total"], 1, "{after}");
    assert_eq!(after["rules"]["total"], 1, "{after}");

    // The tenant, named as a confirmation.
    let wrong = admin
        .err("memory_purge", json!({"tenant": "tenant-b", "reason": "x"}))
        .await;
    assert_eq!(wrong["code"], "invalid_purge_target", "{wrong}");
    let two = admin
        .err(
            "memory_purge",
            json!({"tenant": "tenant-a", "butler": "general", "reason": "x"}),
        )
        .await;
    assert_eq!(two["code"], "invalid_purge_target", "{two}");
    let no_reason = admin
        .err("memory_purge", json!({"tenant": "tenant-a", "reason": " "}))
        .await;
    assert_eq!(no_reason["class"], "invalid_input", "{no_reason}");
    let all = admin
        .ok(
            "memory_purge",
            json!({"tenant": "tenant-a", "reason": "account closed"}),
        )
        .await;
    assert_eq!(
        all["counts"],
        json!({"episodes": 3, "facts": 1, "rules": 1})
    );
    let after = admin.ok("memory_stats", json!({})).await;
    for kind in ["episodes", "facts", "rules"] {
        assert_eq!(after[kind]["total"], 0, "{after}");
    }
    other_tenant
        .ok("memory_get", json!({"type": "episode", "id": theirs}))
        .await;
    app.stop().await;
}

#[tokio::test]
async fn a_purge_also_runs_over_rest_and_from_the_command_line() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let store = |subject: &'static str, content: &'static str| {
        let health = &health;
        async move {
            id(&health
                .ok(
                    "memory_store_fact",
                    json!({"subject": subject, "predicate": "phone", "content": content}),
                )
                .await)
        }
    };
    let by_rest = store("quintero", "Calls from the Quintero landline").await;
    let by_cli = store("vallecas", "Lives near Vallecas station").await;
    let post = |key: &'static str, body: Value| {
        let url = app.url("/api/memory/purge");
        async move {
            let response = reqwest::Client::new()
                .post(url)
                .header("Authorization", format!("Bearer {key}"))
                .json(&body)
                .send()
                .await
                .unwrap();
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        }
    };
    let body = json!({"type": "fact", "id": by_rest, "reason": "asked over REST"});
    let (status, refused) = post(TENANT_A_HEALTH, body.clone()).await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (403, Some("admin_only"))
    );
    let (status, purged) = post(TENANT_A_ADMIN, body).await;
    assert_eq!(status, 200, "{purged}");
    assert_eq!(purged["counts"]["facts"], 1);
    let (status, both) = post(
        TENANT_A_ADMIN,
        json!({"butler": "health", "tenant": "tenant-a", "reason": "x"}),
    )
    .await;
    assert_eq!(
        (status, both["code"].as_str()),
        (400, Some("invalid_purge_target"))
    );

    // From the command line, on the same database: candidates first, then the confirmed.
    let dir = tempfile::tempdir().unwrap();
    let config = crate::binary::write_config(dir.path(), "");
    let (url, _) = app.database();
    let cli = |args: &[&str]| {
        crate::binary::run_cli(&config, args, &[("BUTLER_MEMORY_DATABASE_URL", &url)])
    };
    let listed = cli(&[
        "purge",
        "--tenant",
        "tenant-a",
        "--subject",
        "vallecas",
        "--reason",
        "asked by letter",
    ]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["dry_run"], true);
    assert_eq!(listed["records"][0]["id"], by_cli.as_str());
    let done = cli(&[
        "purge",
        "--tenant",
        "tenant-a",
        "--subject",
        "vallecas",
        "--confirm",
        &by_cli,
        "--reason",
        "asked by letter",
    ]);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let done: Value = serde_json::from_slice(&done.stdout).unwrap();
    assert_eq!(done["counts"]["facts"], 1, "{done}");
    let gone = admin
        .err("memory_get", json!({"type": "fact", "id": by_cli}))
        .await;
    assert_eq!(gone["code"], "not_found");
    let last = activity(&admin, 1000).await.pop().unwrap();
    assert_eq!(last["event_type"], "fact_purged");
    assert_eq!(last["actor"], "operator:cli");
    assert_eq!(last["payload"]["reason"], "asked by letter");
    let two = cli(&[
        "purge", "--tenant", "tenant-a", "--butler", "health", "--all", "--reason", "x",
    ]);
    assert!(!two.status.success());
    app.stop().await;
}
