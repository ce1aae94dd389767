//! Instances as processes on one database: `kill -9` of one in the middle of a burst sent to
//! both loses no acknowledged write (and the shard's order has no gap), and the survivor
//! keeps running the shard's sweeps and its consolidation; work the dead one held is taken
//! over after the lease.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::Connection;

use crate::binary::{Service, write_config};
use crate::helpers::*;

/// An instance of the binary on the database at `url`, named `name`: sweeps and
/// consolidation every two seconds, leases of two seconds.
fn instance(dir: &std::path::Path, url: &str, name: &str) -> Service {
    let config = write_config(
        dir,
        &format!(
            "[lifecycle]\ninstance_id = \"{name}\"\nscheduler_tick_ms = 100\nlease_secs = 2\n\
             decay_sweep_cron = \"*/2 * * * * *\"\nconsolidation_cron = \"*/2 * * * * *\"\n"
        ),
    );
    Service::start_with(&config, &[("BUTLER_MEMORY_DATABASE_URL", url)])
}

#[tokio::test]
async fn a_killed_instance_loses_no_acknowledged_write_and_the_survivor_keeps_sweeping() {
    let (url, db) = fresh_database().await;
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut p1 = instance(one.path(), &url, "p1");
    let p2 = instance(two.path(), &url, "p2");

    // Eight writers, half to each instance, store episodes of one shard back to back and
    // keep every acknowledged id, until told to stop (or their instance is gone).
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..8)
        .map(|w| {
            let base = if w % 2 == 0 { p1.base.clone() } else { p2.base.clone() };
            let (acked, stop) = (acked.clone(), stop.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let sent = client
                        .post(format!("{base}/mcp"))
                        .header("Authorization", format!("Bearer {TENANT_A_HEALTH}"))
                        .header("Accept", "application/json, text/event-stream")
                        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                      "params": {"name": "memory_store_episode", "arguments":
                                          {"content": format!("burst {w}/{i}"), "butler": "health"}}}))
                        .send()
                        .await;
                    let Ok(response) = sent else { return };
                    let Ok(body) = response.json::<Value>().await else { return };
                    if body["result"]["isError"] == true {
                        continue;
                    }
                    let id = body["result"]["structuredContent"]["id"].as_str().unwrap();
                    acked.lock().unwrap().push(id.to_owned());
                }
            })
        })
        .collect();
    eventually(Duration::from_secs(60), || {
        let n = acked.lock().unwrap().len();
        std::future::ready(if n >= 300 {
            Ok(())
        } else {
            Err(format!("{n} acknowledged"))
        })
    })
    .await
    .unwrap();
    p1.child.kill().unwrap();
    p1.child.wait().unwrap();
    let killed_at = chrono::Utc::now();
    // The survivor goes on taking writes for a moment, then the burst ends.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();

    // Every acknowledged episode is there, with its event, in one gapless shard order.
    let mut sql = sqlx::PgConnection::connect_with(&db).await.unwrap();
    let present: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM episodes e JOIN memory_events v
             ON v.entity_id = e.id AND v.event_type = 'episode_stored'
         WHERE e.id::text = ANY($1)",
    )
    .bind(&acked)
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(present, acked.len() as i64, "acknowledged episodes lost");
    let (numbers, head): (i64, i64) = sqlx::query_as(
        "SELECT count(DISTINCT shard_seq),
                (SELECT seq FROM shard_heads WHERE tenant_id = 'tenant-a' AND butler = 'health')
         FROM memory_events WHERE tenant_id = 'tenant-a' AND butler = 'health'",
    )
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(numbers, head, "the shard's numbers have a gap");

    // The survivor runs the shard's sweeps and consolidation after the kill, no claim of
    // the dead instance stays unfinished past its lease, and the burst's episodes (the dead
    // instance's too) are all consolidated.
    eventually(Duration::from_secs(60), || async {
        let mut sql = sqlx::PgConnection::connect_with(&db).await.unwrap();
        let (swept, consolidations, abandoned, pending): (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE kind = 'decay_sweep' AND instance_id = 'p2'
                                      AND fire_at > $1 AND finished_at IS NOT NULL
                                      AND tenant_id = 'tenant-a' AND butler = 'health'),
                    count(*) FILTER (WHERE kind = 'consolidation' AND instance_id = 'p2'
                                      AND fire_at > $1 AND finished_at IS NOT NULL
                                      AND tenant_id = 'tenant-a' AND butler = 'health'),
                    count(*) FILTER (WHERE finished_at IS NULL AND heartbeat_at < now() - interval '4 seconds'),
                    (SELECT count(*) FROM episodes WHERE tenant_id = 'tenant-a'
                         AND butler = 'health' AND consolidation_status = 'pending')
             FROM lifecycle_claims",
        )
        .bind(killed_at)
        .fetch_one(&mut sql)
        .await
        .unwrap();
        if swept >= 2 && consolidations >= 1 && abandoned == 0 && pending == 0 {
            Ok(())
        } else {
            Err(format!(
                "{swept} sweeps and {consolidations} consolidations by the survivor, \
                 {abandoned} abandoned claims, {pending} episodes pending"
            ))
        }
    })
    .await
    .unwrap();
    p2.stop().await;
}
