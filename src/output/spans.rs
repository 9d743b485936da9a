//! The spans output: each VM's view of an event as OpenTelemetry spans, queued for OTLP export.
//!
//! [`EventSpans`] builds the spans (pure); this output hands them to the export queue of
//! [`Traces`], which never blocks: a collector that is slow or down loses spans (counted in
//! `..._otlp_spans_dropped_total`), never a poll. Wired only when traces are on.

use azure_scheduled_events_core::occurrence::{Context, Occurrence};

use crate::output::telemetry::{Traces, VmIdentity};

use self::event_spans::EventSpans;
use super::Output;

mod event_spans;

#[derive(Debug)]
pub struct Spans {
    traces: Option<Traces>,
    spans: EventSpans,
}

impl Spans {
    pub fn new(traces: Traces) -> Self {
        Self {
            traces: Some(traces),
            spans: EventSpans::new(),
        }
    }
}

#[async_trait::async_trait]
impl Output for Spans {
    fn consume(&mut self, context: &Context, occurrences: &[Occurrence]) {
        let Some(traces) = &self.traces else { return };
        for occurrence in occurrences {
            match occurrence {
                Occurrence::Transition(transition) => {
                    for span in self.spans.record(transition, context) {
                        traces.submit(span);
                    }
                }
                Occurrence::EndedWhileDown(remembered) => {
                    if let Some(span) = self.spans.ended_while_down(remembered, context) {
                        traces.submit(span);
                    }
                }
                Occurrence::Decision(decision) => {
                    traces.submit(self.spans.decision(decision, context));
                }
                Occurrence::VmIdentified { compute, .. } => traces.set_vm(VmIdentity {
                    vm_name: context.vm_name(),
                    compute: Some(compute),
                }),
                // Exported at debug level by the `tracing` bridge, or not at all: one trace per
                // poll is noise.
                Occurrence::Restarted(_)
                | Occurrence::VmUnidentified { .. }
                | Occurrence::Imds(_)
                | Occurrence::Events(_)
                | Occurrence::ApprovalSending { .. }
                | Occurrence::Notify(_) => {}
            }
        }
    }

    /// Ends the open event spans and exports what is queued, before the process exits.
    async fn stop(&mut self, context: &Context) {
        let Some(traces) = self.traces.take() else {
            return;
        };
        for span in self.spans.close_all(context) {
            traces.submit(span);
        }
        traces.shutdown().await;
    }
}
