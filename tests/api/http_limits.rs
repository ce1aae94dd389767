//! The listener's bounds, as a client that misbehaves meets them: idle and slow sockets
//! are closed, connections beyond the caps are closed as they are accepted, and a body
//! that is too large or too slow is refused.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::*;

/// Reads until the server closes the connection; fails if it is still open after `within`.
/// Returns what the server sent.
async fn closed_within(stream: &mut TcpStream, within: Duration) -> String {
    let mut seen = Vec::new();
    let read = tokio::time::timeout(within, stream.read_to_end(&mut seen)).await;
    assert!(
        read.is_ok(),
        "the connection is still open after {within:?} (read so far: {:?})",
        String::from_utf8_lossy(&seen)
    );
    String::from_utf8_lossy(&seen).into_owned()
}

async fn connect(app: &TestApp) -> TcpStream {
    TcpStream::connect(app.service.address).await.unwrap()
}

/// A connection that sends nothing, or headers that never end, is closed after the header
/// read timeout; one that keeps its body back, after the body read timeout.
#[tokio::test]
async fn idle_and_slow_clients_are_cut_off() {
    let app =
        spawn_app_with("[http]\nheader_read_timeout_ms = 300\nbody_read_timeout_ms = 300\n").await;
    let mut idle = connect(&app).await;
    closed_within(&mut idle, Duration::from_secs(5)).await;

    let mut slow_headers = connect(&app).await;
    slow_headers
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    closed_within(&mut slow_headers, Duration::from_secs(5)).await;

    let mut slow_body = connect(&app).await;
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TENANT_A_HEALTH}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: 100\r\n\r\n{{\"jsonrpc\""
    );
    slow_body.write_all(request.as_bytes()).await.unwrap();
    let answer = closed_within(&mut slow_body, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    app.stop().await;
}

/// Beyond `max_connections_per_peer` (or `max_connections`), a new connection is closed as
/// it is accepted, while those already open are served; a closed one frees its place.
#[tokio::test]
async fn connections_beyond_the_caps_are_closed_at_once() {
    for caps in [
        "max_connections_per_peer = 3\n",
        "max_connections = 3\nmax_connections_per_peer = 100\n",
    ] {
        let app = spawn_app_with(&format!("[http]\nheader_read_timeout_ms = 30000\n{caps}")).await;
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(connect(&app).await);
        }
        let mut extra = connect(&app).await;
        let answer = closed_within(&mut extra, Duration::from_secs(5)).await;
        assert!(
            answer.is_empty(),
            "{caps}: nothing is read or written: {answer}"
        );
        // The held connections are served.
        let healthz = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        held[0].write_all(healthz).await.unwrap();
        let answer = closed_within(&mut held[0], Duration::from_secs(5)).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{caps}: {answer}");
        // That one closed: its place is free again.
        let mut next = eventually(Duration::from_secs(5), || async {
            let mut stream = connect(&app).await;
            stream.write_all(healthz).await.map_err(|e| e.to_string())?;
            let mut seen = Vec::new();
            stream
                .read_to_end(&mut seen)
                .await
                .map_err(|e| e.to_string())?;
            if seen.starts_with(b"HTTP/1.1 200") {
                Ok(seen)
            } else {
                Err(String::from_utf8_lossy(&seen).into_owned())
            }
        })
        .await
        .unwrap();
        next.clear();
        drop(held);
        app.stop().await;
    }
}

/// A body larger than `mcp.max_request_bytes` is refused with 413, whether it says its
/// length or not.
#[tokio::test]
async fn an_oversized_body_is_refused() {
    let app = spawn_app_with("[mcp]\nmax_request_bytes = 2048\n").await;
    let http = reqwest::Client::new();
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"memory_store_episode","arguments":{{"butler":"health","content":"{}"}}}}}}"#,
        "x".repeat(4096)
    );
    let sized = http
        .post(app.url("/mcp"))
        .header("Authorization", format!("Bearer {TENANT_A_HEALTH}"))
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(sized.status(), 413);
    let chunks = futures::stream::iter(
        big.into_bytes()
            .chunks(512)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>(),
    );
    let streamed = http
        .post(app.url("/mcp"))
        .header("Authorization", format!("Bearer {TENANT_A_HEALTH}"))
        .header("Accept", "application/json, text/event-stream")
        .header("Content-Type", "application/json")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status(), 413);
    app.stop().await;
}
