//! The load generator's own MCP client: one JSON-RPC POST per tool call to the service's
//! Streamable HTTP endpoint, stateless, reading only the ids and error class of each answer;
//! and `/metrics`, read as text.

// Why not the test kit's `McpClient` (rmcp's client), as the benches' other clients: the
// generator shares the machine's cores with the service, and whatever it spends per call
// is CPU the service does not get. rmcp's client runs a background task per connection,
// handshakes (`initialize`) before its first call and decodes every answer whole into a
// `CallToolResult`; this poster sends one stateless POST per call (the service keeps no
// sessions) over one shared connection pool and deserialises only the ids and the error
// class the generator counts. It has no per-call timeout either: a call that takes minutes
// counts with its whole latency, not as a failure after the kit's 60 s. Every call the
// generator makes goes through `Endpoint` (`butler-memory load` and the load bench).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

/// The line [`Endpoint::metrics`] puts between two instances' expositions.
pub const INSTANCE_SEPARATOR: &str = "# butler-memory load: next instance";

/// How long [`Endpoint::check`] waits for an instance's answer: a `tools/list` is answered
/// from memory, so a service that takes longer is not one to measure.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// The MCP endpoints of the service (one per instance of a fleet without a balancer in
/// front: calls go to each in turn) and the HTTP connection pool every call of the
/// generator shares.
#[derive(Clone)]
pub struct Endpoint {
    http: reqwest::Client,
    urls: Arc<[reqwest::Url]>,
    route: Route,
    /// Which instance the next call goes to (`Route::EachInTurn`).
    next: Arc<AtomicUsize>,
}

/// How calls are spread over a fleet's instances (`--route`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Route {
    /// Each call to the next instance in turn, as a round-robin balancer does.
    #[default]
    EachInTurn,
    /// Every call of a key to the same instance, as a balancer with affinity by key does:
    /// a key's shards are written by one instance.
    ByKey,
}

impl Endpoint {
    /// `/mcp` at `address`, keeping up to `connections` idle connections open.
    pub fn new(address: SocketAddr, connections: usize) -> anyhow::Result<Endpoint> {
        Endpoint::at(&format!("http://{address}"), connections)
    }

    /// The service at `base` (`http://host:port` or `https://...`, with or without `/mcp`),
    /// or at each of several such bases separated by commas (the instances of a fleet).
    pub fn at(base: &str, connections: usize) -> anyhow::Result<Endpoint> {
        let urls = base
            .split(',')
            .map(|one| {
                let one = one.trim().trim_end_matches('/');
                let one = one.strip_suffix("/mcp").unwrap_or(one);
                format!("{one}/mcp").parse::<reqwest::Url>()
            })
            .collect::<Result<Vec<_>, _>>()?;
        butler_memory_actors::install_tls_provider();
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(connections)
            .build()?;
        Ok(Endpoint {
            http,
            urls: urls.into(),
            route: Route::EachInTurn,
            next: Arc::default(),
        })
    }

    /// The same endpoint, spreading calls by `route`.
    pub fn with_route(mut self, route: Route) -> Endpoint {
        self.route = route;
        self
    }

    /// Before the clock: every instance answers, and takes every key in `keys` (each named
    /// by its tenant for the message). A wrong URL or key would otherwise only show as a run
    /// of calls that all failed; this says which, and no load is sent.
    pub async fn check(&self, keys: &[(&str, &str)]) -> anyhow::Result<()> {
        let list = json!({"jsonrpc": "2.0", "id": 0, "method": "tools/list"});
        for url in self.urls.iter() {
            for (tenant, key) in keys {
                let response = self
                    .request(url, key, &list)
                    .timeout(CHECK_TIMEOUT)
                    .send()
                    .await
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "{url} cannot be reached: {}; no load was sent",
                            butler_memory_actors::with_causes(&e)
                        )
                    })?;
                let status = response.status();
                if status == reqwest::StatusCode::UNAUTHORIZED
                    || status == reqwest::StatusCode::FORBIDDEN
                {
                    anyhow::bail!(
                        "{url} refuses the key of tenant {tenant} (HTTP {status}): check the keys file; no load was sent"
                    );
                }
                if !status.is_success() {
                    anyhow::bail!("{url} answers HTTP {status} to tools/list; no load was sent");
                }
            }
        }
        Ok(())
    }

    /// The instance a call with `key` goes to.
    fn instance_for(&self, key: &str) -> usize {
        let n = self.urls.len();
        match self.route {
            Route::EachInTurn => self.next.fetch_add(1, Ordering::Relaxed) % n,
            Route::ByKey => {
                use std::hash::{Hash, Hasher};
                let mut hash = std::collections::hash_map::DefaultHasher::new();
                key.hash(&mut hash);
                (hash.finish() % n as u64) as usize
            }
        }
    }

    /// The service's `/metrics` text (every instance's, one after another, separated by
    /// `INSTANCE_SEPARATOR`, so that a family's samples add up over the fleet), or
    /// `None` when one does not answer it.
    pub async fn metrics(&self) -> Option<String> {
        let mut text = String::new();
        for (i, url) in self.urls.iter().enumerate() {
            if i > 0 {
                text.push_str(INSTANCE_SEPARATOR);
                text.push('\n');
            }
            let response = self
                .http
                .get(url.join("/metrics").ok()?)
                .send()
                .await
                .ok()?;
            if !response.status().is_success() {
                return None;
            }
            text.push_str(&response.text().await.ok()?);
            text.push('\n');
        }
        Some(text)
    }

    /// One tool call whose whole answer is wanted (`Ok(structuredContent)` or
    /// `Err(error class)`), for the few calls outside the load (setup, verification).
    pub async fn call_value(&self, key: &str, tool: &str, args: Value) -> Result<Value, String> {
        let response = self.tool_call(key, tool, args).await?;
        let reply: Value = response.json().await.map_err(|_| "protocol".to_owned())?;
        let result = &reply["result"];
        let content = result["structuredContent"].clone();
        if result["isError"] == json!(true) {
            return Err(content["class"].as_str().unwrap_or("unknown").to_owned());
        }
        if result.is_null() {
            return Err("protocol".to_owned());
        }
        Ok(content)
    }

    /// `tools/call` of `tool`, its answer not yet read (`Err("transport")`: none came).
    async fn tool_call(
        &self,
        key: &str,
        tool: &str,
        args: Value,
    ) -> Result<reqwest::Response, String> {
        self.post(
            key,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": tool, "arguments": args}}),
        )
        .await
        .map_err(|_| "transport".to_owned())
    }

    /// One JSON-RPC message to the MCP endpoint (stateless Streamable HTTP POST).
    pub async fn post(&self, key: &str, message: Value) -> reqwest::Result<reqwest::Response> {
        let url = &self.urls[self.instance_for(key)];
        self.request(url, key, &message).send().await
    }

    /// A JSON-RPC `message` to the MCP endpoint at `url` with `key`, not yet sent.
    fn request(&self, url: &reqwest::Url, key: &str, message: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(url.clone())
            .bearer_auth(key)
            .header("Accept", "application/json, text/event-stream")
            .json(message)
    }

    /// One MCP tool call over Streamable HTTP (stateless JSON-RPC POST): `Ok(the ids it
    /// stored)` or `Err(error class)`.
    pub async fn call(&self, key: &str, tool: &str, args: Value) -> Result<Vec<String>, String> {
        let response = self.tool_call(key, tool, args).await?;
        let body = response.bytes().await.map_err(|_| "transport".to_owned())?;
        let reply: Reply = serde_json::from_slice(&body).map_err(|_| "protocol".to_owned())?;
        let result = reply.result.ok_or_else(|| "protocol".to_owned())?;
        let answer = result.content;
        if result.is_error {
            return Err(answer.class.unwrap_or_else(|| "unknown".to_owned()));
        }
        Ok(answer
            .ids
            .unwrap_or_else(|| answer.id.into_iter().collect()))
    }
}

/// The parts of a tool call's answer the generator reads: it runs beside the service on
/// the same cores, so it skips over the rest of each answer (the stored record, the context
/// block) instead of building it as a JSON tree.
#[derive(Deserialize)]
struct Reply {
    result: Option<ToolResult>,
}

#[derive(Deserialize)]
struct ToolResult {
    #[serde(rename = "isError", default)]
    is_error: bool,
    #[serde(rename = "structuredContent", default)]
    content: Answer,
}

/// A stored episode's `id`, a batch's `ids`, an error's `class`.
#[derive(Deserialize, Default)]
struct Answer {
    id: Option<String>,
    ids: Option<Vec<String>>,
    class: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_go_to_each_instance_in_turn_or_by_key() {
        let fleet = Endpoint::at("http://a:1, http://b:2/mcp", 1).unwrap();
        assert_eq!(fleet.urls[1].as_str(), "http://b:2/mcp");
        let turns: Vec<usize> = (0..4).map(|_| fleet.instance_for("k")).collect();
        assert_eq!(turns, [0, 1, 0, 1]);
        let by_key = fleet.with_route(Route::ByKey);
        let keys: Vec<String> = (0..64).map(|i| format!("key-{i}")).collect();
        let first: Vec<usize> = keys.iter().map(|k| by_key.instance_for(k)).collect();
        let again: Vec<usize> = keys.iter().map(|k| by_key.instance_for(k)).collect();
        assert_eq!(first, again, "a key keeps its instance");
        assert!(
            first.contains(&0) && first.contains(&1),
            "keys spread: {first:?}"
        );
    }
}
