//! The metrics output: the occurrences' counters and gauges in [`Metrics`].
//!
//! IMDS request figures and the poll heartbeat are not here: the side that sends a request
//! records it (the poll loop its GETs, the approval output its POSTs).

use std::sync::Arc;

use crate::metrics::Metrics;
use crate::occurrence::{Context, Occurrence};

use super::Output;

#[derive(Debug)]
pub struct MetricsOutput(Arc<Metrics>);

impl MetricsOutput {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self(metrics)
    }
}

impl Output for MetricsOutput {
    fn consume(&mut self, context: &Context, occurrences: &[Occurrence]) {
        let metrics = &self.0;
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
                    metrics.set_vm(context.vm_name(), Some(compute))
                }
                Occurrence::Transition(transition) => metrics.record_transition(transition),
                Occurrence::Events(events) => {
                    metrics.set_tracked(context.incarnation.unwrap_or_default(), events)
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
