//! `[dashboard]`: whether the pages are served, how long a browser session lives idle, and
//! whether its cookie is sent over HTTPS only. Its own file so that the configuration can
//! name it without depending on the pages.

use serde::Deserialize;

/// `[dashboard]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DashboardConfig {
    /// Serve the pages at `/` (the REST API is served either way).
    pub enabled: bool,
    /// A browser session ends after this long without a request.
    pub session_idle_minutes: std::num::NonZeroU64,
    /// Send the session cookie over HTTPS only (set it behind a TLS proxy).
    pub secure_cookie: bool,
}
