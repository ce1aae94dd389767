//! Keyword search over the BM25 statistics kept per tenant and type: common words score but
//! only rare ones pick candidates, a new word is found at once, and counts past their window
//! are served once more while a recount runs behind the read (`butler_memory_keyword_counts_total`
//! says which counts a read waited for); a word counts each time a memory says it, wherever
//! it says it.

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::Duration;
use serde_json::json;

use super::{counter, episode, fact, ids, t0};
use crate::helpers::*;

#[tokio::test]
async fn common_words_score_but_only_rare_words_pick_keyword_candidates() {
    // Five memories make a word common here, so the bound shows with a handful of rows.
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at(
        "[retrieval]\nworkers = 2\nkeyword_common_df = 5\n",
        clock.clone(),
    )
    .await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let mut plans = Vec::new();
    for day in 0..12 {
        plans.push(
            episode(
                &mcp,
                &format!("The user asked about the plan for day {day}"),
            )
            .await,
        );
        clock.advance(Duration::minutes(1));
    }
    let search =
        |query: &str| json!({"query": query, "mode": "keyword", "types": ["episode"], "limit": 20});
    // "plan" is in twelve episodes: common. Alone, it scores its most recent five matches.
    let common = mcp.ok("memory_search", search("plan")).await;
    let mut found = ids(&common);
    found.sort();
    let mut recent = plans[7..].to_vec();
    recent.sort();
    assert_eq!(found, recent, "{common}");
    // The same across all butlers (an admin key), where no recency index serves the walk.
    let admin = app.client(TENANT_A_ADMIN).await;
    let mut all = ids(&admin.ok("memory_search", search("plan")).await);
    all.sort();
    assert_eq!(all, recent);

    // A rare word picks the candidates; the common word still adds to their scores (the
    // two have as many words, so length does not decide).
    let zucchini = episode(&mcp, "Grow zucchini on the balcony").await;
    let both = episode(&mcp, "A plan to grow zucchini").await;
    let rare = mcp.ok("memory_search", search("zucchini plan")).await;
    assert_eq!(ids(&rare), vec![both.clone(), zucchini.clone()], "{rare}");

    // A word that grows common is recounted: "zucchini" in six episodes is common too, so
    // a query of the two now scores the most recent matches of either.
    for _ in 0..4 {
        clock.advance(Duration::minutes(1));
        mcp.ok(
            "memory_store_episode",
            json!({"butler": "health", "content": "Harvest zucchini today"}),
        )
        .await;
    }
    let grown = mcp.ok("memory_search", search("zucchini plan")).await;
    assert_eq!(ids(&grown).len(), 5, "{grown}");
    assert!(!ids(&grown).contains(&plans[0]), "{grown}");
    app.stop().await;
}

#[tokio::test]
async fn a_first_fact_is_found_right_after_reads_that_saw_none() {
    // Reads skip a memory type the tenant has nothing of; the first write of that type must
    // end the skipping at once.
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    mcp.ok(
        "memory_store_episode",
        json!({"butler": "health", "content": "We talked about tea"}),
    )
    .await;
    let search = json!({"query": "green tea", "mode": "keyword"});
    let context = json!({"trigger_prompt": "Which tea?", "butler": "health"});
    let before = mcp.ok("memory_search", search.clone()).await;
    assert!(
        before["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["type"] == "episode"),
        "{before}"
    );
    mcp.ok("memory_context", context.clone()).await;

    let tea = fact(&mcp, "drink", "Drinks green tea in the afternoon").await;
    let after = mcp.ok("memory_search", search).await;
    assert!(ids(&after).contains(&tea), "{after}");
    let block = mcp.ok("memory_context", context).await;
    assert!(
        block["text"].as_str().unwrap().contains("Drinks green tea"),
        "{block}"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_word_counted_in_no_memory_finds_the_first_memory_that_has_it() {
    // Word counts are reused across writes for a while (the clock hardly moves here, so they
    // are): a word that was in no memory when counted must still find a newer one.
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("[retrieval]\nkeyword_common_df = 2\n", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    for i in 0..4 {
        episode(&mcp, &format!("Tea time number {i}")).await;
    }
    let search = |query: &str| json!({"query": query, "mode": "keyword", "types": ["episode"]});
    // "zebra" is counted now, in no memory; "tea" is common (its most recent two match).
    let before = mcp.ok("memory_search", search("zebra tea")).await;
    assert_eq!(ids(&before).len(), 2, "{before}");
    assert!(ids(&mcp.ok("memory_search", search("zebra")).await).is_empty());

    // A millisecond later: the newest episode, well inside the counts' trust window.
    clock.advance(Duration::milliseconds(1));
    let zebra = episode(&mcp, "A zebra crossed the road").await;
    assert_eq!(
        ids(&mcp.ok("memory_search", search("zebra")).await),
        vec![zebra.clone()]
    );
    let both = mcp.ok("memory_search", search("zebra tea")).await;
    assert_eq!(
        ids(&both).first(),
        Some(&zebra),
        "the rare word ranks first: {both}"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_word_count_past_its_window_is_served_once_more_and_recounted_behind_the_read() {
    // Counts over a small corpus are trusted for a second after a write; for a second more
    // a read uses them as they are and a recount runs behind it, so no read waits for one.
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("[retrieval]\nkeyword_common_df = 5\n", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    for i in 0..40 {
        episode(&mcp, &format!("Watered the garden bed number {i}")).await;
    }
    let mut zucchini = Vec::new();
    for i in 0..2 {
        zucchini.push(episode(&mcp, &format!("Picked zucchini batch {i}")).await);
    }
    let search = json!({"query": "zucchini", "mode": "keyword", "types": ["episode"], "limit": 20});
    // Words counted, by whether a read waited (the process's series: other tests' reads
    // count too, so only what this test's reads add is asserted, at least).
    let waited = r#"butler_memory_keyword_counts_total{waiting="read"}"#;
    let behind = r#"butler_memory_keyword_counts_total{waiting="none"}"#;
    let before = app.metrics().await;
    // Counted now, while the read waits: two of 42 memories, a rare word.
    assert_eq!(ids(&mcp.ok("memory_search", search.clone()).await).len(), 2);
    let first = app.metrics().await;
    assert!(
        counter(&first, waited) >= counter(&before, waited) + 1.0,
        "{first}"
    );

    // 1.5 s on, five more: seven of 47 would make the word common (only the five most
    // recent matches score), but the count is within its second window.
    clock.advance(Duration::milliseconds(1500));
    for i in 2..7 {
        zucchini.push(episode(&mcp, &format!("Picked zucchini batch {i}")).await);
    }
    // Everything embedded first: no write moves the tenant's generation after this read,
    // so only the recount landing can keep its answer from being served again.
    app.engine().flush().await.unwrap();
    let stale = mcp.ok("memory_search", search.clone()).await;
    let mut found = ids(&stale);
    found.sort();
    let mut all = zucchini.clone();
    all.sort();
    assert_eq!(found, all, "served with the old count (rare): {stale}");

    // The recount behind that read lands; then the word is common.
    let recounted = eventually(std::time::Duration::from_secs(30), || async {
        let result = mcp.ok("memory_search", search.clone()).await;
        if ids(&result).len() == 5 {
            Ok(result)
        } else {
            Err(result.to_string())
        }
    })
    .await
    .unwrap();
    let mut found = ids(&recounted);
    found.sort();
    let mut recent = zucchini[2..].to_vec();
    recent.sort();
    assert_eq!(found, recent, "recounted (common): {recounted}");
    let after = app.metrics().await;
    assert!(
        counter(&after, behind) >= counter(&first, behind) + 1.0,
        "{after}"
    );
    app.stop().await;
}

/// BM25 counts how often a query word occurs in a memory, in every part of its document (a
/// fact's subject and predicate weigh `B`, its content `A`). Each pair below has the same
/// number of distinct words, and the one with more occurrences is stored first: were only
/// containment counted, the two would tie and the newer would come first.
#[tokio::test]
async fn a_word_said_more_often_scores_higher_wherever_it_is_said() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("[retrieval.score_weights]\nrecency = 0.0", clock.clone()).await;
    let mcp = app.client(TENANT_A_ADMIN).await;
    let thrice = episode(&mcp, "lantern lantern lantern harbour stone").await;
    let in_predicate_too = fact(&mcp, "lantern", "lantern harbour stone").await;
    clock.advance(Duration::minutes(5));
    let once = episode(&mcp, "lantern harbour stone").await;
    let in_content_only = fact(&mcp, "stone", "lantern harbour stone").await;
    app.engine().flush().await.unwrap();
    for (types, more, fewer) in [
        ("episode", &thrice, &once),
        ("fact", &in_predicate_too, &in_content_only),
    ] {
        let result = mcp
            .ok(
                "memory_search",
                json!({"query": "lantern", "mode": "keyword", "types": [types]}),
            )
            .await;
        assert_eq!(ids(&result), vec![more.clone(), fewer.clone()], "{result}");
        let relevance: Vec<f64> = result["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["scores"]["relevance"].as_f64().unwrap())
            .collect();
        assert!(relevance[0] > relevance[1], "{result}");
    }
    app.stop().await;
}
