//! Every HTTP request's identity and its access log line. A request keeps the id its client
//! sent in `X-Request-Id` (or gets one), and a W3C `traceparent` it carries is kept too;
//! both are echoed on the response, handed to the tools (a tool call without its own
//! `request_context` is audited under that id), and written on the request's one access log
//! line: method, path, status, latency, ids, for a request made with a key its tenant and
//! the class of its outcome (so that another tenant's id answered `not_found` is on record
//! with who asked), and for a tool call the tool. Never content, arguments or keys.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use butler_memory_actors::{ErrorClass, Lineage};

/// `X-Request-Id`.
pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
/// W3C Trace Context.
pub static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// The longest request id kept from a client (the same bound as `request_context` ids).
const MAX_ID_CHARS: usize = 200;

/// Who a request is, for the tools and the log.
#[derive(Debug, Clone)]
pub struct RequestMeta {
    /// The client's `X-Request-Id`, or one made here.
    pub id: String,
    /// Whether `id` was made here.
    pub generated: bool,
    /// The client's `traceparent`, when it is a valid one.
    pub trace: Option<TraceParent>,
    /// What the request did, filled in by the tool it ran (if any).
    note: Arc<Mutex<Option<ToolNote>>>,
}

/// A tool call's part of the access log line.
#[derive(Debug, Clone)]
pub struct ToolNote {
    pub tool: String,
    pub class: &'static str,
    pub tenant: String,
}

/// A valid W3C `traceparent`: `version-traceid-parentid-flags`, lowercase hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    pub header: String,
    pub trace_id: String,
}

impl RequestMeta {
    fn from_headers(headers: &axum::http::HeaderMap) -> RequestMeta {
        let given = headers
            .get(&X_REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|id| valid_id(id));
        RequestMeta {
            id: given.map_or_else(|| format!("req-{}", uuid::Uuid::now_v7()), str::to_owned),
            generated: given.is_none(),
            trace: headers
                .get(&TRACEPARENT)
                .and_then(|v| v.to_str().ok())
                .and_then(TraceParent::parse),
            note: Arc::default(),
        }
    }

    /// A request made in code (tests, tools called without HTTP).
    pub fn generated() -> RequestMeta {
        RequestMeta::from_headers(&axum::http::HeaderMap::new())
    }

    /// The lineage of a tool call that names none of its own.
    pub fn lineage(&self) -> Lineage {
        Lineage {
            request_id: self.id.clone(),
            subrequest_id: None,
            segment_id: None,
            generated: self.generated,
        }
    }

    /// Records the tool call this request made, for its access log line.
    pub fn note(&self, note: ToolNote) {
        *self.note.lock().unwrap_or_else(|p| p.into_inner()) = Some(note);
    }

    /// Records the tenant of a request that ran no tool (a REST call, a dashboard page) and
    /// the class of what it answered (`error_response` and the dashboard's error pages
    /// leave it on the response), for its access log line. A tool call's note is kept.
    pub fn note_answer(&self, tenant: &str, response: &Response) {
        let mut note = self.note.lock().unwrap_or_else(|p| p.into_inner());
        if note.is_some() {
            return;
        }
        let status = response.status();
        let class = match response.extensions().get::<ErrorClass>() {
            Some(class) => class.as_str(),
            None if status.is_success() || status.is_redirection() => "ok",
            // Refused before a handler ran (a wrong method, a body over the limit).
            None => "",
        };
        *note = Some(ToolNote {
            tool: String::new(),
            class,
            tenant: tenant.to_owned(),
        });
    }
}

impl TraceParent {
    /// The header if it is well formed (version 00 or a later one read as 00, ids not all
    /// zero); otherwise none, as the W3C recommendation says to treat it.
    pub fn parse(header: &str) -> Option<TraceParent> {
        let header = header.trim();
        let parts: Vec<&str> = header.split('-').collect();
        let hex = |s: &str, n: usize| {
            s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        };
        let [version, trace_id, parent_id, flags, ..] = parts[..] else {
            return None;
        };
        let valid = hex(version, 2)
            && version != "ff"
            && (version != "00" || parts.len() == 4)
            && hex(trace_id, 32)
            && trace_id.bytes().any(|b| b != b'0')
            && hex(parent_id, 16)
            && parent_id.bytes().any(|b| b != b'0')
            && hex(flags, 2);
        valid.then(|| TraceParent {
            header: header.to_owned(),
            trace_id: trace_id.to_owned(),
        })
    }
}

/// Printable ASCII, no spaces, at most [`MAX_ID_CHARS`]: what a log line and an audit row
/// can carry as they are.
fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= MAX_ID_CHARS && id.bytes().all(|b| b.is_ascii_graphic())
}

/// The middleware: gives the request its [`RequestMeta`], echoes the ids, and writes the
/// access log line when `access_log` is on.
pub async fn track(State(access_log): State<bool>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let meta = RequestMeta::from_headers(request.headers());
    request.extensions_mut().insert(meta.clone());
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let mut response = next.run(request).await;
    if let Ok(id) = HeaderValue::from_str(&meta.id) {
        response.headers_mut().insert(X_REQUEST_ID.clone(), id);
    }
    if let Some(trace) = &meta.trace
        && let Ok(value) = HeaderValue::from_str(&trace.header)
    {
        response.headers_mut().insert(TRACEPARENT.clone(), value);
    }
    if access_log {
        let note = meta.note.lock().unwrap_or_else(|p| p.into_inner()).take();
        let (tool, class, tenant) = match &note {
            Some(n) => (n.tool.as_str(), n.class, n.tenant.as_str()),
            None => ("", "", ""),
        };
        tracing::info!(
            target: "butler_memory::access",
            method = %method,
            path,
            status = response.status().as_u16(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            request_id = meta.id,
            trace_id = meta.trace.as_ref().map_or("", |t| t.trace_id.as_str()),
            tool,
            class,
            tenant,
            "request"
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_kept_only_when_well_formed() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            TraceParent::parse(good).unwrap().trace_id,
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        // A later version may carry more fields; version 00 may not.
        assert!(
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz")
                .is_some()
        );
        for bad in [
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "garbage",
        ] {
            assert!(TraceParent::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn a_clients_request_id_is_kept_when_it_can_be_logged_as_it_is() {
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(&X_REQUEST_ID, "abc-123".parse().unwrap());
        let meta = RequestMeta::from_headers(&headers);
        assert_eq!((meta.id.as_str(), meta.generated), ("abc-123", false));
        assert!(!meta.lineage().generated);
        headers.insert(&X_REQUEST_ID, "has space".parse().unwrap());
        let meta = RequestMeta::from_headers(&headers);
        assert!(meta.generated && meta.id.starts_with("req-"));
        headers.insert(&X_REQUEST_ID, "x".repeat(201).parse().unwrap());
        assert!(RequestMeta::from_headers(&headers).generated);
    }
}
