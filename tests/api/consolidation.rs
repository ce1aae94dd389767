//! Consolidation through MCP: with the heuristic extractor, episodes become facts and rules
//! with provenance and events, every episode ends consolidated, and a second run creates
//! nothing twice; with an LLM extractor (a local server speaking the OpenAI protocol), facts
//! are created, superseded, confirmed and linked, failures are retried with backoff then
//! dead-lettered, one refused episode does not stop its batch, and a backlog over its trigger
//! is consolidated between cron runs. The endpoint's limits and TLS: `llm_endpoint.rs`.

use serde_json::{Value, json};

use crate::helpers::*;
use crate::llm_server::{LlmServer, Script, llm_server};

pub(crate) async fn consolidate(admin: &McpClient) -> Value {
    admin
        .ok("memory_run_sweep", json!({"kinds": ["consolidation"]}))
        .await
}

#[tokio::test]
async fn episodes_become_facts_and_rules_once() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let first = mcp
        .ok(
            "memory_store_episode",
            json!({"content": "Hi, my name is Ada. I'm allergic to peanuts. Always check labels before suggesting snacks.", "butler": "health"}),
        )
        .await;
    mcp.ok(
        "memory_store_episode",
        json!({"content": "We chatted about the weather.", "butler": "health"}),
    )
    .await;
    let report = consolidate(&admin).await;
    let changes = &report["reports"][0]["changes"];
    assert_eq!(changes["episodes_consolidated"], 2, "{report}");
    assert_eq!(changes["facts_created"], 2, "{report}");
    assert_eq!(changes["rules_created"], 1, "{report}");

    // The fact is retrievable, tied to its episode by id and by a derived_from link.
    app.engine().flush().await.unwrap();
    let recalled = mcp
        .ok("memory_recall", json!({"topic": "peanut allergy"}))
        .await;
    let fact = recalled["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["type"] == "fact")
        .cloned()
        .expect("the allergy fact is recalled");
    assert_eq!(fact["content"], "Allergic to peanuts", "{recalled}");
    let got = mcp
        .ok("memory_get", json!({"type": "fact", "id": fact["id"]}))
        .await;
    assert_eq!(got["source_episode_id"], first["id"]);
    assert_eq!(got["permanence"], "permanent");
    assert_eq!(
        got["links"]["outbound"][0]["relation"], "derived_from",
        "{got}"
    );
    // Every episode ends in exactly one terminal state, and every change is audited with
    // actor `consolidation`.
    let mut db = app.sql().await;
    let statuses: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT consolidation_status FROM episodes")
            .fetch_all(&mut db)
            .await
            .unwrap();
    assert_eq!(statuses, vec!["consolidated".to_owned()]);
    let events: i64 =
        sqlx::query_scalar("SELECT count(*) FROM memory_events WHERE actor = 'consolidation'")
            .fetch_one(&mut db)
            .await
            .unwrap();
    assert_eq!(events, 5, "two facts, a rule and two episodes consolidated");

    // Nothing is pending: a second run creates nothing.
    let again = consolidate(&admin).await;
    assert!(
        again["reports"][0]["changes"]
            .as_object()
            .unwrap()
            .is_empty(),
        "{again}"
    );
    // The same facts said again confirm instead of duplicating.
    mcp.ok(
        "memory_store_episode",
        json!({"content": "I'm allergic to peanuts, as you know.", "butler": "health"}),
    )
    .await;
    let restated = consolidate(&admin).await;
    assert_eq!(
        restated["reports"][0]["changes"]["facts_confirmed"], 1,
        "{restated}"
    );
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM facts WHERE predicate = 'allergic_to_peanuts' AND validity = 'active'",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(live, 1);
    let jobs: Vec<String> = sqlx::query_scalar("SELECT status FROM consolidation_jobs")
        .fetch_all(&mut db)
        .await
        .unwrap();
    assert_eq!(jobs, vec!["succeeded".to_owned(), "succeeded".to_owned()]);
    app.stop().await;
}

pub(crate) fn llm_config(server: &LlmServer) -> String {
    format!(
        "[consolidation]\nextractor = \"llm\"\nmax_attempts = 4\nretry_base_secs = 60.0\nretry_max_secs = 600.0\n\
         [consolidation.llm]\nbase_url = \"{}\"\nmodel = \"test-model\"\ntimeout_ms = 500\n",
        server.base_url
    )
}

#[tokio::test]
async fn the_llm_extractor_creates_supersedes_confirms_and_links() {
    let server = llm_server(vec![Script::Happy]).await;
    let app = spawn_app_with(&llm_config(&server)).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let city = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "city", "content": "Lives in Lyon"}),
        )
        .await;
    let name = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "name", "content": "Name is Ada"}),
        )
        .await;
    mcp.ok(
        "memory_store_episode",
        json!({"content": "Ada moved from Lyon to Nantes on 2 March 2026 and had oolong tea after a long day.", "butler": "health"}),
    )
    .await;
    let report = consolidate(&admin).await;
    let changes = &report["reports"][0]["changes"];
    assert_eq!(changes["episodes_consolidated"], 1, "{report}");
    // The tea fact is new; the city update supersedes the live city fact.
    assert_eq!(changes["facts_created"], 1, "{report}");
    assert_eq!(changes["rules_created"], 1, "{report}");
    assert_eq!(changes["facts_confirmed"], 1, "{report}");
    // The request followed the protocol: a JSON schema response format, temperature 0, the
    // episode and the shard's facts related to it as reference, labelled.
    let request = server.requests.lock().unwrap()[0].clone();
    assert_eq!(request["model"], "test-model");
    assert_eq!(request["temperature"], 0);
    assert_eq!(request["response_format"]["type"], "json_schema");
    let messages = request["messages"].as_array().unwrap();
    let user = messages.last().unwrap()["content"].as_str().unwrap();
    assert!(user.contains(": user | city | Lives in Lyon\n"), "{user}");
    assert!(user.contains(": user | name | Name is Ada\n"), "{user}");
    assert_eq!(changes["facts_superseded"], 1, "{report}");
    let old = mcp
        .ok("memory_get", json!({"type": "fact", "id": city["id"]}))
        .await;
    assert_eq!(old["validity"], "superseded");
    let confirmed = mcp
        .ok("memory_get", json!({"type": "fact", "id": name["id"]}))
        .await;
    assert_eq!(confirmed["validity"], "active");
    let mut db = app.sql().await;
    let live_city: String = sqlx::query_scalar(
        "SELECT content FROM facts WHERE predicate = 'city' AND validity = 'active'",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(live_city, "Lives in Nantes");
    // The move's date, words of the episode the extractor named, starts the new fact; Lyon,
    // recorded today (after it), was then never true. The tea fact states no date: the
    // episode's.
    type Validity = (
        chrono::DateTime<chrono::Utc>,
        Option<chrono::DateTime<chrono::Utc>>,
    );
    let validity = |predicate: &'static str, validity: &'static str| {
        sqlx::query_as::<_, Validity>(
            "SELECT valid_from, valid_until FROM facts WHERE predicate = $1 AND validity = $2",
        )
        .bind(predicate)
        .bind(validity)
    };
    let (nantes_from, _) = validity("city", "active").fetch_one(&mut db).await.unwrap();
    assert_eq!(nantes_from.to_rfc3339(), "2026-03-02T00:00:00+00:00");
    let (lyon_from, lyon_until) = validity("city", "superseded")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(lyon_until, Some(lyon_from));
    // What the model understood, kept with the fact.
    let statement: String = sqlx::query_scalar(
        "SELECT metadata->>'statement' FROM facts WHERE predicate = 'favourite_tea'",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(statement, "user favourite_tea Likes oolong tea");
    let (tea_from, _) = validity("favourite_tea", "active")
        .fetch_one(&mut db)
        .await
        .unwrap();
    let told: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("SELECT created_at FROM episodes")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(tea_from, told);
    // The model is told who speaks; the service, not the model, reads the episode's times.
    assert!(
        user.contains("\nEpisode (speaker: user):\nAda moved"),
        "{user}"
    );
    let confirmed_by: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM memory_events
         WHERE event_type = 'fact_confirmed' AND actor = 'consolidation' AND entity_id = $1::uuid",
    )
    .bind(name["id"].as_str().unwrap())
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(confirmed_by, 1);
    let derived: i64 =
        sqlx::query_scalar("SELECT count(*) FROM memory_links WHERE relation = 'derived_from'")
            .fetch_one(&mut db)
            .await
            .unwrap();
    assert_eq!(derived, 3, "two facts and a rule point at their episode");
    let contradicts: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM memory_links WHERE relation = 'contradicts' AND target_id = $1::uuid",
    )
    .bind(city["id"].as_str().unwrap())
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(contradicts, 1, "the known fact the answer's label named");
    app.stop().await;
}

pub(crate) async fn episode_state(db: &mut sqlx::PgConnection) -> (String, i32, Option<String>) {
    sqlx::query_as(
        "SELECT consolidation_status, consolidation_attempts, last_consolidation_error FROM episodes",
    )
    .fetch_one(db)
    .await
    .unwrap()
}

#[tokio::test]
async fn failed_extractions_are_retried_with_backoff_then_dead_lettered() {
    let server = llm_server(vec![
        Script::Malformed,
        Script::SchemaInvalid,
        Script::RateLimited,
        Script::Slow,
        Script::Happy,
    ])
    .await;
    let clock = std::sync::Arc::new(butler_memory_actors::ManualClock::new(
        chrono::DateTime::parse_from_rfc3339("2026-05-01T09:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc),
    ));
    let app = spawn_app_at(&llm_config(&server), clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let episode = mcp
        .ok(
            "memory_store_episode",
            json!({"content": "A day at the beach with oolong tea.", "butler": "health"}),
        )
        .await;
    let mut db = app.sql().await;
    let expected = [
        "not JSON",
        "does not match the schema",
        "HTTP 429",
        "did not answer",
    ];
    for (attempt, error) in expected.iter().enumerate() {
        let report = consolidate(&admin).await;
        let (status, attempts, last) = episode_state(&mut db).await;
        assert_eq!(attempts as usize, attempt + 1, "{report}");
        assert!(last.as_deref().unwrap_or("").contains(error), "{last:?}");
        if attempt + 1 < expected.len() {
            assert_eq!(status, "pending");
            // Not due before its backoff: another run now does nothing.
            let idle = consolidate(&admin).await;
            assert!(
                idle["reports"][0]["changes"]
                    .as_object()
                    .unwrap()
                    .is_empty(),
                "{idle}"
            );
            clock.advance(chrono::Duration::minutes(15));
        } else {
            assert_eq!(status, "dead_letter", "{report}");
            assert_eq!(report["reports"][0]["changes"]["episodes_dead_lettered"], 1);
        }
    }
    let dead: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM memory_events WHERE event_type = 'episode_dead_lettered' AND entity_id = $1::uuid",
    )
    .bind(episode["id"].as_str().unwrap())
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(dead, 1);
    // Nothing was persisted by any failed attempt.
    let facts: i64 = sqlx::query_scalar("SELECT count(*) FROM facts")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(facts, 0);
    // An admin sees the dead letter and its last error, and puts it back in the queue;
    // the next run (the endpoint has recovered) consolidates it.
    let listed = admin.ok("memory_dead_letters", json!({})).await;
    assert_eq!(listed["count"], 1, "{listed}");
    assert!(
        listed["episodes"][0]["last_consolidation_error"]
            .as_str()
            .unwrap()
            .contains("did not answer")
    );
    let err = mcp.err("memory_dead_letters", json!({})).await;
    assert_eq!(err["class"], "forbidden");
    let requeued = admin.ok("memory_requeue_dead_letters", json!({})).await;
    assert_eq!(requeued["count"], 1);
    let report = consolidate(&admin).await;
    assert_eq!(
        report["reports"][0]["changes"]["episodes_consolidated"], 1,
        "{report}"
    );
    let (status, _, _) = episode_state(&mut db).await;
    assert_eq!(status, "consolidated");
    // What the episode told was true when it was told, not when it was consolidated.
    let told: chrono::DateTime<chrono::Utc> =
        chrono::DateTime::parse_from_rfc3339(episode["created_at"].as_str().unwrap())
            .unwrap()
            .with_timezone(&chrono::Utc);
    let validity: Vec<(chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as("SELECT valid_from, created_at FROM facts")
            .fetch_all(&mut db)
            .await
            .unwrap();
    assert!(!validity.is_empty(), "the extraction stored facts");
    for (valid_from, created_at) in validity {
        assert_eq!(valid_from, told);
        assert!(created_at > told, "consolidated later than told");
    }
    app.stop().await;
}

#[tokio::test]
async fn a_backlog_over_its_trigger_is_consolidated_between_cron_runs() {
    let app = spawn_app_with(
        "[lifecycle]\nscheduler_tick_ms = 50\ncatch_up_missed_runs = false\n\
         [consolidation]\ntrigger_backlog_size = 3\n",
    )
    .await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    for i in 0..3 {
        mcp.ok(
            "memory_store_episode",
            json!({"content": format!("I live in Town{i}"), "butler": "health"}),
        )
        .await;
    }
    let mut db = app.sql().await;
    // The backlog is consolidated.
    eventually(std::time::Duration::from_secs(10), || async {
        let pending: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM episodes WHERE consolidation_status = 'pending'",
        )
        .fetch_one(&mut app.sql().await)
        .await
        .unwrap();
        match pending {
            0 => Ok(()),
            n => Err(format!("{n} episodes pending")),
        }
    })
    .await
    .unwrap();
    let city: String = sqlx::query_scalar(
        "SELECT content FROM facts WHERE predicate = 'lives_in' AND validity = 'active'",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(city, "Lives in Town2", "the newest statement holds");
    app.stop().await;
}

/// The episodes' consolidation states, oldest first.
async fn states(db: &mut sqlx::PgConnection) -> Vec<(String, String)> {
    sqlx::query_as("SELECT content, consolidation_status FROM episodes ORDER BY created_at, id")
        .fetch_all(db)
        .await
        .unwrap()
}

async fn failed_events(db: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM memory_events WHERE event_type = 'episode_failed'")
        .fetch_one(db)
        .await
        .unwrap()
}

/// An input the extractor refuses (an HTTP 4xx other than 408 and 429) is `failed` at
/// once, with an event and the reason; in a batch, only the episode refused on its own is,
/// and the others are consolidated.
#[tokio::test]
async fn an_episode_the_extractor_refuses_is_failed_and_the_rest_of_its_batch_goes_on() {
    let server = llm_server(vec![Script::RefusePoison]).await;
    let app = spawn_app_with(&llm_config(&server)).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    for content in [
        "Tea at noon.",
        "A poison pen letter arrived.",
        "A walk by the river.",
    ] {
        mcp.ok(
            "memory_store_episode",
            json!({"content": content, "butler": "health"}),
        )
        .await;
    }
    let report = consolidate(&admin).await;
    let changes = &report["reports"][0]["changes"];
    assert_eq!(changes["episodes_failed"], 1, "{report}");
    assert_eq!(changes["episodes_consolidated"], 2, "{report}");
    let mut db = app.sql().await;
    assert_eq!(
        states(&mut db).await,
        [
            ("Tea at noon.".to_owned(), "consolidated".to_owned()),
            (
                "A poison pen letter arrived.".to_owned(),
                "failed".to_owned()
            ),
            ("A walk by the river.".to_owned(), "consolidated".to_owned()),
        ]
    );
    assert_eq!(failed_events(&mut db).await, 1);
    let (error,): (Option<String>,) = sqlx::query_as(
        "SELECT last_consolidation_error FROM episodes WHERE consolidation_status = 'failed'",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert!(error.unwrap().contains("HTTP 400"));
    // A failed episode is not tried again.
    let again = consolidate(&admin).await;
    assert!(
        again["reports"][0]["changes"]
            .as_object()
            .unwrap()
            .is_empty(),
        "{again}"
    );
    app.stop().await;
}

/// An input the extractor keeps answering wrongly (not JSON, not the schema) is retried,
/// and when its attempts run out it is `failed`, not dead-lettered: the endpoint was up,
/// the input is what it cannot process.
#[tokio::test]
async fn an_input_answered_wrongly_every_time_ends_failed() {
    let server = llm_server(vec![Script::Malformed, Script::SchemaInvalid]).await;
    let clock = std::sync::Arc::new(butler_memory_actors::ManualClock::new(
        chrono::DateTime::parse_from_rfc3339("2026-05-01T09:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc),
    ));
    let app = spawn_app_at(&llm_config(&server), clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    mcp.ok(
        "memory_store_episode",
        json!({"content": "Garbled notes.", "butler": "health"}),
    )
    .await;
    let mut db = app.sql().await;
    for attempt in 1..=4 {
        let report = consolidate(&admin).await;
        let (status, attempts, _) = episode_state(&mut db).await;
        assert_eq!(attempts, attempt, "{report}");
        let expected = if attempt < 4 { "pending" } else { "failed" };
        assert_eq!(status, expected, "{report}");
        clock.advance(chrono::Duration::minutes(15));
    }
    assert_eq!(failed_events(&mut db).await, 1);
    let dead: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM memory_events WHERE event_type = 'episode_dead_lettered'",
    )
    .fetch_one(&mut db)
    .await
    .unwrap();
    assert_eq!(dead, 0);
    app.stop().await;
}
