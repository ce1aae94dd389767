//! Dashboard sessions belong to the database, not to an instance: a browser signed in on
//! one instance is signed in on another behind the same balancer, and signing out on
//! either ends the session on both.

use std::sync::Arc;

use butler_memory_actors::ManualClock;
use chrono::Utc;

use crate::dashboard::{csrf, page, post, sign_in};
use crate::helpers::*;

#[tokio::test]
async fn a_session_started_on_one_instance_is_known_and_ended_on_every_instance() {
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let a = spawn_app_at("", clock.clone()).await;
    let b = spawn_beside(&a, "", clock).await;
    let cookie = sign_in(&a, TENANT_A_ADMIN).await;

    // Signed in on A, the same cookie opens B's pages, and B's forms carry the session's
    // CSRF token, the same on both.
    let on_a = page(&a, Some(&cookie), "/memory/facts").await;
    let on_b = page(&b, Some(&cookie), "/memory/facts").await;
    assert_eq!((on_a.status, on_b.status), (200, 200), "{}", on_b.body);
    assert_eq!(csrf(&on_a.body), csrf(&on_b.body));

    // Signing out on B ends the session on A too.
    let out = post(
        &b,
        &cookie,
        "/sign-out",
        &[("csrf", &csrf(&on_b.body))],
        None,
    )
    .await;
    assert_eq!(out.status, 303, "{}", out.body);
    let after = page(&a, Some(&cookie), "/memory/facts").await;
    assert_eq!(after.status, 303);
    assert_eq!(after.location.as_deref(), Some("/sign-in"));
    b.stop().await;
    a.stop().await;
}

#[tokio::test]
async fn a_session_idle_past_its_limit_is_over_and_a_page_view_keeps_one_alive() {
    // Idle limit: 60 minutes (`dashboard.session_idle_minutes`). Sessions are aged in the
    // database, whose clock every instance shares.
    let app = spawn_app().await;
    let cookie = sign_in(&app, TENANT_A_ADMIN).await;
    let mut sql = app.sql().await;
    let age = |minutes: i64| {
        format!(
            "UPDATE dashboard_sessions SET last_seen_at = now() - make_interval(mins => {minutes})"
        )
    };
    // Seen 59 minutes ago: alive, and the page view moves its last-seen time to now.
    sqlx::query(sqlx::AssertSqlSafe(age(59)))
        .execute(&mut sql)
        .await
        .unwrap();
    assert_eq!(page(&app, Some(&cookie), "/memory").await.status, 200);
    let idle: f64 = sqlx::query_scalar(
        "SELECT extract(epoch FROM now() - last_seen_at)::float8 FROM dashboard_sessions",
    )
    .fetch_one(&mut sql)
    .await
    .unwrap();
    assert!(idle < 60.0, "refreshed: idle {idle} s");
    // Seen 61 minutes ago: over; the browser is sent to sign in.
    sqlx::query(sqlx::AssertSqlSafe(age(61)))
        .execute(&mut sql)
        .await
        .unwrap();
    let after = page(&app, Some(&cookie), "/memory").await;
    assert_eq!(after.status, 303);
    assert_eq!(after.location.as_deref(), Some("/sign-in"));
    app.stop().await;
}
