//! Logs (tracing) and metrics (the `metrics` facade, rendered in Prometheus text format).

use std::io::IsTerminal;
use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

use crate::config::{LogConfig, LogFormat};

/// Installs the log subscriber (once per process; later calls are no-ops).
pub fn init_logging(config: &LogConfig) {
    let level = std::env::var("RUST_LOG").unwrap_or_else(|_| config.level.clone());
    let filter = EnvFilter::try_new(quiet_rmcp(&level)).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(FmtSpan::NONE)
        // Colour codes only for a person at a terminal, never into a file or a collector.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = match config.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// `level` with rmcp held to warnings unless it names rmcp itself: rmcp logs every
/// non-tool request at info (with a made-up client identity), which says nothing an
/// operator needs and drowns the access log.
fn quiet_rmcp(level: &str) -> String {
    if level.contains("rmcp") {
        level.to_owned()
    } else {
        format!("{level},rmcp=warn")
    }
}

/// The process-wide Prometheus recorder. The `metrics` facade allows one recorder per
/// process, so every service instance in a process (tests run several) shares it.
pub fn metrics() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Latency buckets from 0.5 ms to 10 s: the SLOs are 250 and 350 ms, the targets
            // 20-50 ms, and the store path is single-digit milliseconds.
            let seconds = [
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ];
            let sizes = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &seconds)
                .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_size".into()), &sizes))
                .expect("bucket lists are non-empty");
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (e.g. by a test harness); then this
            // handle still renders whatever is recorded through it.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmcp_is_held_to_warnings_unless_named() {
        assert_eq!(quiet_rmcp("info"), "info,rmcp=warn");
        assert_eq!(quiet_rmcp("debug,rmcp=trace"), "debug,rmcp=trace");
    }
}
