//! Log-based events: the log lines of an event's transitions, each also an OpenTelemetry
//! LogRecord with an event name, queued for OTLP export.
//!
//! The lines are those the log output writes with the [`TARGET`] target (or one of its
//! `TARGET::<name>` children): a `tracing` layer beside the JSON lines turns each into a record
//! with the line's fields as attributes (the same names and values), its message as body, its
//! level as severity, and its `trace_id` and `span_id` as the record's trace context, so a record
//! and the event's spans link both ways. The event name is `azure.scheduled_event.<name>`: the
//! line's `transition` field for the transition lines, the target's last segment for the others.
//! The layer sits under the same level filter as the lines, so a record is sent exactly when its
//! line is written; it only ever hands the record to the bounded queue ([`super::export`]).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::trace::{SpanId, TraceFlags, TraceId};
use opentelemetry::{InstrumentationScope, Key};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{LogProcessor, SdkLogRecord, SdkLogger, SdkLoggerProvider};
use tracing::field::{Field, Visit};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;

use super::export::Queue;

/// The `tracing` target of the lines that are events; `TARGET::<name>` names the event of a
/// line without a `transition` field.
pub const TARGET: &str = "azure_scheduled_events_exporter::event";

/// The targets of the lines whose event is not their `transition`.
pub const APPROVED: &str = "azure_scheduled_events_exporter::event::approved";
pub const ENDED_WHILE_DOWN: &str = "azure_scheduled_events_exporter::event::ended_while_down";
pub const RESUMED: &str = "azure_scheduled_events_exporter::event::resumed";

/// Every event name a record can carry, under one namespace.
pub const NAMES: [&str; 9] = [
    "azure.scheduled_event.scheduled",
    "azure.scheduled_event.advisory",
    "azure.scheduled_event.started",
    "azure.scheduled_event.updated",
    "azure.scheduled_event.completed",
    "azure.scheduled_event.cancelled",
    "azure.scheduled_event.approved",
    "azure.scheduled_event.ended_while_down",
    "azure.scheduled_event.resumed",
];

const NAMESPACE: &str = "azure.scheduled_event.";

/// The event name of `name` (`scheduled`, `approved`, ...), when it is one.
fn event_name(name: &str) -> Option<&'static str> {
    NAMES
        .iter()
        .copied()
        .find(|full| full.strip_prefix(NAMESPACE) == Some(name))
}

/// The scope of every record, as of every span.
pub fn scope() -> InstrumentationScope {
    InstrumentationScope::builder(super::SCOPE)
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

/// The SDK's provider, whose only processor feeds the export queue once the agent has started
/// it (and drops records before that, when no event line is written anyway).
pub fn provider(queue: Arc<OnceLock<Queue<SdkLogRecord>>>) -> SdkLoggerProvider {
    SdkLoggerProvider::builder()
        .with_log_processor(QueueProcessor(queue))
        .build()
}

/// The `tracing` layer that turns event lines into records.
#[derive(Debug)]
pub struct EventsLayer {
    logger: SdkLogger,
}

impl EventsLayer {
    pub fn new(provider: &SdkLoggerProvider) -> Self {
        Self {
            logger: provider.logger_with_scope(scope()),
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for EventsLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let metadata = event.metadata();
        let Some(rest) = metadata.target().strip_prefix(TARGET) else {
            return;
        };
        let named = match rest.strip_prefix("::") {
            Some(name) => event_name(name),
            None if rest.is_empty() => None,
            // Another target that only starts alike.
            None => return,
        };
        let mut record = self.logger.create_log_record();
        let mut fields = Fields {
            record: &mut record,
            name: named,
            trace_id: None,
            span_id: None,
        };
        event.record(&mut fields);
        let (Some(name), trace_id, span_id) = (fields.name, fields.trace_id, fields.span_id) else {
            return;
        };
        record.set_event_name(name);
        record.set_timestamp(SystemTime::now());
        let (number, text) = severity(*metadata.level());
        record.set_severity_number(number);
        record.set_severity_text(text);
        if let Some(trace_id) = trace_id {
            record.set_trace_context(
                trace_id,
                span_id.unwrap_or(SpanId::INVALID),
                Some(TraceFlags::SAMPLED),
            );
        }
        self.logger.emit(record);
    }
}

fn severity(level: tracing::Level) -> (Severity, &'static str) {
    match level {
        tracing::Level::TRACE => (Severity::Trace, "TRACE"),
        tracing::Level::DEBUG => (Severity::Debug, "DEBUG"),
        tracing::Level::INFO => (Severity::Info, "INFO"),
        tracing::Level::WARN => (Severity::Warn, "WARN"),
        tracing::Level::ERROR => (Severity::Error, "ERROR"),
    }
}

/// Writes a line's fields into a record.
struct Fields<'a> {
    record: &'a mut SdkLogRecord,
    name: Option<&'static str>,
    trace_id: Option<TraceId>,
    span_id: Option<SpanId>,
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => {
                self.record.set_body(AnyValue::from(value.to_owned()));
                return;
            }
            "transition" if self.name.is_none() => self.name = event_name(value),
            "trace_id" => self.trace_id = TraceId::from_hex(value).ok(),
            "span_id" => self.span_id = SpanId::from_hex(value).ok(),
            _ => {}
        }
        self.record
            .add_attribute(Key::from_static_str(field.name()), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // `format_args!` messages and `%`/`?` fields arrive here: as text, like the line.
        self.record_str(field, &format!("{value:?}"));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record
            .add_attribute(Key::from_static_str(field.name()), value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.record_i64(field, i64::try_from(value).unwrap_or(i64::MAX));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.record
            .add_attribute(Key::from_static_str(field.name()), value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.record
            .add_attribute(Key::from_static_str(field.name()), value);
    }
}

/// About how many bytes a record holds: its body and attributes, keys and values. The log queue
/// is bounded by this sum.
pub fn size(record: &SdkLogRecord) -> usize {
    fn of(value: &AnyValue) -> usize {
        match value {
            AnyValue::String(text) => text.as_str().len(),
            AnyValue::Bytes(bytes) => bytes.len(),
            AnyValue::ListAny(list) => list.iter().map(of).sum(),
            AnyValue::Map(map) => map.iter().map(|(k, v)| k.as_str().len() + of(v)).sum(),
            _ => 8,
        }
    }
    // The record's fixed part: timestamps, ids, severity, the attribute slots.
    const FIXED: usize = 256;
    FIXED
        + record.body().map_or(0, of)
        + record
            .attributes_iter()
            .map(|(key, value)| key.as_str().len() + of(value) + 16)
            .sum::<usize>()
}

/// Hands each record to the export queue once the agent has started it.
#[derive(Debug, Clone, Default)]
struct QueueProcessor(Arc<OnceLock<Queue<SdkLogRecord>>>);

impl LogProcessor for QueueProcessor {
    fn emit(&self, record: &mut SdkLogRecord, _scope: &InstrumentationScope) {
        if let Some(queue) = self.0.get() {
            let bytes = size(record);
            queue.submit_sized(record.clone(), bytes);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn set_resource(&mut self, _resource: &Resource) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use tracing_subscriber::layer::SubscriberExt as _;

    /// Every record the layer emitted.
    #[derive(Debug, Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<SdkLogRecord>>>);

    impl LogProcessor for Recorder {
        fn emit(&self, record: &mut SdkLogRecord, _scope: &InstrumentationScope) {
            if let Ok(mut records) = self.0.lock() {
                records.push(record.clone());
            }
        }
        fn force_flush(&self) -> OTelSdkResult {
            Ok(())
        }
    }

    fn records_of(lines: impl FnOnce()) -> Vec<SdkLogRecord> {
        let recorder = Recorder::default();
        let provider = SdkLoggerProvider::builder()
            .with_log_processor(recorder.clone())
            .build();
        let subscriber = tracing_subscriber::registry().with(EventsLayer::new(&provider));
        tracing::subscriber::with_default(subscriber, lines);
        recorder.0.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn attribute<'a>(record: &'a SdkLogRecord, key: &str) -> Option<&'a AnyValue> {
        record
            .attributes_iter()
            .find(|(k, _)| k.as_str() == key)
            .map(|(_, v)| v)
    }

    #[test]
    fn a_transition_line_is_a_record_named_by_its_transition_in_the_events_trace() {
        let records = records_of(|| {
            tracing::warn!(
                target: TARGET,
                transition = "started",
                event_id = "5DD55B64-45AD-49D3-BBC9-F57D4EA97BD7",
                trace_id = "5dd55b6445ad49d3bbc9f57d4ea97bd7",
                span_id = "3812c4db59ce6f07",
                document_incarnation = 3_u64,
                seen_started = true,
                "event {}",
                "started"
            );
        });
        assert_eq!(records.len(), 1);
        let record = &records[0];
        assert_eq!(record.event_name(), Some("azure.scheduled_event.started"));
        assert_eq!(record.severity_number(), Some(Severity::Warn));
        assert_eq!(record.severity_text(), Some("WARN"));
        assert_eq!(
            record.body(),
            Some(&AnyValue::from("event started".to_owned()))
        );
        let context = record.trace_context().map(|c| (c.trace_id, c.span_id));
        assert_eq!(
            context,
            Some((
                TraceId::from_hex("5dd55b6445ad49d3bbc9f57d4ea97bd7").unwrap_or(TraceId::INVALID),
                SpanId::from_hex("3812c4db59ce6f07").unwrap_or(SpanId::INVALID)
            ))
        );
        assert_eq!(
            attribute(record, "event_id"),
            Some(&AnyValue::from(
                "5DD55B64-45AD-49D3-BBC9-F57D4EA97BD7".to_owned()
            ))
        );
        assert_eq!(
            attribute(record, "document_incarnation"),
            Some(&AnyValue::Int(3))
        );
        assert_eq!(
            attribute(record, "seen_started"),
            Some(&AnyValue::Boolean(true))
        );
        assert!(attribute(record, "message").is_none(), "the body, once");
        assert!(size(record) > 256);
    }

    #[test]
    fn lines_of_other_targets_are_no_records_and_child_targets_name_their_event() {
        let records = records_of(|| {
            tracing::info!(transition = "scheduled", "event scheduled");
            tracing::info!(target: "azure_scheduled_events_exporter::eventually", "x");
            tracing::info!(target: RESUMED, resumed = 2_u64, "resumed the events");
            tracing::info!(target: APPROVED, decision = "approved", "event approved");
            tracing::info!(target: TARGET, transition = "unknown", "event unknown");
        });
        let names: Vec<_> = records.iter().map(SdkLogRecord::event_name).collect();
        assert_eq!(
            names,
            [
                Some("azure.scheduled_event.resumed"),
                Some("azure.scheduled_event.approved")
            ]
        );
        assert!(records[0].trace_context().is_none(), "no event, no trace");
    }

    #[test]
    fn every_child_target_names_an_event() {
        for target in [APPROVED, ENDED_WHILE_DOWN, RESUMED] {
            let name = target
                .strip_prefix(TARGET)
                .and_then(|rest| rest.strip_prefix("::"))
                .and_then(event_name);
            assert!(name.is_some(), "{target}");
        }
    }
}
