//! Signing in and out. The key is typed once into a form (POST, never a URL), checked like
//! a bearer token, and exchanged for a session cookie: `HttpOnly` (no script reads it),
//! `SameSite=Strict` (no other site's page sends it), `Path=/`, `Secure` when configured,
//! and a session-only lifetime (gone when the browser closes). Auditor keys are refused:
//! their reads are recorded one by one over `/mcp`, with a reason.

use std::sync::Arc;

use axum::extract::State;
use axum::extract::rejection::FormRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use butler_memory_actors::Role;
use cookie::{Cookie, SameSite};
use maud::html;
use serde::Deserialize;

use super::layout;
use super::session::{COOKIE, Viewer};
use crate::app_state::AppState;

/// `GET /`: the overview when signed in, else the sign-in page.
pub async fn root(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    match super::viewer_of(&state, &headers).await {
        Ok(Some(viewer)) => Redirect::to(home(&viewer)).into_response(),
        Ok(None) => Redirect::to("/sign-in").into_response(),
        Err(e) => layout::error_page(None, &e),
    }
}

/// Where a viewer lands: operators see the service, orchestrators their graph, everyone
/// else the memory.
fn home(viewer: &Viewer) -> &'static str {
    landing(viewer.caller.role)
}

fn landing(role: Role) -> &'static str {
    match role {
        Role::Operator => "/operators",
        Role::Orchestrator => "/memory/graph",
        _ => "/memory",
    }
}

/// `GET /sign-in`
pub async fn form() -> Response {
    sign_in_page(StatusCode::OK, None)
}

fn sign_in_page(status: StatusCode, problem: Option<&str>) -> Response {
    layout::bare(
        "Sign in",
        status,
        html! {
            form.sign-in method="post" action="/sign-in" {
                h1 { "butler-memory" }
                p.muted { "Sign in with an API key: an admin key sees and governs its tenant's memory, a butler key reads what its butler may, an operator key sees the service." }
                @if let Some(problem) = problem { div.flash.error role="alert" { (problem) } }
                label for="key" { "API key" }
                input #key type="password" name="key" autocomplete="off" required autofocus;
                button type="submit" { "Sign in" }
                p.muted { "The key is not stored by the browser: it holds a session cookie that ends after inactivity or sign-out." }
            }
        },
    )
}

#[derive(Deserialize)]
pub struct SignIn {
    key: String,
}

/// `POST /sign-in`
pub async fn sign_in(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<SignIn>, FormRejection>,
) -> Response {
    if !super::same_origin(&headers) {
        return sign_in_page(
            StatusCode::FORBIDDEN,
            Some("This sign-in came from another site."),
        );
    }
    let Ok(Form(form)) = form else {
        return sign_in_page(StatusCode::BAD_REQUEST, Some("Type an API key."));
    };
    let caller = state
        .auth
        .caller(Some(&format!("Bearer {}", form.key.trim())));
    let caller = match caller {
        Some(c) if c.role == Role::Auditor => {
            return sign_in_page(
                StatusCode::FORBIDDEN,
                Some(
                    "Auditor keys investigate over /mcp, where every read is recorded with its reason.",
                ),
            );
        }
        Some(c) => c,
        None => {
            tracing::warn!("dashboard sign-in with an unknown key");
            return sign_in_page(StatusCode::UNAUTHORIZED, Some("That key is not known."));
        }
    };
    tracing::info!(key = %caller.key_name, tenant = %caller.tenant_id, "dashboard sign-in");
    let landing = landing(caller.role);
    match state.sessions.start(&caller).await {
        Ok(token) => {
            let cookie = Cookie::build((COOKIE, token))
                .http_only(true)
                .same_site(SameSite::Strict)
                .path("/")
                .secure(state.config.edge.dashboard.secure_cookie)
                .build();
            (
                [(header::SET_COOKIE, cookie.to_string())],
                Redirect::to(landing),
            )
                .into_response()
        }
        Err(e) => layout::error_page(None, &e),
    }
}

#[derive(Deserialize)]
pub struct SignOut {
    csrf: String,
}

/// `POST /sign-out`
pub async fn sign_out(
    State(state): State<Arc<AppState>>,
    Extension(viewer): Extension<Viewer>,
    headers: HeaderMap,
    form: Result<Form<SignOut>, FormRejection>,
) -> Response {
    if let Err(e) = super::filters::form(form).and_then(|f| viewer.check_csrf(&f.csrf)) {
        return layout::error_page(Some(&viewer), &e);
    }
    if let Some(token) = super::session_token(&headers)
        && let Err(e) = state.sessions.end(&token).await
    {
        return layout::error_page(Some(&viewer), &e);
    }
    let expired = Cookie::build((COOKIE, ""))
        .http_only(true)
        .same_site(SameSite::Strict)
        .path("/")
        .max_age(cookie::time::Duration::ZERO)
        .build();
    (
        [(header::SET_COOKIE, expired.to_string())],
        Redirect::to("/sign-in"),
    )
        .into_response()
}
