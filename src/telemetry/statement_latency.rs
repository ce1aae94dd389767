//! `butler_memory_db_statement_seconds{family}`: the time of each SQL statement family, from
//! the engine's `db.*` spans (one per store function, `#[instrument]`ed in `store/`). A
//! `tracing` layer times each such span from creation to close, so the statements are
//! measured in one place, whether or not traces are exported.

use std::time::Instant;

use tracing::span::{Attributes, Id};
use tracing::{Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// Times `db.*` spans of the engine's trace target.
pub struct StatementLatency;

/// When a statement family's span began.
struct Began(Instant);

impl StatementLatency {
    /// Whether `metadata` is a statement family's span: the layer's filter.
    pub fn is_statement(metadata: &Metadata<'_>) -> bool {
        metadata.is_span()
            && metadata.target() == super::traces::SPANS
            && metadata.name().starts_with("db.")
    }
}

impl<S> Layer<S> for StatementLatency
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    fn on_new_span(&self, _attributes: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Began(Instant::now()));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        if let Some(Began(began)) = span.extensions().get::<Began>() {
            // `name` is the span's static name: one series per family, a bounded set.
            metrics::histogram!("butler_memory_db_statement_seconds", "family" => span.name())
                .record(began.elapsed().as_secs_f64());
        }
    }
}
