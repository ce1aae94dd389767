//! The operator endpoints: `/healthz`, `/readyz`, `/actors`, `/metrics`, the one shape of an
//! HTTP error, the server every route runs on (`server.rs`), and every request's id and
//! access log line (`request_meta.rs`).

pub mod actors;
pub mod bundle;
pub mod health;
pub mod metrics;
pub mod request_meta;
pub mod resource_metadata;
pub mod server;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use butler_memory_actors::MemoryError;
use serde_json::json;

/// An error as an HTTP answer: `{class, code, message}` with the status its code calls for
/// (the catalogue in `ErrorCode`).
pub fn error_response(error: &MemoryError) -> Response {
    let status =
        StatusCode::from_u16(error.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({
        "class": error.class(),
        "code": error.code,
        "message": error.message,
    });
    let mut response = (status, Json(body)).into_response();
    // For the access log line (`request_meta::track`): what went wrong, not only the status.
    response.extensions_mut().insert(error.class());
    response
}
