//! The log subscriber: JSON lines on stdout by default, plain text on request.
//!
//! Each line is one change (see [`crate::shell::agent`]), never one per poll. When traces are on, the
//! same subscriber bridges the agent's own `tracing` spans to OpenTelemetry: only spans of this
//! crate, and only at the levels the log filter lets through, so the per-poll IMDS request spans
//! (debug) are exported only with `--log.level=debug`, and the exporter's own HTTP and gRPC
//! internals never feed back into it. When log events are on, the event lines (and only those,
//! under the same filter) are also log records ([`crate::output::telemetry::events`]).
//!
//! The text format reads as a sentence first: the message, then an event's `summary`, then the
//! ids and the other fields as `key=value`.

use std::fmt::Write as _;
use std::io::IsTerminal;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::filter::{FilterExt, Targets, filter_fn};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{Layer, fmt};

use crate::config::LogFormat;
pub use crate::output::telemetry::Bridges;

/// Installs the global subscriber, writing to stdout. `level` was validated with the
/// configuration.
pub fn init(format: LogFormat, level: &str, bridges: Bridges) {
    init_with_writer(
        format,
        level,
        bridges,
        std::io::stdout,
        std::io::stdout().is_terminal(),
    );
}

/// Installs the global subscriber, writing lines to `writer` (a Windows service has no stdout).
pub fn init_with_writer<W>(format: LogFormat, level: &str, bridges: Bridges, writer: W, ansi: bool)
where
    W: for<'w> fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    let targets = level
        .parse::<Targets>()
        .unwrap_or_else(|_| Targets::new().with_default(tracing::Level::INFO));
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
            .fmt_fields(SentenceFirst)
            .with_target(false)
            .with_ansi(ansi)
            .with_writer(writer)
            .boxed(),
    };
    let spans = bridges.tracer.map(|tracer| {
        let ours = filter_fn(|metadata| metadata.target().starts_with(env!("CARGO_CRATE_NAME")));
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(targets.clone().and(ours))
    });
    // The Kubernetes client logs an ERROR line of its own, without context, for every failed
    // request; the agent logs one line per kind of failure with the node and the operation
    // (src/output/kubernetes/api.rs). The client's lines are kept for --log.level=debug.
    let debug =
        tracing_subscriber::layer::Filter::<tracing_subscriber::Registry>::max_level_hint(&targets)
            .is_none_or(|level| level >= tracing::level_filters::LevelFilter::DEBUG);
    let client = filter_fn(move |metadata| debug || !metadata.target().starts_with("kube_client"));
    // A second initialisation (tests that start several agents) keeps the first subscriber.
    let events = bridges
        .events
        .map(|events| events.with_filter(targets.clone()));
    let _ = tracing_subscriber::registry()
        .with(spans)
        .with(events)
        .with(lines.with_filter(targets.clone().and(client)))
        .try_init();
}

/// Fields as the text format writes them: the message and the summary first, as a sentence,
/// then every other field as `key=value` in the order given.
#[derive(Debug, Clone, Copy)]
struct SentenceFirst;

impl<'writer> FormatFields<'writer> for SentenceFirst {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> std::fmt::Result {
        let mut collected = Collected::default();
        fields.record(&mut collected);
        writer.write_str(&collected.sentence())?;
        writer.write_str(&collected.rest)
    }
}

/// One line's fields, sorted into the sentence and the rest.
#[derive(Debug, Default)]
struct Collected {
    message: String,
    summary: String,
    rest: String,
}

impl Collected {
    fn sentence(&self) -> String {
        match (self.message.is_empty(), self.summary.is_empty()) {
            (_, true) => self.message.clone(),
            (true, false) => self.summary.clone(),
            (false, false) => format!("{}: {}", self.message, self.summary),
        }
    }
}

impl Visit for Collected {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_owned(),
            "summary" => self.summary = value.to_owned(),
            name => {
                let _ = write!(self.rest, " {name}={value:?}");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "summary" => self.summary = format!("{value:?}"),
            name => {
                let _ = write!(self.rest, " {name}={value:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_lines_read_as_a_sentence_first_with_the_ids_after() {
        let mut collected = Collected::default();
        let callsite_fields = tracing::field::FieldSet::new(
            &["event_id", "summary", "message"],
            tracing::callsite::Identifier(&CALLSITE),
        );
        let mut fields = callsite_fields.iter();
        let (id, summary, message) = (fields.next(), fields.next(), fields.next());
        let (Some(id), Some(summary), Some(message)) = (id, summary, message) else {
            panic!("three fields");
        };
        collected.record_str(&id, "A1B2");
        collected.record_str(
            &summary,
            "Freeze of vm_0, vm_1 in 60 s, for 5 s, live migration",
        );
        collected.record_debug(&message, &format_args!("event scheduled"));
        assert_eq!(
            format!("{}{}", collected.sentence(), collected.rest),
            "event scheduled: Freeze of vm_0, vm_1 in 60 s, for 5 s, live migration event_id=\"A1B2\""
        );
    }

    struct Callsite;
    static CALLSITE: Callsite = Callsite;
    impl tracing::callsite::Callsite for Callsite {
        fn set_interest(&self, _: tracing::subscriber::Interest) {}
        fn metadata(&self) -> &tracing::Metadata<'_> {
            unreachable!("never registered")
        }
    }
}
