//! `/metrics`: Prometheus text. Gauges that are cheap to read at scrape time (each pool's
//! usage, shard count, the embedding backlog) are refreshed here rather than on every change, so
//! they are current whenever they are read.

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::app_state::AppState;

pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    state.engine.refresh_scraped_gauges().await;
    for pool in state.engine.pool_usage() {
        let (name, open, in_use) = (pool.name, f64::from(pool.open), f64::from(pool.in_use));
        metrics::gauge!("butler_memory_db_pool_connections", "pool" => name, "state" => "idle")
            .set(open - in_use);
        metrics::gauge!("butler_memory_db_pool_connections", "pool" => name, "state" => "in_use")
            .set(in_use);
        metrics::gauge!("butler_memory_db_pool_max_connections", "pool" => name)
            .set(f64::from(pool.max));
    }
    metrics::gauge!("butler_memory_shards").set(state.engine.shard_count() as f64);
    crate::telemetry::collect_process_metrics();
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
        .into_response()
}
