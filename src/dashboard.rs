//! The web dashboard (issue 20, `memory_project_plan.md` M5: "the user can see and edit
//! everything"): server-drawn HTML pages where the people who own the memory see what
//! their butlers know, why it exists, and correct or govern it. Served by this binary at
//! `/` beside the REST API, from the same engine calls with the same visibility, so a page
//! can show nothing the key could not read over `/api`, and every change it makes is the
//! REST API's (a fact edit supersedes, a delete is `memory_forget`, a rule decision is an
//! audited transition) with the session's key as the actor.
//!
//! A person signs in with an API key (`session.rs`); pages are HTML from maud templates
//! with htmx for the drawer, the live feed and the operators' panel (`assets.rs`), and
//! every answer carries `Cache-Control: no-store` and a strict Content-Security-Policy
//! (`page_headers`), so no memory content is kept by the browser for another key.

pub mod assets;
pub mod changes;
pub mod charts;
pub mod config;
pub mod episodes;
pub mod facts;
pub mod feed;
pub mod filters;
pub mod graph;
pub mod layout;
pub mod operators;
pub mod overview;
pub mod playbook;
pub mod provenance;
pub mod search;
pub mod session;
pub mod sign_in;
pub mod widgets;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use butler_memory_actors::{ErrorCode, MemoryError, MemoryResult};

use crate::app_state::AppState;
use crate::http::request_meta::RequestMeta;
pub use config::DashboardConfig;
use session::{COOKIE, Viewer};

/// The dashboard's routes, with their state (none when `dashboard.enabled` is off).
pub fn routes(state: Arc<AppState>) -> Router {
    if !state.config.edge.dashboard.enabled {
        return Router::new();
    }
    let signed_in = Router::new()
        .route("/sign-out", post(sign_in::sign_out))
        .route("/memory", get(overview::overview))
        .route("/memory/feed", get(feed::feed))
        .route("/memory/facts", get(facts::list))
        .route("/memory/facts/{id}", get(facts::detail))
        .route("/memory/facts/{id}/edit", post(facts::edit))
        .route("/memory/playbook", get(playbook::list))
        .route("/memory/rules/{id}", get(playbook::detail))
        .route("/memory/rules/{id}/govern", post(playbook::govern))
        .route("/memory/episodes", get(episodes::list))
        .route("/memory/episodes/{id}", get(episodes::detail))
        .route("/memory/episodes/requeue", post(episodes::requeue))
        .route("/memory/{kind}/{id}/forget", post(changes::forget))
        .route("/memory/{kind}/{id}/restore", post(changes::restore))
        .route("/memory/search", get(search::search))
        .route("/memory/graph", get(graph::list))
        .route("/memory/graph/{id}", get(graph::detail))
        .route("/memory/graph/{id}/status", post(graph::set_status))
        .route("/butlers/{name}/memory", get(overview::butler))
        .route("/operators", get(operators::page))
        .route("/operators/panel", get(operators::panel))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_session,
        ));
    Router::new()
        .route("/", get(sign_in::root))
        .route("/sign-in", get(sign_in::form).post(sign_in::sign_in))
        .merge(signed_in)
        .route_layer(axum::middleware::from_fn(page_headers))
        .route("/assets/{version}/{name}", get(assets::serve))
        .with_state(state)
}

/// The session token a request's cookie carries, if any.
pub fn session_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .map(|c| c.value().to_owned())
}

/// The viewer of the request's session: `None` when it has no live session, or its key is
/// no longer configured (removing a key signs its browsers out).
pub async fn viewer_of(state: &AppState, headers: &HeaderMap) -> MemoryResult<Option<Viewer>> {
    let Some(token) = session_token(headers) else {
        return Ok(None);
    };
    let viewer = state.sessions.find(&token).await?;
    Ok(viewer.filter(|v| state.auth.still_configured(&v.caller)))
}

/// Middleware: a signed-in browser's [`Viewer`], or the way to the sign-in page; and for
/// every change (any method but GET), the same origin (CSRF's first line; each form also
/// carries the session's token).
async fn require_session(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let viewer = match viewer_of(&state, request.headers()).await {
        Ok(viewer) => viewer,
        Err(e) => return layout::error_page(None, &e),
    };
    let Some(viewer) = viewer else {
        if layout::is_htmx(request.headers()) {
            return (StatusCode::UNAUTHORIZED, [("HX-Redirect", "/sign-in")]).into_response();
        }
        return Redirect::to("/sign-in").into_response();
    };
    if request.method() != Method::GET && !same_origin(request.headers()) {
        let error = MemoryError::new(
            ErrorCode::CsrfRejected,
            "this change was sent from another site",
        );
        return layout::error_page(Some(&viewer), &error);
    }
    let meta = request.extensions().get::<RequestMeta>().cloned();
    let tenant = viewer.caller.tenant_id.to_string();
    request.extensions_mut().insert(viewer);
    let response = next.run(request).await;
    if let Some(meta) = meta {
        meta.note_answer(&tenant, &response);
    }
    response
}

/// Whether a request's `Origin` (when the browser sent one) is the host it was sent to.
pub fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    matches!((origin_host, host), (Some(o), Some(h)) if o.eq_ignore_ascii_case(h))
}

/// Middleware: what every page and fragment answers with. Nothing is stored by the
/// browser or a proxy (another key may sign in on the same browser next), scripts and
/// styles come from this origin only, and no other site may frame a page.
async fn page_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let set = |headers: &mut HeaderMap, name, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(headers, header::CACHE_CONTROL, "no-store");
    set(headers, header::VARY, "Cookie");
    set(
        headers,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    );
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends `Origin: null`
    // with a form, and the origin check could not tell the dashboard from another site.
    set(headers, header::REFERRER_POLICY, "same-origin");
    set(headers, header::X_FRAME_OPTIONS, "DENY");
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let h = headers(&[(header::COOKIE, "a=1; bm_session=tok; b=2")]);
        assert_eq!(session_token(&h).as_deref(), Some("tok"));
        assert_eq!(session_token(&headers(&[(header::COOKIE, "a=1")])), None);
    }

    #[test]
    fn a_change_from_another_origin_is_refused() {
        let host = (header::HOST, "127.0.0.1:8150");
        assert!(same_origin(&headers(std::slice::from_ref(&host))));
        assert!(same_origin(&headers(&[
            host.clone(),
            (header::ORIGIN, "http://127.0.0.1:8150")
        ])));
        assert!(!same_origin(&headers(&[
            host.clone(),
            (header::ORIGIN, "http://evil.example")
        ])));
        assert!(!same_origin(&headers(&[host, (header::ORIGIN, "null")])));
    }
}
