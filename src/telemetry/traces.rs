//! Optional trace export: OpenTelemetry over OTLP/HTTP (protobuf), off unless
//! `traces.endpoint` is set.
//!
//! The service's spans are `tracing` spans with the target [`SPANS`]; the log layer never
//! sees them (its filter turns the target off), and without an exporter nothing is
//! interested in them at all, so a disabled span costs a branch. With an exporter,
//! tracing-opentelemetry turns them into OpenTelemetry spans, batched on the SDK's own
//! thread with a blocking HTTP client: exporting never runs on the service's runtime, and a
//! slow or dead collector costs dropped spans, never a slower call.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider,
};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::config::TracesConfig;

/// The `tracing` target of every span meant for export (the engine's).
pub const SPANS: &str = butler_memory_actors::TRACE_SPANS;

/// A running exporter; [`Exporter::shutdown`] sends what is still batched.
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Builds the exporter `config` describes; `None` when export is off.
    pub fn start(config: &TracesConfig) -> Result<Option<Exporter>, String> {
        if config.endpoint.is_empty() {
            return Ok(None);
        }
        let headers: HashMap<String, String> = config
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), value.expose().to_owned()))
            .collect();
        let exporter = SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(config.endpoint.clone())
            .with_timeout(Duration::from_millis(config.timeout_ms))
            .with_headers(headers)
            .build()
            .map_err(|e| format!("traces.endpoint: cannot export to it: {e}"))?;
        let batches = BatchConfigBuilder::default()
            .with_scheduled_delay(Duration::from_millis(config.batch_delay_ms))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_span_processor(
                BatchSpanProcessor::builder(exporter)
                    .with_batch_config(batches)
                    .build(),
            )
            // A caller that sends a sampled traceparent gets its trace; new traces are
            // kept at the configured ratio.
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                config.sample_ratio,
            ))))
            .with_resource(
                Resource::builder()
                    .with_service_name(config.service_name.clone())
                    .build(),
            )
            .build();
        Ok(Some(Exporter { provider }))
    }

    /// The `tracing` layer that turns the service's spans into OpenTelemetry spans.
    pub fn layer<S>(
        &self,
    ) -> tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>
    where
        S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        tracing_opentelemetry::layer().with_tracer(self.provider.tracer("butler-memory"))
    }

    /// Sends the spans still batched and stops the exporter's thread.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            eprintln!("butler-memory: exporting the last traces: {e}");
        }
    }
}

/// Makes `span` a child of the caller's W3C `traceparent` (already validated), so that the
/// service's spans join the caller's trace.
pub fn continue_trace(span: &tracing::Span, traceparent: &str) {
    let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
    let parent = TraceContextPropagator::new().extract(&carrier);
    // Fails only when the span is disabled (no exporter): nothing to continue then.
    let _ = span.set_parent(parent);
}
