//! An MCP client for tests and benches: rmcp's Streamable HTTP client with a bearer key, as
//! butlers connect. Tests assert (`ok`, `err`); benches count failures (`try_call`).

use std::time::Duration;

use anyhow::Context as _;
use rmcp::model::{CallToolRequestParams, CallToolResult, ClientConfig};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

/// How long a test's tool call may take before the test fails.
const TEST_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a bench's tool call may take before it counts as failed.
const BENCH_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A client connected to one `/mcp` endpoint with one key.
pub struct McpClient {
    pub service: RunningService<RoleClient, ClientConfig>,
}

impl McpClient {
    /// Connects to `url` (the `/mcp` endpoint) with `key` as its bearer token.
    pub async fn connect(url: &str, key: &str) -> anyhow::Result<McpClient> {
        butler_memory_actors::install_tls_provider();
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url.to_owned())
                .auth_header(key.to_owned()),
        );
        let service = ClientConfig::default()
            .serve(transport)
            .await
            .with_context(|| format!("the MCP client connects to {url}"))?;
        Ok(McpClient { service })
    }

    /// Calls `tool` within `limit`; a transport failure or a timeout is an `Err`, a tool
    /// error is a result with `isError`.
    pub async fn call_within(
        &self,
        tool: &str,
        args: Value,
        limit: Duration,
    ) -> anyhow::Result<CallToolResult> {
        let Value::Object(args) = args else {
            anyhow::bail!("tool arguments must be a JSON object, got {args}");
        };
        let request = CallToolRequestParams::new(tool.to_owned()).with_arguments(args);
        tokio::time::timeout(limit, self.service.call_tool(request))
            .await
            .with_context(|| format!("{tool} did not answer within {limit:?}"))?
            .with_context(|| format!("{tool} call"))
    }

    /// Calls `tool`; a test fails if it gets no result in time.
    pub async fn call(&self, tool: &str, args: Value) -> CallToolResult {
        self.call_within(tool, args, TEST_CALL_TIMEOUT)
            .await
            .expect("the tool call gets a result in time")
    }

    /// Calls a tool that must succeed; returns its structured content.
    pub async fn ok(&self, tool: &str, args: Value) -> Value {
        let result = self.call(tool, args).await;
        let body = structured(&result);
        assert_ne!(result.is_error, Some(true), "{tool} failed: {body}");
        body
    }

    /// Calls a tool that must fail; returns its structured error.
    pub async fn err(&self, tool: &str, args: Value) -> Value {
        let result = self.call(tool, args).await;
        let body = structured(&result);
        assert_eq!(
            result.is_error,
            Some(true),
            "{tool} should have failed: {body}"
        );
        body
    }

    /// Calls `tool` for a bench: its structured content, or an `Err` (with the error's
    /// body, for a tool error) that the bench counts.
    pub async fn try_call(&self, tool: &str, args: Value) -> anyhow::Result<Value> {
        self.try_call_within(tool, args, BENCH_CALL_TIMEOUT).await
    }

    /// [`McpClient::try_call`] that may take up to `limit` (sweeps over large shards).
    pub async fn try_call_within(
        &self,
        tool: &str,
        args: Value,
        limit: Duration,
    ) -> anyhow::Result<Value> {
        let result = self.call_within(tool, args, limit).await?;
        let body = result.structured_content.unwrap_or(Value::Null);
        if result.is_error == Some(true) {
            anyhow::bail!("{tool} failed: {body}");
        }
        Ok(body)
    }

    pub async fn close(self) {
        let _ = self.service.cancel().await;
    }
}

/// The structured content of a result, checked against its text content (the same JSON).
pub fn structured(result: &CallToolResult) -> Value {
    let body = result
        .structured_content
        .clone()
        .expect("results carry structured content");
    let text = result
        .content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .expect("results carry text content");
    let parsed: Value = serde_json::from_str(&text).expect("text content is JSON");
    assert_eq!(
        parsed, body,
        "text and structured content must be the same JSON"
    );
    body
}
