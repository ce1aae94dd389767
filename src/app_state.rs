//! What every request handler shares: the engine, the key table, the configuration and the
//! metrics recorder. Its own module, so that the endpoints and start-up both depend on it
//! and not on each other.

use butler_memory_actors::Engine;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::auth::Authenticator;
use crate::config::Config;
use crate::dashboard::session::Sessions;

/// The state behind every route.
pub struct AppState {
    pub engine: Engine,
    pub auth: Authenticator,
    pub config: Config,
    pub metrics: PrometheusHandle,
    /// The dashboard's signed-in browsers.
    pub sessions: Sessions,
}
