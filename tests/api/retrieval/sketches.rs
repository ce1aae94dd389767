//! The second stage's token sketches live in tables of their own beside the memory rows
//! (migration 32), and only as long as the row, its text and its model: a purged fact or
//! rule takes its sketch, a row whose embedding was cleared (its text changed) is not
//! measured from its old sketch, and a row embedded again with the second stage off loses
//! the one it had; the second stage turned on over rows embedded without it stores their
//! sketches, at the pace `indexer.walk_rows_per_sec` sets. (A retired month's episodes take
//! theirs: tests/api/episode_partitions.rs.)

use std::collections::HashMap;

use butler_memory_actors::MemoryType;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::*;

fn id(answer: &Value) -> Uuid {
    answer["id"].as_str().unwrap().parse().unwrap()
}

/// The ids with a sketch stored in `table`, in id order.
async fn sketched(app: &TestApp, table: &str) -> Vec<Uuid> {
    let sql = format!("SELECT id FROM {table} ORDER BY id");
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .fetch_all(&mut app.sql().await)
        .await
        .unwrap()
}

/// Every row's embedding, as text, in id order.
async fn embeddings(app: &TestApp) -> Vec<(Uuid, Option<String>)> {
    sqlx::query_as(
        "SELECT id, embedding::text FROM episodes UNION ALL SELECT id, embedding::text FROM facts
         UNION ALL SELECT id, embedding::text FROM rules ORDER BY 1",
    )
    .fetch_all(&mut app.sql().await)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_sketch_lives_as_long_as_its_row_its_text_and_its_model() {
    let app = spawn_app_with("[retrieval.rerank]\nenabled = true\n").await;
    let health = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let mut episodes = Vec::new();
    for content in [
        "Walked the dog by the canal",
        "Baked rye bread for the market",
    ] {
        episodes.push(id(&health
            .ok(
                "memory_store_episode",
                json!({"butler": "health", "content": content}),
            )
            .await));
    }
    episodes.sort();
    let fact = id(&health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "bakes", "content": "The user bakes rye bread"}),
        )
        .await);
    let rule = id(&health
        .ok(
            "memory_store_rule",
            json!({"content": "Ask about the market before suggesting recipes"}),
        )
        .await);
    app.engine().flush().await.unwrap();
    assert_eq!(sketched(&app, "episode_sketches").await, episodes);
    assert_eq!(sketched(&app, "fact_sketches").await, [fact]);
    assert_eq!(sketched(&app, "rule_sketches").await, [rule]);
    // The rows' own shape does not change with the second stage: no sketch column.
    let columns: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.columns
         WHERE table_name IN ('episodes', 'facts', 'rules') AND column_name LIKE '%sketch%'",
    )
    .fetch_one(&mut app.sql().await)
    .await
    .unwrap();
    assert_eq!(columns, 0);

    // Purged, a fact and a rule take their sketches.
    for (memory_type, id) in [("fact", fact), ("rule", rule)] {
        admin
            .ok(
                "memory_purge",
                json!({"type": memory_type, "id": id, "reason": "asked to"}),
            )
            .await;
    }
    assert!(sketched(&app, "fact_sketches").await.is_empty());
    assert!(sketched(&app, "rule_sketches").await.is_empty());
    assert_eq!(sketched(&app, "episode_sketches").await, episodes);

    // A row whose embedding was cleared (as a changed text clears it) loses its sketch with
    // it: the second stage would read its new text instead.
    let (kept, changed) = (episodes[0], episodes[1]);
    let mut sql = app.sql().await;
    let version: i16 =
        sqlx::query_scalar("SELECT embedding_version_id FROM episodes WHERE id = $1")
            .bind(kept)
            .fetch_one(&mut sql)
            .await
            .unwrap();
    sqlx::query("UPDATE episodes SET embedding = NULL, embedding_version_id = NULL WHERE id = $1")
        .bind(changed)
        .execute(&mut sql)
        .await
        .unwrap();
    let of_episodes = HashMap::from([(MemoryType::Episode, episodes.clone())]);
    let read = app
        .engine()
        .store()
        .token_sketches("tenant-a", &of_episodes, version)
        .await
        .unwrap();
    assert_eq!(read.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [kept]);
    assert_eq!(sketched(&app, "episode_sketches").await, [kept]);
    // Nor by another model's number.
    let other = app
        .engine()
        .store()
        .token_sketches("tenant-a", &of_episodes, version + 1)
        .await
        .unwrap();
    assert!(other.is_empty());
    let database = (app.db_url.clone(), app.db.clone());
    app.stop().await;

    // Embedded again by a service with the second stage off: the old sketch goes, the
    // other row's stays.
    let app = spawn_on_database(database, |config| {
        config.engine.retrieval.rerank.enabled = false;
    })
    .await;
    app.engine().flush().await.unwrap();
    let embedded: Option<i16> =
        sqlx::query_scalar("SELECT embedding_version_id FROM episodes WHERE id = $1")
            .bind(changed)
            .fetch_one(&mut app.sql().await)
            .await
            .unwrap();
    assert_eq!(embedded, Some(version));
    assert_eq!(sketched(&app, "episode_sketches").await, [kept]);
    // Meanwhile a fact and a rule, embedded without sketches.
    let health = app.client(TENANT_A_HEALTH).await;
    let fact = id(&health
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "walks", "content": "The user walks the dog daily"}),
        )
        .await);
    let rule = id(&health
        .ok(
            "memory_store_rule",
            json!({"content": "Suggest walks along the canal"}),
        )
        .await);
    app.engine().flush().await.unwrap();
    assert!(sketched(&app, "fact_sketches").await.is_empty());
    let before = embeddings(&app).await;
    let database = (app.db_url.clone(), app.db.clone());
    app.stop().await;

    // The second stage turned on over that store: the indexer walks the tables and stores
    // the missing sketches, from each row's own text (the embeddings stay as they were).
    let app = spawn_on_database(database, |config| {
        config.engine.retrieval.rerank.enabled = true;
    })
    .await;
    app.engine().flush().await.unwrap();
    assert_eq!(sketched(&app, "episode_sketches").await, episodes);
    assert_eq!(sketched(&app, "fact_sketches").await, [fact]);
    assert_eq!(sketched(&app, "rule_sketches").await, [rule]);
    assert_eq!(embeddings(&app).await, before);
    let backfilled: f64 = app
        .metrics()
        .await
        .lines()
        .filter(|l| l.starts_with("butler_memory_sketches_backfilled_total{"))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum();
    assert!(backfilled >= 3.0, "{backfilled}");
    app.stop().await;
}

/// The walk that stores the sketches of rows embedded while the second stage was off keeps
/// to `indexer.walk_rows_per_sec`: kept to a pace it steps a batch at a time, and with
/// batches of four rows at half a row a second the second batch waits eight seconds from
/// the first's beginning; a flush waits it out and finds every sketch stored.
#[tokio::test]
async fn the_sketch_walk_keeps_to_its_pace() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    for n in 0..8 {
        health
            .ok(
                "memory_store_episode",
                json!({"butler": "health", "content": format!("Watered the plants on day {n}")}),
            )
            .await;
    }
    app.engine().flush().await.unwrap();
    assert!(sketched(&app, "episode_sketches").await.is_empty());
    let database = (app.db_url.clone(), app.db.clone());
    app.stop().await;

    let app = spawn_on_database(database, |config| {
        config.engine.retrieval.rerank.enabled = true;
        config.engine.indexer.batch_size = std::num::NonZeroU32::new(4).unwrap();
        config.engine.indexer.walk_rows_per_sec = 0.5;
    })
    .await;
    let first = eventually(std::time::Duration::from_secs(60), || async {
        match sketched(&app, "episode_sketches").await.len() {
            0 => Err("no batch sketched yet".to_owned()),
            n => Ok(n),
        }
    })
    .await
    .unwrap();
    assert_eq!(first, 4, "one batch of four rows a step");
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        sketched(&app, "episode_sketches").await.len(),
        4,
        "the next step waits for the pace"
    );
    app.engine().flush().await.unwrap();
    assert_eq!(sketched(&app, "episode_sketches").await.len(), 8);
    app.stop().await;
}

/// The last migration before the sketches moved out of the rows.
const SKETCHES_IN_ROWS: i64 = 20261122000031;

#[tokio::test]
async fn the_migration_moves_stored_sketches_beside_their_rows() {
    let (_database, pool) = database_at(SKETCHES_IN_ROWS).await;
    let version = registered_model(&pool).await;
    // Two embedded episodes with sketches, one embedded without, one whose embedding was
    // cleared with its sketch left behind (as sealing in place left it).
    sqlx::query(
        "INSERT INTO episodes (id, tenant_id, butler, content, created_at, last_referenced_at,
                               expires_at, embedding, embedding_version_id, token_sketch)
         SELECT ('00000000-0000-7000-8000-00000000000' || i)::uuid, 'tenant-a', 'health',
                'Episode ' || i, now(), now(), now() + interval '1 year',
                CASE WHEN i < 4 THEN array_fill(0.05::real, ARRAY[384])::vector END,
                CASE WHEN i < 4 THEN $1::smallint END,
                CASE WHEN i IN (1, 2, 4) THEN decode('01' || repeat('ab', 64), 'hex') END
         FROM generate_series(1, 4) AS i",
    )
    .bind(version)
    .execute(&pool)
    .await
    .unwrap();

    butler_memory_actors::MIGRATOR.run(&pool).await.unwrap();
    let moved: Vec<(Uuid, i16, i32)> = sqlx::query_as(
        "SELECT id, embedding_version_id, length(sketch) FROM episode_sketches ORDER BY id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let id = |i: u8| {
        format!("00000000-0000-7000-8000-00000000000{i}")
            .parse()
            .unwrap()
    };
    assert_eq!(moved, [(id(1), version, 65), (id(2), version, 65)]);
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.columns
         WHERE table_name = 'episodes' AND column_name = 'token_sketch'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(left, 0);
}
