//! The metrics output: the occurrences' counters and gauges in [`Metrics`].
//!
//! IMDS request figures and the poll heartbeat are not here: the side that sends a request
//! records it (the poll loop its GETs, the approval output its POSTs).

use std::sync::Arc;

use azure_scheduled_events_core::occurrence::{Context, Occurrence};
use azure_scheduled_events_core::tracker::Tracked;

use super::Metrics;

use crate::output::Output;

#[derive(Debug)]
pub struct MetricsOutput {
    metrics: Arc<Metrics>,
    /// The document's events as last seen: whether each affects this VM changes when its
    /// name becomes known.
    events: Arc<[Tracked]>,
}

impl MetricsOutput {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            events: Arc::from([]),
        }
    }

    /// The per-event series of the last events, as this batch's event views say.
    fn set_events(&self, context: &Context) {
        self.metrics.set_events(
            context.incarnation.unwrap_or_default(),
            self.events.iter().map(|tracked| {
                let affects = context.affects(&tracked.event);
                (tracked.event.clone(), affects, Some(tracked.first_seen))
            }),
        );
    }
}

impl Output for MetricsOutput {
    fn consume(&mut self, context: &Context, occurrences: &[Occurrence]) {
        let metrics = Arc::clone(&self.metrics);
        for occurrence in occurrences {
            match occurrence {
                Occurrence::Restarted(restart) => {
                    if let (Some(expected), Some(clean)) =
                        (restart.expected_label(), restart.clean_label())
                    {
                        metrics.record_reboot(expected, clean);
                    }
                }
                Occurrence::VmIdentified { compute, .. } => {
                    metrics.set_vm(context.vm_name(), compute);
                    self.set_events(context);
                }
                Occurrence::Transition(transition) => metrics.record_transition(transition),
                Occurrence::Events(events) => {
                    self.events = Arc::clone(events);
                    self.set_events(context);
                }
                Occurrence::Decision(decision) => metrics.record_decision(decision),
                // `up` and the request counters are the poll loop's; the rest is not counted.
                Occurrence::VmUnidentified { .. }
                | Occurrence::Imds(_)
                | Occurrence::EndedWhileDown(_)
                | Occurrence::ApprovalSending { .. }
                | Occurrence::Notify(_) => {}
            }
        }
    }
}
