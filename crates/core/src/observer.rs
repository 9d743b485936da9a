//! The functional core of the agent: one poll's outcome in, the [`Occurrence`]s it makes out.
//!
//! [`Observer::poll`] folds a document (or a failed poll) into the [`Monitor`], resuming from the
//! state file at the first document after a start, then says which prepare and recover hooks
//! start and what approval decides ([`Decider`]). [`Observer::report`] takes back what an output
//! that acts (a hook, an approval POST) reports. No I/O, no clock: the caller passes the time.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::approval::decide::{Decided, Decider};
use crate::approval::{self, Decision, HookKind, Outcome};
use crate::event::{Affects, Event, EventId, Polled};
use crate::monitor::{Monitor, PollFailure};
use crate::notices::{Notices, Recipient};
use crate::occurrence::{Occurrence, Report};
use crate::state::{KnownEvent, State, is_digest};
use crate::tracker::Tracked;
use crate::view::SpanIds;

/// Everything the agent has worked out from what it saw.
#[derive(Debug)]
pub struct Observer {
    monitor: Monitor,
    decider: Decider,
    prepare_hook: bool,
    recover_hook: bool,
    /// The state file's events, until the first valid document.
    remembered: Option<Vec<KnownEvent>>,
    /// The incarnation of the document the state file's events are from.
    remembered_incarnation: Option<u64>,
    notices: Notices,
    /// This VM's lifecycle span id of each event, given at first sight.
    span_ids: Arc<SpanIds>,
}

impl Observer {
    /// Starts from what the state file of an earlier run holds, on the machine called `host`,
    /// deciding approvals by `approval` and notifying `recipients`.
    pub fn new(
        approval: approval::Settings,
        recipients: &[Recipient],
        previous: &State,
        host: &str,
    ) -> Self {
        Self {
            notices: Notices::new(recipients, previous),
            span_ids: Arc::new(SpanIds::new(host)),
            monitor: Monitor::new(),
            prepare_hook: approval.hooks.prepare,
            recover_hook: approval.hooks.recover,
            decider: Decider::new(approval, &previous.approvals),
            remembered: Some(previous.events.clone()),
            remembered_incarnation: previous.document_incarnation,
        }
    }

    pub fn monitor(&self) -> &Monitor {
        &self.monitor
    }

    /// This VM's lifecycle span id of each event, as first given.
    pub fn span_ids(&self) -> &Arc<SpanIds> {
        &self.span_ids
    }

    /// Takes in one poll's outcome, read at `now` by the VM called `vm`.
    pub fn poll(
        &mut self,
        outcome: Result<Polled, PollFailure<'_>>,
        vm: Option<&str>,
        now: DateTime<Utc>,
    ) -> Vec<Occurrence> {
        if let Ok(polled) = &outcome
            && let Some(mut remembered) = self.remembered.take()
        {
            // Strings too long for the state file were held as digests: the document's own
            // are taken back, so the tracker knows the event again.
            if let Polled::Changed(document) = polled {
                for known in remembered.iter_mut().filter(|known| {
                    [&known.event_id, &known.event_type, &known.event_status]
                        .into_iter()
                        .any(|held| is_digest(held))
                }) {
                    document.events.iter().any(|event| known.resolve(event));
                }
            }
            // Resolved against the VM's name as known now, at the first document.
            self.monitor.resume(
                remembered.iter().map(|known| tracked(known, vm)).collect(),
                self.remembered_incarnation,
            );
            let span_ids = Arc::make_mut(&mut self.span_ids);
            for known in &remembered {
                span_ids.give(
                    &EventId::new(known.event_id.as_str()),
                    vm,
                    known.span_id.as_deref(),
                );
            }
        }
        let mut occurrences = self.monitor.observe(outcome, now);
        self.give_span_ids(&occurrences, vm);
        let hooks: Vec<Occurrence> = occurrences
            .iter()
            .filter_map(|occurrence| self.lifecycle_hook(occurrence, vm))
            .collect();
        occurrences.extend(hooks);
        if self.monitor.is_up() {
            let events = self.monitor.tracker().events();
            occurrences.extend(
                self.decider
                    .decide(events, vm, now)
                    .into_iter()
                    .map(|decided| match decided {
                        Decided::Decision(decision) => Occurrence::Decision(decision),
                        Decided::Send {
                            event,
                            rule,
                            attempts,
                        } => Occurrence::ApprovalSending {
                            event,
                            rule,
                            attempts,
                        },
                    }),
            );
        }
        occurrences
    }

    /// The notifications a whole batch of occurrences (what [`Observer::poll`] and
    /// [`Observer::report`] made) holds, for the VM called `vm`.
    pub fn notices(&mut self, occurrences: &[Occurrence], vm: Option<&str>) -> Vec<Occurrence> {
        self.notices.decide(occurrences, vm)
    }

    /// Takes in what an output reported back, at `now`.
    pub fn report(&mut self, report: Report, now: DateTime<Utc>) -> Occurrence {
        Occurrence::Decision(match report {
            Report::HookFinished { event, run } => self.decider.hook_finished(event, run),
            Report::Posted {
                event,
                rule,
                attempts,
                result,
            } => self.decider.posted(event, rule, attempts, result, now),
        })
    }

    /// Gives each event that appeared its lifecycle span id, once; marks those that ended.
    fn give_span_ids(&mut self, occurrences: &[Occurrence], vm: Option<&str>) {
        for lifecycle in occurrences.iter().filter_map(Occurrence::lifecycle) {
            let event = lifecycle.event();
            let ended = lifecycle.ended();
            let span_ids = Arc::make_mut(&mut self.span_ids);
            span_ids.give(&event.id, vm, None);
            if ended {
                span_ids.ended(&event.id);
            }
        }
    }

    /// The prepare hook for an event of this VM that appeared, the recover hook for one that
    /// ended (also while the agent was down). An event resumed after a restart was prepared by
    /// the earlier run.
    fn lifecycle_hook(&self, occurrence: &Occurrence, vm: Option<&str>) -> Option<Occurrence> {
        let lifecycle = occurrence.lifecycle()?;
        let kind = if lifecycle.appeared() {
            HookKind::Prepare
        } else if lifecycle.ended() {
            HookKind::Recover
        } else {
            return None;
        };
        let event = lifecycle.event();
        let configured = match kind {
            HookKind::Prepare => self.prepare_hook,
            HookKind::Recover => self.recover_hook,
            HookKind::Approve => false,
        };
        // An advisory announces nothing to prepare for or recover from.
        (configured && event.affects(vm) == Affects::Yes && !event.is_advisory())
            .then(|| hook_started(event, kind))
    }
}

fn hook_started(event: &Event, kind: HookKind) -> Occurrence {
    Occurrence::Decision(Decision {
        event: event.clone(),
        outcome: Outcome::HookStarted(kind),
    })
}

/// An event as the state file remembers it, for the tracker to resume from.
fn tracked(known: &KnownEvent, vm: Option<&str>) -> Tracked {
    Tracked {
        event: known.to_event(vm),
        first_seen: known.first_seen,
        seen_started: known.seen_started(),
    }
}
