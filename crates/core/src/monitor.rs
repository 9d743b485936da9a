//! What the agent knows from polling: the tracker's events plus whether IMDS is answering.
//!
//! [`Monitor::observe`] folds one poll outcome into that knowledge and returns what changed as
//! [`Occurrence`]s. Like the tracker it is pure: the poll loop passes in the result and the time.
//! A failed poll only ever changes reachability; it never reaches the tracker.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::event::{DocumentIncarnation, Polled};
use crate::occurrence::{Imds, Occurrence};
use crate::tracker::{IncarnationChange, Tracked, Tracker};

/// Why a poll brought no document, as the core needs it: a bounded kind (the `reason` label and
/// `error.type`) and the error, read only when the outage begins (an outage is one failed poll a
/// second, and only its first is said). The shell makes one from the IMDS client's error.
#[derive(Debug, Clone, Copy)]
pub struct PollFailure<'a> {
    pub kind: &'static str,
    pub error: &'a dyn std::error::Error,
}

/// Whether the last poll succeeded, with what is needed to report the next change of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reachability {
    /// No poll has finished yet.
    Unknown,
    Reachable,
    Unreachable {
        since: DateTime<Utc>,
        failed_polls: u64,
    },
}

/// The tracker and IMDS reachability.
#[derive(Debug, Clone)]
pub struct Monitor {
    tracker: Tracker,
    reachability: Reachability,
    last_success: Option<DateTime<Utc>>,
}

impl Default for Monitor {
    fn default() -> Self {
        Self {
            tracker: Tracker::new(),
            reachability: Reachability::Unknown,
            last_success: None,
        }
    }
}

impl Monitor {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn tracker(&self) -> &Tracker {
        &self.tracker
    }

    /// Starts from what an earlier run knew (see [`Tracker::resume`]).
    pub fn resume(&mut self, remembered: Vec<Tracked>, incarnation: Option<u64>) {
        self.tracker
            .resume_from(remembered, incarnation.map(DocumentIncarnation));
    }

    /// Time of the last valid document.
    pub fn last_success(&self) -> Option<DateTime<Utc>> {
        self.last_success
    }

    /// Whether the last poll returned a valid document.
    pub fn is_up(&self) -> bool {
        self.reachability == Reachability::Reachable
    }

    /// Takes in one poll's outcome, read at `now`.
    pub fn observe(
        &mut self,
        outcome: Result<Polled, PollFailure<'_>>,
        now: DateTime<Utc>,
    ) -> Vec<Occurrence> {
        match outcome {
            Err(failure) => self.failed(failure, now).into_iter().collect(),
            Ok(polled) => {
                let mut changes = Vec::new();
                match self.reachability {
                    Reachability::Reachable => {}
                    Reachability::Unknown => changes.push(Occurrence::Imds(Imds::Reachable {
                        failed_polls: 0,
                        since: None,
                    })),
                    Reachability::Unreachable {
                        since,
                        failed_polls,
                    } => {
                        changes.push(Occurrence::Imds(Imds::Reachable {
                            failed_polls,
                            since: Some(since),
                        }));
                    }
                }
                self.reachability = Reachability::Reachable;
                self.last_success = Some(now);
                // The same bytes as the last valid document change nothing, but for events it
                // lacks whose end this one more document confirms: the tracker is a function of
                // the documents alone.
                let observation = match polled {
                    Polled::Changed(document) => Some(self.tracker.observe(document, now)),
                    // The same stale document again: one more toward a restarted numbering.
                    Polled::Unchanged => self.tracker.stale_again(now),
                };
                let Some(observation) = observation else {
                    let ended = self.tracker.unchanged(now);
                    if !ended.is_empty() {
                        changes.extend(ended.into_iter().map(Occurrence::Transition));
                        changes.push(Occurrence::Events(Arc::from(self.tracker.events())));
                    }
                    return changes;
                };
                let events_changed = !observation.transitions.is_empty()
                    || observation.incarnation != IncarnationChange::Unchanged;
                if matches!(
                    observation.incarnation,
                    IncarnationChange::Jumped { .. } | IncarnationChange::Restarted { .. }
                ) {
                    changes.push(Occurrence::Imds(Imds::Incarnation(observation.incarnation)));
                }
                changes.extend(
                    observation
                        .duplicates
                        .into_iter()
                        .map(|id| Occurrence::Imds(Imds::DuplicateEventId(id))),
                );
                changes.extend(
                    observation
                        .transitions
                        .into_iter()
                        .map(Occurrence::Transition),
                );
                changes.extend(
                    observation
                        .ended_while_down
                        .into_iter()
                        .map(Occurrence::EndedWhileDown),
                );
                if events_changed {
                    changes.push(Occurrence::Events(Arc::from(self.tracker.events())));
                }
                changes
            }
        }
    }

    fn failed(&mut self, failure: PollFailure<'_>, now: DateTime<Utc>) -> Option<Occurrence> {
        match &mut self.reachability {
            Reachability::Unreachable { failed_polls, .. } => {
                *failed_polls += 1;
                None
            }
            Reachability::Reachable | Reachability::Unknown => {
                self.reachability = Reachability::Unreachable {
                    since: now,
                    failed_polls: 1,
                };
                Some(Occurrence::Imds(Imds::Unreachable {
                    reason: failure.kind,
                    error: failure.error.to_string(),
                }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Document, DocumentIncarnation};
    use crate::tracker::Transition;
    use chrono::TimeZone;

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0)
            .single()
            .unwrap_or_default()
    }

    /// A failed poll of `kind`, with the client's error Rust's own I/O error stands in for.
    fn failure<'a>(kind: &'static str, error: &'a std::io::Error) -> PollFailure<'a> {
        PollFailure { kind, error }
    }

    fn doc(json: &str) -> Polled {
        Polled::Changed(Document::from_json(json.as_bytes()).unwrap_or_else(|e| panic!("{e}")))
    }

    const SCHEDULED: &str = r#"{"DocumentIncarnation":2,"Events":[{"EventId":"A","EventStatus":"Scheduled","EventType":"Reboot",
        "Resources":["vm_0"],"NotBefore":"Tue, 14 Nov 2023 22:28:20 GMT"}]}"#;

    #[test]
    fn a_poll_that_fails_between_two_identical_documents_changes_nothing() {
        let mut monitor = Monitor::new();
        monitor.observe(Ok(doc(SCHEDULED)), t(0));
        let known = monitor.tracker().events().to_vec();

        let error = std::io::Error::other("connection closed");
        for kind in ["timeout", "decode", "transport"] {
            monitor.observe(Err(failure(kind, &error)), t(1));
            assert_eq!(monitor.tracker().events(), known, "{kind}");
            assert_eq!(
                monitor.tracker().incarnation(),
                Some(DocumentIncarnation(2))
            );
        }
        let back = monitor.observe(Ok(doc(SCHEDULED)), t(4));
        assert_eq!(
            back,
            [Occurrence::Imds(Imds::Reachable {
                failed_polls: 3,
                since: Some(t(1))
            })],
            "no event transition"
        );
        assert_eq!(monitor.tracker().events(), known);
    }

    #[test]
    fn an_unchanged_document_changes_nothing_but_reachability() {
        let mut monitor = Monitor::new();
        monitor.observe(Ok(doc(SCHEDULED)), t(0));
        let known = monitor.tracker().events().to_vec();
        assert!(monitor.observe(Ok(Polled::Unchanged), t(1)).is_empty());
        let error = std::io::Error::other("timed out");
        monitor.observe(Err(failure("timeout", &error)), t(2));
        assert_eq!(
            monitor.observe(Ok(Polled::Unchanged), t(3)),
            [Occurrence::Imds(Imds::Reachable {
                failed_polls: 1,
                since: Some(t(2))
            })]
        );
        assert_eq!(monitor.tracker().events(), known);
        assert_eq!(monitor.last_success(), Some(t(3)));
    }

    #[test]
    fn unreachable_is_reported_once_per_outage() {
        let mut monitor = Monitor::new();
        monitor.observe(Ok(doc(SCHEDULED)), t(0));
        let error = std::io::Error::other("503 Service Unavailable");
        let first = monitor.observe(Err(failure("http_5xx", &error)), t(1));
        assert!(matches!(
            first[..],
            [Occurrence::Imds(Imds::Unreachable {
                reason: "http_5xx",
                ref error,
            })] if error == "503 Service Unavailable"
        ));
        assert!(!monitor.is_up());
        assert!(
            monitor
                .observe(Err(failure("http_5xx", &error)), t(2))
                .is_empty()
        );
        assert_eq!(monitor.last_success(), Some(t(0)));
    }

    #[test]
    fn the_first_document_reports_reachable_and_every_event() {
        let mut monitor = Monitor::new();
        let changes = monitor.observe(Ok(doc(SCHEDULED)), t(0));
        assert_eq!(changes.len(), 3);
        assert_eq!(
            changes[0],
            Occurrence::Imds(Imds::Reachable {
                failed_polls: 0,
                since: None
            })
        );
        assert!(
            matches!(&changes[1], Occurrence::Transition(Transition::Appeared(e)) if e.id.as_str() == "A")
        );
        assert!(
            matches!(&changes[2], Occurrence::Events(events) if events.len() == 1 && events[0].event.id.as_str() == "A")
        );
        assert!(monitor.is_up());
    }

    #[test]
    fn an_incarnation_jump_is_reported() {
        let mut monitor = Monitor::new();
        monitor.observe(Ok(doc(SCHEDULED)), t(0));
        let changes = monitor.observe(Ok(doc(r#"{"DocumentIncarnation":4,"Events":[]}"#)), t(60));
        assert_eq!(
            changes[0],
            Occurrence::Imds(Imds::Incarnation(IncarnationChange::Jumped {
                from: DocumentIncarnation(2),
                to: DocumentIncarnation(4)
            }))
        );
    }
}
