//! The second stage (`retrieval.rerank`), with the real model: two services on one database
//! with one pinned clock, the second stage off in one and on in the other. On, it reads the
//! first stage's top candidates again, from the token sketches the indexer stored with them
//! or, for a row without one, from its text, against the question made by the run that
//! embedded the query (a keyword search's by a run of its own, where `keyword_searches` asks
//! for it), and reorders those only, each showing its measure in `scores.rerank`; when it
//! cannot answer in time, or the model is down, the first stage's order stands and the
//! search still answers. As shipped it is on, for searches that embed their query.

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use serde_json::{Value, json};

use super::{counter, t0};
use crate::helpers::*;

const SET: usize = 5;

/// An indexer that embeds only what its own service writes (it looks for other rows once an
/// hour): the test decides which service embeds, and so whether sketches are stored.
const QUIET_INDEXER: &str = "[indexer]\npoll_interval_ms = 3600000\n";

/// The second stage off, whatever the default.
const OFF: &str = "[retrieval.rerank]\nenabled = false\n";

/// The second stage's series this file reads: candidates read from their stored sketches
/// or by the model, and questions from the query's own run or a model run of their own.
const STORED: &str = r#"butler_memory_rerank_passages_total{source="stored"}"#;
const MODEL: &str = r#"butler_memory_rerank_passages_total{source="model"}"#;
const FROM_QUERY: &str = r#"butler_memory_rerank_questions_total{source="query"}"#;
const FROM_MODEL: &str = r#"butler_memory_rerank_questions_total{source="model"}"#;

/// The second stage's counters are the test process's: its tests take turns, so that each
/// reads its own.
static COUNTERS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Episodes in sessions of their own (no neighbours, no diversity cluster), so that with
/// one clock the first stage's order is its keyword relevance alone.
async fn seed(mcp: &McpClient, contents: &[String]) {
    for (i, content) in contents.iter().enumerate() {
        mcp.ok(
            "memory_store_episode",
            json!({"butler": "health", "session_id": format!("s{i}"), "content": content}),
        )
        .await;
    }
}

async fn search(mcp: &McpClient, query: &str) -> Value {
    mcp.ok(
        "memory_search",
        json!({"query": query, "mode": "keyword", "types": ["episode"], "limit": 10}),
    )
    .await
}

fn results(answer: &Value) -> &Vec<Value> {
    answer["results"].as_array().unwrap()
}

fn measure(hit: &Value) -> Option<f64> {
    hit["scores"]["rerank"].as_f64()
}

#[tokio::test]
async fn the_second_stage_reorders_its_set_only_and_shows_its_measure() {
    let _turn = COUNTERS.lock().await;
    let clock = Arc::new(ManualClock::new(t0()));
    let first = spawn_app_at(&format!("{QUIET_INDEXER}{OFF}"), clock.clone()).await;
    let on = format!(
        "[retrieval.rerank]\nenabled = true\ncandidates = {SET}\nweight = 1.0\ntimeout_ms = 60000\nkeyword_searches = true\n"
    );
    let second = spawn_beside(&first, &on, clock.clone()).await;
    let base = second.metrics().await;
    let delta = |metrics: &str, series: &str| counter(metrics, series) - counter(&base, series);
    // Written through the service with the second stage on: its indexer embeds them and,
    // the second stage being on, stores their sketches.
    let mcp = second.client(TENANT_A_HEALTH).await;
    let contents: Vec<String> = [
        "Maya baked lemon bars for the garden party",
        "Garden, garden, garden: the garden club talked about the garden all day",
        "Maya cooked cookies for the celebration in her yard",
        "The party was loud",
        "Baking bread takes patience",
        "Party hats were cheap this year",
        "The lawn needs water",
        "The weather turned cold",
    ]
    .map(String::from)
    .into();
    seed(&mcp, &contents).await;
    second.engine().flush().await.unwrap();
    // The indexer stored a sketch with every embedding: a format byte, 64 bytes a token.
    let mut sql = first.sql().await;
    let sizes: Vec<Option<i32>> = sqlx::query_scalar(
        "SELECT length(s.sketch) FROM episodes e
         LEFT JOIN episode_sketches s ON s.tenant_id = e.tenant_id AND s.id = e.id
         ORDER BY e.content",
    )
    .fetch_all(&mut sql)
    .await
    .unwrap();
    assert_eq!(sizes.len(), contents.len());
    assert!(
        sizes
            .iter()
            .all(|s| s.is_some_and(|n| n > 64 && (n - 1) % 64 == 0)),
        "{sizes:?}"
    );
    // A hybrid search: the run that embeds the query also makes it the second stage's
    // question, and every member of the set has its sketch, so the set is measured without
    // another model run.
    let hybrid = mcp
        .ok(
            "memory_search",
            json!({"query": "who baked lemon bars for a party", "mode": "hybrid",
                   "types": ["episode"], "limit": 10}),
        )
        .await;
    let hits = results(&hybrid);
    assert!(hits.len() > SET, "{hits:?}");
    assert!(hits[..SET].iter().all(|h| measure(h).is_some()), "{hits:?}");
    assert!(hits[SET..].iter().all(|h| measure(h).is_none()), "{hits:?}");
    assert_eq!(hits[0]["content"], contents[0], "{hits:?}");
    let metrics = second.metrics().await;
    assert_eq!(delta(&metrics, STORED), SET as f64, "{metrics}");
    assert_eq!(delta(&metrics, MODEL), 0.0, "{metrics}");
    assert_eq!(delta(&metrics, FROM_QUERY), 1.0, "{metrics}");
    assert_eq!(delta(&metrics, FROM_MODEL), 0.0, "{metrics}");

    // One row as if embedded before sketches were stored: the model reads its text, and its
    // measure compares with the stored ones.
    sqlx::query(
        "DELETE FROM episode_sketches s USING episodes e
         WHERE s.tenant_id = e.tenant_id AND s.id = e.id AND e.content = $1",
    )
    .bind(&contents[2])
    .execute(&mut sql)
    .await
    .unwrap();
    let query = "what did Maya bake for the garden party";
    let before = search(&first.client(TENANT_A_HEALTH).await, query).await;
    let after = search(&mcp, query).await;
    let (before, after) = (results(&before), results(&after));
    assert_eq!(before.len(), after.len());
    assert!(
        before.len() > SET,
        "more candidates than the set: {before:?}"
    );
    let ids = |hits: &[Value]| -> Vec<String> {
        hits.iter()
            .map(|h| h["id"].as_str().unwrap().to_owned())
            .collect()
    };

    // The set is the first stage's top SET: the same memories, in another order.
    let mut set_before = ids(&before[..SET]);
    let mut set_after = ids(&after[..SET]);
    assert_ne!(set_before, set_after, "the measure reordered the set");
    set_before.sort();
    set_after.sort();
    assert_eq!(set_before, set_after, "nothing entered or left the set");
    // Below it, nothing moved and nothing was read.
    assert_eq!(ids(&before[SET..]), ids(&after[SET..]));
    assert!(after[SET..].iter().all(|h| measure(h).is_none()));
    assert!(
        before.iter().all(|h| measure(h).is_none()),
        "off: no measure"
    );

    // Weight 1: the set is in the order of its measure, and within the range the first
    // stage's relevances spanned.
    let measures: Vec<f64> = after[..SET].iter().map(|h| measure(h).unwrap()).collect();
    assert!(measures.windows(2).all(|w| w[0] >= w[1]), "{measures:?}");
    let relevance = |h: &Value| h["scores"]["relevance"].as_f64().unwrap();
    let (lo, hi) = (relevance(&before[SET - 1]), relevance(&before[0]));
    assert!(
        after[..SET]
            .iter()
            .all(|h| (lo - 1e-9..=hi + 1e-9).contains(&relevance(h)))
    );
    // The turn that answers the question covers it best, and the one that answers it in
    // other words ("cooked cookies", "celebration", "yard") rises above the one that only
    // repeats a word of it.
    assert_eq!(after[0]["content"], contents[0], "{after:?}");
    assert_eq!(after[1]["content"], contents[2], "{after:?}");
    let position =
        |hits: &[Value], content: &str| hits.iter().position(|h| h["content"] == content);
    assert!(position(before, &contents[2]) > position(before, &contents[1]));
    let metrics = second.metrics().await;
    assert_eq!(delta(&metrics, STORED), (2 * SET - 1) as f64, "{metrics}");
    assert_eq!(delta(&metrics, MODEL), 1.0, "{metrics}");
    // A keyword search embeds no query: the model reads the question as well.
    assert_eq!(delta(&metrics, FROM_MODEL), 1.0, "{metrics}");
    second.stop().await;
    first.stop().await;
}

#[tokio::test]
async fn without_an_answer_in_time_the_first_stage_order_stands() {
    let _turn = COUNTERS.lock().await;
    let clock = Arc::new(ManualClock::new(t0()));
    let first = spawn_app_at(OFF, clock.clone()).await;
    // Twenty long candidates without sketches (embedded by the service with the second
    // stage off) take the model far longer than a millisecond to read.
    let late = format!(
        "{QUIET_INDEXER}[retrieval.rerank]\nenabled = true\ncandidates = 20\ntimeout_ms = 1\nmax_model_reads = 20\nkeyword_searches = true\n"
    );
    let second = spawn_beside(&first, &late, clock.clone()).await;
    // With the default bound on model reads (4), the set is not read at all.
    let bounded = format!(
        "{QUIET_INDEXER}[retrieval.rerank]\nenabled = true\ncandidates = 20\ntimeout_ms = 60000\nkeyword_searches = true\n"
    );
    let third = spawn_beside(&first, &bounded, clock.clone()).await;
    // Their walks for rows embedded without a sketch done (over the empty tables) before the
    // rows come, so that these stay without one.
    second.engine().flush().await.unwrap();
    third.engine().flush().await.unwrap();
    let mcp = first.client(TENANT_A_HEALTH).await;
    let contents: Vec<String> = (0..24)
        .map(|i| {
            format!(
                "Entry {i} of the garden diary: {}",
                "the roses, the beans and the lemon tree were watered at dawn and again at dusk; "
                    .repeat(4)
            )
        })
        .collect();
    seed(&mcp, &contents).await;
    first.engine().flush().await.unwrap();
    let query = "when were the lemon tree and the roses watered";
    let before = search(&mcp, query).await;
    let on = second.client(TENANT_A_HEALTH).await;
    let after = search(&on, query).await;
    // Not remembered: asked again, the second stage is tried again.
    let again = search(&on, query).await;
    assert_eq!(time_free(after.clone()), time_free(again));
    assert_eq!(
        time_free(before["results"].clone()),
        time_free(after["results"].clone()),
        "the first stage's answer, unchanged"
    );
    assert!(results(&after).iter().all(|h| measure(h).is_none()));
    let skipped = counter(
        &second.metrics().await,
        r#"butler_memory_rerank_skipped_total{reason="unanswered"}"#,
    );
    assert!(skipped >= 2.0, "{skipped}");

    // Past `max_model_reads`: the first stage's order, not read, and remembered like any
    // answer (asked again, it is not tried again).
    let unsketched = r#"butler_memory_rerank_skipped_total{reason="unsketched"}"#;
    let bounded_client = third.client(TENANT_A_HEALTH).await;
    let base = third.metrics().await;
    let plain = search(&bounded_client, query).await;
    let again = search(&bounded_client, query).await;
    assert_eq!(time_free(plain.clone()), time_free(again));
    assert_eq!(
        time_free(before["results"].clone()),
        time_free(plain["results"].clone())
    );
    let metrics = third.metrics().await;
    let delta = |series: &str| counter(&metrics, series) - counter(&base, series);
    assert_eq!(delta(unsketched), 1.0, "{metrics}");
    assert_eq!(delta(MODEL), 0.0, "{metrics}");
    third.stop().await;

    // The model down: the search answers at once, in the first stage's order.
    second.engine().set_embedder_running(false).await.unwrap();
    let down = search(&on, "what was watered at dawn").await;
    let up = search(&mcp, "what was watered at dawn").await;
    assert_eq!(
        time_free(down["results"].clone()),
        time_free(up["results"].clone())
    );
    second.stop().await;
    first.stop().await;
}

/// Rows not embedded yet (the indexer behind a write burst) have no sketch: a set with more
/// of them than `max_model_reads` keeps the first stage's order, unread and counted apart
/// (`reason="unembedded"`), without its sketches looked up.
#[tokio::test]
async fn a_set_not_embedded_yet_keeps_its_order_unread() {
    let _turn = COUNTERS.lock().await;
    let app = spawn_app_with(
        "[retrieval.rerank]\nenabled = true\ncandidates = 20\nkeyword_searches = true\n",
    )
    .await;
    app.engine().set_embedder_running(false).await.unwrap();
    let mcp = app.client(TENANT_A_HEALTH).await;
    let contents: Vec<String> = (0..8)
        .map(|i| format!("Entry {i} of the garden diary: the lemon tree was watered at dawn"))
        .collect();
    seed(&mcp, &contents).await;
    let base = app.metrics().await;
    let found = search(&mcp, "when was the lemon tree watered").await;
    let metrics = app.metrics().await;
    assert_eq!(results(&found).len(), 8, "{found}");
    assert!(
        results(&found).iter().all(|h| measure(h).is_none()),
        "{found}"
    );
    let delta = |series: &str| counter(&metrics, series) - counter(&base, series);
    let unembedded = r#"butler_memory_rerank_skipped_total{reason="unembedded"}"#;
    assert!(delta(unembedded) >= 1.0, "{metrics}");
    assert_eq!(
        delta(FROM_MODEL),
        0.0,
        "no question made for a set left unread"
    );
    app.stop().await;
}

/// As shipped (`enabled`, and `keyword_searches` left at its default, off): a hybrid search
/// is read again, with the question from the run that embedded its query; a keyword search
/// keeps the keyword list's order and runs no model.
#[tokio::test]
async fn a_hybrid_search_is_read_again_and_a_keyword_search_keeps_its_order() {
    let _turn = COUNTERS.lock().await;
    let app = spawn_app_with("[retrieval.rerank]\nenabled = true\n").await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let contents: Vec<String> = [
        "Maya baked lemon bars for the garden party",
        "Maya cooked cookies for the celebration in her yard",
        "The party was loud",
        "Baking bread takes patience",
    ]
    .map(String::from)
    .into();
    seed(&mcp, &contents).await;
    app.engine().flush().await.unwrap();
    let base = app.metrics().await;
    let delta = |metrics: &str, series: &str| counter(metrics, series) - counter(&base, series);

    let hybrid = mcp
        .ok(
            "memory_search",
            json!({"query": "who baked for the party", "mode": "hybrid",
                   "types": ["episode"], "limit": 10}),
        )
        .await;
    let hits = results(&hybrid);
    assert_eq!(hits.len(), contents.len(), "{hybrid}");
    assert!(hits.iter().all(|h| measure(h).is_some()), "{hybrid}");
    let metrics = app.metrics().await;
    assert_eq!(delta(&metrics, FROM_QUERY), 1.0, "{metrics}");
    assert_eq!(delta(&metrics, STORED), contents.len() as f64, "{metrics}");

    let keyword = search(&mcp, "party").await;
    let hits = results(&keyword);
    assert_eq!(hits.len(), 2, "{keyword}");
    assert!(hits.iter().all(|h| measure(h).is_none()), "{keyword}");
    let metrics = app.metrics().await;
    assert_eq!(delta(&metrics, FROM_QUERY), 1.0, "{metrics}");
    assert_eq!(delta(&metrics, FROM_MODEL), 0.0, "no model run: {metrics}");
    app.stop().await;
}

/// An episode is read with the turns around it in its session
/// (`neighbour_share`): a reply that holds none of the question's words covers those the
/// turn it answers holds. The same reply after an unrelated turn measures lower; with the
/// share at 0 both measure alike, each read alone.
#[tokio::test]
async fn a_reply_is_read_with_the_turn_it_answers() {
    // Its searches count in the second stage's series, which the other tests read.
    let _turn = COUNTERS.lock().await;
    const REPLY: &str = "We went hiking up to the lake";
    for share in [0.7, 0.0] {
        let app = spawn_app_with(&format!(
            "[retrieval.rerank]\nenabled = true\ntimeout_ms = 60000\nneighbour_share = {share}\n"
        ))
        .await;
        let mcp = app.client(TENANT_A_HEALTH).await;
        for (session, asked) in [
            ("asked", "What did you do on Sunday afternoon?"),
            ("other", "The printer is out of toner again"),
        ] {
            for content in [asked, REPLY] {
                mcp.ok(
                    "memory_store_episode",
                    json!({"butler": "health", "session_id": session, "content": content}),
                )
                .await;
            }
        }
        app.engine().flush().await.unwrap();
        let answer = mcp
            .ok(
                "memory_search",
                json!({"query": "What did you do on Sunday afternoon?", "types": ["episode"],
                       "limit": 10}),
            )
            .await;
        let reply = |session: &str| {
            results(&answer)
                .iter()
                .find(|h| h["content"] == REPLY && h["session_id"] == session)
                .and_then(measure)
                .unwrap_or_else(|| panic!("the reply in {session}, measured: {answer}"))
        };
        let (answering, elsewhere) = (reply("asked"), reply("other"));
        if share > 0.0 {
            assert!(
                answering > elsewhere + 0.1,
                "read with the question it answers: {answering} against {elsewhere}"
            );
        } else {
            assert_eq!(answering, elsewhere, "each read alone: {answer}");
        }
        app.stop().await;
    }
}
