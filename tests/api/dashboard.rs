//! The web dashboard over HTTP against the real service (its browser tests are in
//! `browser.rs`, its roles in `dashboard_roles.rs`): signing in (cookie attributes, no key in
//! it, unknown and auditor keys refused; an operator lands on the service's page and may not
//! read memory), pages that need a session, headers that keep content out of caches, CSRF and
//! origin checks on every change; and the helpers the dashboard's other tests share.

use reqwest::header::{CACHE_CONTROL, LOCATION, SET_COOKIE};
use reqwest::redirect::Policy;
use serde_json::json;

use crate::helpers::*;

pub(crate) fn http() -> reqwest::Client {
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

pub(crate) async fn read(response: reqwest::Response) -> Page {
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

pub(crate) async fn seed(app: &TestApp) -> (String, String) {
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
