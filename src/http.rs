//! The operator endpoints: `/healthz`, `/readyz`, `/actors`, `/metrics`.

pub mod actors;
pub mod health;
pub mod metrics;
