//! The log subscriber: JSON lines on stdout by default, plain text on request.
//!
//! Each line is one change (see [`crate::shell::agent`]), never one per poll. When traces are on, the
//! same subscriber bridges the agent's own `tracing` spans to OpenTelemetry: only spans of this
//! crate, and only at the levels the log filter lets through, so the per-poll IMDS request spans
//! (debug) are exported only with `--log.level=debug`, and the exporter's own HTTP and gRPC
//! internals never feed back into it.

use std::io::IsTerminal;

use opentelemetry_sdk::trace::Tracer;
use tracing_subscriber::filter::{EnvFilter, FilterExt, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

use crate::config::LogFormat;

/// Installs the global subscriber, writing to stdout. `level` was validated with the
/// configuration.
pub fn init(format: LogFormat, level: &str, tracer: Option<Tracer>) {
    init_with_writer(
        format,
        level,
        tracer,
        std::io::stdout,
        std::io::stdout().is_terminal(),
    );
}

/// Installs the global subscriber, writing lines to `writer` (a Windows service has no stdout).
pub fn init_with_writer<W>(
    format: LogFormat,
    level: &str,
    tracer: Option<Tracer>,
    writer: W,
    ansi: bool,
) where
    W: for<'w> fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let filter = || EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let lines = match format {
        LogFormat::Json => fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_target(false)
            .with_writer(writer)
            .boxed(),
        LogFormat::Text => fmt::layer()
            .with_target(false)
            .with_ansi(ansi)
            .with_writer(writer)
            .boxed(),
    };
    let spans = tracer.map(|tracer| {
        let ours = filter_fn(|metadata| metadata.target().starts_with(env!("CARGO_CRATE_NAME")));
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(filter().and(ours))
    });
    // A second initialisation (tests that start several agents) keeps the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(spans)
        .with(lines.with_filter(filter()))
        .try_init();
}
