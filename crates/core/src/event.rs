//! Scheduled events as the agent understands them: enums and newtypes named as in Azure's docs,
//! built from [`azure_scheduled_events_protocol::wire`] at the edge.
//!
//! Reading is tolerant where Azure or its samples vary (enum case, missing newer fields, unknown
//! types, an incarnation written as a string of digits) and strict only where a wrong guess would
//! be dangerous: a document whose `DocumentIncarnation` is not a number is rejected as a whole, so
//! the agent keeps what it knew instead of acting on a document it cannot place.

use std::fmt;

use azure_scheduled_events_protocol::resources::Resources;
use azure_scheduled_events_protocol::wire;

use crate::not_before::NotBefore;

/// `EventId`, kept exactly as received: approvals must echo it byte for byte, and real IMDS sends
/// upper-case GUIDs where the docs show lower-case ones.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(String);

impl EventId {
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `DocumentIncarnation`: increases whenever the events change, possibly by more than one. It is
/// specific to each VM and restarts when the service is disabled, so it never correlates VMs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DocumentIncarnation(pub u64);

impl fmt::Display for DocumentIncarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Defines a string enum of Azure's with known variants, an `Other` that keeps unknown values as
/// sent, case-insensitive reading, and the canonical spelling for labels and logs.
macro_rules! azure_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($variant,)+
            /// A value this version of the agent does not know, kept as sent.
            Other(String),
        }

        impl $name {
            /// Every known value, in the order of Azure's docs.
            pub const KNOWN: &'static [$name] = &[$($name::$variant),+];

            /// Reads a value as Azure writes it; comparison ignores case.
            pub fn parse(text: &str) -> Self {
                $(if text.eq_ignore_ascii_case(stringify!($variant)) {
                    return $name::$variant;
                })+
                $name::Other(text.to_owned())
            }

            /// Reads a value an operator typed (a flag, a configuration file): a known one, or
            /// an error that lists them.
            pub fn parse_known(text: &str) -> Result<Self, String> {
                match Self::parse(text.trim()) {
                    $name::Other(_) => Err(format!(
                        "{text:?} is not one of {}",
                        [$(stringify!($variant)),+].join(", ")
                    )),
                    known => Ok(known),
                }
            }

            /// The canonical spelling (Azure's), or the unknown value as sent.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => stringify!($variant),)+
                    $name::Other(text) => text,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

azure_enum!(
    /// `EventType`: what will happen to the VM. `SpotRebalanceRecommendation` (Spot Plus, at an
    /// api-version newer than 2020-07-01) is an advisory: nothing happens because of it.
    EventType { Freeze, Reboot, Redeploy, Preempt, Terminate, SpotRebalanceRecommendation }
);

azure_enum!(
    /// `EventStatus`. There is no `Completed`: a finished event leaves the document. `Advisory`
    /// (with Spot rebalance recommendations) announces no impact, and acknowledging it has no
    /// effect.
    EventStatus { Scheduled, Started, Advisory }
);

impl EventType {
    /// Whether events of this type only advise: Azure does nothing to the VM because of them.
    pub fn is_advisory(&self) -> bool {
        *self == EventType::SpotRebalanceRecommendation
    }

    /// The known types that announce an impact on the VM, in the order of Azure's docs.
    pub fn impacts() -> impl Iterator<Item = &'static EventType> {
        Self::KNOWN.iter().filter(|t| !t.is_advisory())
    }
}

impl EventStatus {
    /// Whether the status announces an impact: `Scheduled` or `Started`. `Advisory`, and any
    /// status this agent does not know, never does.
    pub fn is_impact(&self) -> bool {
        matches!(self, EventStatus::Scheduled | EventStatus::Started)
    }

    /// The known statuses that announce an impact.
    pub const IMPACTS: [EventStatus; 2] = [EventStatus::Scheduled, EventStatus::Started];
}

azure_enum!(
    /// `EventSource` (api-version 2019-08-01 and later).
    EventSource { Platform, User }
);

/// `DurationInSeconds` (api-version 2020-07-01 and later): expected impact, `0` for none, `-1` for
/// unknown. Kept as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationInSeconds(pub i64);

/// Whether an event names this VM in `Resources`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Affects {
    Yes,
    No,
    /// This VM's name is not known yet (neither `--vm.name` nor instance metadata has given it).
    Unknown,
}

impl Affects {
    /// The `affects_this_vm` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Affects::Yes => "true",
            Affects::No => "false",
            Affects::Unknown => "unknown",
        }
    }
}

/// One scheduled event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub id: EventId,
    pub event_type: EventType,
    pub status: EventStatus,
    /// `ResourceType`, `VirtualMachine` in every document seen; empty when missing.
    pub resource_type: String,
    pub resources: Resources,
    pub not_before: NotBefore,
    /// Free text, never used for decisions; `None` before api-version 2019-04-01.
    pub description: Option<String>,
    pub source: Option<EventSource>,
    pub duration: Option<DurationInSeconds>,
}

impl Event {
    /// Whether the event only advises: a Spot rebalance recommendation, an `Advisory` status, or
    /// a status this agent does not know. Such an event is shown, logged and traced, but never a
    /// pending impact, never approved, and never notified or put on the Node unless asked for.
    pub fn is_advisory(&self) -> bool {
        self.event_type.is_advisory() || !self.status.is_impact()
    }

    /// Whether `vm` is in `Resources`. Azure resource names are case-insensitive.
    pub fn affects(&self, vm: Option<&str>) -> Affects {
        match vm {
            None => Affects::Unknown,
            Some(vm) if self.resources.contains_ignore_ascii_case(vm) => Affects::Yes,
            Some(_) => Affects::No,
        }
    }
}

/// By value: the wire strings move into the event instead of being copied.
impl From<wire::ScheduledEvent> for Event {
    fn from(wire: wire::ScheduledEvent) -> Self {
        Self {
            event_type: EventType::parse(&wire.event_type),
            status: EventStatus::parse(&wire.event_status),
            not_before: NotBefore::parse(wire.not_before.as_deref()),
            source: wire.event_source.as_deref().map(EventSource::parse),
            id: EventId::new(wire.event_id),
            resource_type: wire.resource_type.unwrap_or_default(),
            resources: wire.resources.unwrap_or_default(),
            description: wire.description,
            duration: wire.duration_in_seconds.map(DurationInSeconds),
        }
    }
}

/// A scheduled-events document the agent can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    pub incarnation: DocumentIncarnation,
    pub events: Vec<Event>,
}

/// Why a body is not a document the agent can act on.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    #[error("not a scheduled-events document: {0}")]
    Json(#[from] serde_json::Error),
    #[error("DocumentIncarnation {0} is not a non-negative integer")]
    Incarnation(String),
}

impl Document {
    /// Reads a response body.
    pub fn from_json(body: &[u8]) -> Result<Self, DocumentError> {
        let wire: wire::ScheduledEventsDocument = serde_json::from_slice(body)?;
        Self::try_from(wire)
    }
}

impl TryFrom<wire::ScheduledEventsDocument> for Document {
    type Error = DocumentError;

    fn try_from(wire: wire::ScheduledEventsDocument) -> Result<Self, Self::Error> {
        let incarnation = match &wire.document_incarnation {
            wire::Incarnation::Number(n) => n.as_u64(),
            wire::Incarnation::Text(text) => text.trim().parse().ok(),
        }
        .map(DocumentIncarnation)
        .ok_or_else(|| {
            DocumentError::Incarnation(match &wire.document_incarnation {
                wire::Incarnation::Number(n) => n.to_string(),
                wire::Incarnation::Text(text) => format!("{text:?}"),
            })
        })?;
        Ok(Self {
            incarnation,
            events: wire.events.into_iter().map(Event::from).collect(),
        })
    }
}

/// A valid scheduled-events document, or the news that it is byte for byte the last one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Polled {
    Changed(Document),
    Unchanged,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_value_is_known_or_an_error_that_lists_the_known_ones() {
        assert_eq!(EventType::parse_known(" reboot "), Ok(EventType::Reboot));
        assert_eq!(
            EventType::parse_known("Hibernate"),
            Err("\"Hibernate\" is not one of Freeze, Reboot, Redeploy, Preempt, Terminate, SpotRebalanceRecommendation".into())
        );
        assert_eq!(
            EventSource::parse_known("Azure"),
            Err("\"Azure\" is not one of Platform, User".into())
        );
    }

    fn doc(json: &str) -> Document {
        match Document::from_json(json.as_bytes()) {
            Ok(doc) => doc,
            Err(e) => panic!("{e}: {json}"),
        }
    }

    #[test]
    fn the_documented_example_is_read_field_by_field() {
        let d = doc(
            r#"{"DocumentIncarnation": 2, "Events": [{"EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
            "EventStatus": "Scheduled", "EventType": "Freeze", "ResourceType": "VirtualMachine",
            "Resources": ["WestNO_0", "WestNO_1"], "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT",
            "Description": "paused", "EventSource": "Platform", "DurationInSeconds": 5}]}"#,
        );
        assert_eq!(d.incarnation, DocumentIncarnation(2));
        let e = &d.events[0];
        assert_eq!(e.id.as_str(), "C7061BAC-AFDC-4513-B24B-AA5F13A16123");
        assert_eq!(e.event_type, EventType::Freeze);
        assert_eq!(e.status, EventStatus::Scheduled);
        assert_eq!(e.resource_type, "VirtualMachine");
        assert_eq!(
            e.resources.iter().collect::<Vec<_>>(),
            ["WestNO_0", "WestNO_1"]
        );
        assert_eq!(
            e.not_before.at().map(|t| t.timestamp()),
            Some(1_649_716_018)
        );
        assert_eq!(e.description.as_deref(), Some("paused"));
        assert_eq!(e.source, Some(EventSource::Platform));
        assert_eq!(e.duration, Some(DurationInSeconds(5)));
    }

    #[test]
    fn the_2017_schema_without_newer_fields_is_read() {
        let d = doc(
            r#"{"DocumentIncarnation":1,"Events":[{"EventId":"F3E6E2D2-E86A-47F0-AA8E-18918049A2B1",
            "EventStatus":"Scheduled","EventType":"Reboot","ResourceType":"VirtualMachine",
            "Resources":["controlplane_0"],"NotBefore":"Sun, 30 Jun 2019 16:22:03 GMT"}]}"#,
        );
        let e = &d.events[0];
        assert_eq!(
            (e.description.as_ref(), e.source.as_ref(), e.duration),
            (None, None, None)
        );
        assert_eq!(e.event_type, EventType::Reboot);
    }

    #[test]
    fn enum_strings_are_compared_without_case() {
        assert_eq!(EventType::parse("fReEzE"), EventType::Freeze);
        assert_eq!(EventStatus::parse("STARTED"), EventStatus::Started);
        assert_eq!(EventSource::parse("user"), EventSource::User);
        assert_eq!(EventType::parse("preempt").as_str(), "Preempt");
    }

    #[test]
    fn a_spot_rebalance_recommendation_is_a_known_advisory_in_any_case() {
        let d = doc(
            r#"{"DocumentIncarnation":5,"Events":[{"EventId":"A","EventStatus":"advisory",
            "EventType":"spotrebalancerecommendation","Resources":["spot_0"],"NotBefore":""}]}"#,
        );
        let e = &d.events[0];
        assert_eq!(e.event_type, EventType::SpotRebalanceRecommendation);
        assert_eq!(e.status, EventStatus::Advisory);
        assert_eq!(e.status.as_str(), "Advisory");
        assert!(e.is_advisory());
        assert_eq!(e.not_before.at(), None);
    }

    #[test]
    fn a_document_of_a_newer_version_with_fields_it_does_not_know_is_read() {
        let d = doc(
            r#"{"DocumentIncarnation":6,"DocumentVersion":"2026-09-01","Events":[{"EventId":"A",
            "EventStatus":"Advisory","EventType":"SpotRebalanceRecommendation","ResourceType":"VirtualMachine",
            "Resources":["spot_0"],"NotBefore":"","Description":"","EventSource":"Platform",
            "DurationInSeconds":-1,"RecommendationScore":0.7,"Details":{"Region":"westeurope"}}]}"#,
        );
        assert_eq!(d.incarnation, DocumentIncarnation(6));
        assert_eq!(
            d.events[0].event_type,
            EventType::SpotRebalanceRecommendation
        );
        assert_eq!(d.events[0].duration, Some(DurationInSeconds(-1)));
    }

    #[test]
    fn only_scheduled_and_started_are_impacts() {
        let event = |status: &str, event_type: &str| {
            doc(&format!(
                r#"{{"DocumentIncarnation":1,"Events":[{{"EventId":"x","EventStatus":"{status}","EventType":"{event_type}"}}]}}"#
            ))
            .events[0]
                .is_advisory()
        };
        assert!(!event("Scheduled", "Reboot"));
        assert!(
            !event("Started", "Hibernate"),
            "an unknown type that started is an impact"
        );
        assert!(event("Advisory", "Preempt"));
        assert!(
            event("Paused", "Reboot"),
            "an unknown status is never an impact"
        );
        assert!(event("Scheduled", "SpotRebalanceRecommendation"));
        assert_eq!(
            EventType::impacts()
                .map(EventType::as_str)
                .collect::<Vec<_>>(),
            ["Freeze", "Reboot", "Redeploy", "Preempt", "Terminate"]
        );
    }

    #[test]
    fn unknown_enum_values_are_kept_as_other() {
        let d = doc(
            r#"{"DocumentIncarnation":3,"Events":[{"EventId":"x","EventStatus":"Paused",
            "EventType":"Hibernate","EventSource":"Robot","Resources":[]}]}"#,
        );
        let e = &d.events[0];
        assert_eq!(e.event_type, EventType::Other("Hibernate".into()));
        assert_eq!(e.status, EventStatus::Other("Paused".into()));
        assert_eq!(e.source, Some(EventSource::Other("Robot".into())));
        assert_eq!(e.event_type.as_str(), "Hibernate");
    }

    #[test]
    fn incarnation_may_be_a_numeric_string() {
        assert_eq!(
            doc(r#"{"DocumentIncarnation":"17","Events":[]}"#).incarnation,
            DocumentIncarnation(17)
        );
    }

    #[test]
    fn a_non_numeric_or_negative_incarnation_rejects_the_document() {
        for body in [
            r#"{"DocumentIncarnation":"abc123","Events":[]}"#,
            r#"{"DocumentIncarnation":-1,"Events":[]}"#,
            r#"{"DocumentIncarnation":1.5,"Events":[]}"#,
        ] {
            assert!(
                matches!(
                    Document::from_json(body.as_bytes()),
                    Err(DocumentError::Incarnation(_))
                ),
                "{body}"
            );
        }
    }

    #[test]
    fn a_body_without_events_is_not_an_empty_document() {
        for body in [
            r#"{"DocumentIncarnation":4}"#,
            r#"{"error":"Bad request. api-version was not specified"}"#,
            "<html><body>Service Unavailable</body></html>",
            r#"{"DocumentIncarnation":4,"Events":[{"EventId":"#,
            "",
        ] {
            assert!(Document::from_json(body.as_bytes()).is_err(), "{body}");
        }
    }

    #[test]
    fn missing_and_null_resources_are_empty() {
        let d = doc(
            r#"{"DocumentIncarnation":1,"Events":[{"EventId":"a","EventStatus":"Started","EventType":"Reboot"},
            {"EventId":"b","EventStatus":"Started","EventType":"Reboot","Resources":null}]}"#,
        );
        assert!(
            d.events
                .iter()
                .all(|e| e.resources.is_empty() && e.not_before.at().is_none())
        );
    }

    #[test]
    fn event_id_is_echoed_exactly() {
        let d = doc(
            r#"{"DocumentIncarnation":1,"Events":[{"EventId":" 602d9444-D2CD ","EventStatus":"Scheduled","EventType":"Reboot"}]}"#,
        );
        assert_eq!(d.events[0].id.as_str(), " 602d9444-D2CD ");
    }

    #[test]
    fn affects_compares_names_without_case_and_knows_when_it_cannot_tell() {
        let d = doc(
            r#"{"DocumentIncarnation":1,"Events":[{"EventId":"a","EventStatus":"Scheduled","EventType":"Freeze",
            "Resources":["WestNO_0","WestNO_1"]}]}"#,
        );
        let e = &d.events[0];
        assert_eq!(e.affects(Some("westno_1")), Affects::Yes);
        assert_eq!(e.affects(Some("WestNO_2")), Affects::No);
        assert_eq!(e.affects(None), Affects::Unknown);
    }
}
