//! Reads' reference counts, tallied beside a recently referenced record and written into one
//! whose `last_referenced_at` is older than `shards.reference_date_resolution_secs`; a
//! record read, an export and a deletion see the tally (migration 33).

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use sqlx::PgConnection;

use crate::bundle::export;
use crate::helpers::*;

fn at(value: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(value.as_str().unwrap())
        .unwrap()
        .with_timezone(&Utc)
}

/// The fact's own row: its written count and date.
async fn record(sql: &mut PgConnection, id: &str) -> (i32, DateTime<Utc>) {
    sqlx::query_as("SELECT reference_count, last_referenced_at FROM facts WHERE id = $1::uuid")
        .bind(id)
        .fetch_one(sql)
        .await
        .unwrap()
}

/// The reads tallied beside the record, if any.
async fn tally(sql: &mut PgConnection, id: &str) -> Option<(i32, DateTime<Utc>)> {
    sqlx::query_as("SELECT reads, last_read_at FROM memory_reads WHERE memory_id = $1::uuid")
        .bind(id)
        .fetch_optional(sql)
        .await
        .unwrap()
}

#[tokio::test]
async fn reads_are_tallied_beside_a_recent_record_and_written_into_a_stale_one() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let fact = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "drink", "content": "green tea every morning"}),
        )
        .await;
    let id = fact["id"].as_str().unwrap();
    let search = json!({"query": "green tea", "types": ["fact"]});
    let mut sql = app.sql().await;

    // Read a minute after it was stored: the record was referenced (stored) within the
    // hour, so the read is tallied and the record's row is left as it was.
    clock.advance(Duration::minutes(1));
    let found = mcp.ok("memory_search", search.clone()).await;
    assert_eq!(result_ids(&found), vec![id.to_owned()]);
    app.engine().flush().await.unwrap();
    assert_eq!(record(&mut sql, id).await, (0, t0()));
    assert_eq!(
        tally(&mut sql, id).await,
        Some((1, t0() + Duration::minutes(1)))
    );
    // A record read shows both, as if written.
    let got = mcp
        .ok("memory_get", json!({"type": "fact", "id": id}))
        .await;
    assert_eq!(got["reference_count"], 1, "{got}");
    assert_eq!(at(&got["last_referenced_at"]), t0() + Duration::minutes(1));
    app.engine().flush().await.unwrap();
    assert_eq!(
        tally(&mut sql, id).await.unwrap().0,
        2,
        "the get counted too"
    );

    // Two hours on, the record's date is older than the resolution: the read writes the
    // record, with the tally folded in, and the tally is gone.
    clock.advance(Duration::hours(2));
    mcp.ok("memory_search", search).await;
    app.engine().flush().await.unwrap();
    let later = t0() + Duration::minutes(121);
    assert_eq!(record(&mut sql, id).await, (3, later));
    assert_eq!(tally(&mut sql, id).await, None);
    let got = mcp
        .ok("memory_get", json!({"type": "fact", "id": id}))
        .await;
    assert_eq!(got["reference_count"], 3, "{got}");

    // That get is tallied again (the record was written just now); an export carries it.
    app.engine().flush().await.unwrap();
    assert_eq!(tally(&mut sql, id).await, Some((1, later)));
    let bundle = export(&app, TENANT_A_ADMIN, "").await.text().await.unwrap();
    let exported: Value = bundle
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .find(|line| line["row"]["id"] == id)
        .expect("the fact exported");
    assert_eq!(exported["row"]["reference_count"], 4, "{exported}");
    assert_eq!(at(&exported["row"]["last_referenced_at"]), later);
    app.stop().await;
}

#[tokio::test]
async fn with_no_resolution_every_read_writes_its_record() {
    let app = spawn_app_with("[shards]\nreference_date_resolution_secs = 0").await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let fact = mcp
        .ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": "city", "content": "Lisbon"}),
        )
        .await;
    let id = fact["id"].as_str().unwrap();
    mcp.ok("memory_get", json!({"type": "fact", "id": id}))
        .await;
    app.engine().flush().await.unwrap();
    let mut sql = app.sql().await;
    assert_eq!(record(&mut sql, id).await.0, 1);
    assert_eq!(tally(&mut sql, id).await, None);
    app.stop().await;
}

#[tokio::test]
async fn a_purged_record_takes_its_tally() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let mut ids = Vec::new();
    for content in ["Walked the dog by the river", "Booked a table for Friday"] {
        let episode = mcp
            .ok(
                "memory_store_episode",
                json!({"content": content, "butler": "health"}),
            )
            .await;
        ids.push(episode["id"].as_str().unwrap().to_owned());
    }
    for id in &ids {
        mcp.ok("memory_get", json!({"type": "episode", "id": id}))
            .await;
    }
    app.engine().flush().await.unwrap();
    let mut sql = app.sql().await;
    let tallied = || {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM memory_reads WHERE memory_id = ANY($1::uuid[])",
        )
        .bind(
            ids.iter()
                .map(|id| id.parse::<uuid::Uuid>().unwrap())
                .collect::<Vec<_>>(),
        )
    };
    assert_eq!(tallied().fetch_one(&mut sql).await.unwrap(), 2);
    admin
        .ok(
            "memory_purge",
            json!({"butler": "health", "reason": "retired"}),
        )
        .await;
    assert_eq!(tallied().fetch_one(&mut sql).await.unwrap(), 0);
    app.stop().await;
}
