//! What survives a restart: a small, versioned JSON file, written atomically.
//!
//! [`State`] is plain data, the file's format: the last `DocumentIncarnation`, the events known
//! with their first-seen times, status and lifecycle span ids, the approvals sent, the
//! notifications a restart would send again, the impact last expected for this VM, and the boot
//! of the machine that wrote it. The core is seeded from it at start. Reading and writing the
//! file is the agent's state output's store: the one writer, atomic, only when the state changed.

mod read;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::event::{Affects, Event, EventId, EventStatus, EventType};
use crate::not_before::NotBefore;
use crate::tracker::Tracked;

pub use read::{Read, read};

/// The format version this agent writes. A file with a higher version is set aside, not read.
pub const VERSION: u32 = 1;

/// Approvals are forgotten this long after they were sent, once their event has left the
/// document, so the file stays small.
const APPROVAL_RETENTION: chrono::TimeDelta = chrono::TimeDelta::days(7);

/// Approvals of events that left the document kept at most, the newest: a week of one approval
/// every ten minutes. Under churn the file (rewritten at every change) holds under 200 kB of
/// approvals however many events come and go; an approval is always kept while its event is
/// in the document, which is what keeps it from being sent twice.
pub const MAX_PAST_APPROVALS: usize = 1000;

/// Longest string of a document (an EventId, an event type or status) the file holds as it is.
/// Azure's EventIds are GUIDs (36 characters, 38 in braces), its types and statuses single words;
/// a longer string is held as its digest ([`stored`]), so the file's size follows the number of
/// events, never the length of their strings, and stays under the cap the agent reads back.
pub const MAX_STORED_LEN: usize = 38;

/// Bytes of the SHA-256 a digest keeps: 128 bits, 32 hex digits.
const DIGEST_BYTES: usize = 16;

/// What starts a digest held in place of a longer string.
const DIGEST_PREFIX: &str = "sha256:";

/// How the file holds `text`, a string of a document: as it is up to [`MAX_STORED_LEN`] bytes,
/// else as `sha256:` and the first 128 bits of the SHA-256 of its bytes in lower-case hex (39
/// bytes). A digest is longer than any string held as it is, so the two never collide; one is
/// held as it is (reading the file again gives the same form). Every lookup of the file's approvals and notifications goes
/// through this, so a long EventId is found again after a restart.
pub fn stored(text: &str) -> Cow<'_, str> {
    if text.len() <= MAX_STORED_LEN || is_digest(text) {
        return Cow::Borrowed(text);
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let mut held = String::with_capacity(DIGEST_PREFIX.len() + 2 * DIGEST_BYTES);
    held.push_str(DIGEST_PREFIX);
    for byte in digest.as_ref().iter().take(DIGEST_BYTES) {
        let _ = write!(held, "{byte:02x}");
    }
    Cow::Owned(held)
}

/// Whether `text` is a digest [`stored`] made.
pub fn is_digest(text: &str) -> bool {
    text.strip_prefix(DIGEST_PREFIX).is_some_and(|hex| {
        hex.len() == 2 * DIGEST_BYTES && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// Event types after which, once this VM saw them Started, a reboot is expected. A Freeze does not
/// reboot, but a reboot during one is what the operator was told to expect; a Preempt deallocates,
/// and the next start of the VM is a new boot.
pub const IMPACT_TYPES: [EventType; 4] = [
    EventType::Reboot,
    EventType::Redeploy,
    EventType::Freeze,
    EventType::Preempt,
];

/// Everything the state file holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct State {
    pub version: u32,
    /// Boot identity of the machine when the file was written (see [`crate::boot`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document_incarnation: Option<u64>,
    /// Events of the last document, in document order.
    pub events: Vec<KnownEvent>,
    /// Approvals by EventId.
    pub approvals: BTreeMap<String, ApprovalRecord>,
    /// The event affecting this VM that was last seen Started, while it lasts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_impact: Option<Impact>,
    /// When the agent last stopped cleanly (SIGTERM or Ctrl-C); cleared at the next start. A
    /// reboot found at start after a clean stop is a clean reboot (see [`crate::boot`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clean_stop: Option<DateTime<Utc>>,
    /// Notifications handed to a receiver, by EventId, then receiver name: the transitions
    /// (`scheduled`, `started`, ..., `approved`) never to be sent to it again. Written before
    /// the POST leaves; kept while the event is in the document.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub notifications: BTreeMap<String, BTreeMap<String, Vec<String>>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnownEvent {
    pub event_id: String,
    pub event_type: String,
    pub event_status: String,
    pub first_seen: DateTime<Utc>,
    pub affects_this_vm: bool,
    /// This VM's lifecycle span id of the event (16 hex digits), as first given: a restart keeps
    /// it even when the VM's name was not known at first sight (see [`crate::view`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub span_id: Option<String>,
}

impl KnownEvent {
    /// The event as far as the file remembers it: no NotBefore, duration or description, and
    /// `Resources` naming only this VM when the event affected it.
    pub fn to_event(&self, vm: Option<&str>) -> Event {
        Event {
            id: EventId::new(self.event_id.clone()),
            event_type: EventType::parse(&self.event_type),
            status: EventStatus::parse(&self.event_status),
            resource_type: String::new(),
            resources: vm.filter(|_| self.affects_this_vm).into_iter().collect(),
            not_before: NotBefore::parse(None),
            description: None,
            source: None,
            duration: None,
        }
    }

    /// Takes the strings held as digests ([`stored`]) back from `event` of the document, when it
    /// is this event (its EventId held as this one's): then true.
    pub fn resolve(&mut self, event: &Event) -> bool {
        if self.event_id != stored(event.id.as_str()) {
            return false;
        }
        for (held, text) in [
            (&mut self.event_id, event.id.as_str()),
            (&mut self.event_type, event.event_type.as_str()),
            (&mut self.event_status, event.status.as_str()),
        ] {
            if is_digest(held) && *held == stored(text) {
                *held = text.to_owned();
            }
        }
        true
    }

    /// Whether this VM saw the event `Started`.
    pub fn seen_started(&self) -> bool {
        EventStatus::parse(&self.event_status) == EventStatus::Started
    }
}

/// One approval this agent sent, or was sending when it stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRecord {
    pub event_type: String,
    /// When the last attempt started.
    pub at: DateTime<Utc>,
    pub status: ApprovalStatus,
    pub attempts: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Written before the POST. Found after a restart, it means the POST may have reached IMDS,
    /// so it counts as sent: at most once wins over at least once.
    Sending,
    /// IMDS answered 200.
    Sent,
    /// IMDS answered 4xx: never sent again.
    Rejected,
    /// Timeout, connection failure or 5xx: may be retried while the event is Scheduled.
    Failed,
}

impl ApprovalStatus {
    /// Whether no further POST may be sent for the event.
    pub fn is_final(self) -> bool {
        !matches!(self, ApprovalStatus::Failed)
    }
}

/// An event that affects this VM with an impact that can reboot it, seen Started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Impact {
    pub event_id: String,
    pub event_type: String,
    pub started_seen: DateTime<Utc>,
}

impl State {
    pub fn new() -> Self {
        Self {
            version: VERSION,
            ..Self::default()
        }
    }

    /// Folds in the events of a valid document read at `now`: first-seen times are kept for
    /// events already known, the expected impact follows the Started events of this VM, and
    /// approvals of events long gone are dropped. A document that changed nothing the state
    /// holds returns at once, without allocating: that is nearly every poll.
    pub fn observe(
        &mut self,
        incarnation: Option<u64>,
        events: &[Tracked],
        vm: Option<&str>,
        now: DateTime<Utc>,
    ) {
        // The common poll: nothing changed, and nothing is allocated.
        let unchanged = self.document_incarnation == incarnation
            && self.events.len() == events.len()
            && self.events.iter().zip(events).all(|(known, tracked)| {
                let event = &tracked.event;
                known.event_id == stored(event.id.as_str())
                    && known.event_status == stored(event.status.as_str())
                    && known.event_type == stored(event.event_type.as_str())
                    && known.affects_this_vm == (event.affects(vm) == Affects::Yes)
            });
        if unchanged {
            return;
        }
        self.document_incarnation = incarnation;
        let previous = std::mem::take(&mut self.events);
        self.events = events
            .iter()
            .map(|tracked| {
                let id = stored(tracked.event.id.as_str());
                let earlier = previous.iter().find(|known| known.event_id == id);
                let first_seen = earlier.map_or(tracked.first_seen, |known| {
                    known.first_seen.min(tracked.first_seen)
                });
                KnownEvent {
                    span_id: earlier.and_then(|known| known.span_id.clone()),
                    event_id: id.into_owned(),
                    event_type: stored(tracked.event.event_type.as_str()).into_owned(),
                    event_status: stored(tracked.event.status.as_str()).into_owned(),
                    first_seen,
                    affects_this_vm: tracked.event.affects(vm) == Affects::Yes,
                }
            })
            .collect();
        let impact = events.iter().find(|tracked| {
            tracked.event.status == EventStatus::Started
                && tracked.event.affects(vm) == Affects::Yes
                && IMPACT_TYPES.contains(&tracked.event.event_type)
        });
        self.expected_impact = match (impact, self.expected_impact.take()) {
            (Some(tracked), Some(known)) if known.event_id == stored(tracked.event.id.as_str()) => {
                Some(known)
            }
            (Some(tracked), _) => Some(Impact {
                event_id: stored(tracked.event.id.as_str()).into_owned(),
                event_type: stored(tracked.event.event_type.as_str()).into_owned(),
                started_seen: now,
            }),
            // It ended without restarting this agent: whatever it did is over.
            (None, _) => None,
        };
        let in_document: Vec<&str> = self.events.iter().map(|e| e.event_id.as_str()).collect();
        self.approvals.retain(|id, record| {
            in_document.contains(&id.as_str()) || now - record.at < APPROVAL_RETENTION
        });
        let mut past: Vec<(DateTime<Utc>, &String)> = self
            .approvals
            .iter()
            .filter(|(id, _)| !in_document.contains(&id.as_str()))
            .map(|(id, record)| (record.at, id))
            .collect();
        if past.len() > MAX_PAST_APPROVALS {
            past.sort_unstable();
            let oldest: Vec<String> = past[..past.len() - MAX_PAST_APPROVALS]
                .iter()
                .map(|(_, id)| (*id).clone())
                .collect();
            for id in oldest {
                self.approvals.remove(&id);
            }
        }
        // An event that left the document gets no further transition, even after a restart.
        self.notifications
            .retain(|id, _| in_document.contains(&id.as_str()));
    }

    /// Gives every event that has none its lifecycle span id, `span_id(event_id)`.
    pub fn keep_span_ids(&mut self, span_id: impl Fn(&str) -> String) {
        for known in self
            .events
            .iter_mut()
            .filter(|known| known.span_id.is_none())
        {
            known.span_id = Some(span_id(&known.event_id));
        }
    }

    /// Records that `transition` of `event_id` goes to `receiver`; false if it already went.
    pub fn record_notification(
        &mut self,
        event_id: &str,
        receiver: &str,
        transition: &str,
    ) -> bool {
        let sent = self
            .notifications
            .entry(stored(event_id).into_owned())
            .or_default()
            .entry(receiver.to_owned())
            .or_default();
        if sent.iter().any(|t| t == transition) {
            return false;
        }
        sent.push(transition.to_owned());
        true
    }

    /// Reads a state file's bytes whole: an error if anything in them is not understood (the
    /// agent itself reads what it can, [`read`]).
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let read = read(bytes, DateTime::UNIX_EPOCH);
        if let Some(version) = read.newer {
            return Err(ParseError::Newer(version));
        }
        if !read.dropped.is_empty() {
            return Err(ParseError::Corrupt(read.dropped.join("; ")));
        }
        Ok(read.state)
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}

/// Why a state file's bytes were not understood whole (what reading the file met is the store's
/// to say).
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("not a state file: {0}")]
    Corrupt(String),
    #[error(
        "written by a newer version of the agent (format {0}, this agent reads up to {VERSION})"
    )]
    Newer(u64),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, EventId};
    use crate::not_before::NotBefore;

    fn t(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + seconds, 0).unwrap_or_default()
    }

    fn tracked(id: &str, event_type: EventType, status: EventStatus, seen: i64) -> Tracked {
        Tracked {
            event: Event {
                id: EventId::new(id),
                event_type,
                status,
                resource_type: "VirtualMachine".into(),
                resources: ["me"].into_iter().collect(),
                not_before: NotBefore::parse(None),
                description: None,
                source: None,
                duration: None,
            },
            first_seen: t(seen),
            seen_started: false,
        }
    }

    #[test]
    fn first_seen_times_survive_a_restart_of_the_tracker() {
        let mut state = State::new();
        let a = tracked("A", EventType::Reboot, EventStatus::Scheduled, 10);
        state.observe(Some(1), std::slice::from_ref(&a), Some("me"), t(10));
        let restarted = tracked("A", EventType::Reboot, EventStatus::Scheduled, 500);
        state.observe(Some(2), &[restarted], Some("me"), t(500));
        assert_eq!(state.events.len(), 1);
        assert_eq!(state.events[0].event_id, "A");
        assert_eq!(state.events[0].first_seen, t(10));
        assert_eq!(state.document_incarnation, Some(2));
    }

    #[test]
    fn the_expected_impact_follows_started_events_of_this_vm_and_ends_with_them() {
        let mut state = State::new();
        let scheduled = tracked("R", EventType::Reboot, EventStatus::Scheduled, 0);
        state.observe(Some(1), &[scheduled], Some("me"), t(0));
        assert_eq!(state.expected_impact, None);
        let started = tracked("R", EventType::Reboot, EventStatus::Started, 0);
        state.observe(Some(2), std::slice::from_ref(&started), Some("me"), t(5));
        state.observe(Some(2), &[started], Some("me"), t(6));
        assert_eq!(
            state.expected_impact,
            Some(Impact {
                event_id: "R".into(),
                event_type: "Reboot".into(),
                started_seen: t(5)
            })
        );
        state.observe(Some(3), &[], Some("me"), t(7));
        assert_eq!(state.expected_impact, None);
        let other_vm = tracked("O", EventType::Reboot, EventStatus::Started, 8);
        state.observe(Some(4), &[other_vm], Some("someone-else"), t(8));
        assert_eq!(state.expected_impact, None);
    }

    #[test]
    fn a_file_from_a_newer_version_or_without_a_version_is_not_read() {
        assert!(matches!(
            State::parse(br#"{"version":2,"events":[]}"#),
            Err(ParseError::Newer(2))
        ));
        assert!(matches!(
            State::parse(br#"{"events":[]}"#),
            Err(ParseError::Corrupt(_))
        ));
        assert!(matches!(
            State::parse(br#"{"version":1,"events":7}"#),
            Err(ParseError::Corrupt(_))
        ));
    }

    #[test]
    fn a_state_reads_back_as_written() -> Result<(), ParseError> {
        let mut state = State::new();
        state.boot_id = Some("b".into());
        state.observe(
            Some(7),
            &[tracked("A", EventType::Freeze, EventStatus::Started, 3)],
            Some("me"),
            t(4),
        );
        state.approvals.insert(
            "A".into(),
            ApprovalRecord {
                event_type: "Freeze".into(),
                at: t(4),
                status: ApprovalStatus::Sent,
                attempts: 1,
            },
        );
        assert_eq!(State::parse(&state.to_bytes())?, state);
        Ok(())
    }

    #[test]
    fn approvals_are_forgotten_a_week_after_their_event_left() {
        let mut state = State::new();
        for id in ["gone", "present"] {
            state.approvals.insert(
                id.into(),
                ApprovalRecord {
                    event_type: "Freeze".into(),
                    at: t(0),
                    status: ApprovalStatus::Sent,
                    attempts: 1,
                },
            );
        }
        let present = tracked("present", EventType::Freeze, EventStatus::Started, 0);
        state.observe(Some(1), std::slice::from_ref(&present), None, t(86_400));
        assert_eq!(state.approvals.len(), 2, "a day later both are kept");
        state.observe(Some(1), std::slice::from_ref(&present), None, t(8 * 86_400));
        assert_eq!(
            state.approvals.len(),
            2,
            "an unchanged document changes nothing"
        );
        state.observe(Some(2), &[present], None, t(8 * 86_400));
        assert_eq!(
            state.approvals.keys().collect::<Vec<_>>(),
            ["present"],
            "an approval is kept while its event is in the document"
        );
    }

    #[test]
    fn a_long_string_is_held_as_a_digest_that_no_string_held_as_it_is_can_be() {
        let guid = "C7061BAC-AFDC-4513-B24B-AA5F13A16123";
        assert_eq!(stored(guid), guid);
        let at_the_bound = "x".repeat(MAX_STORED_LEN);
        assert_eq!(stored(&at_the_bound), at_the_bound);
        let long = "x".repeat(64_000);
        let held = stored(&long).into_owned();
        assert!(held.starts_with("sha256:") && is_digest(&held), "{held}");
        assert_eq!(held.len(), 39);
        assert!(
            held.len() > MAX_STORED_LEN,
            "no string held as it is looks like one"
        );
        assert_eq!(stored(&held), held, "read back, it is held the same");
        assert_ne!(stored(&"y".repeat(64_000)), held);
    }

    #[test]
    fn an_event_with_a_long_id_is_known_again_from_its_digest() {
        let long = "E".repeat(64_000);
        let mut state = State::new();
        let event = tracked(&long, EventType::Freeze, EventStatus::Scheduled, 0);
        state.observe(Some(1), std::slice::from_ref(&event), Some("me"), t(0));
        let mut known = state.events[0].clone();
        assert!(is_digest(&known.event_id));
        assert!(
            !known.resolve(&tracked("other", EventType::Freeze, EventStatus::Scheduled, 0).event)
        );
        assert!(known.resolve(&event.event));
        assert_eq!(known.event_id, long);
        assert_eq!(known.event_type, "Freeze");
    }

    #[test]
    fn churn_keeps_the_file_bounded() {
        let mut state = State::new();
        let mut sizes = Vec::new();
        // 5,000 events in a day, each approved while in the document, then gone.
        for i in 0..5000_i64 {
            let id = format!("E{i:05}");
            let at = i * 17;
            let event = tracked(&id, EventType::Freeze, EventStatus::Scheduled, at);
            state.observe(
                Some(i as u64),
                std::slice::from_ref(&event),
                Some("me"),
                t(at),
            );
            state.approvals.insert(
                id,
                ApprovalRecord {
                    event_type: "Freeze".into(),
                    at: t(at),
                    status: ApprovalStatus::Sent,
                    attempts: 1,
                },
            );
            if i % 1000 == 999 {
                sizes.push(state.to_bytes().len());
            }
        }
        state.observe(Some(5000), &[], Some("me"), t(5000 * 17));
        assert_eq!(state.approvals.len(), MAX_PAST_APPROVALS);
        assert!(
            state.approvals.contains_key("E04999") && !state.approvals.contains_key("E03999"),
            "the newest are kept"
        );
        let last = state.to_bytes().len();
        assert!(last < 200_000, "{last} bytes");
        assert!(
            sizes.windows(2).all(|w| w[1] <= w[0] + 1000),
            "no growth once the bound is reached: {sizes:?}"
        );
    }
}
