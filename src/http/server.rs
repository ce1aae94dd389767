//! The HTTP server under every route: hyper's HTTP/1 connections with the bounds a public
//! listener needs, which `axum::serve` does not set. A client has `http.header_read_timeout_ms`
//! to send a request's headers (which is also how long a kept-alive connection may sit idle)
//! and `http.body_read_timeout_ms` to send its whole body; at most `http.max_connections`
//! connections are open, and `http.max_connections_per_peer` from one address. A connection
//! beyond a cap is closed as it is accepted, before any of it is read, so that a client that
//! opens sockets and sends nothing cannot hold the service's file descriptors.
//!
//! Shutdown stops accepting, lets each connection finish the request it is serving, and
//! closes what is left after `http.shutdown_grace_ms`: a stopping service never waits on
//! its clients without bound.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;

/// `[http]`: the bounds of the listener.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    pub header_read_timeout_ms: std::num::NonZeroU64,
    pub body_read_timeout_ms: std::num::NonZeroU64,
    pub max_connections: std::num::NonZeroUsize,
    pub max_connections_per_peer: std::num::NonZeroUsize,
    pub shutdown_grace_ms: u64,
}

/// Serves `router` on `listener` until `shutdown` is cancelled, then drains (bounded).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    config: &HttpConfig,
    shutdown: CancellationToken,
) {
    let body_timeout = Duration::from_millis(config.body_read_timeout_ms.get());
    let router = router.layer(axum::middleware::from_fn_with_state(
        body_timeout,
        bound_body,
    ));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(config.header_read_timeout_ms.get()));
    let caps = Caps::new(config);
    let mut connections = JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors or a connection reset before it was accepted: the
                    // listener itself is fine; back off a moment so a full table can drain.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(slot) = caps.admit(peer) else {
            drop(stream);
            continue;
        };
        let connection = builder.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(router.clone()),
        );
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let _slot = slot;
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                () = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
        while connections.try_join_next().is_some() {}
    }
    let grace = Duration::from_millis(config.shutdown_grace_ms);
    let drained = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "connections still open after the shutdown grace period; closing them"
        );
        connections.shutdown().await;
    }
}

/// The connection caps: a permit of the total, and a count per client address.
struct Caps {
    open: Arc<Semaphore>,
    per_peer: usize,
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// A connection's place under the caps, given back when the connection ends.
struct Slot {
    _open: OwnedSemaphorePermit,
    peer: IpAddr,
    peers: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Caps {
    fn new(config: &HttpConfig) -> Self {
        Caps {
            open: Arc::new(Semaphore::new(config.max_connections.get())),
            per_peer: config.max_connections_per_peer.get(),
            peers: Arc::default(),
        }
    }

    /// A place for a connection from `peer`, or `None` (counted) when a cap is reached.
    fn admit(&self, peer: SocketAddr) -> Option<Slot> {
        let Ok(open) = self.open.clone().try_acquire_owned() else {
            metrics::counter!("butler_memory_http_connections_refused_total", "reason" => "total")
                .increment(1);
            return None;
        };
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        let count = peers.entry(peer.ip()).or_default();
        if *count >= self.per_peer {
            metrics::counter!("butler_memory_http_connections_refused_total", "reason" => "per_peer")
                .increment(1);
            return None;
        }
        *count += 1;
        metrics::gauge!("butler_memory_http_connections").increment(1.0);
        Some(Slot {
            _open: open,
            peer: peer.ip(),
            peers: self.peers.clone(),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = peers.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                peers.remove(&self.peer);
            }
        }
        metrics::gauge!("butler_memory_http_connections").decrement(1.0);
    }
}

/// Middleware: every request's body must arrive whole within `timeout` of its headers.
async fn bound_body(State(timeout): State<Duration>, request: Request, next: Next) -> Response {
    let request = request.map(|body| Body::new(DeadlineBody::new(body, timeout)));
    next.run(request).await
}

/// A request body that fails with [`BodyTimedOut`] once its deadline has passed.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<Sleep>>,
}

/// The client did not send the request's body in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within the body read timeout")]
pub struct BodyTimedOut;

impl DeadlineBody {
    fn new(inner: Body, timeout: Duration) -> Self {
        DeadlineBody {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
        }
    }
}

impl http_body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match this.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimedOut.into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Whether a body read failed for want of time (for the handler's status code).
pub fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(e) = source {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        source = e.source();
    }
    false
}
