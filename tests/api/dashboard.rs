//! The web dashboard over HTTP against the real service (its browser tests are in
//! `browser.rs`): signing in (cookie attributes, no key in it, unknown and auditor keys
//! refused), pages that need a session, headers that keep content out of caches, CSRF and
//! origin checks on every change, roles (a butler key reads without change forms and cannot
//! change anything; an operator sees the service, not memory), another tenant's ids, bad
//! ids, bad filters and oversized forms: clear errors, never a 500.

use reqwest::header::{CACHE_CONTROL, LOCATION, SET_COOKIE};
use reqwest::redirect::Policy;
use serde_json::json;

use crate::helpers::*;

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(Policy::none())
        .build()
        .unwrap()
}

/// The HTML of the element that carries `marker`, up to the next `closing` after it.
pub(crate) fn element<'a>(body: &'a str, marker: &str, closing: &str) -> &'a str {
    let start = body
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker} in {body}"));
    let end = body[start..].find(closing).expect("the element ends") + start;
    &body[start..end]
}

/// Signs in with `key`; answers the session cookie (`name=value`).
pub(crate) async fn sign_in(app: &TestApp, key: &str) -> String {
    let response = http()
        .post(app.url("/sign-in"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string([("key", key)]).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303, "sign-in with {key}");
    let cookie = response.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    cookie.split(';').next().unwrap().to_owned()
}

pub(crate) struct Page {
    pub(crate) status: u16,
    pub(crate) location: Option<String>,
    pub(crate) cache_control: Option<String>,
    pub(crate) body: String,
}

pub(crate) async fn page(app: &TestApp, cookie: Option<&str>, path: &str) -> Page {
    let mut request = http().get(app.url(path));
    if let Some(cookie) = cookie {
        request = request.header("Cookie", cookie);
    }
    read(request.send().await.unwrap()).await
}

async fn read(response: reqwest::Response) -> Page {
    let header = |name| {
        response
            .headers()
            .get(name)
            .map(|v: &reqwest::header::HeaderValue| v.to_str().unwrap().to_owned())
    };
    Page {
        status: response.status().as_u16(),
        location: header(LOCATION),
        cache_control: header(CACHE_CONTROL),
        body: response.text().await.unwrap(),
    }
}

pub(crate) async fn post(
    app: &TestApp,
    cookie: &str,
    path: &str,
    form: &[(&str, &str)],
    origin: Option<&str>,
) -> Page {
    let mut request = http()
        .post(app.url(path))
        .header("Cookie", cookie)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string(form).unwrap());
    if let Some(origin) = origin {
        request = request.header("Origin", origin);
    }
    read(request.send().await.unwrap()).await
}

/// The CSRF token a page's forms carry.
pub(crate) fn csrf(body: &str) -> String {
    let at = body
        .find(r#"name="csrf" value=""#)
        .expect("a form with a CSRF token")
        + 19;
    body[at..].split('"').next().unwrap().to_owned()
}

async fn seed(app: &TestApp) -> (String, String) {
    let health = app.client(TENANT_A_HEALTH).await;
    let fact = health
        .ok(
            "memory_store_fact",
            json!({"subject": "ann", "predicate": "diet", "content": "Ann is vegetarian"}),
        )
        .await;
    let rule = health
        .ok(
            "memory_store_rule",
            json!({"content": "Offer vegetarian recipes first"}),
        )
        .await;
    (
        fact["id"].as_str().unwrap().to_owned(),
        rule["id"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn signing_in_exchanges_the_key_for_a_strict_http_only_session_cookie() {
    let app = spawn_app().await;
    let response = http()
        .post(app.url("/sign-in"))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(serde_urlencoded::to_string([("key", TENANT_A_ADMIN)]).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()[LOCATION], "/memory");
    let cookie = response.headers()[SET_COOKIE].to_str().unwrap();
    assert!(cookie.starts_with("bm_session="), "{cookie}");
    assert!(cookie.contains("HttpOnly"), "{cookie}");
    assert!(cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(
        !cookie.contains(TENANT_A_ADMIN),
        "the key never leaves the form"
    );
    assert!(
        !cookie.contains("Max-Age") && !cookie.contains("Expires"),
        "a session cookie"
    );

    for (key, status) in [("not-a-key-at-all-000000", 401), (AUDITOR, 403)] {
        let refused = read(
            http()
                .post(app.url("/sign-in"))
                .header("Content-Type", "application/x-www-form-urlencoded")
                .body(serde_urlencoded::to_string([("key", key)]).unwrap())
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(refused.status, status, "{}", refused.body);
        assert!(refused.body.contains("sign-in"), "the form again");
    }
    // A sign-in posted by another site's page is refused.
    let forged = read(
        http()
            .post(app.url("/sign-in"))
            .header("Origin", "http://evil.example")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(serde_urlencoded::to_string([("key", TENANT_A_ADMIN)]).unwrap())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(forged.status, 403);

    // The operator lands on the service's page and may not read memory.
    let ops = sign_in(&app, OPERATOR).await;
    let landing = page(&app, Some(&ops), "/").await;
    assert_eq!(landing.location.as_deref(), Some("/operators"));
    let service = page(&app, Some(&ops), "/operators").await;
    assert_eq!(service.status, 200);
    assert!(service.body.contains("Actor tree") && service.body.contains("embedder"));
    // Every pool, with the size the test configuration gives it.
    assert!(service.body.contains(r#"id="pools""#), "{}", service.body);
    for (pool, max) in [
        ("reads", 6),
        ("retrieval", 4),
        ("writes", 3),
        ("locks", 4),
        ("health", 1),
    ] {
        let tag = format!("<b>{pool}</b> ");
        let shown = service
            .body
            .split_once(&tag)
            .and_then(|(_, after)| after.split_once('<'));
        let shown = shown.map(|(text, _)| text).unwrap_or_default();
        assert!(
            shown.contains('/') && shown.ends_with(&format!(" (max {max})")),
            "{pool}: {shown:?} in {}",
            service.body
        );
    }
    let facts = page(&app, Some(&ops), "/memory/facts").await;
    assert_eq!(facts.status, 403, "{}", facts.body);
    assert!(facts.body.contains("operator_key"));
    app.stop().await;
}

#[tokio::test]
async fn pages_need_a_session_and_are_never_cached() {
    let app = spawn_app().await;
    let (fact, _) = seed(&app).await;
    for path in [
        "/memory",
        "/memory/facts",
        &format!("/memory/facts/{fact}"),
        "/operators",
    ] {
        let anonymous = page(&app, None, path).await;
        assert_eq!(anonymous.status, 303, "{path}");
        assert_eq!(anonymous.location.as_deref(), Some("/sign-in"));
        assert!(!anonymous.body.contains("vegetarian"));
    }
    // htmx is told where to go rather than handed a page to swap in.
    let fragment = http()
        .get(app.url("/memory/feed"))
        .header("HX-Request", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(fragment.status(), 401);
    assert_eq!(fragment.headers()["HX-Redirect"], "/sign-in");
    let forged = page(&app, Some("bm_session=forged"), "/memory").await;
    assert_eq!(forged.status, 303);

    let admin = sign_in(&app, TENANT_A_ADMIN).await;
    for path in [
        "/memory",
        "/memory/facts",
        "/memory/playbook",
        "/memory/episodes",
        "/memory/search?q=vegetarian",
        "/butlers/health/memory",
        &format!("/memory/facts/{fact}"),
        "/operators",
    ] {
        let shown = page(&app, Some(&admin), path).await;
        assert_eq!(shown.status, 200, "{path}: {}", shown.body);
        assert_eq!(shown.cache_control.as_deref(), Some("no-store"), "{path}");
    }
    let facts = page(&app, Some(&admin), "/memory/facts").await;
    assert!(facts.body.contains("Ann is vegetarian"));

    // Signing out ends the session on the server, not only in the browser.
    let token = csrf(&facts.body);
    let out = post(&app, &admin, "/sign-out", &[("csrf", &token)], None).await;
    assert_eq!(out.status, 303);
    assert_eq!(page(&app, Some(&admin), "/memory").await.status, 303);
    app.stop().await;
}

#[tokio::test]
async fn every_change_needs_the_session_token_and_the_same_origin() {
    let app = spawn_app().await;
    let (fact, rule) = seed(&app).await;
    let admin = sign_in(&app, TENANT_A_ADMIN).await;
    let token = csrf(&page(&app, Some(&admin), "/memory/facts").await.body);
    let edit = format!("/memory/facts/{fact}/edit");
    let correction = [("content", "Ann is vegan"), ("permanence", "stable")];

    let without = post(&app, &admin, &edit, &correction, None).await;
    assert_eq!(without.status, 400, "no token: {}", without.body);
    let mut wrong = correction.to_vec();
    wrong.push(("csrf", "forged"));
    let forged = post(&app, &admin, &edit, &wrong, None).await;
    assert_eq!(forged.status, 403);
    assert!(forged.body.contains("csrf_rejected"));
    let mut right = correction.to_vec();
    right.push(("csrf", &token));
    let cross_site = post(&app, &admin, &edit, &right, Some("http://evil.example")).await;
    assert_eq!(cross_site.status, 403);
    assert!(cross_site.body.contains("csrf_rejected"));
    let governed = post(
        &app,
        &admin,
        &format!("/memory/rules/{rule}/govern"),
        &[("csrf", "forged"), ("decision", "disable"), ("reason", "x")],
        None,
    )
    .await;
    assert_eq!(governed.status, 403);
    // Nothing of it happened.
    let facts = page(&app, Some(&admin), "/memory/facts").await.body;
    assert!(!facts.contains("Ann is vegan"));
    assert!(
        !page(&app, Some(&admin), "/memory/playbook")
            .await
            .body
            .contains("disabled</span>")
    );

    // The same form, sent properly, supersedes the fact through the engine.
    let origin = app.url("");
    let origin = origin.trim_end_matches('/');
    let done = post(&app, &admin, &edit, &right, Some(origin)).await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(
        done.location.as_deref(),
        Some("/memory/facts?subject=ann&done=edited")
    );
    let after = page(&app, Some(&admin), "/memory/facts?subject=ann")
        .await
        .body;
    assert!(after.contains("Ann is vegan") && after.contains("superseded"));
    let mut sql = app.sql().await;
    let validity: String = sqlx::query_scalar("SELECT validity FROM facts WHERE id = $1::uuid")
        .bind(&fact)
        .fetch_one(&mut sql)
        .await
        .unwrap();
    assert_eq!(validity, "superseded");
    // A correction: the new version was true since the old one began, which never was.
    let (old_from, old_until, new_from): (
        chrono::DateTime<chrono::Utc>,
        Option<chrono::DateTime<chrono::Utc>>,
        chrono::DateTime<chrono::Utc>,
    ) = sqlx::query_as(
        "SELECT o.valid_from, o.valid_until, n.valid_from FROM facts o
         JOIN facts n ON n.supersedes_id = o.id WHERE o.id = $1::uuid",
    )
    .bind(&fact)
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!((old_until, new_from), (Some(old_from), old_from));
    let drawer = page(&app, Some(&admin), &format!("/memory/facts/{fact}"))
        .await
        .body;
    let stamp = old_from.format("%Y-%m-%d %H:%M UTC").to_string();
    assert!(
        drawer.contains(&format!("from {stamp} until {stamp}")),
        "{drawer}"
    );
    let actor: String = sqlx::query_scalar(
        "SELECT actor FROM memory_events WHERE event_type = 'fact_superseded' AND entity_id = $1::uuid",
    )
    .bind(&fact)
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert!(
        actor.contains("a-admin"),
        "the session's key is the actor: {actor}"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_butler_key_reads_its_scopes_and_changes_nothing() {
    let app = spawn_app().await;
    let (fact, rule) = seed(&app).await;
    let other = app.client(TENANT_B_HEALTH).await;
    let foreign = other
        .ok(
            "memory_store_fact",
            json!({"subject": "bob", "predicate": "diet", "content": "Bob eats fish"}),
        )
        .await;
    let general = app.client(TENANT_A_GENERAL).await;
    general
        .ok(
            "memory_store_fact",
            json!({"subject": "cal", "predicate": "job", "content": "Cal is a pilot", "scope": "general"}),
        )
        .await;

    let butler = sign_in(&app, TENANT_A_HEALTH).await;
    let facts = page(&app, Some(&butler), "/memory/facts").await.body;
    assert!(facts.contains("Ann is vegetarian"));
    assert!(!facts.contains("Cal is a pilot"), "another butler's scope");
    assert!(!facts.contains("Bob eats fish"), "another tenant");
    let drawer = page(&app, Some(&butler), &format!("/memory/facts/{fact}"))
        .await
        .body;
    assert!(drawer.contains("Events") && !drawer.contains("Correct this fact"));
    let token = csrf(&drawer);
    let refused = post(
        &app,
        &butler,
        &format!("/memory/facts/{fact}/edit"),
        &[("csrf", &token), ("content", "Ann eats meat")],
        None,
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("admin_only"));
    let refused = post(
        &app,
        &butler,
        &format!("/memory/rules/{rule}/govern"),
        &[("csrf", &token), ("decision", "disable"), ("reason", "no")],
        None,
    )
    .await;
    assert_eq!(refused.status, 403);

    // Another tenant's id is not found (for the admin too), a malformed one a 400.
    let admin = sign_in(&app, TENANT_A_ADMIN).await;
    let foreign_id = foreign["id"].as_str().unwrap();
    for cookie in [&butler, &admin] {
        let missing = page(&app, Some(cookie), &format!("/memory/facts/{foreign_id}")).await;
        assert_eq!(missing.status, 404, "{}", missing.body);
        assert!(!missing.body.contains("Bob eats fish"));
    }
    // In the drawer (htmx), the error alone, with its status.
    let drawer = read(
        http()
            .get(app.url(&format!("/memory/facts/{foreign_id}")))
            .header("Cookie", &admin)
            .header("HX-Request", "true")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(drawer.status, 404);
    assert!(
        drawer.body.contains("not_found") && !drawer.body.contains("<html"),
        "{}",
        drawer.body
    );
    let bad = page(&app, Some(&admin), "/memory/facts/not-a-uuid").await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("invalid_arguments"));
    let filter = page(&app, Some(&admin), "/memory/facts?permanence=forever").await;
    assert_eq!(filter.status, 400, "{}", filter.body);
    let unknown = page(&app, Some(&admin), "/memory/facts?colour=red").await;
    assert_eq!(unknown.status, 400);
    let days = page(&app, Some(&admin), "/memory/episodes?from=yesterday").await;
    assert_eq!(days.status, 400);

    // An oversized form is refused before it is read, with a status, not a crash.
    let token = csrf(&page(&app, Some(&admin), "/memory/facts").await.body);
    let huge = "x".repeat(3 * 1024 * 1024);
    let oversized = post(
        &app,
        &admin,
        &format!("/memory/facts/{fact}/edit"),
        &[("csrf", &token), ("content", &huge)],
        None,
    )
    .await;
    assert!(
        [400, 413].contains(&oversized.status),
        "{}",
        oversized.status
    );
    assert_eq!(page(&app, Some(&admin), "/memory").await.status, 200);
    app.stop().await;
}

#[tokio::test]
async fn an_admin_governs_forgets_restores_and_requeues_from_the_pages() {
    let app = spawn_app().await;
    let (fact, rule) = seed(&app).await;
    let health = app.client(TENANT_A_HEALTH).await;
    health
        .ok("memory_mark_helpful", json!({"rule_id": rule}))
        .await;
    let episode = health
        .ok(
            "memory_store_episode",
            json!({"butler": "health", "content": "A turn that failed to consolidate."}),
        )
        .await;
    let episode = episode["id"].as_str().unwrap().to_owned();
    let mut sql = app.sql().await;
    sqlx::query("UPDATE episodes SET consolidation_status = 'dead_letter', consolidation_attempts = 5 WHERE id = $1::uuid")
        .bind(&episode)
        .execute(&mut sql)
        .await
        .unwrap();
    let admin = sign_in(&app, TENANT_A_ADMIN).await;

    // The rule's drawer shows its application history; promoting it is an audited decision.
    let drawer = page(&app, Some(&admin), &format!("/memory/rules/{rule}"))
        .await
        .body;
    assert!(
        drawer.contains("Applications") && drawer.contains("helpful"),
        "{drawer}"
    );
    let token = csrf(&drawer);
    let promoted = post(
        &app,
        &admin,
        &format!("/memory/rules/{rule}/govern"),
        &[
            ("csrf", &token),
            ("decision", "promote"),
            ("reason", "proved itself"),
        ],
        None,
    )
    .await;
    assert_eq!(promoted.status, 303, "{}", promoted.body);
    let playbook = page(&app, Some(&admin), "/memory/playbook").await.body;
    assert!(
        playbook.contains(r#"data-maturity="established""#),
        "{playbook}"
    );
    let (reason, actor): (String, String) = sqlx::query_as(
        "SELECT payload->>'reason', actor FROM memory_events
         WHERE event_type = 'rule_promoted' AND entity_id = $1::uuid",
    )
    .bind(&rule)
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert_eq!(
        (reason.as_str(), actor.as_str()),
        ("proved itself", "admin:a-admin")
    );
    // A decision its state does not allow is refused, not a 500.
    let again = post(
        &app,
        &admin,
        &format!("/memory/rules/{rule}/govern"),
        &[("csrf", &token), ("decision", "enable"), ("reason", "x")],
        None,
    )
    .await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(again.body.contains("no_such_transition"));

    // Forget a fact from its drawer, then restore it.
    let forgotten = post(
        &app,
        &admin,
        &format!("/memory/fact/{fact}/forget"),
        &[("csrf", &token), ("reason", "not true any more")],
        None,
    )
    .await;
    assert_eq!(forgotten.status, 303);
    assert_eq!(
        forgotten.location,
        Some(format!("/memory/facts/{fact}?done=forgotten"))
    );
    let drawer = page(&app, Some(&admin), &format!("/memory/facts/{fact}"))
        .await
        .body;
    assert!(
        drawer.contains("retracted") && drawer.contains("Restore"),
        "{drawer}"
    );
    let restored = post(
        &app,
        &admin,
        &format!("/memory/fact/{fact}/restore"),
        &[("csrf", &token)],
        None,
    )
    .await;
    assert_eq!(restored.status, 303);
    let drawer = page(&app, Some(&admin), &format!("/memory/facts/{fact}"))
        .await
        .body;
    assert!(drawer.contains("Correct this fact"), "live again: {drawer}");
    let kinds: Vec<String> = sqlx::query_scalar(
        "SELECT event_type FROM memory_events WHERE entity_id = $1::uuid ORDER BY id",
    )
    .bind(&fact)
    .fetch_all(&mut sql)
    .await
    .unwrap();
    assert_eq!(kinds, ["fact_created", "fact_retracted", "fact_restored"]);
    let bogus = post(
        &app,
        &admin,
        "/memory/widget/123/forget",
        &[("csrf", &token)],
        None,
    )
    .await;
    assert_eq!(bogus.status, 400, "{}", bogus.body);

    // A dead letter is listed with its button; requeued, it waits for consolidation again.
    let episodes = page(
        &app,
        Some(&admin),
        "/memory/episodes?consolidation_status=dead_letter",
    )
    .await
    .body;
    assert!(
        episodes.contains("failed to consolidate") && episodes.contains("Requeue"),
        "{episodes}"
    );
    let requeued = post(
        &app,
        &admin,
        "/memory/episodes/requeue",
        &[("csrf", &token), ("id", &episode)],
        None,
    )
    .await;
    assert_eq!(requeued.status, 303, "{}", requeued.body);
    let status: String =
        sqlx::query_scalar("SELECT consolidation_status FROM episodes WHERE id = $1::uuid")
            .bind(&episode)
            .fetch_one(&mut sql)
            .await
            .unwrap();
    assert_eq!(status, "pending");
    app.stop().await;
}
