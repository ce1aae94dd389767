//! One MCP tool call as one stateless JSON-RPC POST (the service keeps no session), and what
//! its answer means for a fail-open caller: a result, a refusal of the input (never worth
//! retrying), or a failure of the service (worth retrying later).

use std::time::Duration;

use serde_json::{Value, json};

/// How a call ended.
#[derive(Debug)]
pub enum Outcome {
    /// The tool's result.
    Done(Value),
    /// The service refused the input (`invalid_input`, `forbidden`, `not_found`, ...): sending
    /// it again would be refused again. `code` is the tool error's (`invalid_time`, ...), none
    /// for a refusal by HTTP status or JSON-RPC.
    Refused { code: Option<String>, why: String },
    /// The service did not answer, answered late, or said it cannot now (`overloaded`,
    /// `unavailable`, HTTP 5xx, 429): try again later.
    Failed(String),
}

/// Calls `tool` with `arguments` at `url` with `key`, within `timeout`.
pub async fn call(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    tool: &str,
    arguments: Value,
    timeout: Duration,
) -> Outcome {
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                         "params": {"name": tool, "arguments": arguments}});
    let sent = http
        .post(url)
        .bearer_auth(key)
        .header("Accept", "application/json, text/event-stream")
        .header("MCP-Protocol-Version", "2025-06-18")
        .json(&request)
        .timeout(timeout)
        .send()
        .await;
    let response = match sent {
        Ok(response) => response,
        Err(e) if e.is_timeout() => {
            return Outcome::Failed(format!("no answer within {timeout:?}"));
        }
        Err(e) => return Outcome::Failed(format!("unreachable: {e}")),
    };
    let status = response.status();
    if status.is_server_error() || status.as_u16() == 429 || status.as_u16() == 408 {
        return Outcome::Failed(format!("HTTP {status}"));
    }
    if !status.is_success() {
        // 401 (a key the service does not know), 403, 413: sending again changes nothing.
        return Outcome::Refused {
            code: None,
            why: format!("HTTP {status}"),
        };
    }
    let answer: Value = match response.json().await {
        Ok(answer) => answer,
        Err(e) if e.is_timeout() => {
            return Outcome::Failed(format!("no answer within {timeout:?}"));
        }
        Err(e) => return Outcome::Failed(format!("an answer that is not JSON: {e}")),
    };
    interpret(answer)
}

/// A JSON-RPC answer to a tool call as an [`Outcome`].
fn interpret(answer: Value) -> Outcome {
    if let Some(error) = answer.get("error") {
        return Outcome::Refused {
            code: None,
            why: format!("JSON-RPC error: {error}"),
        };
    }
    let result = &answer["result"];
    let body = result
        .get("structuredContent")
        .cloned()
        .unwrap_or(Value::Null);
    if result["isError"] == true {
        let class = body["class"].as_str().unwrap_or("");
        let why = format!("{class}: {}", body["message"].as_str().unwrap_or(""));
        return match class {
            "overloaded" | "unavailable" => Outcome::Failed(why),
            _ => Outcome::Refused {
                code: body["code"].as_str().map(str::to_owned),
                why,
            },
        };
    }
    Outcome::Done(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_saying_it_cannot_now_is_a_failure_a_bad_input_a_refusal() {
        let error = |class: &str| {
            json!({"jsonrpc": "2.0", "id": 1, "result": {"isError": true,
                   "structuredContent": {"class": class, "code": "x", "message": "m"}}})
        };
        assert!(matches!(interpret(error("overloaded")), Outcome::Failed(_)));
        assert!(matches!(
            interpret(error("unavailable")),
            Outcome::Failed(_)
        ));
        match interpret(error("invalid_input")) {
            Outcome::Refused { code, why } => {
                assert_eq!(code.as_deref(), Some("x"));
                assert_eq!(why, "invalid_input: m");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            interpret(
                json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "x"}})
            ),
            Outcome::Refused { code: None, .. }
        ));
        match interpret(json!({"jsonrpc": "2.0", "id": 1,
                               "result": {"structuredContent": {"id": "e1"}}}))
        {
            Outcome::Done(body) => assert_eq!(body["id"], "e1"),
            other => panic!("{other:?}"),
        }
    }
}
