//! The log subscriber: JSON lines on stdout by default, plain text on request.
//!
//! Each line is one change (see [`crate::agent`]), never one per poll.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::LogFormat;

/// Installs the global subscriber. `level` was validated with the configuration.
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_new(level).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stdout);
    // A second initialisation (tests that start several agents) keeps the first subscriber.
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_target(false)
            .try_init(),
        LogFormat::Text => builder
            .with_target(false)
            .with_ansi(std::io::stdout().is_terminal())
            .try_init(),
    };
}
