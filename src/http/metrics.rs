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
    for (name, pool) in state.engine.pools() {
        let size = f64::from(pool.size());
        let idle = pool.num_idle() as f64;
        let max = f64::from(pool.options().get_max_connections());
        metrics::gauge!("butler_memory_db_pool_connections", "pool" => name, "state" => "idle")
            .set(idle);
        metrics::gauge!("butler_memory_db_pool_connections", "pool" => name, "state" => "in_use")
            .set(size - idle);
        metrics::gauge!("butler_memory_db_pool_max_connections", "pool" => name).set(max);
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
