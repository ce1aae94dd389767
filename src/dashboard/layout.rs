//! The page around every view: the header with its navigation (what the key may use), the
//! search box (`/` focuses it), the signed-in key and sign-out; the drawer a record opens
//! in; and the error page, which shows the same `{class, code, message}` as the API.

use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use butler_memory_actors::{MemoryError, MemoryResult, Role};
use maud::{DOCTYPE, Markup, html};

use super::assets;
use super::session::Viewer;

/// The section a page belongs to (its navigation entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Overview,
    Facts,
    Playbook,
    Episodes,
    Search,
    Graph,
    Operators,
}

const MEMORY_SECTIONS: [(Section, &str, &str); 4] = [
    (Section::Overview, "/memory", "Overview"),
    (Section::Facts, "/memory/facts", "Facts"),
    (Section::Playbook, "/memory/playbook", "Playbook"),
    (Section::Episodes, "/memory/episodes", "Episodes"),
];

/// Whether a request came from htmx (it wants a fragment, not a page).
pub fn is_htmx(headers: &HeaderMap) -> bool {
    headers.contains_key("hx-request")
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            // htmx may add no inline style (the Content-Security-Policy refuses it), and swaps
            // an error's fragment too, so that a drawer or panel says what went wrong.
            meta name="htmx-config" content=r#"{"includeIndicatorStyles":false,"allowEval":false,"responseHandling":[{"code":"204","swap":false},{"code":"...","swap":true}]}"#;
            title { (title) " · butler-memory" }
            link rel="stylesheet" href=(assets::url("app.css"));
            script src=(assets::url("htmx.min.js")) defer {}
            script src=(assets::url("app.js")) defer {}
        }
    }
}

/// A whole page for a signed-in viewer.
pub fn page(viewer: &Viewer, title: &str, section: Section, body: Markup) -> Response {
    let role = viewer.caller.role;
    // The butlers' memory, for every role but operators and orchestrators; the graph of
    // the orchestrator memory, for an orchestrator and its tenant's admin.
    let memory = !matches!(role, Role::Operator | Role::Orchestrator);
    let graph = matches!(role, Role::Orchestrator | Role::Admin);
    let operators = matches!(role, Role::Operator | Role::Admin);
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                header.top {
                    a.brand href="/" { "butler-memory" }
                    nav {
                        @if memory {
                            @for (s, href, label) in MEMORY_SECTIONS {
                                a.active[s == section] href=(href) { (label) }
                            }
                        }
                        @if graph {
                            a.active[section == Section::Graph] href="/memory/graph" { "Graph" }
                        }
                        @if operators {
                            a.active[section == Section::Operators] href="/operators" { "Operators" }
                        }
                    }
                    @if memory {
                        form.search action="/memory/search" method="get" role="search" {
                            input #search-box type="search" name="q" placeholder="Search memory (press /)"
                                aria-label="Search memory";
                        }
                    }
                    span.who {
                        (viewer.caller.key_name) " · " (role_name(viewer.caller.role))
                        @if !viewer.caller.tenant_id.is_empty() { " · " (viewer.caller.tenant_id) }
                        form.inline action="/sign-out" method="post" {
                            input type="hidden" name="csrf" value=(viewer.csrf);
                            button.quiet type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
                aside #drawer aria-live="polite" {}
            }
        }
    };
    Html(markup.into_string()).into_response()
}

/// A page without a session (sign-in).
pub fn bare(title: &str, status: StatusCode, body: Markup) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" { (head(title)) body { main { (body) } } }
    };
    (status, Html(markup.into_string())).into_response()
}

/// An error as a page (or a fragment, for htmx), with the status its code calls for.
pub fn error_page(viewer: Option<&Viewer>, error: &MemoryError) -> Response {
    let status =
        StatusCode::from_u16(error.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = html! {
        div.flash.error role="alert" {
            strong { (error.class()) " · " (error.code) } ": " (error.message)
        }
    };
    let mut response = match viewer {
        Some(viewer) => page(viewer, "Error", Section::Overview, body),
        None => bare("Error", status, body),
    };
    *response.status_mut() = status;
    // For the access log line, as the API's errors (`http::error_response`).
    response.extensions_mut().insert(error.class());
    response
}

/// An error where a fragment was asked for (htmx: the drawer, a panel, the feed): the
/// error alone, with its status; otherwise the error page.
pub fn error_in(headers: &HeaderMap, viewer: &Viewer, error: &MemoryError) -> Response {
    if !is_htmx(headers) {
        return error_page(Some(viewer), error);
    }
    let status =
        StatusCode::from_u16(error.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = html! {
        div.flash.error role="alert" {
            strong { (error.class()) " · " (error.code) } ": " (error.message)
        }
    };
    let mut response = (status, Html(body.into_string())).into_response();
    response.extensions_mut().insert(error.class());
    response
}

/// A page's content as a page, or what went wrong as the error page.
pub fn page_of(
    viewer: &Viewer,
    title: &str,
    section: Section,
    body: MemoryResult<Markup>,
) -> Response {
    match body {
        Ok(body) => page(viewer, title, section, body),
        Err(e) => error_page(Some(viewer), &e),
    }
}

/// Content that is a fragment for htmx (the drawer, a panel) and a page otherwise, or what
/// went wrong in the same form.
pub fn fragment_of(
    headers: &HeaderMap,
    viewer: &Viewer,
    title: &str,
    section: Section,
    body: MemoryResult<Markup>,
) -> Response {
    match body {
        Ok(body) => fragment_or_page(headers, viewer, title, section, body),
        Err(e) => error_in(headers, viewer, &e),
    }
}

/// A fragment (an htmx swap) or the same content as a page of its own.
fn fragment_or_page(
    headers: &HeaderMap,
    viewer: &Viewer,
    title: &str,
    section: Section,
    body: Markup,
) -> Response {
    if is_htmx(headers) {
        Html(body.into_string()).into_response()
    } else {
        page(viewer, title, section, body)
    }
}

pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::Admin => "admin",
        Role::Butler => "butler",
        Role::Operator => "operator",
        Role::Auditor => "auditor",
        Role::Orchestrator => "orchestrator",
    }
}
