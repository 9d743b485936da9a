//! One view of each event, the same for every output: its fields, this VM, the document, and
//! the ids that join it to its trace.
//!
//! [`SpanIds`] is the one rule for this VM's lifecycle span id of an event: it is given once,
//! when the event is first seen, from the EventId and this VM's identity at that moment (its
//! name in `Resources` once known, else the machine's host name), and kept for the event's
//! whole life; the state file remembers it across a restart. So an event that appears before
//! instance metadata has been read keeps the id it was first given in every log line,
//! notification and span, and every child span's parent is the lifecycle span exported.
//!
//! [`EventView`] is what the log line, the notification body (and its template fields) and the
//! span attributes say about one event, built from the occurrence's event and the batch's
//! [`crate::occurrence::Context`]. Pure: no I/O, no clock.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::event::{Affects, Event, EventId};
use crate::subject::Subject;
use crate::trace_id::{lifecycle_span_id, trace_id};

/// How many ended events keep their span id, for a decision that comes after the event left
/// the document (a hook that finished later).
const ENDED_KEPT: usize = 256;

/// This VM's lifecycle span id of each event it knows, as first given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpanIds {
    /// The machine's host name: this VM's identity for span ids while its name is not known.
    host: Arc<str>,
    ids: HashMap<EventId, u64>,
    /// Events that left the document, oldest first; their ids go after [`ENDED_KEPT`] more.
    ended: VecDeque<EventId>,
}

impl SpanIds {
    /// No ids yet; `host` names this machine until the VM's name is known.
    pub fn new(host: &str) -> Self {
        Self {
            host: Arc::from(host),
            ..Self::default()
        }
    }

    /// The identity span ids are derived from: the VM's name once known, else the host name.
    pub fn identity<'a>(&'a self, vm: Option<&'a str>) -> &'a str {
        vm.filter(|name| !name.is_empty()).unwrap_or(&self.host)
    }

    /// Gives `id` its span id if it has none: `remembered` (a hex id from the state file), else
    /// one derived from this VM's identity now.
    pub fn give(&mut self, id: &EventId, vm: Option<&str>, remembered: Option<&str>) {
        if self.ids.contains_key(id) {
            return;
        }
        let span_id = remembered
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .filter(|&span_id| span_id != 0)
            .unwrap_or_else(|| lifecycle_span_id(id.as_str(), self.identity(vm)));
        self.ids.insert(id.clone(), span_id);
    }

    /// `id` left the document: its span id stays for a while, for decisions that come later.
    pub fn ended(&mut self, id: &EventId) {
        if !self.ids.contains_key(id) || self.ended.contains(id) {
            return;
        }
        self.ended.push_back(id.clone());
        while self.ended.len() > ENDED_KEPT {
            if let Some(gone) = self.ended.pop_front() {
                self.ids.remove(&gone);
            }
        }
    }

    /// The span id `id` was given; one derived from this VM's identity now for an event never
    /// given one.
    pub fn get(&self, id: &EventId, vm: Option<&str>) -> u64 {
        self.ids
            .get(id)
            .copied()
            .unwrap_or_else(|| lifecycle_span_id(id.as_str(), self.identity(vm)))
    }
}

/// 16 lower-case hex digits, as log lines, notifications and the state file carry a span id.
pub fn span_id_hex(span_id: u64) -> String {
    format!("{span_id:016x}")
}

/// The fields of one event as every output says it ([`EventView`], its log line, its span), in
/// order: the event's part of the template fields of notifications.
pub const EVENT_FIELDS: [&str; 16] = [
    "event_id",
    "trace_id",
    "span_id",
    "vm_name",
    "event_type",
    "event_status",
    "advisory",
    "event_source",
    "resource_type",
    "resources",
    "not_before",
    "duration_in_seconds",
    "description",
    "cause",
    "affects_this_vm",
    "document_incarnation",
];

/// One event as this VM saw it in one batch: the fields every output says about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventView {
    pub event_id: String,
    pub trace_id: String,
    pub span_id: String,
    pub vm_name: Option<String>,
    pub event_type: String,
    pub event_status: String,
    /// The event announces no impact ([`Event::is_advisory`]): a Spot rebalance recommendation,
    /// EventStatus `Advisory`, or an unknown status.
    pub advisory: bool,
    pub event_source: Option<String>,
    pub resource_type: String,
    pub resources: String,
    pub not_before: String,
    pub duration_in_seconds: Option<i64>,
    pub description: Option<String>,
    /// What `Description` says caused the event ([`crate::cause::Cause`]).
    pub cause: &'static str,
    /// `true`, `false`, or `unknown` while this VM's name is not known.
    #[serde(serialize_with = "as_str")]
    pub affects_this_vm: Affects,
    pub document_incarnation: Option<u64>,
}

fn as_str<S: serde::Serializer>(affects: &Affects, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(affects.as_str())
}

impl EventView {
    /// The view of `event` seen by `vm_name` in document `incarnation`, whose lifecycle span is
    /// `span_id`.
    pub fn new(
        event: &Event,
        vm_name: Option<&str>,
        incarnation: Option<u64>,
        span_id: u64,
    ) -> Self {
        let id = event.id.as_str();
        Self {
            event_id: id.to_owned(),
            trace_id: trace_id(id),
            span_id: span_id_hex(span_id),
            vm_name: vm_name.map(str::to_owned),
            event_type: event.event_type.as_str().to_owned(),
            event_status: event.status.as_str().to_owned(),
            advisory: event.is_advisory(),
            event_source: event.source.as_ref().map(|s| s.as_str().to_owned()),
            resource_type: event.resource_type.clone(),
            resources: event.resources.to_string(),
            not_before: event.not_before.raw().to_owned(),
            duration_in_seconds: event.duration.map(|d| d.0),
            description: event.description.clone(),
            cause: event.cause().as_str(),
            affects_this_vm: event.affects(vm_name),
            document_incarnation: incarnation,
        }
    }
}

/// The event in one sentence, for people reading a log line or a notification: what, to which
/// VMs, when, for how long and why, e.g. "Freeze of vm_0, vm_1 in 60 s, for 5 s, live migration".
/// `transition` is the line's (`scheduled`, `updated`, `started`, ..., `approved`).
pub fn summary(event: &Event, transition: Subject, at: DateTime<Utc>) -> String {
    let mut names = event.resources.iter();
    let mut text = format!("{} of ", event.event_type);
    for (i, name) in names.by_ref().take(SUMMARY_NAMES).enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        text.push_str(name);
    }
    match names.len() {
        0 if event.resources.is_empty() => text.push_str("no VM named"),
        0 => {}
        more => text.push_str(&format!(" and {more} more")),
    }
    text.push(' ');
    text.push_str(&match transition {
        Subject::Scheduled => until(event.not_before.seconds_from(at)),
        Subject::Updated => format!("changed, {}", until(event.not_before.seconds_from(at))),
        other => other.as_str().to_owned(),
    });
    if let Some(duration) = event.duration.filter(|d| d.0 >= 0) {
        text.push_str(", for ");
        text.push_str(&human_seconds(duration.0 as f64));
    }
    let cause = event.cause();
    if cause != crate::cause::Cause::Other {
        text.push_str(", ");
        text.push_str(&cause.as_str().replace('_', " "));
    }
    text
}

/// Names of `Resources` a summary lists before "and N more".
const SUMMARY_NAMES: usize = 3;

/// When NotBefore comes, from now: "in 60 s", "30 s overdue", or "with no NotBefore".
pub fn until(seconds: Option<f64>) -> String {
    match seconds {
        Some(s) if s >= 0.0 => format!("in {}", human_seconds(s)),
        Some(s) => format!("{} overdue", human_seconds(-s)),
        None => "with no NotBefore".to_owned(),
    }
}

/// Seconds as a person says them: "45 s", "15 min", "3 h", "6 days" (rounded).
fn human_seconds(seconds: f64) -> String {
    let s = seconds.round() as i64;
    match s {
        ..120 => format!("{s} s"),
        120..7_200 => format!("{} min", (s + 30) / 60),
        7_200..172_800 => format!("{} h", (s + 1_800) / 3_600),
        _ => format!("{} days", (s + 43_200) / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> EventId {
        EventId::new(text.to_owned())
    }

    #[test]
    fn an_event_first_seen_before_the_vm_name_keeps_the_host_names_id() {
        let mut ids = SpanIds::new("host-a");
        let event = id("C7061BAC-AFDC-4513-B24B-AA5F13A16123");
        ids.give(&event, None, None);
        let first = ids.get(&event, None);
        assert_eq!(first, lifecycle_span_id(event.as_str(), "host-a"));
        ids.give(&event, Some("vmss_0"), None);
        assert_eq!(ids.get(&event, Some("vmss_0")), first, "given once");
        let later = id("C7061BAC-AFDC-4513-B24B-AA5F13A16124");
        ids.give(&later, Some("vmss_0"), None);
        assert_eq!(
            ids.get(&later, Some("vmss_0")),
            lifecycle_span_id(later.as_str(), "vmss_0"),
            "an event first seen once the name is known has the name's id"
        );
    }

    #[test]
    fn a_remembered_id_wins_and_ended_events_keep_theirs_for_a_while() {
        let mut ids = SpanIds::new("host-a");
        let event = id("123");
        ids.give(&event, Some("vmss_0"), Some("00000000000000ab"));
        assert_eq!(ids.get(&event, Some("vmss_0")), 0xab);
        ids.ended(&event);
        assert_eq!(ids.get(&event, Some("vmss_0")), 0xab);
        for n in 0..ENDED_KEPT {
            let other = id(&format!("other-{n}"));
            ids.give(&other, None, None);
            ids.ended(&other);
        }
        assert_eq!(
            ids.get(&event, Some("vmss_0")),
            lifecycle_span_id("123", "vmss_0"),
            "forgotten after enough later events ended"
        );
        assert!(ids.ids.len() <= ENDED_KEPT);
    }

    #[test]
    fn a_view_serialises_to_its_field_list() -> Result<(), serde_json::Error> {
        let event = crate::event::Document::from_json(
            br#"{"DocumentIncarnation":1,"Events":[{"EventId":"123","EventType":"Reboot","ResourceType":"VirtualMachine","Resources":["vmss_0"],"EventStatus":"Scheduled","NotBefore":""}]}"#,
        )
        .map_err(serde::de::Error::custom)?
        .events
        .remove(0);
        let view = EventView::new(&event, Some("vmss_0"), Some(1), 0xab);
        assert_eq!(view.affects_this_vm, Affects::Yes);
        assert_eq!(serde_json::to_value(&view)?["affects_this_vm"], "true");
        assert_eq!(view.span_id, "00000000000000ab");
        let value = serde_json::to_value(&view)?;
        let keys: Vec<&str> = value
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let mut fields = EVENT_FIELDS.to_vec();
        fields.sort_unstable();
        assert_eq!(keys, fields);
        Ok(())
    }

    fn summary_event(json: &str) -> Result<Event, Box<dyn std::error::Error>> {
        let body = format!(r#"{{"DocumentIncarnation":1,"Events":[{json}]}}"#);
        crate::event::Document::from_json(body.as_bytes())?
            .events
            .pop()
            .ok_or_else(|| "no event".into())
    }

    fn at() -> DateTime<Utc> {
        use chrono::TimeZone;
        Utc.with_ymd_and_hms(2026, 11, 27, 10, 0, 0)
            .single()
            .unwrap_or_default()
    }

    #[test]
    fn a_summary_says_what_to_whom_when_for_how_long_and_why()
    -> Result<(), Box<dyn std::error::Error>> {
        let freeze = summary_event(
            r#"{"EventId":"A","EventType":"Freeze","ResourceType":"VirtualMachine",
            "Resources":["demo-vmss_0","demo-vmss_1"],"EventStatus":"Scheduled",
            "NotBefore":"Fri, 27 Nov 2026 10:01:00 GMT","Description":"Virtual machine is being paused because of a memory-preserving Live Migration operation.",
            "EventSource":"Platform","DurationInSeconds":5}"#,
        )?;
        assert_eq!(
            summary(&freeze, Subject::Scheduled, at()),
            "Freeze of demo-vmss_0, demo-vmss_1 in 60 s, for 5 s, live migration"
        );
        assert_eq!(
            summary(&freeze, Subject::Started, at()),
            "Freeze of demo-vmss_0, demo-vmss_1 started, for 5 s, live migration"
        );
        let reboot = summary_event(
            r#"{"EventId":"B","EventType":"Reboot","ResourceType":"VirtualMachine",
            "Resources":["a","b","c","d","e"],"EventStatus":"Scheduled",
            "NotBefore":"Fri, 27 Nov 2026 10:15:00 GMT","EventSource":"User","DurationInSeconds":-1}"#,
        )?;
        assert_eq!(
            summary(&reboot, Subject::Scheduled, at()),
            "Reboot of a, b, c and 2 more in 15 min"
        );
        Ok(())
    }

    #[test]
    fn durations_read_as_a_person_says_them() {
        assert_eq!(human_seconds(45.2), "45 s");
        assert_eq!(human_seconds(900.0), "15 min");
        assert_eq!(human_seconds(3.0 * 3600.0), "3 h");
        assert_eq!(human_seconds(6.0 * 86_400.0), "6 days");
        assert_eq!(until(Some(-30.0)), "30 s overdue");
        assert_eq!(until(None), "with no NotBefore");
    }
}
