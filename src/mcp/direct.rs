//! Plain stateless `tools/call` POSTs, answered without rmcp's per-request machinery.
//!
//! rmcp serves every stateless POST by deserialising the message through its generic
//! `ClientJsonRpcMessage` (serde `flatten`, which buffers the whole message and parses it
//! twice), then spawning a one-shot service loop with its own channel and cancellation
//! tokens for that single request: under a burst, a large share of the service's own CPU
//! (docs/decisions.md), paid by every butler on every call. This module answers the common
//! case itself: a POST of one JSON-RPC `tools/call` request for a tool this server has, from
//! a client on a protocol version that needs no per-request metadata. It produces the same
//! bytes rmcp would.
//!
//! The check is conservative by construction. Anything this module does not fully
//! understand (another method, an `Origin`, a session id, `_meta`, an unknown tool, a newer
//! protocol version with its standard headers, unusual `Accept` weights) is handed to rmcp
//! untouched, so rmcp stays the judge of every protocol rule. Before either, the JSON-RPC
//! envelope of a JSON POST is checked (`jsonrpc.rs`): malformed messages get their JSON-RPC
//! errors, and a batch is split into its messages where the protocol version has batches.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, HOST, ORIGIN};
use axum::http::{HeaderMap, Method, StatusCode, request::Parts};
use axum::response::{IntoResponse, Response};
use butler_memory_actors::Caller;
use rmcp::model::{JsonObject, RequestId, ServerJsonRpcMessage, ServerResult};
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use serde::Deserialize;

use super::MemoryServer;
use super::jsonrpc::{self, Envelope};
use crate::config::McpConfig;
use crate::http::request_meta::RequestMeta;

/// Protocol versions whose requests need nothing beyond the JSON-RPC body: no standard
/// `Mcp-Method`/`Mcp-Name` headers and no per-request `_meta` (those arrived in
/// 2026-07-28). A request without the header is treated by rmcp as 2025-03-26.
const PLAIN_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// Headers whose presence means the request is not a plain stateless call.
const DEFER_HEADERS: &[&str] = &["mcp-session-id", "last-event-id", "mcp-method", "mcp-name"];

/// `/mcp`: plain tool calls here, everything else through rmcp.
pub struct Endpoint {
    server: MemoryServer,
    rmcp: StreamableHttpService<MemoryServer, LocalSessionManager>,
    rules: PlainRules,
}

/// What the headers of a plain call look like, from the endpoint's configuration.
struct PlainRules {
    /// rmcp's DNS-rebinding allowlist, parsed once: host (lowercase, no brackets), port.
    allowed_hosts: Vec<(String, Option<u16>)>,
    /// Origins allowed besides those on an allowed host, lowercase, without a trailing `/`.
    allowed_origins: Vec<String>,
    max_request_bytes: usize,
}

/// One JSON-RPC `tools/call` request. Unknown fields (`_meta`, a task request, ...) fail
/// the parse, which sends the request to rmcp.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCall {
    jsonrpc: String,
    id: RequestId,
    method: String,
    params: ToolCallParams,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolCallParams {
    name: String,
    #[serde(default)]
    arguments: Option<JsonObject>,
}

impl Endpoint {
    pub fn new(
        server: MemoryServer,
        rmcp: StreamableHttpService<MemoryServer, LocalSessionManager>,
        config: &McpConfig,
    ) -> Self {
        Self {
            server,
            rmcp,
            rules: PlainRules::new(&config.allowed_hosts, config.max_request_bytes)
                .with_origins(&config.allowed_origins),
        }
    }

    /// Answers a plain tool call, or hands the request back when it is not one.
    async fn answer(&self, parts: &Parts, body: &Bytes) -> Option<Response> {
        let call = plain_call(body)?;
        let caller = parts.extensions.get::<Caller>()?;
        let meta = parts
            .extensions
            .get::<RequestMeta>()
            .cloned()
            .unwrap_or_else(RequestMeta::generated);
        let args = call.params.arguments.unwrap_or_default();
        let result = self
            .server
            .run_tool(&call.params.name, caller, &meta, args)
            .await?;
        // What rmcp's handler does for a peer older than 2026-07-28.
        let mut result = ServerResult::CallToolResult(result);
        result.strip_result_type_for_legacy_peer();
        let message = ServerJsonRpcMessage::response(result, call.id);
        Some(match serde_json::to_vec(&message) {
            Ok(json) => ([(CONTENT_TYPE, "application/json")], json).into_response(),
            Err(e) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("serialize json response: {e}"),
            )
                .into_response(),
        })
    }

    async fn forward(&self, request: Request) -> Response {
        self.rmcp.handle(request).await.map(Body::new)
    }
}

impl PlainRules {
    fn new(allowed_hosts: &[String], max_request_bytes: usize) -> Self {
        let allowed_hosts = allowed_hosts
            .iter()
            .map(|h| h.trim())
            .filter(|h| !h.is_empty())
            .map(|h| match h.parse::<axum::http::uri::Authority>() {
                Ok(a) => (normalise_host(a.host()), a.port_u16()),
                Err(_) => (normalise_host(h), None),
            })
            .collect();
        Self {
            allowed_hosts,
            allowed_origins: Vec::new(),
            max_request_bytes,
        }
    }

    fn with_origins(mut self, origins: &[String]) -> Self {
        self.allowed_origins = origins
            .iter()
            .map(|o| o.trim().trim_end_matches('/').to_ascii_lowercase())
            .filter(|o| !o.is_empty())
            .collect();
        self
    }

    /// The MCP rule against DNS rebinding from browsers: a request with an `Origin` comes
    /// from a page, which may call only if its origin is on an allowed host or listed.
    /// Requests without one (every client that is not a browser) pass.
    fn origin_allowed(&self, headers: &HeaderMap) -> bool {
        let Some(origin) = headers.get(ORIGIN) else {
            return true;
        };
        let Some(origin) = origin.to_str().ok().map(str::to_ascii_lowercase) else {
            return false;
        };
        if self
            .allowed_origins
            .iter()
            .any(|o| o == "*" || *o == origin.trim_end_matches('/'))
        {
            return true;
        }
        let Some((_, authority)) = origin.split_once("://") else {
            return false;
        };
        let Ok(authority) = authority.parse::<axum::http::uri::Authority>() else {
            return false;
        };
        let host = normalise_host(authority.host());
        let port = authority.port_u16();
        self.allowed_hosts
            .iter()
            .any(|(h, p)| *h == host && p.is_none_or(|p| port == Some(p)))
    }

    /// Whether the body is ours to check as JSON-RPC before rmcp sees it: a JSON POST that
    /// rmcp's header rules (content type, Host) would let through.
    fn envelope_checked(&self, method: &Method, headers: &HeaderMap) -> bool {
        method == Method::POST
            && headers
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| essence(v).eq_ignore_ascii_case("application/json"))
            && self.host_allowed(headers)
    }

    /// Whether the headers allow a direct answer (the body is checked after).
    fn admit(&self, method: &Method, headers: &HeaderMap) -> bool {
        method == Method::POST
            && DEFER_HEADERS.iter().all(|h| !headers.contains_key(*h))
            && !headers.contains_key(ORIGIN)
            && headers.get_all("mcp-protocol-version").iter().count() <= 1
            && headers
                .get("mcp-protocol-version")
                .is_none_or(|v| PLAIN_VERSIONS.iter().any(|p| v.as_bytes() == p.as_bytes()))
            && accepts_json_and_sse(headers)
            && headers
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| essence(v).eq_ignore_ascii_case("application/json"))
            && headers
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<usize>().ok())
                .is_some_and(|n| n <= self.max_request_bytes)
            && self.host_allowed(headers)
    }

    /// rmcp's Host rule: the host (and the port, where the allowlist names one) must be
    /// listed; an empty list allows any host.
    fn host_allowed(&self, headers: &HeaderMap) -> bool {
        if self.allowed_hosts.is_empty() {
            return true;
        }
        let Some(authority) = headers
            .get(HOST)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<axum::http::uri::Authority>().ok())
        else {
            return false;
        };
        let host = normalise_host(authority.host());
        let port = authority.port_u16();
        self.allowed_hosts
            .iter()
            .any(|(h, p)| *h == host && p.is_none_or(|p| port == Some(p)))
    }
}

/// The `/mcp` handler.
pub async fn handle(State(endpoint): State<Arc<Endpoint>>, request: Request) -> Response {
    if !endpoint.rules.origin_allowed(request.headers()) {
        return jsonrpc::forbidden_origin(request.headers().get(ORIGIN)).into_response();
    }
    // rmcp's header rules (method, content type, Host) come first, as rmcp answers them.
    if !endpoint
        .rules
        .envelope_checked(request.method(), request.headers())
    {
        return endpoint.forward(request).await;
    }
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, endpoint.rules.max_request_bytes).await {
        Ok(body) => body,
        Err(e) => {
            let status = if crate::http::server::timed_out(&e) {
                StatusCode::REQUEST_TIMEOUT
            } else if std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>())
            {
                StatusCode::PAYLOAD_TOO_LARGE
            } else {
                // As rmcp answers a body it cannot read.
                StatusCode::INTERNAL_SERVER_ERROR
            };
            return (status, format!("Failed to read request body: {e}")).into_response();
        }
    };
    match jsonrpc::inspect(&body, &parts.headers) {
        Envelope::Refused(error) => error.into_response(),
        Envelope::Single { method } => endpoint.one(parts, body, method.is_some()).await,
        Envelope::Batch(items) => endpoint.batch(parts, items).await,
    }
}

impl Endpoint {
    /// One well-formed message: answered here when it is a plain tool call, else by rmcp.
    async fn one(&self, parts: Parts, body: Bytes, request: bool) -> Response {
        if self.rules.admit(&parts.method, &parts.headers)
            && let Some(response) = self.answer(&parts, &body).await
        {
            return response;
        }
        let response = self
            .forward(Request::from_parts(parts, Body::from(body)))
            .await;
        if request {
            explained(response).await
        } else {
            response
        }
    }

    /// A batch (protocol versions that have them): each message answered as if it came
    /// alone, the answers to requests gathered in one array; 202 when there are none.
    async fn batch(&self, parts: Parts, items: Vec<Bytes>) -> Response {
        let mut answers = Vec::new();
        for item in items {
            let answer = match jsonrpc::inspect(&item, &parts.headers) {
                Envelope::Refused(error) => error.body(),
                // A batch inside a batch is not a message.
                Envelope::Batch(_) => {
                    jsonrpc::invalid_request("a batch holds messages, not batches")
                }
                Envelope::Single { method } => {
                    let response = self
                        .one(copy_for(&parts, item.len()), item, method.is_some())
                        .await;
                    if response.status() == StatusCode::ACCEPTED {
                        continue;
                    }
                    match axum::body::to_bytes(response.into_body(), usize::MAX).await {
                        Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                            jsonrpc::internal_error(&String::from_utf8_lossy(&bytes))
                        }),
                        Err(e) => jsonrpc::internal_error(&e.to_string()),
                    }
                }
            };
            answers.push(answer);
        }
        if answers.is_empty() {
            return StatusCode::ACCEPTED.into_response();
        }
        (
            [(CONTENT_TYPE, "application/json")],
            serde_json::Value::Array(answers).to_string(),
        )
            .into_response()
    }
}

/// The request's head for one message of its batch (`length` bytes).
fn copy_for(parts: &Parts, length: usize) -> Parts {
    let mut builder = Request::builder()
        .method(parts.method.clone())
        .uri(parts.uri.clone())
        .version(parts.version);
    if let Some(headers) = builder.headers_mut() {
        *headers = parts.headers.clone();
        headers.insert(CONTENT_LENGTH, length.into());
    }
    if let Some(extensions) = builder.extensions_mut() {
        *extensions = parts.extensions.clone();
    }
    builder
        .body(())
        .map(|r| r.into_parts().0)
        .expect("a head copied from a valid request")
}

/// rmcp's answer, with a "method not found" error saying what it is.
async fn explained(response: Response) -> Response {
    let json = response
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if response.status() != StatusCode::OK || !json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let mut parts = parts;
    match jsonrpc::explain_unknown_method(&bytes) {
        Some(rewritten) => {
            parts.headers.remove(CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(rewritten))
        }
        None => Response::from_parts(parts, Body::from(bytes)),
    }
}

/// The body as one JSON-RPC `tools/call` request, if it is exactly that.
fn plain_call(body: &[u8]) -> Option<ToolCall> {
    let call: ToolCall = serde_json::from_slice(body).ok()?;
    (call.jsonrpc == "2.0" && call.method == "tools/call").then_some(call)
}

/// Both media types listed plainly (no parameters, so no weights to interpret).
fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for item in value.split(',').map(str::trim) {
            json |= item.eq_ignore_ascii_case("application/json");
            sse |= item.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && sse
}

/// A media type without its parameters.
fn essence(value: &str) -> &str {
    value.split_once(';').map_or(value, |(e, _)| e).trim()
}

fn normalise_host(host: &str) -> String {
    host.trim_matches('[')
        .trim_matches(']')
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> PlainRules {
        PlainRules::new(
            &["localhost".into(), "127.0.0.1".into(), "::1".into()],
            1000,
        )
    }

    /// The headers the load generator and rmcp's client send on a tool call.
    fn plain() -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(HOST, "127.0.0.1:8150".parse().unwrap());
        h.insert(
            ACCEPT,
            "application/json, text/event-stream".parse().unwrap(),
        );
        h.insert(CONTENT_TYPE, "application/json".parse().unwrap());
        h.insert(CONTENT_LENGTH, "120".parse().unwrap());
        h
    }

    fn with(header: &'static str, value: &'static str) -> HeaderMap {
        let mut h = plain();
        h.insert(header, value.parse().unwrap());
        h
    }

    #[test]
    fn a_plain_post_is_admitted() {
        let rules = rules();
        assert!(rules.admit(&Method::POST, &plain()));
        assert!(rules.admit(&Method::POST, &with("mcp-protocol-version", "2025-11-25")));
        assert!(rules.admit(&Method::POST, &with("host", "[::1]:9000")));
        assert!(rules.admit(&Method::POST, &with("host", "LOCALHOST")));
        assert!(rules.admit(
            &Method::POST,
            &with("content-type", "application/json; charset=utf-8")
        ));
        let open = PlainRules::new(&[], 1000);
        assert!(open.admit(&Method::POST, &with("host", "memory.example.com")));
    }

    #[test]
    fn anything_unusual_goes_to_rmcp() {
        let rules = rules();
        assert!(!rules.admit(&Method::GET, &plain()));
        for (header, value) in [
            // Newer protocols carry standard headers and per-request metadata rmcp checks.
            ("mcp-protocol-version", "2026-07-28"),
            ("mcp-protocol-version", "1999-01-01"),
            ("mcp-method", "tools/call"),
            ("mcp-session-id", "abc"),
            ("origin", "http://localhost"),
            // rmcp refuses these with its own status codes.
            ("host", "evil.example.com"),
            ("accept", "application/json"),
            ("accept", "application/json, text/event-stream;q=0"),
            ("accept", "application/json, text/event-stream;q=1"),
            ("content-type", "text/plain"),
            ("content-length", "1001"),
        ] {
            assert!(
                !rules.admit(&Method::POST, &with(header, value)),
                "{header}: {value}"
            );
        }
        let mut no_length = plain();
        no_length.remove(CONTENT_LENGTH);
        assert!(!rules.admit(&Method::POST, &no_length));
        let ported = PlainRules::new(&["localhost:8150".into()], 1000);
        assert!(ported.admit(&Method::POST, &with("host", "localhost:8150")));
        assert!(!ported.admit(&Method::POST, &with("host", "localhost:9000")));
    }

    #[test]
    fn pages_call_only_from_allowed_origins() {
        let rules = rules().with_origins(&["https://Console.Example.com/".into()]);
        assert!(rules.origin_allowed(&plain()), "no Origin: not a browser");
        for allowed in [
            "http://localhost:6274",
            "http://127.0.0.1",
            "http://[::1]:3000",
            "https://console.example.com",
        ] {
            assert!(rules.origin_allowed(&with("origin", allowed)), "{allowed}");
        }
        for refused in [
            "https://evil.example",
            "null",
            "http://localhost.evil.example",
            "garbage",
        ] {
            assert!(!rules.origin_allowed(&with("origin", refused)), "{refused}");
        }
        let any = PlainRules::new(&[], 1000).with_origins(&["*".into()]);
        assert!(any.origin_allowed(&with("origin", "https://evil.example")));
        let none = PlainRules::new(&[], 1000);
        assert!(!none.origin_allowed(&with("origin", "http://localhost")));
    }

    #[test]
    fn only_a_bare_tools_call_is_answered_directly() {
        let call = plain_call(
            br#"{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"memory_get","arguments":{"id":"x"}}}"#,
        )
        .unwrap();
        assert_eq!(call.id, RequestId::String("a".into()));
        assert_eq!(call.params.name, "memory_get");
        assert!(plain_call(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"memory_stats"}}"#).is_some());
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"memory_get"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"memory_get"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"memory_get"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory_get","_meta":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory_get","arguments":[]}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory_get"}}]"#,
            "not json",
        ] {
            assert!(plain_call(body.as_bytes()).is_none(), "{body}");
        }
    }
}
