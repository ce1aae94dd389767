//! Changing the embedding model (memory_butler.md §5.5): rows embedded by the old model are
//! re-embedded in the background, semantic search compares vectors of the running model
//! only (a row not yet re-embedded is found by its words), and `memory_stats` and the
//! metrics show how far it has come. The service is restarted on the same database with a
//! second model file (a copy of the model recorded under another name: a different
//! `embedding_versions` row, which is all the service goes by), and back again.

use std::path::Path;

use butler_memory::config::Config;
use serde_json::{Value, json};
use sqlx::Connection;

use crate::helpers::*;

/// How many rows of each type carry which model's embedding, by model name.
async fn by_model(app: &TestApp) -> Vec<(String, String, i64)> {
    let mut db = app.sql().await;
    let rows = sqlx::query_as(
        "SELECT t, coalesce(v.model, '(none)'), count(*) FROM (
             SELECT 'episode' AS t, embedding_version_id FROM episodes
             UNION ALL SELECT 'fact', embedding_version_id FROM facts
             UNION ALL SELECT 'rule', embedding_version_id FROM rules) r
         LEFT JOIN embedding_versions v ON v.id = r.embedding_version_id
         GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    db.close().await.unwrap();
    rows
}

/// How many orchestrator memory nodes carry which model's embedding, by model name.
async fn node_models(app: &TestApp) -> Vec<(String, i64)> {
    let mut db = app.sql().await;
    let rows = sqlx::query_as(
        "SELECT coalesce(v.model, '(none)'), count(*) FROM orchestrator_memories m
         LEFT JOIN embedding_versions v ON v.id = m.embedding_version_id
         GROUP BY 1 ORDER BY 1",
    )
    .fetch_all(&mut db)
    .await
    .unwrap();
    db.close().await.unwrap();
    rows
}

/// The `embedding` breakdown of each type in `memory_stats`.
async fn embedding_states(app: &TestApp) -> Value {
    let stats = app
        .client(TENANT_A_ADMIN)
        .await
        .ok("memory_stats", json!({}))
        .await;
    json!({
        "episodes": stats["episodes"]["breakdown"]["embedding"],
        "facts": stats["facts"]["breakdown"]["embedding"],
        "rules": stats["rules"]["breakdown"]["embedding"],
    })
}

/// Ids of a semantic search's results.
async fn semantic_ids(app: &TestApp, query: &str) -> Vec<String> {
    let found = app
        .client(TENANT_A_HEALTH)
        .await
        .ok(
            "memory_search",
            json!({"query": query, "mode": "semantic", "limit": 50, "min_confidence": 0}),
        )
        .await;
    assert_eq!(found["degraded"], false, "{found}");
    found["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

/// The token sketches stored, of every type.
async fn sketches(app: &TestApp) -> i64 {
    sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM episode_sketches) + (SELECT count(*) FROM fact_sketches)
              + (SELECT count(*) FROM rule_sketches)",
    )
    .fetch_one(&mut app.sql().await)
    .await
    .unwrap()
}

/// The test configuration with the model under `name` at `path`, indexing one row per
/// batch so that the re-embedding walk takes many windows.
fn model(name: &str, path: &Path) -> impl FnOnce(&mut Config) {
    let (name, path) = (name.to_owned(), path.to_owned());
    move |config: &mut Config| {
        config.engine.embedder.model_name = name;
        config.engine.embedder.model_path = path;
        config.engine.indexer.batch_size = 1.try_into().unwrap();
        // Off, whatever the default: the first model's sketches go and no new ones come.
        config.engine.retrieval.rerank.enabled = false;
    }
}

#[tokio::test]
async fn a_model_change_re_embeds_every_row_and_searches_one_model_at_a_time() {
    let first = base_config("").engine.embedder.model_path;
    let dir = tempfile::tempdir().unwrap();
    let second = dir.path().join("second-model.onnx");
    std::fs::copy(&first, &second).unwrap();

    // The first model embeds everything, with the second stage's token sketches.
    let app = spawn_app_with("[retrieval.rerank]\nenabled = true\n").await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let mut episodes = Vec::new();
    for i in 0..20 {
        let stored = mcp
            .ok(
                "memory_store_episode",
                json!({"butler": "health", "content": format!("Walked the dog along the river, day {i}.")}),
            )
            .await;
        episodes.push(stored["id"].as_str().unwrap().to_owned());
    }
    let fact = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "pet", "content": "a spaniel called Biscuit"}),
        )
        .await;
    let fact_id = fact["id"].as_str().unwrap().to_owned();
    mcp.ok(
        "memory_store_rule",
        json!({"content": "Suggest the river path for long walks."}),
    )
    .await;
    app.client(ORCHESTRATOR_ONE)
        .await
        .ok(
            "orchestrator_remember",
            json!({"source": {"sourceType": "manual", "capturedBy": "user"},
                   "memories": [{"type": "Goal", "content": "Walk the dog twice a day"},
                                {"type": "Todo", "content": "Buy a longer lead"}]}),
        )
        .await;
    app.engine().flush().await.unwrap();
    let first_name = base_config("").engine.embedder.model_name;
    assert_eq!(node_models(&app).await, vec![(first_name.clone(), 2)]);
    assert_eq!(
        by_model(&app).await,
        vec![
            ("episode".into(), first_name.clone(), 20),
            ("fact".into(), first_name.clone(), 1),
            ("rule".into(), first_name.clone(), 1),
        ]
    );
    assert_eq!(sketches(&app).await, 22);
    let database = app.database();
    app.stop().await;

    // The second model file: every row is re-embedded with it, in windows; the
    // orchestrator's nodes too. With the second stage off, the first model's sketches go.
    let app = spawn_on_database(database.clone(), model("second-model", &second)).await;
    app.engine().flush().await.unwrap();
    assert_eq!(sketches(&app).await, 0);
    assert_eq!(
        node_models(&app).await,
        vec![("second-model".to_owned(), 2)]
    );
    assert_eq!(
        by_model(&app).await,
        vec![
            ("episode".into(), "second-model".into(), 20),
            ("fact".into(), "second-model".into(), 1),
            ("rule".into(), "second-model".into(), 1),
        ]
    );
    assert_eq!(
        embedding_states(&app).await,
        json!({"episodes": {"current": 20}, "facts": {"current": 1}, "rules": {"current": 1}})
    );
    let metrics = app.metrics().await;
    // Process-wide: no other test changes the model.
    let reembedded: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("butler_memory_reembedded_total{type=\"episode\"} "))
        .expect("the counter is exported")
        .parse()
        .unwrap();
    assert!(reembedded >= 20.0, "{reembedded}");
    let walked = semantic_ids(&app, "walking the dog by the water").await;
    assert!(walked.contains(&episodes[0]), "{walked:?}");
    assert!(
        semantic_ids(&app, "what kind of dog")
            .await
            .contains(&fact_id)
    );

    // Every vector is the running model's: semantic search no longer names the version.
    assert!(!app.engine().compares_one_model_version());

    // A row still holding the first model's vector (as if not re-embedded yet, which the
    // indexer says at start when it finds one) is left out of semantic search, found by its
    // words, and counted as stale.
    app.engine().assume_other_model_vectors();
    let mut db = app.sql().await;
    sqlx::query(
        "UPDATE episodes SET embedding_version_id =
             (SELECT id FROM embedding_versions WHERE model = $1)
         WHERE id = $2::uuid",
    )
    .bind(&first_name)
    .bind(&episodes[3])
    .execute(&mut db)
    .await
    .unwrap();
    db.close().await.unwrap();
    let walked = semantic_ids(&app, "a walk with the dog near the river").await;
    assert!(!walked.contains(&episodes[3]), "{walked:?}");
    let found = episodes.iter().filter(|e| walked.contains(e)).count();
    assert_eq!(found, 19, "the other episodes: {walked:?}");
    let hybrid = app
        .client(TENANT_A_HEALTH)
        .await
        .ok(
            "memory_search",
            json!({"query": "river day 3", "limit": 50, "min_confidence": 0}),
        )
        .await;
    assert!(
        hybrid["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["id"] == episodes[3].as_str()),
        "{hybrid}"
    );
    assert_eq!(
        embedding_states(&app).await["episodes"],
        json!({"current": 19, "stale": 1})
    );
    let database = app.database();
    app.stop().await;

    // Started again, the service finds the stale row and re-embeds it.
    let app = spawn_on_database(database.clone(), model("second-model", &second)).await;
    app.engine().flush().await.unwrap();
    assert!(!app.engine().compares_one_model_version());
    assert_eq!(
        embedding_states(&app).await["episodes"],
        json!({"current": 20})
    );
    assert!(
        semantic_ids(&app, "a stroll with the dog at the riverside")
            .await
            .contains(&episodes[3])
    );
    app.stop().await;

    // And back to the first model file: everything again.
    let app = spawn_on_database(database, model(&first_name, &first)).await;
    app.engine().flush().await.unwrap();
    assert_eq!(
        by_model(&app).await,
        vec![
            ("episode".into(), first_name.clone(), 20),
            ("fact".into(), first_name.clone(), 1),
            ("rule".into(), first_name, 1),
        ]
    );
    app.stop().await;
}
