//! The metrics output: the occurrences' counters and gauges in [`Metrics`].
//!
//! IMDS request figures and the poll heartbeat are not here: the side that sends a request
//! records it (the poll loop its GETs, the approval output its POSTs).

use std::sync::Arc;

use azure_scheduled_events_core::event::{Affects, Event};
use azure_scheduled_events_core::occurrence::{Context, Occurrence};
use azure_scheduled_events_core::tracker::{Tracked, Transition};
use chrono::{DateTime, Utc};

use super::Metrics;

use crate::output::Output;

#[derive(Debug)]
pub struct MetricsOutput {
    metrics: Arc<Metrics>,
    /// The document's events as last seen: whether each affects this VM changes when its
    /// name becomes known.
    events: Arc<[Tracked]>,
    /// This VM's `compute.priority`, once instance metadata has been read.
    priority: Option<String>,
    /// Events that appeared before instance metadata was read, with their first sight: whether
    /// they name this VM, and its priority, are known only then. At most [`MAX_UNIDENTIFIED`].
    unidentified: Vec<(Event, DateTime<Utc>)>,
}

/// Most events held for the notice histogram while instance metadata cannot be read; later ones
/// are not observed.
const MAX_UNIDENTIFIED: usize = 64;

impl MetricsOutput {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            events: Arc::from([]),
            priority: None,
            unidentified: Vec::new(),
        }
    }

    /// Observes the notice of an event this VM's agent sees for the first time (never of one
    /// resumed after a restart: the earlier run observed it), once this VM is identified.
    fn first_sight(&mut self, context: &Context, event: &Event) {
        match &self.priority {
            Some(priority) if context.affects(event) == Affects::Yes => {
                self.metrics.record_notice(event, context.at, priority);
            }
            None if self.unidentified.len() < MAX_UNIDENTIFIED => {
                self.unidentified.push((event.clone(), context.at));
            }
            // Another VM's event, or one too many waiting for instance metadata.
            Some(_) | None => {}
        }
    }

    /// Observes the events that appeared before this VM was identified.
    fn identified(&mut self, context: &Context, priority: &str) {
        for (event, first_seen) in std::mem::take(&mut self.unidentified) {
            if context.affects(&event) == Affects::Yes {
                self.metrics.record_notice(&event, first_seen, priority);
            }
        }
        self.priority = Some(priority.to_owned());
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
                    self.identified(context, &compute.priority);
                    self.set_events(context);
                }
                Occurrence::Transition(transition) => {
                    if let Transition::Appeared(event) = transition {
                        self.first_sight(context, event);
                    }
                    metrics.record_transition(transition);
                }
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
