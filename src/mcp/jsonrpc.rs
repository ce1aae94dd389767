//! The JSON-RPC envelope of a POST to `/mcp`, checked before rmcp sees it, so that every
//! malformed message gets the JSON-RPC error the specification names rather than an HTTP
//! status with a text body: a body that is not JSON is a parse error (-32700), a message
//! that is not a JSON-RPC request, notification or response is an invalid request (-32600),
//! and a `tools/call` whose parameters are not `{name, arguments?}` has invalid params
//! (-32602). A batch (a JSON array) is answered element by element where the negotiated
//! protocol version has batches (2025-03-26 and before) and refused as an invalid request
//! where it does not (2025-06-18 removed them).

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode, header::CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// JSON-RPC 2.0 error codes.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;

/// Protocol versions whose messages may come in batches. A request without the
/// `MCP-Protocol-Version` header is 2025-03-26 (the specification's default).
const BATCH_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26"];

/// What a body holds.
#[derive(Debug)]
pub enum Envelope {
    /// One well-formed message; a request's method is given.
    Single { method: Option<String> },
    /// A batch of messages, each as its own bytes.
    Batch(Vec<Bytes>),
    /// An answer to send as it is.
    Refused(RpcError),
}

/// A JSON-RPC error answer and the HTTP status it goes with.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub status: StatusCode,
    pub id: Value,
    pub code: i64,
    pub message: String,
}

impl RpcError {
    fn new(status: StatusCode, id: Value, code: i64, message: impl Into<String>) -> Self {
        RpcError {
            status,
            id,
            code,
            message: message.into(),
        }
    }

    pub fn body(&self) -> Value {
        json!({"jsonrpc": "2.0", "id": self.id,
               "error": {"code": self.code, "message": self.message}})
    }
}

impl IntoResponse for RpcError {
    fn into_response(self) -> Response {
        let body = self.body().to_string();
        (self.status, [(CONTENT_TYPE, "application/json")], body).into_response()
    }
}

/// Reads `body` as the specification reads it, with `headers` for the protocol version.
pub fn inspect(body: &[u8], headers: &HeaderMap) -> Envelope {
    let value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => {
            return Envelope::Refused(RpcError::new(
                StatusCode::BAD_REQUEST,
                Value::Null,
                PARSE_ERROR,
                format!("Parse error: the body is not JSON ({e})"),
            ));
        }
    };
    match value {
        Value::Array(items) => batch(items, headers),
        message => match check(&message) {
            Ok(method) => Envelope::Single { method },
            Err(error) => Envelope::Refused(error),
        },
    }
}

fn batch(items: Vec<Value>, headers: &HeaderMap) -> Envelope {
    let version = headers
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("2025-03-26");
    if !BATCH_VERSIONS.contains(&version) {
        return Envelope::Refused(RpcError::new(
            StatusCode::BAD_REQUEST,
            Value::Null,
            INVALID_REQUEST,
            format!(
                "Invalid Request: MCP {version} has no JSON-RPC batches (removed in \
                 2025-06-18); send one message per POST"
            ),
        ));
    }
    if items.is_empty() {
        return Envelope::Refused(RpcError::new(
            StatusCode::BAD_REQUEST,
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request: an empty batch",
        ));
    }
    Envelope::Batch(
        items
            .iter()
            .map(|item| Bytes::from(item.to_string()))
            .collect(),
    )
}

/// A message's method when it is a well-formed request or notification, none for a
/// response; otherwise the error to answer.
fn check(message: &Value) -> Result<Option<String>, RpcError> {
    let invalid = |id: &Value, why: &str| {
        RpcError::new(
            StatusCode::BAD_REQUEST,
            id.clone(),
            INVALID_REQUEST,
            format!("Invalid Request: {why}"),
        )
    };
    let Value::Object(fields) = message else {
        return Err(invalid(&Value::Null, "a message is a JSON object"));
    };
    let id = fields.get("id").cloned().unwrap_or(Value::Null);
    let id_ok = matches!(id, Value::String(_) | Value::Number(_))
        || (id.is_null() && !fields.contains_key("id"));
    let echo = if id_ok { id.clone() } else { Value::Null };
    if fields.get("jsonrpc") != Some(&json!("2.0")) {
        return Err(invalid(&echo, "`jsonrpc` must be \"2.0\""));
    }
    if !id_ok {
        return Err(invalid(&Value::Null, "`id` must be a string or a number"));
    }
    let Some(method) = fields.get("method") else {
        // A response (to a request this server sent): it has a result or an error.
        return if fields.contains_key("id")
            && (fields.contains_key("result") ^ fields.contains_key("error"))
        {
            Ok(None)
        } else {
            Err(invalid(&echo, "no `method`, and not a response"))
        };
    };
    let Some(method) = method.as_str() else {
        return Err(invalid(&echo, "`method` must be a string"));
    };
    if let Some(params) = fields.get("params")
        && !matches!(params, Value::Object(_) | Value::Array(_))
    {
        return Err(invalid(&echo, "`params` must be an object or an array"));
    }
    if method == "tools/call" && fields.contains_key("id") {
        check_tool_call(fields.get("params")).map_err(|why| {
            RpcError::new(
                StatusCode::OK,
                id.clone(),
                INVALID_PARAMS,
                format!("Invalid params: {why}"),
            )
        })?;
    }
    Ok(Some(method.to_owned()))
}

/// `tools/call`'s parameters: an object with a string `name` and, if given, an object of
/// `arguments`.
fn check_tool_call(params: Option<&Value>) -> Result<(), &'static str> {
    let Some(Value::Object(params)) = params else {
        return Err("tools/call takes an object of parameters");
    };
    if !params.get("name").is_some_and(Value::is_string) {
        return Err("`name` must be the tool's name, a string");
    }
    match params.get("arguments") {
        None | Some(Value::Null) | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err("`arguments` must be an object"),
    }
}

/// The answer to a page whose origin may not call (403).
pub fn forbidden_origin(origin: Option<&axum::http::HeaderValue>) -> RpcError {
    let origin = origin.and_then(|o| o.to_str().ok()).unwrap_or("?");
    RpcError::new(
        StatusCode::FORBIDDEN,
        Value::Null,
        -32000,
        format!("Forbidden: requests from origin `{origin}` are not allowed (mcp.allowed_origins)"),
    )
}

/// An invalid-request error for one message of a batch.
pub fn invalid_request(why: &str) -> Value {
    RpcError::new(
        StatusCode::OK,
        Value::Null,
        INVALID_REQUEST,
        format!("Invalid Request: {why}"),
    )
    .body()
}

/// An internal error for one message of a batch whose answer could not be read.
pub fn internal_error(why: &str) -> Value {
    RpcError::new(
        StatusCode::OK,
        Value::Null,
        -32603,
        format!("Internal error: {why}"),
    )
    .body()
}

/// rmcp's "method not found" names the method and nothing else; say what it is.
pub fn explain_unknown_method(body: &[u8]) -> Option<Vec<u8>> {
    let mut answer: Value = serde_json::from_slice(body).ok()?;
    let error = answer.get_mut("error")?;
    if error.get("code")?.as_i64()? != METHOD_NOT_FOUND {
        return None;
    }
    let method = error.get("message")?.as_str()?.to_owned();
    if method.starts_with("Method not found") {
        return None;
    }
    error["message"] = json!(format!(
        "Method not found: `{method}` (this server answers initialize, ping, tools/list and tools/call)"
    ));
    serde_json::to_vec(&answer).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: &str, headers: &HeaderMap) -> RpcError {
        match inspect(body.as_bytes(), headers) {
            Envelope::Refused(e) => e,
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn malformed_messages_get_their_json_rpc_errors() {
        let none = HeaderMap::new();
        let e = refused("{bad json", &none);
        assert_eq!(
            (e.status, e.code, &e.id),
            (StatusCode::BAD_REQUEST, PARSE_ERROR, &Value::Null)
        );
        for (body, id) in [
            (r#"{"id":1,"method":"tools/list"}"#, json!(1)),
            (
                r#"{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}"#,
                Value::Null,
            ),
            (r#"{"jsonrpc":"2.0","id":"a","method":7}"#, json!("a")),
            (r#"{"jsonrpc":"2.0","id":2}"#, json!(2)),
            (
                r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":"x"}"#,
                json!(3),
            ),
            ("42", Value::Null),
        ] {
            let e = refused(body, &none);
            assert_eq!((e.code, &e.id), (INVALID_REQUEST, &id), "{body}");
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
        }
        for params in [
            r#""notanobject""#,
            r#"{"name":"memory_stats","arguments":"notanobject"}"#,
            r#"{"name":7}"#,
            r#"{"arguments":{}}"#,
        ] {
            let body =
                format!(r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{params}}}"#);
            let e = refused(&body, &none);
            if params.starts_with('"') {
                assert_eq!(e.code, INVALID_REQUEST, "{params}");
            } else {
                assert_eq!(
                    (e.status, e.code, &e.id),
                    (StatusCode::OK, INVALID_PARAMS, &json!(9)),
                    "{params}"
                );
            }
        }
    }

    #[test]
    fn well_formed_messages_pass() {
        let none = HeaderMap::new();
        for (body, method) in [
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory_stats"}}"#,
                Some("tools/call"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"x","method":"tools/list"}"#,
                Some("tools/list"),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                Some("notifications/initialized"),
            ),
            (r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, None),
        ] {
            match inspect(body.as_bytes(), &none) {
                Envelope::Single { method: m } => assert_eq!(m.as_deref(), method, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }

    #[test]
    fn batches_follow_the_protocol_version() {
        let body = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"}]"#;
        match inspect(body.as_bytes(), &HeaderMap::new()) {
            Envelope::Batch(items) => assert_eq!(items.len(), 2),
            other => panic!("{other:?}"),
        }
        let mut newer = HeaderMap::new();
        newer.insert("mcp-protocol-version", "2025-06-18".parse().unwrap());
        let e = refused(body, &newer);
        assert_eq!(e.code, INVALID_REQUEST);
        assert!(e.message.contains("2025-06-18"), "{}", e.message);
        assert_eq!(refused("[]", &HeaderMap::new()).code, INVALID_REQUEST);
    }

    #[test]
    fn an_unknown_method_is_named_as_such() {
        let rmcp = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"nope/nothing"}}"#;
        let said: Value = serde_json::from_slice(&explain_unknown_method(rmcp).unwrap()).unwrap();
        assert!(
            said["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("Method not found: `nope/nothing`")
        );
        assert_eq!(said["id"], 1);
        assert!(explain_unknown_method(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).is_none());
    }
}
