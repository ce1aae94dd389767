//! How tool results and tool errors look on the wire: JSON as structured content and the
//! same JSON as text. Errors are `{class, code, message}` (plus `retry_after_ms` when
//! retrying helps), never a stack trace, SQL or a secret.

use butler_memory_actors::{Lineage, MemoryError};
use rmcp::model::CallToolResult;
use serde::Serialize;
use serde_json::{Value, json};

/// Serialises a value that is known to serialise (records, stats).
pub fn to_json(value: impl Serialize) -> Result<Value, MemoryError> {
    serde_json::to_value(value)
        .map_err(|e| MemoryError::internal(format!("serialising the result: {e}")))
}

/// A successful result, with the request's lineage echoed as `request_context`.
pub fn success(mut body: Value, lineage: &Lineage) -> CallToolResult {
    if let Value::Object(map) = &mut body {
        map.insert("request_context".into(), json!(lineage));
    }
    CallToolResult::structured(body)
}

/// A tool error in the service's one error shape.
pub fn failure(error: &MemoryError, lineage: &Lineage) -> CallToolResult {
    let mut body = json!({
        "class": error.class(),
        "code": error.code,
        "message": error.message,
    });
    if let Some(ms) = error.retry_after_ms {
        body["retry_after_ms"] = json!(ms);
    }
    body["request_context"] = json!(lineage);
    CallToolResult::structured_error(body)
}
