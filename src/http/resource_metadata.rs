//! OAuth 2.0 Protected Resource Metadata (RFC 9728) for `/mcp`, which MCP clients probe
//! before they connect, and the `WWW-Authenticate` challenge of a 401 that points to it.
//! The service authenticates with API keys, not OAuth: the document names the resource
//! and how to present a bearer token, and no authorization server, so a client knows to
//! use the key it was configured with instead of starting an OAuth flow.

use axum::Json;
use axum::http::{HeaderMap, HeaderValue, header};
use serde_json::{Value, json};

/// Where the document is served (and the path-suffixed form for `/mcp`, RFC 9728 §3.1).
pub const PATH: &str = "/.well-known/oauth-protected-resource";
pub const PATH_FOR_MCP: &str = "/.well-known/oauth-protected-resource/mcp";

/// `scheme://host` as the client reached the service: `Host`, and `X-Forwarded-Proto`
/// when a TLS-terminating proxy says it.
pub fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        // A host and a port, nothing that could break out of the challenge's quotes.
        .filter(|h| {
            !h.is_empty()
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b".-:[]_".contains(&b))
        })
        .unwrap_or("localhost");
    let scheme = match headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
    {
        Some("https") => "https",
        _ => "http",
    };
    format!("{scheme}://{host}")
}

/// `GET /.well-known/oauth-protected-resource`.
pub async fn document(headers: HeaderMap) -> Json<Value> {
    let base = base_url(&headers);
    Json(json!({
        "resource": format!("{base}/mcp"),
        "resource_name": "butler-memory",
        "bearer_methods_supported": ["header"],
        "authorization_servers": [],
    }))
}

/// The challenge of a 401 on `/mcp`: a bearer token is wanted, and where the resource's
/// metadata is.
pub fn challenge(headers: &HeaderMap) -> HeaderValue {
    let value = format!(
        "Bearer realm=\"butler-memory\", resource_metadata=\"{}{PATH}\"",
        base_url(headers)
    );
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_challenge_points_to_the_metadata_as_the_client_reached_it() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "memory.example:8150".parse().unwrap());
        assert_eq!(
            challenge(&headers),
            "Bearer realm=\"butler-memory\", resource_metadata=\"http://memory.example:8150/.well-known/oauth-protected-resource\""
        );
        headers.insert("x-forwarded-proto", "https".parse().unwrap());
        assert_eq!(base_url(&headers), "https://memory.example:8150");
        headers.insert(header::HOST, "evil\"host".parse().unwrap());
        assert_eq!(base_url(&headers), "https://localhost");
    }
}
