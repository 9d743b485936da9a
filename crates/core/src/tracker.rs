//! The lifecycle of every event, worked out from successive documents.
//!
//! A pure state machine: [`Tracker::observe`] takes a document and the time it was read and returns
//! what changed. It does no I/O and reads no clock, so every lifecycle rule is tested without fakes.
//! Failed polls never reach it, which is what guarantees that a timeout or a garbage body can never
//! complete or cancel an event.
//!
//! It is also the one owner of restarts: [`Tracker::resume`] hands it what the state file
//! remembers, and the first document after that says which of those events are still there
//! ([`Transition::Resumed`], first sight and `Started` kept) and which ended while the agent was
//! down ([`Observation::ended_while_down`]). Every output learns of a restart from that alone.
//!
//! An event missing from a document of the same incarnation as the last one is not taken as gone
//! at once: Azure changes the incarnation whenever the events change, so such a document
//! contradicts the one before it (two replicas answering in turn, one of them behind). The event is
//! kept, unchanged, until a document of another incarnation lacks it too, or until
//! [`CONFIRMING_DOCUMENTS`] documents in a row lacked it; if it comes back meanwhile, nothing
//! happened. A genuine end, which comes with a new incarnation, is reported at once, as before.
//!
//! A document of an older incarnation than the newest one seen is stale (a replica behind the
//! others, answering in turn with them): it changes nothing, neither ending what a newer document
//! showed nor bringing back what it no longer holds. Only [`CONFIRMING_DOCUMENTS`] older documents
//! in a row, with no newer one between them, are taken as the service's numbering restarting
//! (disabled for a day, or reset), and then read as such. The incarnation the state file keeps goes
//! with the events it remembers ([`Tracker::resume_from`]), so both holds survive a restart: a
//! first document older than it changes nothing, and one of the same incarnation that lacks a
//! remembered event starts counting its absence instead of ending it.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use crate::event::{Document, DocumentIncarnation, Event, EventId, EventStatus};
use crate::subject::Subject;

/// Documents in a row (the same bytes polled again count) that must lack an event before it is
/// taken as gone when no document of another incarnation said so: 30, half a minute at the default
/// poll interval. Two replicas answering at random would need 30 answers of the stale one in a row
/// (one chance in a billion) to fake an end; an IMDS that removed an event without changing the
/// incarnation, which Azure's contract rules out, still has the end reported within the minute.
pub const CONFIRMING_DOCUMENTS: u32 = 30;

/// An event the tracker knows, with what it has seen of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    pub event: Event,
    pub first_seen: DateTime<Utc>,
    /// Whether any document showed it `Started`.
    pub seen_started: bool,
}

/// A field of an event whose change is reported as [`Transition::Updated`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    EventType,
    EventStatus,
    ResourceType,
    Resources,
    NotBefore,
    Description,
    EventSource,
    DurationInSeconds,
}

impl Field {
    /// Azure's name of the field.
    pub fn as_str(self) -> &'static str {
        match self {
            Field::EventType => "EventType",
            Field::EventStatus => "EventStatus",
            Field::ResourceType => "ResourceType",
            Field::Resources => "Resources",
            Field::NotBefore => "NotBefore",
            Field::Description => "Description",
            Field::EventSource => "EventSource",
            Field::DurationInSeconds => "DurationInSeconds",
        }
    }
}

/// What happened to one event between two documents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// A new event; its status says whether it was announced (`Scheduled`) or is already under way
    /// (`Started`, as for a hardware failure).
    Appeared(Event),
    /// An event known from before the agent restarted, in the first document after it: first
    /// seen (and perhaps seen `Started`) by the earlier run. When `announced`, the earlier run
    /// reported it with the status it has now, and nothing announces it again; otherwise its
    /// status changed while the agent was down, which is news.
    Resumed {
        event: Event,
        first_seen: DateTime<Utc>,
        seen_started: bool,
        announced: bool,
    },
    /// `Scheduled` became `Started`. `NotBefore` emptying at the same time is part of starting.
    Started(Event),
    /// Something else about the event changed.
    Updated { event: Event, changed: Vec<Field> },
    /// The event left the document after it started. `seen_started` is false when no document
    /// showed it `Started` but it must have run: `NotBefore` had passed, or documents were missed
    /// (the incarnation jumped) while it could have started and finished.
    Completed { event: Event, seen_started: bool },
    /// The event left the document while still `Scheduled`, before `NotBefore`, with no document
    /// missed in between.
    Cancelled(Event),
}

impl Transition {
    /// The event the transition is about, as last seen.
    pub fn event(&self) -> &Event {
        match self {
            Transition::Appeared(event)
            | Transition::Resumed { event, .. }
            | Transition::Started(event)
            | Transition::Updated { event, .. }
            | Transition::Completed { event, .. }
            | Transition::Cancelled(event) => event,
        }
    }

    /// What kind of transition it is, as the `transition` label says it: `advisory` for an
    /// event that appeared but announces no impact ([`Event::is_advisory`]), so that nothing that
    /// acts on `scheduled` acts on an advisory.
    pub fn kind(&self) -> Kind {
        match self {
            Transition::Appeared(event) | Transition::Resumed { event, .. }
                if event.is_advisory() =>
            {
                Kind::Advisory
            }
            Transition::Appeared(event) | Transition::Resumed { event, .. }
                if event.status == EventStatus::Started =>
            {
                Kind::Started
            }
            Transition::Appeared(_) | Transition::Resumed { .. } => Kind::Scheduled,
            Transition::Started(_) => Kind::Started,
            Transition::Updated { .. } => Kind::Updated,
            Transition::Completed { .. } => Kind::Completed,
            Transition::Cancelled(_) => Kind::Cancelled,
        }
    }

    /// Whether the earlier run already reported the event as it is now: a resumed event whose
    /// status did not change while the agent was down. Logs, spans and counters say nothing of it.
    pub fn already_announced(&self) -> bool {
        matches!(
            self,
            Transition::Resumed {
                announced: true,
                ..
            }
        )
    }

    /// The fields an update changed, comma-separated as in the log line; `None` for other kinds.
    pub fn changed_fields(&self) -> Option<String> {
        match self {
            Transition::Updated { changed, .. } => Some(
                changed
                    .iter()
                    .map(|f| f.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            _ => None,
        }
    }

    /// Whether a completed event was seen `Started`; `None` for other kinds.
    pub fn seen_started(&self) -> Option<bool> {
        match self {
            Transition::Completed { seen_started, .. } => Some(*seen_started),
            _ => None,
        }
    }

    /// The `transition` label values of an impact's lifecycle, for pre-creating series: every
    /// event is scheduled (or started), then completed or cancelled. `updated` refines an event
    /// already counted, so its series appears with its first.
    pub const LIFECYCLE: [&'static str; 4] = [
        Kind::Scheduled.as_str(),
        Kind::Started.as_str(),
        Kind::Completed.as_str(),
        Kind::Cancelled.as_str(),
    ];
}

/// The kind of a [`Transition`]: what the log line, the `transition` label, the span name and
/// the notification say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Appeared (or resumed) `Scheduled`.
    Scheduled,
    /// Became `Started`, or appeared `Started`.
    Started,
    Updated,
    Completed,
    Cancelled,
    /// Appeared (or resumed) announcing no impact: a Spot rebalance recommendation, EventStatus
    /// `Advisory`, or an unknown status.
    Advisory,
}

impl Kind {
    /// The `transition` label value.
    pub const fn as_str(self) -> &'static str {
        self.subject().as_str()
    }

    /// What a notification of it is about.
    pub const fn subject(self) -> Subject {
        match self {
            Kind::Scheduled => Subject::Scheduled,
            Kind::Started => Subject::Started,
            Kind::Updated => Subject::Updated,
            Kind::Completed => Subject::Completed,
            Kind::Cancelled => Subject::Cancelled,
            Kind::Advisory => Subject::Advisory,
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How `DocumentIncarnation` moved between the last document and this one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IncarnationChange {
    /// The first document the tracker sees.
    First(DocumentIncarnation),
    Unchanged,
    /// Up by exactly one.
    Next,
    /// Up by more than one: documents were published that this agent never saw.
    Jumped {
        from: DocumentIncarnation,
        to: DocumentIncarnation,
    },
    /// Down: the service was disabled (24 h without a request) or reset, and numbering restarted.
    Restarted {
        from: DocumentIncarnation,
        to: DocumentIncarnation,
    },
}

impl IncarnationChange {
    fn between(from: Option<DocumentIncarnation>, to: DocumentIncarnation) -> Self {
        match from {
            None => Self::First(to),
            Some(from) if to == from => Self::Unchanged,
            Some(from) if to.0 == from.0.saturating_add(1) => Self::Next,
            Some(from) if to > from => Self::Jumped { from, to },
            Some(from) => Self::Restarted { from, to },
        }
    }

    /// Whether documents may have been published that this agent did not see.
    fn missed_documents(self) -> bool {
        matches!(self, Self::Jumped { .. } | Self::Restarted { .. })
    }
}

/// What one document changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub incarnation: IncarnationChange,
    pub transitions: Vec<Transition>,
    /// Event ids that appeared more than once in the document; only the first was kept.
    pub duplicates: Vec<EventId>,
    /// In the first document after [`Tracker::resume`]: the remembered events it no longer holds,
    /// which ended while the agent was down.
    pub ended_while_down: Vec<Tracked>,
}

/// An event missing from documents of the incarnation that last held it, not yet taken as gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Absence {
    /// When the first document without it was read: when it left, if it did.
    since: DateTime<Utc>,
    /// Documents in a row without it.
    documents: u32,
}

/// Every event in the last document read, in document order, then those missing from it whose
/// end is not confirmed yet.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    incarnation: Option<DocumentIncarnation>,
    events: Vec<Tracked>,
    /// What an earlier run knew, until the first document is observed.
    remembered: Vec<Tracked>,
    /// By EventId: the events of `events` the last documents lacked.
    absent: HashMap<String, Absence>,
    /// The incarnation an earlier run last saw, until the first document is observed.
    remembered_incarnation: Option<DocumentIncarnation>,
    /// Documents in a row older than the newest incarnation seen, and the last of them: taken as
    /// the numbering restarting once there are [`CONFIRMING_DOCUMENTS`].
    stale: Option<(u32, Document)>,
    /// Remembered events held at the first document after a restart, which lacked them: known
    /// only as the state file has them, so their return is no update.
    held: HashSet<String>,
}

impl Tracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// The incarnation of the last document observed.
    pub fn incarnation(&self) -> Option<DocumentIncarnation> {
        self.incarnation
    }

    /// The events of the last document observed, in its order, then those it lacked whose end
    /// is not confirmed yet (see [`CONFIRMING_DOCUMENTS`]).
    pub fn events(&self) -> &[Tracked] {
        &self.events
    }

    /// Starts from what an earlier run of the agent knew (from the state file): the next document
    /// reports those events it still holds as [`Transition::Resumed`] and the others as ended
    /// while the agent was down. Only before the first document; later calls are ignored.
    pub fn resume(&mut self, remembered: Vec<Tracked>) {
        self.resume_from(remembered, None);
    }

    /// As [`Tracker::resume`], with the incarnation of the document the earlier run last took
    /// in: a first document older than it is stale, and one of the same incarnation does not end
    /// a remembered event it lacks at once.
    pub fn resume_from(
        &mut self,
        remembered: Vec<Tracked>,
        incarnation: Option<DocumentIncarnation>,
    ) {
        if self.incarnation.is_none() {
            self.remembered = remembered;
            self.remembered_incarnation = incarnation;
        }
    }

    /// The newest incarnation seen, by this run or the one before it.
    fn newest(&self) -> Option<DocumentIncarnation> {
        self.incarnation.or(self.remembered_incarnation)
    }

    /// Whether `document` is older than the newest seen and, not yet confirmed as the numbering
    /// restarting, changes nothing: then it is kept, counted.
    fn stale(&mut self, document: &Document) -> bool {
        let older = self
            .newest()
            .is_some_and(|newest| document.incarnation < newest);
        if !older {
            self.stale = None;
            return false;
        }
        let count = self.stale.as_ref().map_or(0, |(count, _)| *count) + 1;
        if count >= CONFIRMING_DOCUMENTS {
            self.stale = None;
            self.remembered_incarnation = None;
            return false;
        }
        self.stale = Some((count, document.clone()));
        true
    }

    /// An observation of nothing: a stale document.
    fn nothing() -> Observation {
        Observation {
            incarnation: IncarnationChange::Unchanged,
            transitions: Vec::new(),
            duplicates: Vec::new(),
            ended_while_down: Vec::new(),
        }
    }

    /// Takes in a poll that brought the same bytes as the last document when that one was stale:
    /// one more older document in a row, which, once they confirm it, is read as the numbering
    /// restarting. `None` when the last document was not stale.
    pub fn stale_again(&mut self, now: DateTime<Utc>) -> Option<Observation> {
        let (_, document) = self.stale.as_ref()?;
        let document = document.clone();
        Some(self.observe(document, now))
    }

    /// Takes in a document read at `now` and returns what changed since the last one.
    pub fn observe(&mut self, document: Document, now: DateTime<Utc>) -> Observation {
        if self.stale(&document) {
            return Self::nothing();
        }
        // The same incarnation as the one an earlier run last saw: what it lacks of what that
        // run knew is held as absent, not ended while the agent was down.
        let same_as_remembered =
            self.incarnation.is_none() && self.remembered_incarnation == Some(document.incarnation);
        self.remembered_incarnation = None;
        let incarnation = IncarnationChange::between(self.incarnation, document.incarnation);
        let previous = std::mem::take(&mut self.events);
        // What the earlier run knew; what the document still holds is taken out below, so what
        // stays ended while the agent was down (in the state file's order).
        let mut remembered = std::mem::take(&mut self.remembered);
        let mut transitions = Vec::new();
        let mut duplicates = Vec::new();
        let mut current = Vec::with_capacity(document.events.len());
        let mut still_present = vec![false; previous.len()];
        // Both lookups borrow the ids in place: an unchanged poll allocates no strings.
        let repeated: Vec<bool> = {
            let mut seen = HashSet::with_capacity(document.events.len());
            document
                .events
                .iter()
                .map(|e| !seen.insert(e.id.as_str()))
                .collect()
        };
        let index: HashMap<&str, usize> = previous
            .iter()
            .enumerate()
            .map(|(i, t)| (t.event.id.as_str(), i))
            .collect();

        for (event, repeated) in document.events.into_iter().zip(repeated) {
            if repeated {
                duplicates.push(event.id);
                continue;
            }
            let started = event.status == EventStatus::Started;
            let old = index.get(event.id.as_str()).and_then(|&i| {
                still_present[i] = true;
                previous.get(i)
            });
            // Back before its end was confirmed: it never left.
            if !self.absent.is_empty() {
                self.absent.remove(event.id.as_str());
            }
            let earlier = match old {
                Some(_) => None,
                None => remembered
                    .iter()
                    .position(|r| r.event.id == event.id)
                    .map(|i| remembered.remove(i)),
            };
            current.push(match (old, earlier) {
                (None, None) => {
                    transitions.push(Transition::Appeared(event.clone()));
                    Tracked {
                        event,
                        first_seen: now,
                        seen_started: started,
                    }
                }
                (None, Some(earlier)) => {
                    let announced = earlier.event.status == event.status;
                    let tracked = Tracked {
                        event,
                        first_seen: earlier.first_seen.min(now),
                        seen_started: earlier.seen_started || started,
                    };
                    transitions.push(Transition::Resumed {
                        event: tracked.event.clone(),
                        first_seen: tracked.first_seen,
                        seen_started: tracked.seen_started,
                        announced,
                    });
                    tracked
                }
                (Some(old), _) => {
                    if self.held.remove(event.id.as_str()) {
                        // Back after a restart held it: the state file knew only its type and
                        // status, so only a start is news.
                        if started && old.event.status != EventStatus::Started {
                            transitions.push(Transition::Started(event.clone()));
                        }
                    } else {
                        transitions.extend(compare(&old.event, &event));
                    }
                    Tracked {
                        event,
                        first_seen: old.first_seen,
                        seen_started: old.seen_started || started,
                    }
                }
            });
        }
        drop(index);

        // Gone from the document: finished or called off, reported in the previous document's
        // order; under the same incarnation, only once confirmed.
        let removed = previous
            .into_iter()
            .zip(still_present)
            .filter(|(_, present)| !present);
        for (tracked, _) in removed {
            let id = tracked.event.id.as_str();
            if incarnation == IncarnationChange::Unchanged && !self.absent_again(id, now) {
                current.push(tracked);
                continue;
            }
            let left = self.absent.remove(id).map_or(now, |absence| absence.since);
            self.held.remove(id);
            transitions.push(ended(tracked, left, incarnation.missed_documents()));
        }

        if same_as_remembered {
            for earlier in std::mem::take(&mut remembered) {
                if self.absent_again(earlier.event.id.as_str(), now) {
                    remembered.push(earlier);
                    continue;
                }
                transitions.push(Transition::Resumed {
                    event: earlier.event.clone(),
                    first_seen: earlier.first_seen,
                    seen_started: earlier.seen_started,
                    announced: true,
                });
                self.held.insert(earlier.event.id.as_str().to_owned());
                current.push(earlier);
            }
        }

        self.incarnation = Some(document.incarnation);
        self.events = current;
        Observation {
            incarnation,
            transitions,
            duplicates,
            ended_while_down: remembered,
        }
    }

    /// Takes in a poll that brought the same bytes as the last document, at `now`: it changes
    /// nothing, except that it is one more document without the events it lacks, which ends
    /// those whose absence is now confirmed.
    pub fn unchanged(&mut self, now: DateTime<Utc>) -> Vec<Transition> {
        if self.absent.is_empty() {
            return Vec::new();
        }
        let events = std::mem::take(&mut self.events);
        let mut transitions = Vec::new();
        for tracked in events {
            let id = tracked.event.id.as_str();
            if !self.absent.contains_key(id) || !self.absent_again(id, now) {
                self.events.push(tracked);
                continue;
            }
            let left = self.absent.remove(id).map_or(now, |absence| absence.since);
            transitions.push(ended(tracked, left, false));
        }
        transitions
    }

    /// Counts one more document without the event `id`; whether its end is now confirmed.
    fn absent_again(&mut self, id: &str, now: DateTime<Utc>) -> bool {
        let absence = self.absent.entry(id.to_owned()).or_insert(Absence {
            since: now,
            documents: 0,
        });
        absence.documents += 1;
        absence.documents >= CONFIRMING_DOCUMENTS
    }
}

/// How an event that left the document at `left` ended: completed when it was seen `Started`,
/// when its NotBefore had passed, or when documents were missed; otherwise cancelled.
fn ended(tracked: Tracked, left: DateTime<Utc>, missed_documents: bool) -> Transition {
    let Tracked {
        event,
        seen_started,
        ..
    } = tracked;
    let overdue = event.not_before.at().is_some_and(|at| at <= left);
    if seen_started || overdue || missed_documents {
        Transition::Completed {
            event,
            seen_started,
        }
    } else {
        Transition::Cancelled(event)
    }
}

/// The transition, if any, from `old` to `new` (same `EventId`).
fn compare(old: &Event, new: &Event) -> Option<Transition> {
    if new.status == EventStatus::Started && old.status != EventStatus::Started {
        return Some(Transition::Started(new.clone()));
    }
    let changed: Vec<Field> = [
        (Field::EventType, old.event_type != new.event_type),
        (Field::EventStatus, old.status != new.status),
        (Field::ResourceType, old.resource_type != new.resource_type),
        (Field::Resources, old.resources != new.resources),
        (Field::NotBefore, old.not_before != new.not_before),
        (Field::Description, old.description != new.description),
        (Field::EventSource, old.source != new.source),
        (Field::DurationInSeconds, old.duration != new.duration),
    ]
    .into_iter()
    .filter_map(|(field, differs)| differs.then_some(field))
    .collect();
    (!changed.is_empty()).then(|| Transition::Updated {
        event: new.clone(),
        changed,
    })
}

impl From<Kind> for Subject {
    fn from(kind: Kind) -> Self {
        kind.subject()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{DurationInSeconds, EventType};
    use crate::not_before::NotBefore;
    use azure_scheduled_events_protocol::resources::Resources;
    use chrono::TimeZone;

    const NOT_BEFORE: &str = "Mon, 11 Apr 2022 22:26:58 GMT";

    fn t(seconds_after_not_before: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_649_716_018 + seconds_after_not_before, 0)
            .single()
            .unwrap_or_default()
    }

    fn event(id: &str, status: EventStatus) -> Event {
        Event {
            id: EventId::new(id),
            event_type: EventType::Reboot,
            status: status.clone(),
            resource_type: "VirtualMachine".into(),
            resources: Resources::from_iter(["vm_0"]),
            not_before: NotBefore::parse(Some(if status == EventStatus::Started {
                ""
            } else {
                NOT_BEFORE
            })),
            description: Some(String::new()),
            source: None,
            duration: Some(DurationInSeconds(-1)),
        }
    }

    fn document(incarnation: u64, events: &[Event]) -> Document {
        Document {
            incarnation: DocumentIncarnation(incarnation),
            events: events.to_vec(),
        }
    }

    fn kinds(observation: &Observation) -> Vec<(&'static str, &str)> {
        observation
            .transitions
            .iter()
            .map(|t| (t.kind().as_str(), t.event().id.as_str()))
            .collect()
    }

    #[test]
    fn an_event_is_scheduled_started_and_completed() {
        let mut tracker = Tracker::new();
        let first = tracker.observe(document(1, &[event("a", EventStatus::Scheduled)]), t(-900));
        assert_eq!(
            first.incarnation,
            IncarnationChange::First(DocumentIncarnation(1))
        );
        assert_eq!(kinds(&first), [("scheduled", "a")]);

        let started = tracker.observe(document(2, &[event("a", EventStatus::Started)]), t(-60));
        assert_eq!(started.incarnation, IncarnationChange::Next);
        assert_eq!(
            kinds(&started),
            [("started", "a")],
            "NotBefore emptying is part of starting"
        );

        let done = tracker.observe(document(3, &[]), t(-30));
        assert_eq!(kinds(&done), [("completed", "a")]);
        assert!(matches!(
            done.transitions[0],
            Transition::Completed {
                seen_started: true,
                ..
            }
        ));
        assert!(tracker.events().is_empty());
    }

    #[test]
    fn an_event_removed_while_scheduled_before_not_before_is_cancelled() {
        let mut tracker = Tracker::new();
        tracker.observe(document(1, &[event("a", EventStatus::Scheduled)]), t(-900));
        let gone = tracker.observe(document(2, &[]), t(-600));
        assert_eq!(kinds(&gone), [("cancelled", "a")]);
    }

    #[test]
    fn an_event_removed_after_not_before_without_a_started_document_completed() {
        let mut tracker = Tracker::new();
        tracker.observe(document(1, &[event("a", EventStatus::Scheduled)]), t(-900));
        let gone = tracker.observe(document(2, &[]), t(5));
        assert_eq!(
            gone.transitions,
            [Transition::Completed {
                event: event("a", EventStatus::Scheduled),
                seen_started: false
            }]
        );
    }

    #[test]
    fn an_event_removed_across_an_incarnation_jump_completed_unseen() {
        // Real documents 19 -> 20: approved at incarnation 2, gone at 4; document 3 (Started) was never seen.
        let mut tracker = Tracker::new();
        tracker.observe(document(2, &[event("a", EventStatus::Scheduled)]), t(-900));
        let gone = tracker.observe(document(4, &[]), t(-840));
        assert_eq!(
            gone.incarnation,
            IncarnationChange::Jumped {
                from: DocumentIncarnation(2),
                to: DocumentIncarnation(4)
            }
        );
        assert!(matches!(
            gone.transitions[..],
            [Transition::Completed {
                seen_started: false,
                ..
            }]
        ));
    }

    #[test]
    fn an_event_can_appear_already_started() {
        let mut tracker = Tracker::new();
        tracker.observe(document(1, &[]), t(-10));
        let appeared = tracker.observe(document(2, &[event("hw", EventStatus::Started)]), t(0));
        assert_eq!(kinds(&appeared), [("started", "hw")]);
        assert!(matches!(appeared.transitions[0], Transition::Appeared(_)));
        let done = tracker.observe(document(3, &[]), t(600));
        assert!(matches!(
            done.transitions[..],
            [Transition::Completed {
                seen_started: true,
                ..
            }]
        ));
    }

    #[test]
    fn an_incarnation_that_jumps_by_two_is_reported_and_events_still_diffed() {
        let mut tracker = Tracker::new();
        tracker.observe(document(5, &[event("a", EventStatus::Scheduled)]), t(-900));
        let o = tracker.observe(
            document(
                7,
                &[
                    event("a", EventStatus::Scheduled),
                    event("b", EventStatus::Scheduled),
                ],
            ),
            t(-890),
        );
        assert_eq!(
            o.incarnation,
            IncarnationChange::Jumped {
                from: DocumentIncarnation(5),
                to: DocumentIncarnation(7)
            }
        );
        assert_eq!(kinds(&o), [("scheduled", "b")]);
        assert_eq!(tracker.incarnation(), Some(DocumentIncarnation(7)));
    }

    #[test]
    fn an_incarnation_that_stays_down_is_a_restart() {
        let mut tracker = Tracker::new();
        tracker.observe(document(190, &[]), t(0));
        // Older documents are a stale replica's until enough of them in a row say otherwise.
        for n in 1..CONFIRMING_DOCUMENTS {
            let o = tracker.observe(document(1, &[]), t(i64::from(n)));
            assert_eq!(o.incarnation, IncarnationChange::Unchanged, "document {n}");
        }
        let o = tracker.observe(document(1, &[]), t(30));
        assert_eq!(
            o.incarnation,
            IncarnationChange::Restarted {
                from: DocumentIncarnation(190),
                to: DocumentIncarnation(1)
            }
        );
    }

    #[test]
    fn an_identical_document_changes_nothing() {
        let mut tracker = Tracker::new();
        let doc = document(
            3,
            &[
                event("a", EventStatus::Scheduled),
                event("b", EventStatus::Started),
            ],
        );
        tracker.observe(doc.clone(), t(-900));
        let before = tracker.events().to_vec();
        let again = tracker.observe(doc, t(-899));
        assert_eq!(
            again,
            Observation {
                incarnation: IncarnationChange::Unchanged,
                transitions: vec![],
                duplicates: vec![],
                ended_while_down: vec![],
            }
        );
        assert_eq!(tracker.events(), before, "first-seen times are kept");
    }

    #[test]
    fn changed_not_before_duration_and_resources_are_one_update() {
        let mut tracker = Tracker::new();
        tracker.observe(document(1, &[event("a", EventStatus::Scheduled)]), t(-900));
        let mut moved = event("a", EventStatus::Scheduled);
        moved.not_before = NotBefore::parse(Some("Tue, 12 Apr 2022 22:26:58 GMT"));
        moved.duration = Some(DurationInSeconds(30));
        moved.resources.push("vm_1");
        let o = tracker.observe(document(2, &[moved.clone()]), t(-800));
        assert_eq!(
            o.transitions,
            [Transition::Updated {
                event: moved,
                changed: vec![Field::Resources, Field::NotBefore, Field::DurationInSeconds]
            }]
        );
    }

    #[test]
    fn several_events_change_in_one_document() {
        let mut tracker = Tracker::new();
        tracker.observe(
            document(
                1,
                &[
                    event("a", EventStatus::Scheduled),
                    event("b", EventStatus::Scheduled),
                ],
            ),
            t(-900),
        );
        let o = tracker.observe(
            document(
                2,
                &[
                    event("b", EventStatus::Started),
                    event("c", EventStatus::Scheduled),
                ],
            ),
            t(-800),
        );
        assert_eq!(
            kinds(&o),
            [("started", "b"), ("scheduled", "c"), ("cancelled", "a")]
        );
        let ids: Vec<&str> = tracker
            .events()
            .iter()
            .map(|t| t.event.id.as_str())
            .collect();
        assert_eq!(ids, ["b", "c"]);
    }

    #[test]
    fn events_removed_together_are_reported_in_the_previous_documents_order() {
        let mut tracker = Tracker::new();
        let ids = ["d", "a", "c", "b"];
        let events: Vec<Event> = ids
            .iter()
            .map(|id| event(id, EventStatus::Scheduled))
            .collect();
        tracker.observe(document(1, &events), t(-900));
        let gone = tracker.observe(document(2, &[]), t(-600));
        let order: Vec<&str> = gone
            .transitions
            .iter()
            .map(|t| t.event().id.as_str())
            .collect();
        assert_eq!(order, ids);
    }

    #[test]
    fn a_repeated_event_id_is_kept_once_and_reported() {
        let mut tracker = Tracker::new();
        let o = tracker.observe(
            document(
                1,
                &[
                    event("a", EventStatus::Scheduled),
                    event("a", EventStatus::Started),
                ],
            ),
            t(-900),
        );
        assert_eq!(kinds(&o), [("scheduled", "a")]);
        assert_eq!(o.duplicates, [EventId::new("a")]);
        assert_eq!(tracker.events().len(), 1);
    }

    #[test]
    fn an_advisory_appears_as_an_advisory_and_a_preempt_after_it_as_scheduled() {
        let mut tracker = Tracker::new();
        let mut advisory = event("rebalance", EventStatus::Advisory);
        advisory.event_type = EventType::SpotRebalanceRecommendation;
        advisory.not_before = NotBefore::parse(Some(""));
        let o = tracker.observe(document(1, std::slice::from_ref(&advisory)), t(-900));
        assert_eq!(kinds(&o), [("advisory", "rebalance")]);
        let mut preempt = event("evict", EventStatus::Scheduled);
        preempt.event_type = EventType::Preempt;
        let o = tracker.observe(document(2, &[advisory, preempt]), t(-30));
        assert_eq!(kinds(&o), [("scheduled", "evict")]);
        let o = tracker.observe(document(3, &[]), t(5));
        assert_eq!(
            kinds(&o),
            [("cancelled", "rebalance"), ("completed", "evict")]
        );
    }

    fn fixture(file: &str) -> Document {
        let path = format!(
            "{}/../../tests/fixtures/imds-documents/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        match std::fs::read(&path).map(|body| Document::from_json(&body)) {
            Ok(Ok(document)) => document,
            Ok(Err(e)) => panic!("{path}: {e}"),
            Err(e) => panic!("{path}: {e}"),
        }
    }

    #[test]
    fn the_real_world_shaped_advisory_then_preempt_documents_are_tracked() {
        let mut tracker = Tracker::new();
        let alone = tracker.observe(fixture("30-spot-rebalance-advisory-alone-di4.json"), t(0));
        assert_eq!(
            kinds(&alone),
            [("advisory", "8F2D6A41-3B7C-4E19-9A5D-2C0B7E6F1D83")]
        );
        assert!(alone.transitions[0].event().is_advisory());
        let then = tracker.observe(
            fixture("31-spot-rebalance-advisory-then-preempt-di5.json"),
            t(20),
        );
        assert_eq!(then.incarnation, IncarnationChange::Next);
        assert_eq!(
            kinds(&then),
            [("scheduled", "D40E9B27-61C5-4F0A-B8E3-97A1C2F5E604")],
            "the advisory is unchanged; the Preempt is the one new impact"
        );
        assert!(!then.transitions[0].event().is_advisory());
    }

    #[test]
    fn an_unknown_status_appears_as_an_advisory() {
        let mut tracker = Tracker::new();
        let o = tracker.observe(
            document(1, &[event("a", EventStatus::Other("Paused".into()))]),
            t(-900),
        );
        assert_eq!(kinds(&o), [("advisory", "a")]);
    }

    #[test]
    fn an_event_that_comes_and_goes_under_one_incarnation_is_scheduled_once_and_never_cancelled() {
        let mut tracker = Tracker::new();
        let with = document(5, &[event("a", EventStatus::Scheduled)]);
        let without = document(5, &[]);
        let mut seen = Vec::new();
        for second in 0..60 {
            let doc = if second % 2 == 0 { &with } else { &without };
            let o = tracker.observe(doc.clone(), t(-900 + second));
            seen.extend(kinds(&o).into_iter().map(|(kind, _)| kind));
            assert_eq!(tracker.events().len(), 1, "kept while unconfirmed");
        }
        assert_eq!(seen, ["scheduled"]);
    }

    #[test]
    fn an_absence_under_one_incarnation_ends_the_event_once_confirmed_as_of_its_first_document() {
        let mut tracker = Tracker::new();
        tracker.observe(document(5, &[event("a", EventStatus::Scheduled)]), t(-10));
        // Missing from a document of the same incarnation, then the same bytes polled again.
        let first = tracker.observe(document(5, &[]), t(-5));
        assert_eq!(kinds(&first), []);
        for n in 2..CONFIRMING_DOCUMENTS {
            assert_eq!(tracker.unchanged(t(i64::from(n))), [], "document {n}");
        }
        // Confirmed after NotBefore, but it left before: called off, not completed.
        assert_eq!(
            tracker.unchanged(t(30)),
            [Transition::Cancelled(event("a", EventStatus::Scheduled))]
        );
        assert!(tracker.events().is_empty());
        assert_eq!(tracker.unchanged(t(31)), []);
    }

    #[test]
    fn a_new_incarnation_confirms_an_absence_at_once() {
        let mut tracker = Tracker::new();
        tracker.observe(document(5, &[event("a", EventStatus::Started)]), t(-10));
        assert_eq!(kinds(&tracker.observe(document(5, &[]), t(-9))), []);
        let done = tracker.observe(document(6, &[]), t(-8));
        assert_eq!(
            done.transitions,
            [Transition::Completed {
                event: event("a", EventStatus::Started),
                seen_started: true
            }]
        );
        assert!(tracker.events().is_empty());
    }

    #[test]
    fn an_event_back_before_confirmation_starts_its_count_again() {
        let mut tracker = Tracker::new();
        let with = document(5, &[event("a", EventStatus::Scheduled)]);
        tracker.observe(with.clone(), t(-900));
        for round in 0..3 {
            tracker.observe(document(5, &[]), t(-800 + round * 100));
            for n in 2..CONFIRMING_DOCUMENTS {
                assert_eq!(tracker.unchanged(t(-800 + round * 100 + i64::from(n))), []);
            }
            assert_eq!(
                kinds(&tracker.observe(with.clone(), t(-750 + round * 100))),
                []
            );
        }
        assert_eq!(tracker.events().len(), 1);
    }

    #[test]
    fn a_resumed_event_is_announced_again_only_when_its_status_changed_while_down() {
        let remembered = |id: &str, status: EventStatus| Tracked {
            event: event(id, status),
            first_seen: t(-2000),
            seen_started: false,
        };
        let mut tracker = Tracker::new();
        tracker.resume(vec![
            remembered("same", EventStatus::Scheduled),
            remembered("moved", EventStatus::Scheduled),
            remembered("gone", EventStatus::Scheduled),
        ]);
        let o = tracker.observe(
            document(
                9,
                &[
                    event("same", EventStatus::Scheduled),
                    event("moved", EventStatus::Started),
                ],
            ),
            t(-10),
        );
        assert_eq!(kinds(&o), [("scheduled", "same"), ("started", "moved")]);
        let announced: Vec<bool> = o
            .transitions
            .iter()
            .map(|t| t.already_announced())
            .collect();
        assert_eq!(announced, [true, false]);
        assert_eq!(
            o.ended_while_down,
            [remembered("gone", EventStatus::Scheduled)]
        );
    }

    #[test]
    fn first_seen_is_kept_across_changes() {
        let mut tracker = Tracker::new();
        tracker.observe(document(1, &[event("a", EventStatus::Scheduled)]), t(-900));
        tracker.observe(document(2, &[event("a", EventStatus::Started)]), t(-10));
        assert_eq!(tracker.events()[0].first_seen, t(-900));
        assert!(tracker.events()[0].seen_started);
    }

    #[test]
    fn an_older_incarnation_never_ends_what_a_newer_one_showed() {
        // Two replicas in turn: 11 with the event, 10 without, for minutes.
        let mut tracker = Tracker::new();
        let newer = document(11, &[event("a", EventStatus::Scheduled)]);
        let older = document(10, &[event("gone", EventStatus::Scheduled)]);
        let mut seen = Vec::new();
        for second in 0..200 {
            let doc = if second % 2 == 0 { &newer } else { &older };
            let o = tracker.observe(doc.clone(), t(-900 + second));
            seen.extend(
                kinds(&o)
                    .into_iter()
                    .map(|(kind, id)| format!("{kind} {id}")),
            );
            assert_eq!(o.incarnation == IncarnationChange::Unchanged, second > 0);
            assert_eq!(tracker.events().len(), 1);
            assert_eq!(tracker.incarnation(), Some(DocumentIncarnation(11)));
        }
        assert_eq!(
            seen,
            ["scheduled a"],
            "one transition, and nothing of the stale replica's"
        );
    }

    #[test]
    fn an_older_incarnation_confirmed_by_its_documents_is_a_restarted_numbering() {
        let mut tracker = Tracker::new();
        tracker.observe(document(11, &[event("a", EventStatus::Scheduled)]), t(-900));
        // The service reset: 1 from now on, the same bytes polled again.
        let reset = document(1, &[]);
        assert_eq!(kinds(&tracker.observe(reset, t(-899))), []);
        for n in 2..CONFIRMING_DOCUMENTS {
            let again = tracker.stale_again(t(-900 + i64::from(n)));
            assert_eq!(again.map(|o| o.transitions.len()), Some(0), "document {n}");
        }
        let Some(read) = tracker.stale_again(t(-850)) else {
            panic!("the last document was stale");
        };
        assert_eq!(
            read.incarnation,
            IncarnationChange::Restarted {
                from: DocumentIncarnation(11),
                to: DocumentIncarnation(1)
            }
        );
        assert_eq!(kinds(&read), [("completed", "a")]);
        assert_eq!(tracker.stale_again(t(-849)).map(|o| o.transitions), None);
        assert_eq!(tracker.incarnation(), Some(DocumentIncarnation(1)));
    }

    #[test]
    fn after_a_restart_an_older_document_changes_nothing_and_the_same_incarnation_holds() {
        let remembered = Tracked {
            event: event("a", EventStatus::Scheduled),
            first_seen: t(-2000),
            seen_started: false,
        };
        // Stopped while 11 showed the event: the first answer is the stale replica's.
        let mut tracker = Tracker::new();
        tracker.resume_from(vec![remembered.clone()], Some(DocumentIncarnation(11)));
        let o = tracker.observe(document(10, &[]), t(-900));
        assert_eq!((kinds(&o), o.ended_while_down.len()), (vec![], 0));
        let o = tracker.observe(document(11, &[event("a", EventStatus::Scheduled)]), t(-899));
        assert_eq!(kinds(&o), [("scheduled", "a")]);
        assert!(o.transitions[0].already_announced(), "not announced again");
        assert_eq!(tracker.events()[0].first_seen, t(-2000));

        // Stopped in the middle of a hold under 11: the first answer lacks it again.
        let mut tracker = Tracker::new();
        tracker.resume_from(vec![remembered.clone()], Some(DocumentIncarnation(11)));
        let o = tracker.observe(document(11, &[]), t(-900));
        assert!(o.ended_while_down.is_empty(), "{o:?}");
        assert!(o.transitions.iter().all(Transition::already_announced));
        assert_eq!(tracker.events().len(), 1, "held");
        let back = tracker.observe(document(11, &[event("a", EventStatus::Scheduled)]), t(-899));
        assert_eq!(kinds(&back), [], "its return is no news");
        // A hold that lasts is confirmed as before.
        tracker.observe(document(11, &[]), t(-800));
        for n in 2..CONFIRMING_DOCUMENTS {
            assert_eq!(tracker.unchanged(t(-800 + i64::from(n))), []);
        }
        assert_eq!(
            tracker.unchanged(t(-700)),
            [Transition::Cancelled(event("a", EventStatus::Scheduled))]
        );
    }
}
