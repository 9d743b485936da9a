//! The simulator's pure core: the events IMDS would currently report, their lifecycle, the
//! `DocumentIncarnation`, approvals, and the document as each `api-version` sees it.
//!
//! No sockets, no clock: every method that depends on time takes `now`. Lifecycles are computed
//! from the instants things happened (appeared, approved, NotBefore), not from when `advance` is
//! called, so a late poll sees exactly what a punctual one would have seen by then.

use bytes::Bytes;
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::event_id::EventIds;
use super::scenario::{InitialStatus, Scenario, ScenarioEvent};
use super::timeline::{Timeline, after};
use azure_scheduled_events_protocol::api_version::ApiVersion;
use azure_scheduled_events_protocol::wire::{
    Incarnation, ScheduledEvent, ScheduledEventsDocument, StartRequests,
};

/// One `EventId` received in an approval `POST`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Approval {
    pub event_id: String,
    pub at: DateTime<Utc>,
    /// Whether the id was in the document when it was posted.
    pub known: bool,
}

/// Why an approval `POST` was answered 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    #[error("Bad request. Body is not a valid StartRequests document: {0}")]
    Malformed(String),
    #[error("Bad request. StartRequests is empty")]
    Empty,
    #[error("Bad request. EventId not found in the current document: {}", .0.join(", "))]
    UnknownEvents(Vec<String>),
}

/// Why an event could not be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddEventError {
    #[error("invalid event: {0}")]
    Invalid(String),
    #[error("an event with EventId {0:?} is already in the document")]
    DuplicateId(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Scheduled,
    Started,
    /// Stays so until removed; approving it has no effect.
    Advisory,
}

/// An event in the document, with the instants that drive its lifecycle.
#[derive(Debug, Clone)]
struct LiveEvent {
    id: String,
    spec: ScenarioEvent,
    status: Status,
    not_before: DateTime<Utc>,
    approved_at: Option<DateTime<Utc>>,
    started_at: Option<DateTime<Utc>>,
    cancel_at: Option<DateTime<Utc>>,
}

impl LiveEvent {
    fn appear(id: String, spec: ScenarioEvent, at: DateTime<Utc>) -> Self {
        let status = match spec.status {
            InitialStatus::Scheduled => Status::Scheduled,
            InitialStatus::Started => Status::Started,
            InitialStatus::Advisory => Status::Advisory,
        };
        LiveEvent {
            id,
            status,
            not_before: after(at, spec.notice()),
            approved_at: None,
            // An advisory's stay is counted like a run, from its appearance.
            started_at: (status != Status::Scheduled).then_some(at),
            cancel_at: spec.cancel_after.map(|c| after(at, c.0)),
            spec,
        }
    }

    /// Moves the event along to `now`; `false` means it has left the document.
    fn advance(&mut self, now: DateTime<Utc>) -> bool {
        if self.status == Status::Scheduled {
            let start_at = match self.approved_at {
                Some(approved) => approved.min(self.not_before),
                None => self.not_before,
            };
            if let Some(cancel_at) = self.cancel_at
                && cancel_at < start_at
                && cancel_at <= now
            {
                return false;
            }
            if start_at <= now {
                self.status = Status::Started;
                self.started_at = Some(start_at);
            }
        }
        match self.started_at {
            Some(started) if self.status != Status::Scheduled => {
                after(started, self.spec.runs_for()) > now
            }
            _ => true,
        }
    }

    fn as_served(&self, version: ApiVersion) -> ScheduledEvent {
        let spec = &self.spec;
        let resources = spec
            .resources
            .iter()
            .map(|r| {
                if version.prefixes_resource_names() {
                    format!("_{r}")
                } else {
                    r.clone()
                }
            })
            .collect();
        ScheduledEvent {
            event_id: self.id.clone(),
            event_status: match self.status {
                Status::Scheduled => "Scheduled",
                Status::Started => "Started",
                Status::Advisory => "Advisory",
            }
            .to_owned(),
            event_type: spec.event_type.clone(),
            resource_type: Some(spec.resource_type.clone()),
            resources: Some(resources),
            not_before: Some(match self.status {
                Status::Scheduled => spec.not_before_format.write(self.not_before),
                Status::Started | Status::Advisory => String::new(),
            }),
            description: version.has_description().then(|| spec.description.clone()),
            event_source: version.has_event_source().then(|| spec.source.clone()),
            duration_in_seconds: version.has_duration().then_some(spec.duration_in_seconds),
        }
    }
}

/// What the simulated IMDS knows at a given moment.
#[derive(Debug, Clone)]
pub struct Simulator {
    incarnation: u64,
    events: Vec<LiveEvent>,
    scenario_name: Option<String>,
    timelines: Vec<Timeline>,
    verbatim: Option<Bytes>,
    approvals: Vec<Approval>,
    ids: EventIds,
}

impl Simulator {
    /// An empty document at incarnation 1. `seed` makes generated EventIds differ between runs
    /// (or repeat, in tests).
    pub fn new(seed: u64) -> Self {
        Simulator {
            incarnation: 1,
            events: Vec::new(),
            scenario_name: None,
            timelines: Vec::new(),
            verbatim: None,
            approvals: Vec::new(),
            ids: EventIds::new(seed),
        }
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    pub fn scenario_name(&self) -> Option<&str> {
        self.scenario_name.as_deref()
    }

    pub fn approvals(&self) -> &[Approval] {
        &self.approvals
    }

    /// The body set with [`Simulator::set_document`], if one is being served.
    pub fn verbatim(&self) -> Option<&Bytes> {
        self.verbatim.as_ref()
    }

    /// Replaces everything with `scenario`, whose timeline starts at `now`: current events are
    /// removed, events added through the control API and a verbatim document are dropped.
    pub fn load_scenario(&mut self, scenario: Scenario, now: DateTime<Utc>) {
        self.changing(now, |sim| {
            sim.events.clear();
            sim.verbatim = None;
            sim.scenario_name = scenario.name.clone();
            sim.timelines = vec![Timeline::new(
                scenario.events,
                scenario.loop_every.map(|p| p.0),
                now,
            )];
        });
    }

    /// Adds one event whose timeline starts at `now` (so `at: 0s` means now) and returns its
    /// EventId (generated up front when absent, so the caller can refer to it). Ends a verbatim
    /// document.
    pub fn add_event(
        &mut self,
        mut event: ScenarioEvent,
        now: DateTime<Utc>,
    ) -> Result<String, AddEventError> {
        event.validate().map_err(AddEventError::Invalid)?;
        let id = match &event.id {
            Some(id) if self.events.iter().any(|e| &e.id == id) => {
                return Err(AddEventError::DuplicateId(id.clone()));
            }
            Some(id) => id.clone(),
            None => self.ids.next_id(),
        };
        event.id = Some(id.clone());
        self.changing(now, |sim| {
            sim.verbatim = None;
            sim.timelines.push(Timeline::new(vec![event], None, now));
        });
        Ok(id)
    }

    /// Removes an event now, whatever its status (Azure cancelled or completed it). `false` when
    /// no such event is in the document. Ends a verbatim document.
    pub fn remove_event(&mut self, event_id: &str, now: DateTime<Utc>) -> bool {
        self.advance(now);
        let present = self.events.iter().any(|e| e.id == event_id);
        if present {
            self.changing(now, |sim| {
                sim.verbatim = None;
                sim.events.retain(|e| e.id != event_id);
            });
        }
        present
    }

    /// Serves `body` verbatim for every GET (any api-version) until a scenario is loaded, an event
    /// is added or removed, or [`Simulator::clear_document`] is called. The simulated events keep
    /// moving behind it.
    pub fn set_document(&mut self, body: Bytes) {
        self.verbatim = Some(body);
    }

    pub fn clear_document(&mut self) {
        self.verbatim = None;
    }

    /// Brings every event and timeline up to `now`. Returns whether the document changed (and
    /// so whether `DocumentIncarnation` went up, by one).
    pub fn advance(&mut self, now: DateTime<Utc>) -> bool {
        self.changing(now, |_| {})
    }

    /// Runs `change`, brings everything up to `now`, and bumps the incarnation once if the
    /// events as served changed.
    fn changing(&mut self, now: DateTime<Utc>, change: impl FnOnce(&mut Self)) -> bool {
        let before = self.served_events(ApiVersion::EVERYTHING);
        change(self);
        self.play_timelines(now);
        self.events.retain_mut(|e| e.advance(now));
        let changed = self.served_events(ApiVersion::EVERYTHING) != before;
        if changed {
            self.incarnation = self.incarnation.saturating_add(1);
        }
        changed
    }

    fn play_timelines(&mut self, now: DateTime<Utc>) {
        let mut due: Vec<_> = self.timelines.iter_mut().flat_map(|t| t.due(now)).collect();
        due.sort_by_key(|a| a.at);
        self.timelines.retain(|t| !t.is_finished());
        for appearance in due {
            let id = match &appearance.event.id {
                Some(id) => id.clone(),
                None => self.ids.next_id(),
            };
            // A fixed id that comes round again (a looping scenario) replaces its predecessor.
            self.events.retain(|e| e.id != id);
            self.events
                .push(LiveEvent::appear(id, appearance.event, appearance.at));
        }
    }

    fn served_events(&self, version: ApiVersion) -> Vec<ScheduledEvent> {
        self.events
            .iter()
            .filter(|e| version.knows_event_type(&e.spec.event_type))
            .map(|e| e.as_served(version))
            .collect()
    }

    /// The simulated document as `version` shows it (a verbatim document is not consulted).
    pub fn document(&self, version: ApiVersion) -> ScheduledEventsDocument {
        ScheduledEventsDocument {
            document_incarnation: Incarnation::Number(self.incarnation.into()),
            events: self.served_events(version),
        }
    }

    /// The body of a GET: the verbatim document when one is set, else the simulated one.
    pub fn body(&self, version: ApiVersion) -> Result<Bytes, serde_json::Error> {
        match &self.verbatim {
            Some(body) => Ok(body.clone()),
            None => serde_json::to_vec(&self.document(version)).map(Bytes::from),
        }
    }

    /// Handles an approval POST body. Every EventId is recorded; the request succeeds only when
    /// all of them are in the document currently served (whatever their status), and then each
    /// Scheduled one starts at the next [`Simulator::advance`]. If any id is unknown, nothing is
    /// approved.
    pub fn approve(&mut self, body: &[u8], now: DateTime<Utc>) -> Result<(), ApprovalError> {
        let requests: StartRequests =
            serde_json::from_slice(body).map_err(|e| ApprovalError::Malformed(e.to_string()))?;
        if requests.start_requests.is_empty() {
            return Err(ApprovalError::Empty);
        }
        let served = self.served_ids();
        let mut unknown = Vec::new();
        for request in &requests.start_requests {
            let known = served.contains(&request.event_id);
            if !known {
                unknown.push(request.event_id.clone());
            }
            self.approvals.push(Approval {
                event_id: request.event_id.clone(),
                at: now,
                known,
            });
        }
        if !unknown.is_empty() {
            return Err(ApprovalError::UnknownEvents(unknown));
        }
        if self.verbatim.is_none() {
            for event in &mut self.events {
                let approved = requests
                    .start_requests
                    .iter()
                    .any(|r| r.event_id == event.id);
                if approved && event.status == Status::Scheduled && event.approved_at.is_none() {
                    event.approved_at = Some(now);
                }
            }
        }
        Ok(())
    }

    /// EventIds of the document being served: the verbatim one's when set (none if it does not
    /// parse), else the simulated events'.
    fn served_ids(&self) -> Vec<String> {
        match &self.verbatim {
            Some(body) => serde_json::from_slice::<ScheduledEventsDocument>(body)
                .map(|doc| doc.events.into_iter().map(|e| e.event_id).collect())
                .unwrap_or_default(),
            None => self.events.iter().map(|e| e.id.clone()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;
    use crate::scenario::{HumanDuration, NotBeforeFormat};
    use std::time::Duration;

    fn t(seconds: u64) -> DateTime<Utc> {
        after(
            DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default(),
            Duration::from_secs(seconds),
        )
    }

    fn secs(s: u64) -> Option<HumanDuration> {
        Some(HumanDuration(Duration::from_secs(s)))
    }

    fn freeze() -> ScenarioEvent {
        ScenarioEvent {
            id: Some("F".into()),
            duration_in_seconds: 5,
            description: "paused".into(),
            notice: secs(60),
            runs_for: secs(10),
            ..ScenarioEvent::new("Freeze", &["vm_0", "vm_1"])
        }
    }

    fn scenario(events: Vec<ScenarioEvent>) -> Scenario {
        Scenario {
            name: None,
            loop_every: None,
            events,
        }
    }

    fn loaded(events: Vec<ScenarioEvent>) -> Simulator {
        let mut sim = Simulator::new(1);
        sim.load_scenario(scenario(events), t(0));
        sim
    }

    fn only(sim: &Simulator) -> ScheduledEvent {
        let events = sim.document(ApiVersion::LATEST).events;
        assert_eq!(events.len(), 1, "{events:?}");
        events[0].clone()
    }

    fn approve(sim: &mut Simulator, id: &str, now: DateTime<Utc>) -> Result<(), ApprovalError> {
        sim.approve(
            format!(r#"{{"StartRequests":[{{"EventId":"{id}"}}]}}"#).as_bytes(),
            now,
        )
    }

    #[test]
    fn a_new_simulator_serves_an_empty_document_at_incarnation_1() -> TestResult {
        let sim = Simulator::new(1);
        let json = String::from_utf8(sim.body(ApiVersion::LATEST)?.to_vec())?;
        assert_eq!(json, r#"{"DocumentIncarnation":1,"Events":[]}"#);
        Ok(())
    }

    #[test]
    fn an_event_is_scheduled_then_started_at_not_before_then_removed_after_runs_for() -> TestResult
    {
        let mut sim = loaded(vec![freeze()]);
        let event = only(&sim);
        assert_eq!(event.event_status, "Scheduled");
        assert_eq!(
            event.not_before.as_deref(),
            Some("Tue, 14 Nov 2023 22:14:20 GMT")
        );
        assert_eq!(event.duration_in_seconds, Some(5));
        assert_eq!(event.event_source.as_deref(), Some("Platform"));
        assert_eq!(event.resource_type.as_deref(), Some("VirtualMachine"));

        sim.advance(t(59));
        assert_eq!(only(&sim).event_status, "Scheduled");
        sim.advance(t(60));
        let event = only(&sim);
        assert_eq!(event.event_status, "Started");
        assert_eq!(event.not_before.as_deref(), Some(""));
        sim.advance(t(69));
        assert_eq!(only(&sim).event_status, "Started");
        sim.advance(t(70));
        assert!(sim.document(ApiVersion::LATEST).events.is_empty());
        Ok(())
    }

    #[test]
    fn the_incarnation_goes_up_by_one_per_change_and_never_otherwise() -> TestResult {
        let mut sim = Simulator::new(1);
        assert_eq!(sim.incarnation(), 1);
        assert!(!sim.advance(t(0)));
        sim.load_scenario(scenario(vec![freeze()]), t(0));
        assert_eq!(sim.incarnation(), 2);
        for s in 1..60 {
            assert!(!sim.advance(t(s)));
        }
        assert_eq!(sim.incarnation(), 2);
        assert!(sim.advance(t(60)));
        assert_eq!(sim.incarnation(), 3);
        assert!(!sim.advance(t(61)));
        assert!(sim.advance(t(75)));
        assert_eq!(sim.incarnation(), 4);
        assert!(!sim.advance(t(100)));
        assert_eq!(sim.incarnation(), 4);
        Ok(())
    }

    #[test]
    fn an_approved_event_starts_at_the_next_advance_and_runs_from_its_approval() -> TestResult {
        let mut sim = loaded(vec![freeze()]);
        sim.advance(t(10));
        approve(&mut sim, "F", t(10))?;
        assert_eq!(only(&sim).event_status, "Scheduled");
        sim.advance(t(11));
        assert_eq!(only(&sim).event_status, "Started");
        assert_eq!(only(&sim).not_before.as_deref(), Some(""));
        sim.advance(t(20));
        assert!(sim.document(ApiVersion::LATEST).events.is_empty());
        assert_eq!(
            sim.approvals(),
            [Approval {
                event_id: "F".into(),
                at: t(10),
                known: true
            }]
        );
        Ok(())
    }

    #[test]
    fn approving_a_started_event_again_is_accepted_and_changes_nothing() -> TestResult {
        let mut sim = loaded(vec![freeze()]);
        approve(&mut sim, "F", t(1))?;
        sim.advance(t(2));
        let incarnation = sim.incarnation();
        approve(&mut sim, "F", t(3))?;
        assert!(!sim.advance(t(4)));
        assert_eq!(sim.incarnation(), incarnation);
        assert_eq!(sim.approvals().len(), 2);
        Ok(())
    }

    #[test]
    fn unknown_or_malformed_approvals_are_refused_and_unknown_ids_still_recorded() -> TestResult {
        let mut sim = loaded(vec![freeze()]);
        assert_eq!(
            approve(&mut sim, "NOPE", t(1)),
            Err(ApprovalError::UnknownEvents(vec!["NOPE".into()]))
        );
        assert!(matches!(
            sim.approve(
                b"{\"StartRequests\":[{\"EventId\":\"F\"},{\"EventId\":\"X\"}]}",
                t(1)
            ),
            Err(ApprovalError::UnknownEvents(_))
        ));
        // Nothing was approved: an unknown id fails the whole request.
        sim.advance(t(2));
        assert_eq!(only(&sim).event_status, "Scheduled");
        assert!(matches!(
            sim.approve(b"{", t(1)),
            Err(ApprovalError::Malformed(_))
        ));
        assert!(matches!(
            sim.approve(b"{\"StartRequest\":[]}", t(1)),
            Err(ApprovalError::Malformed(_))
        ));
        assert_eq!(
            sim.approve(b"{\"StartRequests\":[]}", t(1)),
            Err(ApprovalError::Empty)
        );
        let recorded: Vec<_> = sim
            .approvals()
            .iter()
            .map(|a| (a.event_id.as_str(), a.known))
            .collect();
        assert_eq!(recorded, [("NOPE", false), ("F", true), ("X", false)]);
        Ok(())
    }

    #[test]
    fn cancel_after_removes_an_event_that_is_still_scheduled() -> TestResult {
        let mut sim = loaded(vec![ScenarioEvent {
            cancel_after: secs(30),
            ..freeze()
        }]);
        sim.advance(t(29));
        assert_eq!(only(&sim).event_status, "Scheduled");
        assert!(sim.advance(t(30)));
        assert!(sim.document(ApiVersion::LATEST).events.is_empty());
        Ok(())
    }

    #[test]
    fn an_approval_before_the_cancellation_wins() -> TestResult {
        let mut sim = loaded(vec![ScenarioEvent {
            cancel_after: secs(30),
            runs_for: secs(60),
            ..freeze()
        }]);
        approve(&mut sim, "F", t(5))?;
        sim.advance(t(31));
        assert_eq!(only(&sim).event_status, "Started");
        Ok(())
    }

    #[test]
    fn not_before_can_be_written_in_iso_8601() -> TestResult {
        let mut sim = loaded(vec![ScenarioEvent {
            not_before_format: NotBeforeFormat::Iso8601,
            ..freeze()
        }]);
        let event = only(&sim);
        assert_eq!(event.not_before.as_deref(), Some("2023-11-14T22:14:20Z"));
        sim.advance(t(60));
        assert_eq!(only(&sim).event_status, "Started");
        assert_eq!(only(&sim).not_before.as_deref(), Some(""));
        Ok(())
    }

    #[test]
    fn an_event_can_appear_already_started_with_an_empty_not_before() -> TestResult {
        let mut sim = loaded(vec![ScenarioEvent {
            status: InitialStatus::Started,
            notice: None,
            runs_for: secs(20),
            ..ScenarioEvent::new("Reboot", &["vm_0"])
        }]);
        let event = only(&sim);
        assert_eq!(event.event_status, "Started");
        assert_eq!(event.not_before.as_deref(), Some(""));
        sim.advance(t(20));
        assert!(sim.document(ApiVersion::LATEST).events.is_empty());
        Ok(())
    }

    #[test]
    fn old_versions_lose_newer_fields_and_event_types() -> TestResult {
        let sim = loaded(vec![
            freeze(),
            ScenarioEvent::new("Preempt", &["vm_0"]),
            ScenarioEvent::new("Terminate", &["vm_0"]),
            ScenarioEvent::new("Hibernate", &["vm_0"]),
        ]);
        let types = |v: ApiVersion| -> Vec<String> {
            sim.document(v)
                .events
                .into_iter()
                .map(|e| e.event_type)
                .collect()
        };
        assert_eq!(types(ApiVersion::V2017_08_01), ["Freeze", "Hibernate"]);
        assert_eq!(
            types(ApiVersion::V2017_11_01),
            ["Freeze", "Preempt", "Hibernate"]
        );
        assert_eq!(
            types(ApiVersion::V2020_07_01),
            ["Freeze", "Preempt", "Terminate", "Hibernate"]
        );

        let old = &sim.document(ApiVersion::V2017_08_01).events[0];
        assert_eq!(
            (&old.description, &old.event_source, old.duration_in_seconds),
            (&None, &None, None)
        );
        assert_eq!(
            old.resources.as_ref().map(|r| r.iter().collect::<Vec<_>>()),
            Some(vec!["vm_0", "vm_1"])
        );
        let v2019_04 = &sim.document(ApiVersion::V2019_04_01).events[0];
        assert_eq!(v2019_04.description.as_deref(), Some("paused"));
        assert_eq!(v2019_04.event_source, None);
        let preview = &sim.document(ApiVersion::V2017_03_01).events[0];
        assert_eq!(
            preview
                .resources
                .as_ref()
                .map(|r| r.iter().collect::<Vec<_>>()),
            Some(vec!["_vm_0", "_vm_1"])
        );
        Ok(())
    }

    #[test]
    fn generated_ids_are_fresh_for_every_loop() -> TestResult {
        let mut sim = Simulator::new(9);
        let mut event = freeze();
        event.id = None;
        sim.load_scenario(
            Scenario {
                name: Some("loop".into()),
                loop_every: Some(HumanDuration(Duration::from_secs(100))),
                events: vec![event],
            },
            t(0),
        );
        let first = only(&sim).event_id;
        sim.advance(t(100));
        let second = only(&sim).event_id;
        assert_ne!(first, second);
        assert_eq!(sim.scenario_name(), Some("loop"));
        Ok(())
    }

    #[test]
    fn a_late_advance_replays_what_happened_meanwhile() -> TestResult {
        let mut sim = loaded(vec![
            freeze(),
            ScenarioEvent {
                id: Some("R".into()),
                at: HumanDuration(Duration::from_secs(65)),
                notice: secs(100),
                ..ScenarioEvent::new("Reboot", &["vm_0"])
            },
        ]);
        sim.advance(t(80));
        let event = only(&sim);
        assert_eq!(event.event_id, "R");
        assert_eq!(
            event.not_before.as_deref(),
            Some("Tue, 14 Nov 2023 22:16:05 GMT")
        );
        assert_eq!(sim.incarnation(), 3);
        Ok(())
    }

    #[test]
    fn added_events_appear_now_and_removed_ones_leave_now() -> TestResult {
        let mut sim = Simulator::new(1);
        let id = sim.add_event(ScenarioEvent::new("Reboot", &["vm_0"]), t(5))?;
        assert_eq!(only(&sim).event_id, id);
        assert_eq!(sim.incarnation(), 2);
        assert_eq!(
            sim.add_event(
                ScenarioEvent {
                    id: Some(id.clone()),
                    ..ScenarioEvent::new("Freeze", &[])
                },
                t(6)
            ),
            Err(AddEventError::DuplicateId(id.clone()))
        );
        assert!(sim.remove_event(&id, t(7)));
        assert!(!sim.remove_event(&id, t(8)));
        assert_eq!(sim.incarnation(), 3);
        assert!(sim.document(ApiVersion::LATEST).events.is_empty());
        Ok(())
    }

    #[test]
    fn an_added_event_with_at_appears_later() -> TestResult {
        let mut sim = Simulator::new(1);
        let id = sim.add_event(
            ScenarioEvent {
                at: HumanDuration(Duration::from_secs(10)),
                ..ScenarioEvent::new("Reboot", &["vm_0"])
            },
            t(0),
        )?;
        assert!(sim.document(ApiVersion::LATEST).events.is_empty());
        sim.advance(t(10));
        assert_eq!(only(&sim).event_id, id);
        Ok(())
    }

    #[test]
    fn the_demo_changes_every_half_minute_at_most_and_shows_every_kind_of_event() -> TestResult {
        let mut sim = Simulator::new(5);
        sim.load_scenario(Scenario::demo("this_0", "other_1"), t(0));
        let mut changes = vec![0];
        let mut seen = std::collections::HashMap::<String, Vec<(u64, String)>>::new();
        for second in 0..360 {
            if sim.advance(t(second)) {
                changes.push(second);
            }
            for event in sim.document(ApiVersion::LATEST).events {
                let history = seen.entry(event.event_id.clone()).or_default();
                if history.last().map(|(_, s)| s) != Some(&event.event_status) {
                    history.push((second, event.event_status.clone()));
                }
                if event.event_type == "Preempt" && event.event_status == "Scheduled" {
                    let not_before = event.not_before.unwrap_or_default();
                    let first = history.first().map_or(second, |(s, _)| *s);
                    let expected = after(t(first), Duration::from_secs(30));
                    assert_eq!(
                        not_before,
                        expected
                            .format(crate::scenario::NOT_BEFORE_FORMAT)
                            .to_string()
                    );
                }
            }
        }
        let longest_quiet = changes.windows(2).map(|w| w[1] - w[0]).max();
        assert!(longest_quiet <= Some(30), "changes at {changes:?}");
        // Two rounds of five events, each with its own id.
        assert_eq!(seen.len(), 10);
        let cancelled = seen.values().filter(|h| h.len() == 1).count();
        assert_eq!(
            cancelled, 2,
            "one Redeploy per round never starts: {seen:?}"
        );
        Ok(())
    }

    #[test]
    fn a_verbatim_document_is_served_as_is_and_ids_in_it_can_be_approved() -> TestResult {
        let mut sim = loaded(vec![freeze()]);
        let body = Bytes::from_static(b"{ \"DocumentIncarnation\": 7, \"Events\": [{\"EventId\":\"V\",\"EventStatus\":\"Scheduled\",\"EventType\":\"Reboot\"}] }");
        sim.set_document(body.clone());
        assert_eq!(sim.body(ApiVersion::V2017_08_01)?, body);
        assert!(approve(&mut sim, "F", t(1)).is_err());
        approve(&mut sim, "V", t(1))?;
        sim.clear_document();
        assert_eq!(only(&sim).event_id, "F");
        Ok(())
    }
}
