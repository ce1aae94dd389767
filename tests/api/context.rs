//! memory_context and memory_context_batch through MCP: the format, the hard token
//! budget, determinism, rule ordering, and batches.

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use butler_memory_actors::TokenCounter;
use butler_memory_actors::TokenizerCounter;
use chrono::Duration;
use serde_json::json;

use crate::helpers::*;

fn counter() -> TokenizerCounter {
    TokenizerCounter::load(&base_config("").engine.retrieval.context.tokenizer_path).unwrap()
}

#[tokio::test]
async fn the_block_has_sections_annotations_and_its_ids() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let name = mcp
        .ok("memory_store_fact", json!({"subject": "user", "predicate": "name", "content": "John", "permanence": "permanent", "importance": 9}))
        .await;
    let diet = mcp
        .ok("memory_store_fact", json!({"subject": "user", "predicate": "dietary_restriction", "content": "Lactose intolerant", "permanence": "stable", "scope": "health"}))
        .await;
    let rule = mcp
        .ok(
            "memory_store_rule",
            json!({"content": "Suggest lactose-free recipes", "scope": "health"}),
        )
        .await;
    clock.advance(Duration::hours(2));
    let episode = mcp
        .ok(
            "memory_store_episode",
            json!({"content": "Asked for a dinner recipe\nwithout dairy", "butler": "health"}),
        )
        .await;
    clock.advance(Duration::days(2));
    app.engine().flush().await.unwrap();

    let ctx = mcp
        .ok("memory_context", json!({"trigger_prompt": "Plan dinner for tonight", "butler": "health", "request_context": {"request_id": "ctx-1"}}))
        .await;
    let text = ctx["text"].as_str().unwrap();
    let expected_lines = [
        "## Your Memory",
        "### What You Know (Facts)",
        "- user name: John [permanent, global, confirmed 2d ago]",
        "- user dietary restriction: Lactose intolerant [stable, health, confirmed 2d ago]",
        "### How To Behave (Rules)",
        "- Suggest lactose-free recipes [candidate, health]",
        "### Recent Context (Episodes)",
        "- [2d ago] Asked for a dinner recipe without dairy",
    ];
    for line in expected_lines {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        );
    }
    let order: Vec<usize> = expected_lines
        .iter()
        .map(|l| text.find(l).unwrap())
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "sections in order:\n{text}"
    );
    assert_eq!(ctx["sections"]["rules"], json!([rule["id"]]));
    assert_eq!(ctx["sections"]["episodes"], json!([episode["id"]]));
    let facts = ctx["sections"]["facts"].as_array().unwrap();
    assert!(facts.contains(&name["id"]) && facts.contains(&diet["id"]));
    assert_eq!(ctx["token_budget"], 3000);
    assert_eq!(
        ctx["tokens_used"].as_u64().unwrap() as usize,
        counter().count(text)
    );
    assert_eq!(ctx["dropped"], 0);
    assert_eq!(ctx["butler"], "health");
    assert_eq!(ctx["request_context"]["request_id"], "ctx-1");

    // Another butler's key cannot build health's context.
    let general = app.client(TENANT_A_GENERAL).await;
    let err = general
        .err(
            "memory_context",
            json!({"trigger_prompt": "x", "butler": "health"}),
        )
        .await;
    assert_eq!(err["class"], "forbidden");
    app.stop().await;
}

#[tokio::test]
async fn identical_state_and_request_give_identical_bytes() {
    // Two answers computed independently: the result cache is off, and the second answer
    // comes from another service on the same data (its own caches and hash seeds).
    let uncached = "[retrieval]\nworkers = 2\nembed_timeout_ms = 5000\nresult_cache_size = 0\n";
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at(uncached, clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    for i in 0..12 {
        mcp.ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": format!("p{i}"), "content": format!("Fact number {i} about the garden and tea")}),
        )
        .await;
        mcp.ok(
            "memory_store_episode",
            json!({"content": format!("Session {i} about tea"), "butler": "health"}),
        )
        .await;
    }
    app.engine().flush().await.unwrap();
    let request =
        json!({"trigger_prompt": "tea in the garden", "butler": "health", "token_budget": 120});
    let answer = |mut body: serde_json::Value| {
        body.as_object_mut().unwrap().remove("request_context");
        body.to_string()
    };
    let first = answer(mcp.ok("memory_context", request.clone()).await);
    let again = answer(mcp.ok("memory_context", request.clone()).await);
    let beside = spawn_beside(&app, uncached, clock.clone()).await;
    let elsewhere = answer(
        beside
            .client(TENANT_A_HEALTH)
            .await
            .ok("memory_context", request.clone())
            .await,
    );
    assert_eq!(first, again, "computed twice by one service");
    assert_eq!(first, elsewhere, "computed by another service");
    let body: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert!(
        body["dropped"].as_u64().unwrap() > 0,
        "the small budget dropped candidates"
    );
    beside.stop().await;
    app.stop().await;
}

/// A deterministic pseudo-random stream (no extra crate needed for a test).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[tokio::test]
async fn the_token_budget_is_never_exceeded() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let words = [
        "tea",
        "garden",
        "doctor",
        "appointment",
        "Maria",
        "birthday",
        "tulips",
        "recipe",
        "dairy",
        "walk",
        "morning",
        "ünïcödé",
        "日本",
        "emoji🌷",
        "x-ray",
        "2026-05-01",
        "invoice#42",
        "lactose",
        "Volvo",
        "nurse",
    ];
    let mut rng = Lcg(7);
    let sentence = |rng: &mut Lcg, max: u64| -> String {
        (0..1 + rng.next(max))
            .map(|_| words[rng.next(words.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
    };
    for i in 0..40 {
        let content = sentence(&mut rng, 40);
        mcp.ok(
            "memory_store_fact",
            json!({"subject": "user", "predicate": format!("f{i}"), "content": content}),
        )
        .await;
    }
    for _ in 0..10 {
        let content = sentence(&mut rng, 30);
        mcp.ok("memory_store_rule", json!({"content": content}))
            .await;
        let content = sentence(&mut rng, 60);
        mcp.ok(
            "memory_store_episode",
            json!({"content": content, "butler": "health"}),
        )
        .await;
    }
    app.engine().flush().await.unwrap();
    let counter = counter();
    for _ in 0..25 {
        let budget = 1 + rng.next(1500);
        let prompt = sentence(&mut rng, 10);
        let ctx = mcp
            .ok(
                "memory_context",
                json!({"trigger_prompt": prompt, "butler": "health", "token_budget": budget}),
            )
            .await;
        let text = ctx["text"].as_str().unwrap();
        let counted = counter.count(text) as u64;
        assert!(
            counted <= budget,
            "{counted} tokens > budget {budget}:\n{text}"
        );
        assert_eq!(ctx["tokens_used"].as_u64().unwrap(), counted);
        let included: usize = ["facts", "rules", "episodes"]
            .iter()
            .map(|s| ctx["sections"][s].as_array().unwrap().len())
            .sum();
        assert_eq!(
            included as u64 + ctx["dropped"].as_u64().unwrap(),
            ctx["candidates"].as_u64().unwrap()
        );
    }
    let err = mcp
        .err(
            "memory_context",
            json!({"trigger_prompt": "x", "butler": "health", "token_budget": 0}),
        )
        .await;
    assert_eq!(err["code"], "invalid_token_budget");
    app.stop().await;
}

/// Text a tokenizer undercounts cannot carry the block past its budget: a 30,000-character
/// word is one unknown token to MiniLM's WordPiece, but the block still holds at most about
/// eight bytes per token of budget, and a long memory is cut to a line.
#[tokio::test]
async fn pathological_text_cannot_bypass_the_budget() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    mcp.ok(
        "memory_store_fact",
        json!({"subject": "user", "predicate": "password_hint", "importance": 10,
               "content": format!("tea{}", "z".repeat(30_000))}),
    )
    .await;
    mcp.ok(
        "memory_store_fact",
        json!({"subject": "user", "predicate": "drink", "content": "Likes green tea"}),
    )
    .await;
    app.engine().flush().await.unwrap();
    for budget in [200, 3000] {
        let block = mcp
            .ok(
                "memory_context",
                json!({"trigger_prompt": "tea", "butler": "health", "token_budget": budget}),
            )
            .await;
        let text = block["text"].as_str().unwrap();
        assert!(block["tokens_used"].as_u64().unwrap() <= budget, "{block}");
        assert!(
            text.len() <= 8 * budget as usize,
            "budget {budget}: {} bytes of text for {} tokens",
            text.len(),
            block["tokens_used"]
        );
        assert!(text.contains("Likes green tea"), "{text}");
    }
    app.stop().await;
}

#[tokio::test]
async fn rules_come_by_maturity_with_anti_patterns_as_warnings() {
    let app = spawn_app().await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let mut ids = Vec::new();
    for content in [
        "Greet the user by name",
        "Confirm before sending messages",
        "Offer a summary at the end",
        "Send reminders at 6am",
    ] {
        ids.push(
            mcp.ok("memory_store_rule", json!({"content": content}))
                .await["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let mut sql = app.sql().await;
    for (id, maturity) in [(&ids[1], "proven"), (&ids[2], "established")] {
        sqlx::query("UPDATE rules SET maturity = $2 WHERE id = $1::uuid")
            .bind(id)
            .bind(maturity)
            .execute(&mut sql)
            .await
            .unwrap();
    }
    sqlx::query(
        "UPDATE rules SET maturity = 'anti_pattern', original_content = content,
         content = 'ANTI-PATTERN: Do NOT send reminders at 6am. This caused problems because: woke the user'
         WHERE id = $1::uuid",
    )
    .bind(&ids[3])
    .execute(&mut sql)
    .await
    .unwrap();
    app.engine().flush().await.unwrap();
    let ctx = mcp
        .ok(
            "memory_context",
            json!({"trigger_prompt": "How should I behave?", "butler": "health"}),
        )
        .await;
    let text = ctx["text"].as_str().unwrap();
    let rules: Vec<&str> = text
        .split("### How To Behave (Rules)\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with("- "))
        .collect();
    assert_eq!(
        rules,
        vec![
            "- Confirm before sending messages [proven, global]",
            "- Offer a summary at the end [established, global]",
            "- Greet the user by name [candidate, global]",
            "- Avoid: ANTI-PATTERN: Do NOT send reminders at 6am. This caused problems because: woke the user [anti_pattern, global]",
        ],
        "{text}"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_batch_answers_in_request_order_and_each_request_on_its_own() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("", clock).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    admin.ok("memory_store_fact", json!({"subject": "user", "predicate": "sport", "content": "Plays tennis", "scope": "health"})).await;
    admin.ok("memory_store_fact", json!({"subject": "user", "predicate": "bank", "content": "Banks with Nordea", "scope": "general"})).await;
    admin
        .ok(
            "memory_store_episode",
            json!({"content": "Booked a tennis court", "butler": "health"}),
        )
        .await;
    app.engine().flush().await.unwrap();
    let requests = vec![
        json!({"trigger_prompt": "tennis this week", "butler": "health"}),
        json!({"trigger_prompt": "pay the bills", "butler": "general", "token_budget": 200}),
        json!({"trigger_prompt": "anything", "butler": "not a name"}),
        json!({"trigger_prompt": "tennis again", "butler": "health", "token_budget": 50}),
        // The first prompt again: embedded once, its vector serving both.
        json!({"trigger_prompt": "tennis this week", "butler": "health", "token_budget": 60}),
    ];
    let batch = admin
        .ok("memory_context_batch", json!({"requests": requests}))
        .await;
    let results = batch["results"].as_array().unwrap();
    assert_eq!(results.len(), 5);
    assert_eq!(results[2]["error"]["class"], "invalid_input");
    for i in [0, 1, 3, 4] {
        assert_eq!(results[i]["degraded"], false, "request {i}: {}", results[i]);
    }
    for i in [0, 1, 3, 4] {
        let mut single = admin.ok("memory_context", requests[i].clone()).await;
        single.as_object_mut().unwrap().remove("request_context");
        assert_eq!(results[i], single, "request {i}");
    }
    assert!(
        results[0]["text"]
            .as_str()
            .unwrap()
            .contains("Plays tennis")
    );
    assert!(
        !results[0]["text"].as_str().unwrap().contains("Nordea"),
        "scoped to its butler"
    );
    assert!(results[1]["text"].as_str().unwrap().contains("Nordea"));
    let err = admin
        .err("memory_context_batch", json!({"requests": []}))
        .await;
    assert_eq!(err["code"], "invalid_batch");
    app.stop().await;
}

#[test]
fn the_model_tokenizer_counts_a_block_as_the_sum_of_its_lines() {
    // memory_context sums line counts instead of tokenizing the block again; that is exact
    // only if no token spans a newline. Lines as a block can hold them, awkward ones included.
    let counter = counter();
    assert!(
        counter.additive(),
        "MiniLM's tokenizer splits at whitespace"
    );
    let lines = [
        "## Your Memory\n",
        "\n### What You Know (Facts)\n",
        "- user name: John [permanent, global, confirmed 2d ago]\n",
        "- café crème, naïve façade — “quotes” and ‘apostrophes’ [stable, health]\n",
        "- 東京で寿司を食べた。北京烤鸭也很好吃！[standard, global]\n",
        "- emoji 🎉🍣 and a zero\u{200b}width space, tab\there [12d ago]\n",
        "\n### Recent Context (Episodes)\n",
        "- [5m] x=1;y=2 && echo \"ok\" | grep -v 'no' (parens) [brackets] {braces}\n",
        "- [3h] control\u{7}bell and soft\u{ad}hyphen, ﬁ ligature, İstanbul\n",
    ];
    let sum: usize = lines.iter().map(|l| counter.count(l)).sum();
    assert_eq!(counter.count(&lines.concat()), sum);
}

/// Diversity in the block and in search: a rule restating one above it moves below a
/// different rule, which it outranked; the first statement stays where it was.
#[tokio::test]
async fn a_restated_rule_goes_below_a_different_one() {
    let clock = Arc::new(ManualClock::new(t0()));
    let app = spawn_app_at("", clock.clone()).await;
    let mcp = app.client(TENANT_A_HEALTH).await;
    let mut ids = Vec::new();
    for content in [
        "Always confirm with the user before sending an email",
        "Always confirm with the user before sending emails",
        "Keep replies short and friendly",
    ] {
        let rule = mcp
            .ok(
                "memory_store_rule",
                json!({"content": content, "importance": 5}),
            )
            .await;
        ids.push(rule["id"].as_str().unwrap().to_owned());
        clock.advance(Duration::minutes(1));
    }
    app.engine().flush().await.unwrap();
    let position = |list: &[String], id: &str| list.iter().position(|x| x == id).unwrap();
    let block = mcp
        .ok(
            "memory_context",
            json!({"trigger_prompt": "Confirm with the user before sending the email", "butler": "health"}),
        )
        .await;
    let rules: Vec<String> = serde_json::from_value(block["sections"]["rules"].clone()).unwrap();
    assert_eq!(rules.len(), 3, "{block}");
    let (first, second) = if position(&rules, &ids[0]) < position(&rules, &ids[1]) {
        (&ids[0], &ids[1])
    } else {
        (&ids[1], &ids[0])
    };
    assert_eq!(position(&rules, first), 0, "{rules:?}");
    assert_eq!(position(&rules, &ids[2]), 1, "{rules:?}");
    assert_eq!(position(&rules, second), 2, "{rules:?}");

    let found = mcp
        .ok(
            "memory_search",
            json!({"query": "confirm with the user before sending the email", "types": ["rule"], "limit": 3}),
        )
        .await;
    let found = result_ids(&found);
    assert_eq!(found.len(), 3, "{found:?}");
    assert_eq!(
        found[1], ids[2],
        "the different rule comes second: {found:?}"
    );
    app.stop().await;
}
