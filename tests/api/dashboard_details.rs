//! What the dashboard's pages show, read as plain HTML (interaction is `browser.rs`'s):
//! the playbook's anti-pattern (turned so by harmful marks through MCP) with its warning
//! mark, scope badge, effectiveness bar and counts; facts with their confidence band
//! (green above 0.8, yellow from 0.5, red below), permanence badge and last confirmation;
//! a fact's drawer with its source butler, the rules linked to it and its versions; the
//! overview's fading, backlog and last-consolidation cards; an imported episode with when
//! it happened; and a butler's page narrowed to what that butler wrote.

use serde_json::{Value, json};

use crate::dashboard::{element, page, sign_in};
use crate::helpers::*;

fn id(v: Value) -> String {
    v["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_playbook_marks_an_anti_pattern_with_its_scope_effectiveness_and_counts() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let rule = id(health
        .ok(
            "memory_store_rule",
            json!({"content": "Suggest a cold shower before bed"}),
        )
        .await);
    let helped = id(health
        .ok(
            "memory_store_rule",
            json!({"content": "Suggest herbal tea before bed"}),
        )
        .await);
    health
        .ok("memory_mark_helpful", json!({"rule_id": rule}))
        .await;
    health
        .ok("memory_mark_helpful", json!({"rule_id": helped}))
        .await;
    let mut maturity = Value::Null;
    for reason in ["kept Ann awake", "too cold", "she refused"] {
        let marked = health
            .ok(
                "memory_mark_harmful",
                json!({"rule_id": rule, "reason": reason}),
            )
            .await;
        maturity = marked["maturity"].clone();
    }
    assert_eq!(maturity, "anti_pattern", "three harmful marks invert it");

    let cookie = sign_in(&app, TENANT_A_ADMIN).await;
    let playbook = page(&app, Some(&cookie), "/memory/playbook").await.body;
    let section = element(&playbook, r#"data-maturity="anti_pattern""#, "</section>");
    assert!(section.contains("⚠ Anti-patterns"), "{section}");
    let card = element(&playbook, &format!(r#"data-rule="{rule}""#), "</form>");
    assert!(card.contains("⚠ anti-pattern"), "the warning mark: {card}");
    assert!(card.contains("ANTI-PATTERN: Do NOT"), "{card}");
    assert!(card.contains("scope global"), "the scope badge: {card}");
    // Effectiveness 1 / (1 + 4 × 3 + 0.01): a short red bar.
    assert!(card.contains(r#"aria-label="effectiveness""#), "{card}");
    assert!(card.contains(r#"aria-valuenow="0.08""#), "{card}");
    assert!(card.contains("fill-red"), "{card}");
    assert!(
        card.contains("applied 4 · helped 1 · harmed 3"),
        "the counts: {card}"
    );
    let healthy = element(&playbook, &format!(r#"data-rule="{helped}""#), "</form>");
    assert!(!healthy.contains("⚠"), "{healthy}");
    assert!(
        healthy.contains("applied 1 · helped 1 · harmed 0"),
        "{healthy}"
    );
    assert!(healthy.contains("fill-green"), "{healthy}");
    app.stop().await;
}

#[tokio::test]
async fn an_imported_episode_shows_when_it_happened_and_a_live_one_does_not() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let imported = id(health
        .ok(
            "memory_store_episode",
            json!({"butler": "health", "content": "Planted the tulip bulbs",
                   "occurred_at": "2025-10-12T16:30:00Z"}),
        )
        .await);
    let live = id(health
        .ok(
            "memory_store_episode",
            json!({"butler": "health", "content": "Watered the tulips"}),
        )
        .await);
    let cookie = sign_in(&app, TENANT_A_ADMIN).await;
    let episodes = page(&app, Some(&cookie), "/memory/episodes").await.body;
    let row = element(
        &episodes,
        &format!(r#"data-episode="{imported}""#),
        "</details>",
    );
    assert!(row.contains("Happened"), "{row}");
    assert!(row.contains("2025-10-12 16:30 UTC"), "{row}");
    let row = element(
        &episodes,
        &format!(r#"data-episode="{live}""#),
        "</details>",
    );
    assert!(!row.contains("Happened"), "{row}");
    let drawer = page(&app, Some(&cookie), &format!("/memory/episodes/{imported}"))
        .await
        .body;
    assert!(drawer.contains("2025-10-12 16:30 UTC"), "{drawer}");
    app.stop().await;
}

#[tokio::test]
async fn facts_show_their_band_permanence_confirmation_and_provenance() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let mut by_band = Vec::new();
    for (predicate, confidence, permanence, band) in [
        ("diet", 0.95, "permanent", "green"),
        ("city", 0.6, "stable", "yellow"),
        ("hobby", 0.3, "volatile", "red"),
    ] {
        let fact = id(health
            .ok(
                "memory_store_fact",
                json!({"subject": "ann", "predicate": predicate, "content": format!("Ann {predicate} fact"),
                       "confidence": confidence, "permanence": permanence}),
            )
            .await);
        by_band.push((fact, permanence, band));
    }
    let cookie = sign_in(&app, TENANT_A_ADMIN).await;
    let facts = page(&app, Some(&cookie), "/memory/facts").await.body;
    for (fact, permanence, band) in &by_band {
        let row = element(&facts, &format!(r#"data-fact="{fact}""#), "</tr>");
        assert!(row.contains(&format!("fill-{band}")), "{band}: {row}");
        for other in ["green", "yellow", "red"].iter().filter(|b| *b != band) {
            assert!(!row.contains(&format!("fill-{other}")), "{band}: {row}");
        }
        assert!(
            row.contains(&format!(r#"class="badge {permanence}""#)),
            "{row}"
        );
        // Last confirmed: when it was stored, a moment ago, with the exact time to hover.
        assert!(row.contains("<time datetime="), "{row}");
        assert!(row.contains(" s ago") || row.contains("just now"), "{row}");
    }

    // The drawer: its source butler, the rule linked to it, every version.
    let episode = id(health
        .ok(
            "memory_store_episode",
            json!({"content": "Ann said she moved to Lisbon", "butler": "health"}),
        )
        .await);
    let first = id(health
        .ok(
            "memory_store_fact",
            json!({"subject": "ana", "predicate": "home", "content": "Lives in Porto", "source_episode_id": episode}),
        )
        .await);
    let second = id(health
        .ok(
            "memory_store_fact",
            json!({"subject": "ana", "predicate": "home", "content": "Lives in Braga"}),
        )
        .await);
    let third = id(health
        .ok(
            "memory_store_fact",
            json!({"subject": "ana", "predicate": "home", "content": "Lives in Lisbon"}),
        )
        .await);
    let rule = id(health
        .ok(
            "memory_store_rule",
            json!({"content": "Recommend cafes in Lisbon",
                   "links": [{"target_type": "fact", "target_id": third, "relation": "supports"}]}),
        )
        .await);
    let drawer = page(&app, Some(&cookie), &format!("/memory/facts/{third}"))
        .await
        .body;
    let source = element(&drawer, "<dt>Source butler</dt>", "</dd>");
    assert!(
        source.contains(r#"href="/butlers/health/memory""#) && source.contains("health"),
        "{source}"
    );
    let links = element(&drawer, "<h3>Links</h3>", "</ul>");
    assert!(
        links.contains(&format!(r#"href="/memory/rules/{rule}""#)) && links.contains("supports"),
        "the linked rule: {links}"
    );
    let versions = element(&drawer, r#"id="versions""#, "</ol>");
    let order: Vec<usize> = [&first, &second, &third]
        .iter()
        .map(|v| versions.find(v.as_str()).expect("every version"))
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "oldest first: {versions}"
    );
    assert_eq!(
        versions.matches(r#"<li class="superseded">"#).count(),
        2,
        "{versions}"
    );
    // The oldest version's drawer names the episode it came from.
    let oldest = page(&app, Some(&cookie), &format!("/memory/facts/{first}"))
        .await
        .body;
    let source = element(&oldest, "<h3>Source episode</h3>", "</p>");
    assert!(source.contains("moved to Lisbon") && source.contains("/butlers/health/memory"));
    app.stop().await;
}

#[tokio::test]
async fn the_overview_counts_fading_backlog_and_last_consolidation() {
    let app = spawn_app().await;
    let health = app.client(TENANT_A_HEALTH).await;
    let general = app.client(TENANT_A_GENERAL).await;
    let admin = app.client(TENANT_A_ADMIN).await;
    let fading = id(health
        .ok(
            "memory_store_fact",
            json!({"subject": "ann", "predicate": "mood", "content": "Ann is tired", "permanence": "volatile", "scope": "health"}),
        )
        .await);
    let theirs = id(general
        .ok(
            "memory_store_fact",
            json!({"subject": "cal", "predicate": "job", "content": "Cal is a pilot", "scope": "general"}),
        )
        .await);
    for content in ["Ann asked about tea.", "Ann went for a walk."] {
        health
            .ok(
                "memory_store_episode",
                json!({"content": content, "butler": "health"}),
            )
            .await;
    }
    general
        .ok(
            "memory_store_episode",
            json!({"content": "Cal flew to Oslo.", "butler": "general"}),
        )
        .await;
    // What the decay sweep does to a fact whose confidence has decayed.
    sqlx::query("UPDATE facts SET validity = 'fading' WHERE id = $1::uuid")
        .bind(&fading)
        .execute(&mut app.sql().await)
        .await
        .unwrap();
    let cookie = sign_in(&app, TENANT_A_ADMIN).await;
    let card = |body: &str, name: &str| {
        element(
            body,
            &format!(r#"id="card-{name}""#),
            r#"<div class="card""#,
        )
        .to_owned()
    };
    let overview = page(&app, Some(&cookie), "/memory").await.body;
    let faded = card(&overview, "fading");
    assert!(faded.contains(r#"<div class="value">1</div>"#), "{faded}");
    let backlog = element(&overview, r#"id="card-backlog""#, "</div></div>");
    assert!(
        backlog.contains(r#"<div class="value">3</div>"#),
        "{backlog}"
    );
    assert!(backlog.contains("oldest <time"), "{backlog}");
    assert!(backlog.contains("last consolidation: never"), "{backlog}");
    assert!(backlog.contains("extractor: heuristic"), "{backlog}");

    admin
        .ok("memory_run_sweep", json!({"kinds": ["consolidation"]}))
        .await;
    let overview = page(&app, Some(&cookie), "/memory").await.body;
    let backlog = element(&overview, r#"id="card-backlog""#, "</div></div>");
    assert!(
        backlog.contains(r#"<div class="value">0</div>"#),
        "{backlog}"
    );
    assert!(backlog.contains("nothing waiting"), "{backlog}");
    assert!(
        backlog.contains("last consolidation: <time"),
        "the time since: {backlog}"
    );

    // A butler's page: what that butler sees (its scope's fact, not general's), in cards
    // and records.
    let own = page(&app, Some(&cookie), "/butlers/health/memory").await;
    assert_eq!(own.status, 200);
    assert!(own.body.contains("Butler health"));
    assert!(own.body.contains(&fading), "its facts");
    assert!(!own.body.contains(&theirs), "not general's");
    // Its cards count its own episodes (general's is not among them).
    let episodes = card(&own.body, "episodes");
    assert!(
        episodes.contains(r#"<div class="value">2</div>"#),
        "{episodes}"
    );
    let everyone = card(&overview, "episodes");
    assert!(
        everyone.contains(r#"<div class="value">3</div>"#),
        "{everyone}"
    );
    let other = page(&app, Some(&cookie), "/butlers/general/memory").await;
    assert!(other.body.contains(&theirs) && !other.body.contains(&fading));
    app.stop().await;
}
