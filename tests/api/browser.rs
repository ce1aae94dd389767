//! The dashboard in a real browser: headless Chromium driven over WebDriver (Debian's
//! `chromium` and `chromium-driver`, installed by `scripts/setup`) through fantoccini. A
//! person signs in, browses facts, opens a fact's drawer and reads its provenance, corrects
//! it and sees the old version struck through, disables a rule and `memory_context` stops
//! returning it, filters episodes, watches a new episode arrive in the live feed, searches
//! with the keyboard shortcut, and looks at the operators' page. Every page is saved as a
//! screenshot under `$SCREENSHOT_DIR` (default `target/screenshots`): `scripts/test`, which
//! CI runs, points it at `docs/screenshots/`, the pictures the README shows. The service's
//! clock is pinned, so that what a screenshot shows of time (how long ago, the charts'
//! days, expiry dates) is the same from run to run; only ids (time-ordered UUIDs made from
//! the system's clock) differ.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use butler_memory_actors::ManualClock;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use crate::helpers::*;

/// A chromedriver of this test's own, and a browser session in it.
struct Browser {
    driver: Child,
    client: Client,
}

impl Browser {
    async fn start() -> Browser {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let driver = Command::new(chromedriver())
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian package chromium-driver; run ./scripts/setup)");
        let url = format!("http://127.0.0.1:{port}");
        let mut capabilities = serde_json::Map::new();
        let mut chrome = json!({"args": [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--window-size=1440,1000", "--hide-scrollbars",
        ]});
        if std::path::Path::new("/usr/bin/chromium").exists() {
            chrome["binary"] = json!("/usr/bin/chromium");
        }
        capabilities.insert("goog:chromeOptions".into(), chrome);
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let mut last_error = None;
        for _ in 0..100 {
            match ClientBuilder::new(connector.clone())
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => return Browser { driver, client },
                Err(e) => last_error = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("no browser session from chromedriver: {last_error:?}");
    }

    async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// The text of the first element `css` selects, waiting for it to appear (and reading
    /// it again when a navigation or a swap replaced it meanwhile).
    async fn text(&self, css: &str) -> String {
        let mut last_error = None;
        for _ in 0..50 {
            let element = self
                .client
                .wait()
                .at_most(Duration::from_secs(10))
                .for_element(Locator::Css(css))
                .await
                .unwrap_or_else(|e| panic!("{css}: {e}"));
            match element.text().await {
                Ok(text) => return text,
                Err(e) => last_error = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("{css}: {last_error:?}");
    }

    /// Waits until the page's text contains `wanted` (a live update, a swap).
    async fn wait_for_text(&self, css: &str, wanted: &str) -> String {
        let mut seen = String::new();
        for _ in 0..100 {
            seen = self.text(css).await;
            if seen.contains(wanted) {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let source = self.client.source().await.unwrap_or_default();
        let at = self.path().await;
        panic!("{css} never showed {wanted:?}; it shows: {seen}\nat {at}: {source}");
    }

    async fn fill(&self, css: &str, value: &str) {
        let field = self.client.find(Locator::Css(css)).await.unwrap();
        field.clear().await.unwrap();
        field.send_keys(value).await.unwrap();
    }

    async fn click(&self, css: &str) {
        self.client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"))
            .click()
            .await
            .unwrap();
    }

    async fn path(&self) -> String {
        let url = self.client.current_url().await.unwrap();
        match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        }
    }

    /// Waits until the browser is at `wanted` (a form posted by a click navigates after
    /// the click returns).
    async fn wait_for_path(&self, wanted: &str) {
        let mut at = String::new();
        for _ in 0..100 {
            at = self.path().await;
            if at == wanted {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("never reached {wanted}; still at {at}");
    }

    async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        let dir = std::env::var_os("SCREENSHOT_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots")
            });
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }

    async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn chromedriver() -> &'static str {
    if std::path::Path::new("/usr/bin/chromedriver").exists() {
        "/usr/bin/chromedriver"
    } else {
        "chromedriver"
    }
}

#[tokio::test]
async fn a_person_browses_corrects_and_governs_memory_in_a_real_browser() {
    let morning = chrono::DateTime::parse_from_rfc3339("2026-05-14T09:30:00Z").unwrap();
    let clock = Arc::new(ManualClock::new(morning.to_utc()));
    let app = spawn_app_at("", clock.clone()).await;
    let health = app.client(TENANT_A_HEALTH).await;
    let finance = app.client(TENANT_A_GENERAL).await;
    let episode = health
        .ok(
            "memory_store_episode",
            json!({"butler": "health", "content": "Ann said she started taking vitamin D every morning.", "importance": 6}),
        )
        .await;
    health
        .ok(
            "memory_store_episode",
            json!({"butler": "health", "content": "Ann asked for a vegetarian lasagne recipe."}),
        )
        .await;
    finance
        .ok(
            "memory_store_episode",
            json!({"butler": "general", "content": "The electricity bill was paid on Monday."}),
        )
        .await;
    let fact = health
        .ok(
            "memory_store_fact",
            json!({"subject": "ann", "predicate": "supplement", "content": "Ann takes vitamin D daily",
                   "permanence": "stable", "source_episode_id": episode["id"]}),
        )
        .await;
    health
        .ok(
            "memory_store_fact",
            json!({"subject": "ann", "predicate": "diet", "content": "Ann is vegetarian"}),
        )
        .await;
    health
        .ok(
            "memory_store_fact",
            json!({"subject": "household", "predicate": "pets", "content": "The household has a cat named Miso",
                   "permanence": "volatile", "confidence": 0.6}),
        )
        .await;
    let rule = health
        .ok(
            "memory_store_rule",
            json!({"content": "Mention the vitamin D reminder when planning breakfast"}),
        )
        .await;
    health
        .ok(
            "memory_store_rule",
            json!({"content": "Never suggest recipes with meat for Ann"}),
        )
        .await;
    app.engine().flush().await.unwrap();
    let context = |c: &serde_json::Value| c.to_string();
    let before = health
        .ok(
            "memory_context",
            json!({"trigger_prompt": "Plan breakfast with the vitamin D reminder", "butler": "health"}),
        )
        .await;
    assert!(
        context(&before).contains("vitamin D reminder when planning breakfast"),
        "the rule reaches the context before it is disabled: {before}"
    );

    let browser = Browser::start().await;
    let b = &browser;

    // Sign in.
    b.goto(&app.url("/")).await;
    assert_eq!(b.path().await, "/sign-in");
    b.screenshot("sign-in").await;
    b.fill("#key", TENANT_A_ADMIN).await;
    b.click("form.sign-in button[type=submit]").await;
    b.wait_for_text("h1", "Memory of tenant-a").await;
    assert_eq!(b.path().await, "/memory");
    let cards = b.text(".cards").await;
    assert!(
        cards.contains("LIVE FACTS") || cards.contains("Live facts"),
        "{cards}"
    );
    assert!(cards.contains('3'), "three live facts: {cards}");
    b.screenshot("overview").await;
    // htmx took the page's configuration: no inline styles (the CSP refuses them), error
    // fragments swapped into the drawer.
    let config = b
        .client
        .execute(
            "return [htmx.config.includeIndicatorStyles, htmx.config.responseHandling.length]",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(config, json!([false, 2]));

    // Browse facts, grouped by subject; open one in the drawer and read its provenance.
    b.click("nav a[href='/memory/facts']").await;
    let subjects = b.text("main").await;
    assert!(
        subjects.contains("ann") && subjects.contains("household"),
        "{subjects}"
    );
    assert!(subjects.contains("Ann takes vitamin D daily"));
    let id = fact["id"].as_str().unwrap();
    b.click(&format!("tr[data-fact='{id}'] td a")).await;
    let drawer = b.wait_for_text("#drawer", "Events").await;
    assert!(drawer.contains("Source episode"), "{drawer}");
    assert!(
        drawer.contains("vitamin D every morning"),
        "the source episode: {drawer}"
    );
    assert!(drawer.contains("fact created"), "its events: {drawer}");
    assert_eq!(b.path().await, "/memory/facts", "the drawer opens in place");
    b.screenshot("fact-drawer").await;

    // Correct it: a new version supersedes it, and the old one is struck through.
    b.fill(
        "#drawer textarea[name=content]",
        "Ann takes vitamin D and B12 daily",
    )
    .await;
    b.click("#drawer form[action$='/edit'] button[type=submit]")
        .await;
    b.wait_for_text("main", "the new version supersedes").await;
    let old_row = b.text(&format!("tr.superseded[data-fact='{id}']")).await;
    assert!(old_row.contains("Ann takes vitamin D daily"), "{old_row}");
    assert!(old_row.contains("replaced by"), "{old_row}");
    let struck: String = b
        .client
        .execute(
            &format!("return getComputedStyle(document.querySelector(\"tr[data-fact='{id}'] td.content\")).textDecorationLine"),
            vec![],
        )
        .await
        .unwrap()
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(struck, "line-through");
    assert!(
        b.text("main")
            .await
            .contains("Ann takes vitamin D and B12 daily")
    );
    b.screenshot("facts").await;

    // Disable a rule from the playbook: memory_context no longer returns it.
    b.click("nav a[href='/memory/playbook']").await;
    let rule_id = rule["id"].as_str().unwrap();
    let card = format!("div.rule[data-rule='{rule_id}']");
    assert!(b.text(&card).await.contains("candidate"));
    b.fill(
        &format!("{card} input[name=reason]"),
        "confuses the morning routine",
    )
    .await;
    b.click(&format!("{card} button[value=disable]")).await;
    b.wait_for_text("main", "decision is recorded").await;
    assert!(b.text(&card).await.contains("disabled"));
    b.screenshot("playbook").await;
    let after = health
        .ok(
            "memory_context",
            json!({"trigger_prompt": "Plan breakfast with the vitamin D reminder", "butler": "health"}),
        )
        .await;
    assert!(
        !context(&after).contains("vitamin D reminder when planning breakfast"),
        "a disabled rule never reaches the context: {after}"
    );

    // Filter episodes by butler.
    b.click("nav a[href='/memory/episodes']").await;
    assert!(b.text("#episodes").await.contains("electricity bill"));
    b.fill("form.filters input[name=butler]", "health").await;
    b.click("form.filters button[type=submit]").await;
    b.wait_for_text("h1", "(2)").await;
    let filtered = b.text("#episodes").await;
    assert!(filtered.contains("vegetarian lasagne") && !filtered.contains("electricity bill"));
    b.click("details.episode summary").await;
    b.screenshot("episodes").await;

    // A new episode arrives in the live feed without a reload.
    b.click("nav a[href='/memory']").await;
    // Later than the rest, so that its id (time-ordered, from the pinned clock) starts
    // differently from theirs and the feed shows which one arrived.
    clock.advance(chrono::Duration::minutes(5));
    let stored = health
        .ok(
            "memory_store_episode",
            json!({"butler": "health", "content": "Ann booked a dentist appointment for Friday."}),
        )
        .await;
    let short = &stored["id"].as_str().unwrap()[..8];
    let feed = b.wait_for_text("#feed", short).await;
    assert!(feed.contains("episode stored"), "{feed}");
    b.screenshot("overview-live").await;

    // Search from anywhere with the `/` shortcut.
    b.client
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .send_keys("/")
        .await
        .unwrap();
    b.client
        .active_element()
        .await
        .unwrap()
        .send_keys("cat named Miso\u{E007}")
        .await
        .unwrap();
    let results = b.wait_for_text("main", "Search").await;
    let results = if results.contains("Miso") {
        results
    } else {
        b.wait_for_text("#results", "Miso").await
    };
    assert!(results.contains("Miso"), "{results}");
    assert!(b.path().await.starts_with("/memory/search?q=cat"));
    b.screenshot("search").await;

    // A butler's own page, and the operators' view of the service.
    b.goto(&app.url("/butlers/health/memory")).await;
    assert!(b.text("main").await.contains("Facts it sees"));
    b.screenshot("butler").await;
    b.goto(&app.url("/operators")).await;
    let tree = b.wait_for_text("#actors", "embedder").await;
    assert!(tree.contains("tenant-a/health"), "its own shards: {tree}");
    b.screenshot("operators").await;

    // Signing out: the memory pages are closed again.
    b.click("form[action='/sign-out'] button").await;
    b.wait_for_path("/sign-in").await;
    b.goto(&app.url("/memory/facts")).await;
    assert_eq!(b.path().await, "/sign-in");
    browser.close().await;
    app.stop().await;
}
