//! Cursor pages under concurrent writes: facts, rules and episodes walked page by page
//! while another task keeps storing new ones. Every record that existed before the walk
//! began is on exactly one page, and no page repeats a record: new rows get newer ids and
//! land before the cursor, so they never shift what is still to come.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;

use crate::helpers::*;

/// Records of each type before the walk.
const EXISTING: usize = 24;
/// Records per page: several pages, the last one partial.
const PAGE: usize = 5;

async fn store(client: &McpClient, kind: &str, n: usize) {
    let (tool, args) = match kind {
        "facts" => (
            "memory_store_fact",
            json!({"subject": format!("item {n}"), "predicate": "colour", "content": format!("Item {n} is blue")}),
        ),
        "rules" => (
            "memory_store_rule",
            json!({"content": format!("Rule number {n}: tidy up")}),
        ),
        _ => (
            "memory_store_episode",
            json!({"content": format!("Episode number {n}"), "butler": "health"}),
        ),
    };
    client.ok(tool, args).await;
}

#[tokio::test]
async fn pages_walked_during_inserts_show_every_earlier_record_once() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    for kind in ["facts", "rules", "episodes"] {
        for n in 0..EXISTING {
            store(&health, kind, n).await;
        }
    }
    for kind in ["facts", "rules", "episodes"] {
        let list = format!("/api/memory/{kind}");
        let (_, all) = rest(
            &app,
            TENANT_A_ADMIN,
            "GET",
            &format!("{list}?limit=200"),
            None,
            "before",
        )
        .await;
        let before: BTreeSet<String> = page_ids(&all).into_iter().collect();
        assert_eq!(before.len(), EXISTING, "{kind}");

        // The other task stores a record of this type again and again until told to stop.
        let stop = Arc::new(AtomicBool::new(false));
        let stored = Arc::new(AtomicUsize::new(0));
        let writer = app.client(TENANT_A_HEALTH).await;
        let inserting = {
            let (stop, stored) = (stop.clone(), stored.clone());
            tokio::spawn(async move {
                let mut n = 1000;
                while !stop.load(Ordering::Relaxed) {
                    store(&writer, kind, n).await;
                    stored.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                }
            })
        };
        let mut walked = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            // Between any two pages, at least one more record was stored.
            let seen = stored.load(Ordering::Relaxed);
            eventually(Duration::from_secs(30), || async {
                let now = stored.load(Ordering::Relaxed);
                (now > seen).then_some(()).ok_or(format!("{now} stored"))
            })
            .await
            .unwrap();
            let path = match &cursor {
                Some(c) => format!("{list}?limit={PAGE}&cursor={c}"),
                None => format!("{list}?limit={PAGE}"),
            };
            let (status, page) = rest(&app, TENANT_A_ADMIN, "GET", &path, None, "walk").await;
            assert_eq!(status, 200, "{path}: {page}");
            assert!(page_ids(&page).len() <= PAGE);
            walked.extend(page_ids(&page));
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        stop.store(true, Ordering::Relaxed);
        inserting.await.unwrap();

        let distinct: BTreeSet<&String> = walked.iter().collect();
        assert_eq!(
            distinct.len(),
            walked.len(),
            "{kind}: a record twice: {walked:?}"
        );
        let missed: Vec<&String> = before.iter().filter(|id| !distinct.contains(id)).collect();
        assert!(missed.is_empty(), "{kind}: missed {missed:?}");
        assert!(
            walked.len() / PAGE >= EXISTING / PAGE,
            "{kind}: several pages"
        );
        assert!(
            stored.load(Ordering::Relaxed) > EXISTING / PAGE,
            "{kind}: written meanwhile"
        );
    }
    app.stop().await;
}
