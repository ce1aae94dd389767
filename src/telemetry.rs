//! Logs (tracing), traces (OpenTelemetry, optional: `traces.rs`) and metrics (the
//! `metrics` facade, rendered in Prometheus text format; every family is in `catalogue.rs`).

pub mod catalogue;
pub mod statement_latency;
pub mod traces;

use std::io::IsTerminal;
use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::{LogConfig, LogFormat, TracesConfig};
use catalogue::Kind;
use traces::Exporter;

/// Installs the log subscriber and, when `traces` has an endpoint, the trace exporter
/// (once per process; later calls install nothing). Keep the exporter until the end and
/// shut it down then, so that the last spans are sent.
pub fn init(log: &LogConfig, traces: &TracesConfig) -> Result<Option<Exporter>, String> {
    let level = std::env::var("RUST_LOG").unwrap_or_else(|_| log.level.clone());
    let filter = EnvFilter::try_new(log_filter(&level))
        .unwrap_or_else(|_| EnvFilter::new(log_filter("info")));
    let fmt = tracing_subscriber::fmt::layer()
        .with_span_events(FmtSpan::NONE)
        // Colour codes only for a person at a terminal, never into a file or a collector.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let fmt = match log.format {
        LogFormat::Json => fmt.json().with_filter(filter).boxed(),
        LogFormat::Text => fmt.with_filter(filter).boxed(),
    };
    let exporter = Exporter::start(traces)?;
    let spans = exporter.as_ref().map(|exporter| {
        exporter
            .layer()
            // INFO, the level of every exported span: a TRACE here would lift the
            // subscriber's maximum level (see the statement filter below).
            .with_filter(Targets::new().with_target(traces::SPANS, LevelFilter::INFO))
    });
    // The statement families' spans are always timed, for their latency histogram. The
    // level hint matters: without one the subscriber's maximum level is TRACE, and every
    // `debug!`/`trace!` of every dependency (and every `log` record) is evaluated against
    // the filters instead of being skipped at its call site.
    let statements = statement_latency::StatementLatency.with_filter(
        tracing_subscriber::filter::filter_fn(statement_latency::StatementLatency::is_statement)
            .with_max_level_hint(LevelFilter::INFO),
    );
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(spans)
        .with(statements)
        .try_init();
    Ok(exporter)
}

/// `level` with rmcp held to warnings unless it names rmcp itself (rmcp logs every non-tool
/// request at info, with a made-up client identity, which says nothing an operator needs
/// and drowns the access log), and without the spans meant for trace export.
fn log_filter(level: &str) -> String {
    let mut filter = level.to_owned();
    if !level.contains("rmcp") {
        filter.push_str(",rmcp=warn");
    }
    if !level.contains(traces::SPANS) {
        filter.push_str(&format!(",{}=off", traces::SPANS));
    }
    filter
}

/// The process-wide Prometheus recorder. The `metrics` facade allows one recorder per
/// process, so every service instance in a process (tests run several) shares it.
pub fn metrics() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Every histogram with its buckets: one without would be rendered as a summary,
            // whose quantiles cannot be aggregated across instances.
            let builder =
                catalogue::FAMILIES
                    .iter()
                    .try_fold(PrometheusBuilder::new(), |builder, family| {
                        let buckets = match family.kind {
                            Kind::Seconds => catalogue::SECONDS,
                            Kind::LongSeconds => catalogue::LONG_SECONDS,
                            Kind::Ratios => catalogue::RATIOS,
                            Kind::Sizes => catalogue::SIZES,
                            Kind::Counter | Kind::Gauge => return Ok(builder),
                        };
                        builder.set_buckets_for_metric(Matcher::Full(family.name.into()), buckets)
                    });
            let recorder = builder
                .expect("bucket lists are non-empty")
                .build_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (e.g. by a test harness); then this
            // handle still renders whatever is recorded through it.
            if metrics::set_global_recorder(recorder).is_ok() {
                describe_metrics();
            }
            handle
        })
        .clone()
}

/// The process's own figures (CPU seconds, resident memory, open descriptors, threads,
/// start time): `process_*`, as every Prometheus client exports them.
fn process() -> &'static metrics_process::Collector {
    static COLLECTOR: OnceLock<metrics_process::Collector> = OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}

/// Reads the process figures; called on every scrape.
pub fn collect_process_metrics() {
    process().collect();
}

/// Gives every family its `# HELP` and type, and creates at 0 the series that must exist
/// before their first event.
fn describe_metrics() {
    for family in catalogue::FAMILIES {
        match family.kind {
            Kind::Counter => {
                metrics::describe_counter!(family.name, family.help);
                for labels in family.zero {
                    metrics::counter!(family.name, *labels).absolute(0);
                }
            }
            Kind::Gauge => metrics::describe_gauge!(family.name, family.help),
            Kind::Seconds | Kind::LongSeconds | Kind::Sizes | Kind::Ratios => {
                metrics::describe_histogram!(family.name, family.help)
            }
        }
    }
    for tool in crate::mcp::tool_names() {
        metrics::counter!(catalogue::REQUESTS_TOTAL, "tool" => tool, "class" => "ok").absolute(0);
    }
    metrics::gauge!("butler_memory_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    process().describe();
    process().collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmcp_is_held_to_warnings_unless_named() {
        assert_eq!(log_filter("info"), "info,rmcp=warn,otel=off");
        assert_eq!(log_filter("debug,rmcp=trace"), "debug,rmcp=trace,otel=off");
    }
}
