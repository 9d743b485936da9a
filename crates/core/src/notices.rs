//! What each notification receiver is sent: the pure decider of notifications, as
//! [`crate::approval::decide`] is of approvals.
//!
//! [`Notices::decide`] reads one batch of occurrences (transitions, events that ended while the
//! agent was down, approvals) and says, as [`Occurrence::Notify`], which receivers want each
//! one ([`Filter`]) and which are new to them. The transitions a restart reports again
//! (`advisory`, `scheduled`, `started`) go to a receiver once per event: what was handed to it is seeded
//! from the state file, recorded there by the state output before the notification output
//! queues anything, and forgotten when the event leaves the document. No I/O, no clock.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::approval::Outcome;
use crate::event::{Affects, Event, EventSource, EventType};
use crate::occurrence::{Lifecycle, Notice, Occurrence};
use crate::state::{State, stored};
use crate::subject::Subject;
use crate::tracker::Transition;

/// The transitions a restart reports again: an event still in the document is resumed as
/// `advisory`, `scheduled` or `started`. Only these are remembered, so a restart never sends them
/// twice; every other transition happens once (an event is updated as often as it changes).
pub const REPLAYABLE: [Subject; 3] = [Subject::Advisory, Subject::Scheduled, Subject::Started];

/// Which notifications a receiver gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    pub transitions: Vec<Subject>,
    /// Empty: every type.
    pub event_types: Vec<EventType>,
    /// Empty: every source.
    pub event_sources: Vec<EventSource>,
    /// Only events whose `Resources` name this VM (the default).
    pub this_vm_only: bool,
    /// The replayable transitions are sent again after a restart: for `alertmanager`, whose
    /// alerts are idempotent (the same labels are the same alert) and must be re-sent to stay
    /// active.
    pub replay: bool,
}

/// A receiver as the core knows it: its name and what it wants (how it is reached is the
/// notification output's business).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recipient {
    pub name: String,
    pub filter: Filter,
}

/// The receivers' filters and what each was already sent.
#[derive(Debug, Clone, Default)]
pub struct Notices {
    receivers: Vec<(Arc<str>, Filter)>,
    /// By EventId (as the state file holds it, [`stored`]), then receiver: the replayable
    /// transitions already handed to it.
    sent: BTreeMap<String, BTreeMap<Arc<str>, Vec<Subject>>>,
}

impl Notices {
    /// The receivers, knowing what the state file of an earlier run says they got.
    pub fn new(recipients: &[Recipient], previous: &State) -> Self {
        let receivers: Vec<(Arc<str>, Filter)> = recipients
            .iter()
            .map(|r| (Arc::from(r.name.as_str()), r.filter.clone()))
            .collect();
        let mut sent: BTreeMap<String, BTreeMap<Arc<str>, Vec<Subject>>> = BTreeMap::new();
        for (event_id, by_receiver) in &previous.notifications {
            for (name, transitions) in by_receiver {
                let Some((receiver, _)) = receivers.iter().find(|(r, _)| **r == **name) else {
                    continue;
                };
                let replayed: Vec<Subject> = REPLAYABLE
                    .into_iter()
                    .filter(|t| transitions.iter().any(|sent| sent == t.as_str()))
                    .collect();
                sent.entry(event_id.clone())
                    .or_default()
                    .insert(Arc::clone(receiver), replayed);
            }
        }
        Self { receivers, sent }
    }

    /// The notifications of one batch, read by the VM called `vm`.
    pub fn decide(&mut self, occurrences: &[Occurrence], vm: Option<&str>) -> Vec<Occurrence> {
        if self.receivers.is_empty() {
            return Vec::new();
        }
        let mut notices = Vec::new();
        // When each event was first seen, for the mark of a predicted hardware failure on the
        // notice that first reports it.
        let first_seen = |id: &crate::event::EventId| {
            occurrences.iter().find_map(|occurrence| match occurrence {
                Occurrence::Events(events) => events
                    .iter()
                    .find(|tracked| tracked.event.id == *id)
                    .map(|tracked| tracked.first_seen),
                _ => None,
            })
        };
        for occurrence in occurrences {
            let found = match occurrence.lifecycle() {
                Some(Lifecycle::Transition(transition)) => Some((
                    Subject::from(transition.kind()),
                    transition.event(),
                    transition.changed_fields(),
                    transition.seen_started(),
                )),
                // It completed (or was cancelled) while the agent was down: closing it now is
                // what lets a PagerDuty incident resolve itself.
                Some(Lifecycle::EndedWhileDown(tracked)) => Some((
                    Subject::Completed,
                    &tracked.event,
                    None,
                    Some(tracked.seen_started),
                )),
                None => match occurrence {
                    Occurrence::Decision(decision)
                        if matches!(decision.outcome, Outcome::Approved { .. }) =>
                    {
                        Some((Subject::Approved, &decision.event, None, None))
                    }
                    // Events leaving the document take what they were sent with them.
                    Occurrence::Events(events) => {
                        self.sent.retain(|id, _| {
                            events
                                .iter()
                                .any(|tracked| stored(tracked.event.id.as_str()) == id.as_str())
                        });
                        None
                    }
                    // Nothing else is news for a receiver.
                    _ => None,
                },
            };
            let Some((transition, event, changed, seen_started)) = found else {
                continue;
            };
            let predicted = match occurrence {
                Occurrence::Transition(Transition::Appeared(event)) => Some(
                    crate::hardware_failure::predicted(event, first_seen(&event.id)),
                ),
                Occurrence::Transition(Transition::Resumed {
                    event, first_seen, ..
                }) => Some(crate::hardware_failure::predicted(event, Some(*first_seen))),
                _ => None,
            };
            if let Some(mut notice) = self.notice(transition, event, changed, seen_started, vm) {
                notice.hardware_failure_predicted = predicted;
                notices.push(Occurrence::Notify(notice));
            }
        }
        notices
    }

    /// Who gets `transition` of `event`: the receivers whose filter wants it and, for a
    /// replayable transition, that did not get it yet.
    fn notice(
        &mut self,
        transition: Subject,
        event: &Event,
        changed: Option<String>,
        seen_started: Option<bool>,
        vm: Option<&str>,
    ) -> Option<Notice> {
        let recorded = REPLAYABLE.contains(&transition);
        let affects = event.affects(vm);
        let mut receivers = Vec::new();
        for (name, filter) in &self.receivers {
            if !wants(filter, transition, event, affects) {
                continue;
            }
            // A receiver that replays (Alertmanager: the same alert again is no new alert) gets
            // a resumed event again after a restart, to keep its alert active.
            if recorded && !filter.replay {
                let sent = self
                    .sent
                    .entry(stored(event.id.as_str()).into_owned())
                    .or_default()
                    .entry(Arc::clone(name))
                    .or_default();
                if sent.contains(&transition) {
                    continue;
                }
                sent.push(transition);
            }
            receivers.push(Arc::clone(name));
        }
        (!receivers.is_empty()).then(|| Notice {
            transition,
            event: event.clone(),
            changed,
            seen_started,
            hardware_failure_predicted: None,
            receivers,
            recorded,
        })
    }
}

/// Whether a receiver with `filter` wants `transition` of `event`, which `affects` this VM.
fn wants(filter: &Filter, transition: Subject, event: &Event, affects: Affects) -> bool {
    filter.transitions.contains(&transition)
        // An advisory reaches only receivers that asked for advisories, not even its end.
        && (!event.is_advisory() || filter.transitions.contains(&Subject::Advisory))
        && (filter.event_types.is_empty() || filter.event_types.contains(&event.event_type))
        && (filter.event_sources.is_empty()
            || event
                .source
                .as_ref()
                .is_some_and(|s| filter.event_sources.contains(s)))
        // While this VM's name is unknown, every event may be this VM's.
        && (!filter.this_vm_only || affects != Affects::No)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Document;
    use crate::tracker::{Tracked, Tracker, Transition};
    use chrono::{DateTime, Utc};

    fn t(seconds: i64) -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + chrono::Duration::seconds(seconds)
    }

    /// A receiver that does not replay (every format but `alertmanager`).
    fn receiver(name: &str, transitions: &[&'static str], this_vm_only: bool) -> Recipient {
        Recipient {
            name: name.to_owned(),
            filter: Filter {
                transitions: transitions
                    .iter()
                    .filter_map(|t| Subject::parse(t))
                    .collect(),
                event_types: Vec::new(),
                event_sources: Vec::new(),
                this_vm_only,
                replay: false,
            },
        }
    }

    /// The occurrences of one document: its transitions and, as the monitor says it, the events.
    fn observe(tracker: &mut Tracker, incarnation: u64, events: &str, at: i64) -> Vec<Occurrence> {
        let document = Document::from_json(
            format!(r#"{{"DocumentIncarnation":{incarnation},"Events":[{events}]}}"#).as_bytes(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let observation = tracker.observe(document, t(at));
        let mut occurrences: Vec<Occurrence> = observation
            .transitions
            .into_iter()
            .map(Occurrence::Transition)
            .collect();
        occurrences.extend(
            observation
                .ended_while_down
                .into_iter()
                .map(Occurrence::EndedWhileDown),
        );
        occurrences.push(Occurrence::Events(Arc::from(tracker.events())));
        occurrences
    }

    fn event(id: &str, status: &str, resources: &str) -> String {
        format!(
            r#"{{"EventId":"{id}","EventStatus":"{status}","EventType":"Reboot","ResourceType":"VirtualMachine","Resources":[{resources}],"NotBefore":""}}"#
        )
    }

    /// `transition receiver,receiver` per notice.
    fn said(occurrences: &[Occurrence]) -> Vec<String> {
        occurrences
            .iter()
            .filter_map(|o| match o {
                Occurrence::Notify(n) => Some(format!(
                    "{} {} {}",
                    n.transition,
                    n.event.id,
                    n.receivers
                        .iter()
                        .map(|r| r.as_ref())
                        .collect::<Vec<_>>()
                        .join(",")
                )),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn each_receiver_gets_what_its_filter_wants_and_only_this_vms_events_by_default() {
        let mut notices = Notices::new(
            &[
                receiver("ops", &["scheduled", "started", "completed"], true),
                receiver("all", &["scheduled", "updated"], false),
            ],
            &State::new(),
        );
        let mut tracker = Tracker::new();
        let mine = event("A", "Scheduled", r#""vm_0""#);
        let theirs = event("B", "Scheduled", r#""vm_1""#);
        let batch = observe(&mut tracker, 1, &format!("{mine},{theirs}"), 0);
        assert_eq!(
            said(&notices.decide(&batch, Some("vm_0"))),
            ["scheduled A ops,all", "scheduled B all"]
        );
        let batch = observe(&mut tracker, 2, &event("A", "Started", r#""vm_0""#), 1);
        assert_eq!(
            said(&notices.decide(&batch, Some("vm_0"))),
            ["started A ops"],
            "A started (a start is no update), B was cancelled: nobody wants that"
        );
        let batch = observe(&mut tracker, 3, "", 2);
        assert_eq!(
            said(&notices.decide(&batch, Some("vm_0"))),
            ["completed A ops"]
        );
    }

    #[test]
    fn while_the_vms_name_is_unknown_every_event_may_be_this_vms() {
        let mut notices = Notices::new(&[receiver("ops", &["scheduled"], true)], &State::new());
        let batch = observe(
            &mut Tracker::new(),
            1,
            &event("B", "Scheduled", r#""vm_1""#),
            0,
        );
        assert_eq!(said(&notices.decide(&batch, None)), ["scheduled B ops"]);
    }

    #[test]
    fn a_restart_does_not_send_again_what_the_state_file_says_was_sent() {
        let config = vec![
            receiver("ops", &["scheduled", "started"], true),
            receiver("new", &["scheduled", "started"], true),
        ];
        let mut previous = State::new();
        previous.record_notification("A", "ops", "scheduled");
        let mut notices = Notices::new(&config, &previous);
        let mut tracker = Tracker::new();
        tracker.resume(vec![Tracked {
            event: Document::from_json(
                format!(
                    r#"{{"DocumentIncarnation":1,"Events":[{}]}}"#,
                    event("A", "Scheduled", r#""vm_0""#)
                )
                .as_bytes(),
            )
            .unwrap_or_else(|e| panic!("{e}"))
            .events
            .remove(0),
            first_seen: t(0),
            seen_started: false,
        }]);
        let batch = observe(&mut tracker, 1, &event("A", "Scheduled", r#""vm_0""#), 10);
        assert!(matches!(
            batch.first(),
            Some(Occurrence::Transition(Transition::Resumed { .. }))
        ));
        assert_eq!(
            said(&notices.decide(&batch, Some("vm_0"))),
            ["scheduled A new"],
            "only the receiver that never got it"
        );
        assert_eq!(
            said(&notices.decide(&batch, Some("vm_0"))),
            Vec::<String>::new(),
            "the same transition reported again goes nowhere"
        );
    }

    #[test]
    fn what_was_sent_goes_with_the_event_and_updates_are_sent_each_time() {
        let mut notices = Notices::new(
            &[receiver("ops", &["scheduled", "updated"], true)],
            &State::new(),
        );
        let mut tracker = Tracker::new();
        let batch = observe(&mut tracker, 1, &event("A", "Scheduled", r#""vm_0""#), 0);
        assert_eq!(notices.decide(&batch, Some("vm_0")).len(), 1);
        assert_eq!(notices.sent.len(), 1);
        for incarnation in 2..4 {
            let resources = if incarnation % 2 == 0 {
                r#""vm_0","vm_1""#
            } else {
                r#""vm_0""#
            };
            let batch = observe(
                &mut tracker,
                incarnation,
                &event("A", "Scheduled", resources),
                incarnation as i64,
            );
            assert_eq!(
                said(&notices.decide(&batch, Some("vm_0"))),
                ["updated A ops"]
            );
        }
        let batch = observe(&mut tracker, 4, "", 5);
        assert!(notices.decide(&batch, Some("vm_0")).is_empty());
        assert!(notices.sent.is_empty(), "forgotten when the event left");
    }

    #[test]
    fn no_receivers_decide_nothing() {
        let mut notices = Notices::new(&[], &State::new());
        let batch = observe(
            &mut Tracker::new(),
            1,
            &event("A", "Scheduled", r#""vm_0""#),
            0,
        );
        assert!(notices.decide(&batch, Some("vm_0")).is_empty());
    }

    #[test]
    fn an_advisory_reaches_only_receivers_that_list_advisory_not_even_its_end() {
        let mut notices = Notices::new(
            &[
                receiver(
                    "default",
                    &["scheduled", "started", "completed", "cancelled"],
                    true,
                ),
                receiver("spot", &["advisory", "cancelled"], true),
            ],
            &State::default(),
        );
        let mut tracker = Tracker::new();
        let advisory = r#"{"EventId":"A","EventStatus":"Advisory","EventType":"SpotRebalanceRecommendation","Resources":["vm_0"],"NotBefore":""}"#;
        let batch = observe(&mut tracker, 1, advisory, 0);
        assert_eq!(
            said(&notices.decide(&batch, Some("vm_0"))),
            ["advisory A spot"]
        );
        let batch = observe(&mut tracker, 2, "", 10);
        assert_eq!(
            said(&notices.decide(&batch, Some("vm_0"))),
            ["cancelled A spot"]
        );
    }
}
