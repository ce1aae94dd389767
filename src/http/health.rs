//! `/healthz` (the process is alive) and `/readyz` (the database answers, migrations are
//! applied, the embedder is loaded; `degraded` while a read replica is out of rotation or
//! consolidation's local model cannot run, so the heuristic extractor stands in). Neither
//! needs a key (DECISIONS.md #12).

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::app_state::AppState;

pub async fn healthz() -> Response {
    (StatusCode::OK, Json(json!({ "status": "alive" }))).into_response()
}

pub async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    let readiness = state.engine.readiness().await;
    let part = |r: &Result<(), String>| match r {
        Ok(()) => json!({ "ok": true }),
        Err(e) => json!({ "ok": false, "error": e }),
    };
    let failing: Vec<&str> = [
        ("database", &readiness.database),
        ("migrations", &readiness.migrations),
        ("embedder", &readiness.embedder),
    ]
    .into_iter()
    .filter(|(_, r)| r.is_err())
    .map(|(name, _)| name)
    .collect();
    // A read replica out of rotation degrades the service (its reads go to the others, or
    // to the primary) but does not make it unready.
    let replicas = state.engine.replicas().health();
    // Likewise consolidation learning less than configured: the local model cannot run and
    // the heuristic extractor stands in.
    let extractor = state.engine.extractor_status();
    let whole = replicas.iter().all(|r| r.in_rotation) && extractor.active == extractor.configured;
    let status = match (failing.is_empty(), whole) {
        (false, _) => "not_ready",
        (true, true) => "ready",
        (true, false) => "degraded",
    };
    let mut body = json!({
        "status": status,
        "failing": failing,
        "checks": {
            "database": part(&readiness.database),
            "migrations": part(&readiness.migrations),
            "embedder": part(&readiness.embedder),
        },
        "consolidation_extractor": extractor,
    });
    if !replicas.is_empty() {
        body["replicas"] = json!(replicas);
    }
    let status = if readiness.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}
