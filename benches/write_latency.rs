//! Sequential single-episode write latency over MCP, as one butler sees it: N calls of
//! `memory_store_episode`, one after another, through rmcp's Streamable HTTP client with a
//! bearer key, against a running service. Prints p50/p95/p99/max and throughput.
//!
//!     ./scripts/serve &        # or any running butler-memory
//!     cargo bench --bench write_latency -- --key "$(cat data/bootstrap-admin.key)" --calls 1000

#[path = "support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use clap::Parser;
use serde_json::json;

use support::{Latency, McpClient};

#[derive(Parser)]
struct Args {
    /// The MCP endpoint.
    #[arg(long, default_value = "http://127.0.0.1:8150/mcp")]
    url: String,
    /// An API key allowed to write as `--butler`.
    #[arg(long)]
    key: String,
    #[arg(long, default_value = "bench")]
    butler: String,
    /// Calls to time (after `--warmup` untimed ones).
    #[arg(long, default_value_t = 1000)]
    calls: usize,
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// Accepted for `cargo bench` compatibility.
    #[arg(long, hide = true)]
    bench: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let client = McpClient::connect(&args.url, &args.key).await?;
    let (latencies, wall) = time_calls(&client, &args).await?;
    let latency = Latency::of(&latencies);
    println!(
        "memory_store_episode x{} sequential: p50 {:.2} ms  p95 {:.2} ms  p99 {:.2} ms  max {:.2} ms  ({:.0} calls/s)",
        latency.count,
        latency.p50,
        latency.p95,
        latency.p99,
        latency.max,
        (args.warmup + args.calls) as f64 / wall.as_secs_f64(),
    );
    client.close().await;
    Ok(())
}

/// `--warmup` untimed calls, then `--calls` timed ones, each after the previous one
/// answered; returns the timed calls' latencies and the wall time of all of them.
async fn time_calls(client: &McpClient, args: &Args) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let mut latencies = Vec::with_capacity(args.calls);
    let started = Instant::now();
    for i in 0..args.warmup + args.calls {
        let arguments = json!({
            "content": format!("Benchmark episode {i}: the user asked to move the dentist appointment to a morning slot"),
            "butler": args.butler,
        });
        let t = Instant::now();
        client
            .try_call("memory_store_episode", arguments)
            .await
            .map_err(|e| e.context(format!("call {i}")))?;
        let elapsed = t.elapsed();
        if i >= args.warmup {
            latencies.push(elapsed);
        }
    }
    Ok((latencies, started.elapsed()))
}
