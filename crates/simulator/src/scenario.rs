//! Scenarios: what the simulator plays, read from YAML or JSON files, and the built-in demo.
//!
//! A scenario is a list of events, each placed on a timeline relative to the moment the scenario
//! is loaded (`at`, `notice`, `runs_for`, `cancel_after`), optionally replayed every `loop`. This
//! file owns the format, its defaults and its validation; playing it out over time is
//! [`super::timeline`]'s job. Unknown fields are errors, so a typo never silently changes a test.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The VM that the shipped `scenarios/demo.yaml` treats as "this VM": the simulator's default
/// `--vm.name`.
pub const DEMO_VM: &str = "demo-vmss_0";
/// The other VM of the demo's scale set, which shares one event with [`DEMO_VM`] and has one of
/// its own.
pub const DEMO_OTHER_VM: &str = "demo-vmss_1";

/// Longest duration a scenario may use: far beyond any real notice (Azure's longest is about 7
/// days), and small enough that adding it to any date is safe.
const MAX_DURATION: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// How long an event stays Started, beyond its `DurationInSeconds`, when `runs_for` is not given.
pub const DEFAULT_RUN_SLACK: Duration = Duration::from_secs(5);

/// Shortest loop period, part of the format. Scenario files are validated against it; scenarios
/// built in Rust are held to it by [`super::timeline`], so a tiny period can never make one call
/// replay millions of rounds.
pub const MIN_LOOP: Duration = Duration::from_secs(1);

/// A whole scenario file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Free text shown in `/control/state` and logs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Replay the whole scenario from the start every period, with fresh event ids.
    #[serde(rename = "loop", default, skip_serializing_if = "Option::is_none")]
    pub loop_every: Option<HumanDuration>,
    pub events: Vec<ScenarioEvent>,
}

/// One event of a scenario (also the body of `POST /control/events`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioEvent {
    /// `EventId`; absent means a fresh upper-case GUID at every appearance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `EventType`, sent as written: unknown types are allowed on purpose.
    #[serde(rename = "type")]
    pub event_type: String,
    /// `Started` means the event appears already Started (hardware failure), with no notice;
    /// `Advisory` (a Spot rebalance recommendation) that it stays `Advisory`, with an empty
    /// `NotBefore`, for `runs_for`, and that approving it changes nothing.
    #[serde(default)]
    pub status: InitialStatus,
    /// `Resources`: names of the VMs this event affects.
    #[serde(default)]
    pub resources: Vec<String>,
    /// `EventSource`.
    #[serde(default = "default_source")]
    pub source: String,
    /// `Description`.
    #[serde(default)]
    pub description: String,
    /// `DurationInSeconds`: `-1` unknown, `0` no interruption.
    #[serde(default = "default_duration")]
    pub duration_in_seconds: i64,
    /// `ResourceType`.
    #[serde(default = "default_resource_type")]
    pub resource_type: String,
    /// When the event appears, after the scenario is loaded (or after each loop start).
    #[serde(default)]
    pub at: HumanDuration,
    /// Time from appearance to `NotBefore`; defaults to Azure's minimum notice for the type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<HumanDuration>,
    /// How long the event stays Started before it is removed (completed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_for: Option<HumanDuration>,
    /// Remove the event this long after it appeared, if it is still Scheduled (Azure cancelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_after: Option<HumanDuration>,
    /// How `NotBefore` is written.
    #[serde(default, skip_serializing_if = "NotBeforeFormat::is_rfc1123")]
    pub not_before_format: NotBeforeFormat,
}

/// `NotBefore` as Azure's documentation writes it (RFC 1123, always GMT); a scenario event can ask
/// for ISO 8601 instead ([`NotBeforeFormat`]).
pub const NOT_BEFORE_FORMAT: &str = "%a, %d %b %Y %H:%M:%S GMT";

/// How an event's `NotBefore` is written: both forms are seen from Azure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum NotBeforeFormat {
    /// `Mon, 19 Sep 2016 18:29:47 GMT`, as the Scheduled Events documentation shows it.
    #[default]
    #[serde(rename = "rfc1123")]
    Rfc1123,
    /// `2026-04-29T18:00:00Z`, as Microsoft's 2026 maintenance page shows it (and older services
    /// wrote it).
    #[serde(rename = "iso8601")]
    Iso8601,
}

impl NotBeforeFormat {
    fn is_rfc1123(&self) -> bool {
        *self == NotBeforeFormat::Rfc1123
    }

    /// `at` written in this form, always UTC.
    pub fn write(self, at: DateTime<Utc>) -> String {
        match self {
            NotBeforeFormat::Rfc1123 => at.format(NOT_BEFORE_FORMAT),
            NotBeforeFormat::Iso8601 => at.format("%Y-%m-%dT%H:%M:%SZ"),
        }
        .to_string()
    }
}

/// The status an event appears with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum InitialStatus {
    #[default]
    #[serde(alias = "scheduled")]
    Scheduled,
    #[serde(alias = "started")]
    Started,
    #[serde(alias = "advisory")]
    Advisory,
}

fn default_source() -> String {
    "Platform".to_owned()
}

fn default_duration() -> i64 {
    -1
}

fn default_resource_type() -> String {
    "VirtualMachine".to_owned()
}

/// A duration written the humantime way (`30s`, `2m`, `1h 30m`), or a plain number of seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HumanDuration(pub Duration);

impl From<Duration> for HumanDuration {
    fn from(duration: Duration) -> Self {
        Self(duration)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        humantime::format_duration(self.0).fmt(f)
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl serde::de::Visitor<'_> for Visitor {
            type Value = HumanDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"30s\" or \"2m\", or a number of seconds")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<HumanDuration, E> {
                humantime::parse_duration(text.trim())
                    .map(HumanDuration)
                    .map_err(|e| E::custom(format!("invalid duration {text:?}: {e}")))
            }

            fn visit_u64<E: serde::de::Error>(self, seconds: u64) -> Result<HumanDuration, E> {
                Ok(HumanDuration(Duration::from_secs(seconds)))
            }

            fn visit_i64<E: serde::de::Error>(self, seconds: i64) -> Result<HumanDuration, E> {
                u64::try_from(seconds)
                    .map(|s| HumanDuration(Duration::from_secs(s)))
                    .map_err(|_| E::custom(format!("a duration cannot be negative: {seconds}")))
            }
        }

        deserializer.deserialize_any(Visitor)
    }
}

/// Why a scenario could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid JSON scenario: {0}")]
    Json(#[from] serde_json::Error),
    #[error("invalid YAML scenario: {0}")]
    Yaml(#[from] serde_norway::Error),
    #[error("invalid scenario: {0}")]
    Invalid(String),
    #[error("{path}: {source}")]
    InFile {
        path: PathBuf,
        source: Box<ScenarioError>,
    },
}

impl Scenario {
    /// Reads and validates a scenario file (JSON or YAML, whatever its extension).
    pub fn from_file(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|e| ScenarioError::InFile {
            path: path.to_owned(),
            source: Box::new(e),
        })
    }

    /// Parses and validates a scenario, JSON or YAML (see [`from_json_or_yaml`]).
    pub fn parse(text: &str) -> Result<Self, ScenarioError> {
        let scenario: Scenario = from_json_or_yaml(text)?;
        scenario.validate()?;
        Ok(scenario)
    }

    /// Checks what serde cannot: durations that make sense together.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if let Some(period) = self.loop_every {
            if period.0 < MIN_LOOP {
                return Err(ScenarioError::Invalid(format!(
                    "`loop` ({period}) must be at least {}",
                    HumanDuration(MIN_LOOP)
                )));
            }
            check_duration("loop", period)?;
        }
        let mut ids = std::collections::HashSet::new();
        for (index, event) in self.events.iter().enumerate() {
            let fail = |message: String| {
                ScenarioError::Invalid(format!("event {index} ({}): {message}", event.event_type))
            };
            event.validate().map_err(fail)?;
            if let Some(id) = &event.id
                && !ids.insert(id.as_str())
            {
                return Err(fail(format!("id {id:?} is used by another event")));
            }
            if let Some(period) = self.loop_every
                && event.at >= period
            {
                return Err(fail(format!(
                    "at ({}) must come before the end of the loop ({period})",
                    event.at
                )));
            }
        }
        Ok(())
    }

    /// The demo: a three-minute loop in which something changes every 5 to 30 seconds. Offsets
    /// from the loop start:
    ///
    /// | s | change |
    /// |---|---|
    /// | 0 | Freeze on both VMs appears (5 s, NotBefore in 60 s) |
    /// | 15 | Redeploy on this VM appears (NotBefore in 10 min) |
    /// | 30 | Reboot on the other VM only appears |
    /// | 60 | the Freeze starts |
    /// | 65 | the Redeploy is cancelled |
    /// | 70 | the Freeze completes |
    /// | 80 | the other VM's Reboot starts |
    /// | 90 | a user-initiated Reboot on this VM appears |
    /// | 100 | the other VM's Reboot completes |
    /// | 120 | a Spot Preempt on this VM appears with 30 s notice |
    /// | 130 | the user Reboot starts |
    /// | 145 | the user Reboot completes |
    /// | 150 | the Preempt starts |
    /// | 170 | the Preempt completes |
    pub fn demo(this_vm: &str, other_vm: &str) -> Self {
        let secs = |s: u64| HumanDuration(Duration::from_secs(s));
        Scenario {
            name: Some("demo".to_owned()),
            loop_every: Some(secs(180)),
            events: vec![
                ScenarioEvent {
                    description: "Virtual machine is being paused because of a \
                                  memory-preserving Live Migration operation."
                        .to_owned(),
                    duration_in_seconds: 5,
                    at: secs(0),
                    notice: Some(secs(60)),
                    runs_for: Some(secs(10)),
                    ..ScenarioEvent::new("Freeze", &[this_vm, other_vm])
                },
                ScenarioEvent {
                    description: "Virtual machine is going to be redeployed to another host."
                        .to_owned(),
                    at: secs(15),
                    notice: Some(secs(600)),
                    cancel_after: Some(secs(50)),
                    ..ScenarioEvent::new("Redeploy", &[this_vm])
                },
                ScenarioEvent {
                    description: "Host server is undergoing maintenance.".to_owned(),
                    at: secs(30),
                    notice: Some(secs(50)),
                    runs_for: Some(secs(20)),
                    ..ScenarioEvent::new("Reboot", &[other_vm])
                },
                ScenarioEvent {
                    source: "User".to_owned(),
                    description: "Virtual machine is going to be restarted as requested by \
                                  authorized user."
                        .to_owned(),
                    at: secs(90),
                    notice: Some(secs(40)),
                    runs_for: Some(secs(15)),
                    ..ScenarioEvent::new("Reboot", &[this_vm])
                },
                ScenarioEvent {
                    at: secs(120),
                    notice: Some(secs(30)),
                    runs_for: Some(secs(20)),
                    ..ScenarioEvent::new("Preempt", &[this_vm])
                },
            ],
        }
    }
}

/// Reads text that starts with `{` as JSON (for its clearer error messages) and anything else as
/// YAML: scenario files and the control API's bodies alike.
pub(super) fn from_json_or_yaml<T: DeserializeOwned>(text: &str) -> Result<T, ScenarioError> {
    let text = text.trim_start_matches('\u{feff}');
    if text.trim_start().starts_with('{') {
        Ok(serde_json::from_str(text)?)
    } else {
        Ok(serde_norway::from_str(text)?)
    }
}

fn check_duration(field: &str, duration: HumanDuration) -> Result<(), ScenarioError> {
    if duration.0 > MAX_DURATION {
        Err(ScenarioError::Invalid(format!(
            "`{field}` ({duration}) is longer than the limit of 10 years"
        )))
    } else {
        Ok(())
    }
}

impl ScenarioEvent {
    /// An event of this type for these VMs, with every other field at its default: appears at
    /// once, Scheduled, with Azure's minimum notice for the type.
    pub fn new(event_type: &str, resources: &[&str]) -> Self {
        ScenarioEvent {
            id: None,
            event_type: event_type.to_owned(),
            status: InitialStatus::Scheduled,
            resources: resources.iter().map(|r| (*r).to_owned()).collect(),
            source: default_source(),
            description: String::new(),
            duration_in_seconds: default_duration(),
            resource_type: default_resource_type(),
            at: HumanDuration::default(),
            notice: None,
            runs_for: None,
            cancel_after: None,
            not_before_format: NotBeforeFormat::default(),
        }
    }

    /// Time from appearance to `NotBefore`: as given, else Azure's documented minimum notice for
    /// the type (Freeze and Reboot 15 min, Redeploy 10 min, Preempt 30 s, Terminate 5 min, any
    /// other type 15 min).
    pub fn notice(&self) -> Duration {
        if let Some(notice) = self.notice {
            return notice.0;
        }
        let minutes = |m: u64| Duration::from_secs(m * 60);
        let t = self.event_type.as_str();
        if t.eq_ignore_ascii_case("Preempt") {
            Duration::from_secs(30)
        } else if t.eq_ignore_ascii_case("Redeploy") {
            minutes(10)
        } else if t.eq_ignore_ascii_case("Terminate") {
            minutes(5)
        } else {
            minutes(15)
        }
    }

    /// How long the event stays Started: as given, else `max(DurationInSeconds, 0)` seconds plus
    /// [`DEFAULT_RUN_SLACK`].
    pub fn runs_for(&self) -> Duration {
        match self.runs_for {
            Some(runs_for) => runs_for.0,
            None => {
                let impact = u64::try_from(self.duration_in_seconds.max(0)).unwrap_or(0);
                Duration::from_secs(impact.min(MAX_DURATION.as_secs())) + DEFAULT_RUN_SLACK
            }
        }
    }

    /// Checks one event on its own; the message says which field is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if self.event_type.trim().is_empty() {
            return Err("`type` must not be empty".into());
        }
        if self.id.as_deref().is_some_and(|id| id.trim().is_empty()) {
            return Err("`id` must not be empty when given".into());
        }
        for (field, value) in [
            ("at", Some(self.at)),
            ("notice", self.notice),
            ("runs_for", self.runs_for),
            ("cancel_after", self.cancel_after),
        ] {
            if let Some(value) = value {
                check_duration(field, value).map_err(|e| e.to_string())?;
            }
        }
        if matches!(
            self.status,
            InitialStatus::Started | InitialStatus::Advisory
        ) {
            let status = if self.status == InitialStatus::Started {
                "Started"
            } else {
                "Advisory"
            };
            if self.notice.is_some() {
                return Err(format!(
                    "`notice` does not apply to an event that appears {status}"
                ));
            }
            if self.cancel_after.is_some() {
                return Err(format!(
                    "`cancel_after` does not apply to an event that appears {status}"
                ));
            }
        }
        if let Some(cancel_after) = self.cancel_after
            && cancel_after.0 >= self.notice()
        {
            return Err(format!(
                "cancel_after ({cancel_after}) must be shorter than notice ({}), \
                 or the event starts before it can be cancelled",
                HumanDuration(self.notice())
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn rejected(text: &str) -> ScenarioError {
        match Scenario::parse(text) {
            Ok(scenario) => panic!("accepted {scenario:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn a_yaml_scenario_parses_with_defaults_filled_in() -> TestResult {
        let scenario = Scenario::parse(
            "name: one\nloop: 2m\nevents:\n  - type: Freeze\n    resources: [vm_0]\n    at: 10s\n",
        )?;
        assert_eq!(scenario.name.as_deref(), Some("one"));
        assert_eq!(
            scenario.loop_every,
            Some(HumanDuration(Duration::from_secs(120)))
        );
        let event = &scenario.events[0];
        assert_eq!(event.event_type, "Freeze");
        assert_eq!(event.status, InitialStatus::Scheduled);
        assert_eq!(event.source, "Platform");
        assert_eq!(event.resource_type, "VirtualMachine");
        assert_eq!(event.duration_in_seconds, -1);
        assert_eq!(event.description, "");
        assert_eq!(event.at.0, Duration::from_secs(10));
        assert_eq!(event.notice(), Duration::from_secs(15 * 60));
        assert_eq!(event.runs_for(), DEFAULT_RUN_SLACK);
        Ok(())
    }

    #[test]
    fn a_json_scenario_parses() -> TestResult {
        let scenario = Scenario::parse(
            r#"{"events":[{"type":"Preempt","resources":["spot_1"],"duration_in_seconds":-1,
                "status":"Scheduled","notice":"30s","runs_for":20}]}"#,
        )?;
        let event = &scenario.events[0];
        assert_eq!(event.notice(), Duration::from_secs(30));
        assert_eq!(event.runs_for(), Duration::from_secs(20));
        Ok(())
    }

    #[test]
    fn unknown_fields_are_rejected_with_the_field_name() -> TestResult {
        let yaml = rejected("events:\n  - type: Freeze\n    notcie: 30s\n");
        assert!(yaml.to_string().contains("notcie"), "{yaml}");
        let json = rejected(r#"{"events":[],"lop":"3m"}"#);
        assert!(json.to_string().contains("lop"), "{json}");
        Ok(())
    }

    #[test]
    fn not_before_format_is_rfc1123_unless_iso8601_is_asked_for() -> TestResult {
        let scenario = Scenario::parse(
            "events:\n  - type: Freeze\n  - type: Reboot\n    not_before_format: iso8601\n",
        )?;
        let at = chrono::DateTime::parse_from_rfc3339("2026-04-29T18:00:00Z")?.to_utc();
        let written: Vec<String> = scenario
            .events
            .iter()
            .map(|e| e.not_before_format.write(at))
            .collect();
        assert_eq!(
            written,
            ["Wed, 29 Apr 2026 18:00:00 GMT", "2026-04-29T18:00:00Z"]
        );
        let err = rejected("events:\n  - type: Freeze\n    not_before_format: iso\n");
        assert!(err.to_string().contains("iso8601"), "{err}");
        Ok(())
    }

    #[test]
    fn bad_durations_are_rejected() -> TestResult {
        let err = rejected("events:\n  - type: Freeze\n    at: soon\n");
        assert!(err.to_string().contains("soon"), "{err}");
        assert!(Scenario::parse("events:\n  - type: Freeze\n    at: -3\n").is_err());
        assert!(Scenario::parse("loop: 0s\nevents: []\n").is_err());
        assert!(Scenario::parse("events:\n  - type: Freeze\n    at: 100000000000s\n").is_err());
        Ok(())
    }

    #[test]
    fn cancel_after_must_come_before_not_before() -> TestResult {
        let err = rejected("events:\n  - type: Redeploy\n    notice: 1m\n    cancel_after: 2m\n");
        assert!(err.to_string().contains("cancel_after"), "{err}");
        assert!(
            Scenario::parse("events:\n  - type: Redeploy\n    notice: 2m\n    cancel_after: 1m\n")
                .is_ok()
        );
        Ok(())
    }

    #[test]
    fn started_events_take_no_notice() -> TestResult {
        let err = rejected("events:\n  - type: Reboot\n    status: Started\n    notice: 1m\n");
        assert!(err.to_string().contains("notice"), "{err}");
        Ok(())
    }

    #[test]
    fn events_must_appear_within_the_loop() -> TestResult {
        let err = rejected("loop: 1m\nevents:\n  - type: Freeze\n    at: 1m\n");
        assert!(err.to_string().contains("loop"), "{err}");
        Ok(())
    }

    #[test]
    fn duplicate_ids_are_rejected() -> TestResult {
        let err = rejected("events:\n  - type: Freeze\n    id: A\n  - type: Reboot\n    id: A\n");
        assert!(err.to_string().contains("\"A\""), "{err}");
        Ok(())
    }

    #[test]
    fn default_notice_follows_azures_minimum_per_type() -> TestResult {
        let notice = |t: &str| ScenarioEvent::new(t, &[]).notice().as_secs();
        assert_eq!(notice("Freeze"), 900);
        assert_eq!(notice("Reboot"), 900);
        assert_eq!(notice("Redeploy"), 600);
        assert_eq!(notice("Preempt"), 30);
        assert_eq!(notice("Terminate"), 300);
        assert_eq!(notice("Hibernate"), 900);
        Ok(())
    }

    #[test]
    fn the_demo_is_valid_and_loops_within_three_minutes() -> TestResult {
        let demo = Scenario::demo("a_0", "a_1");
        demo.validate()?;
        assert_eq!(
            demo.loop_every,
            Some(HumanDuration(Duration::from_secs(180)))
        );
        let round_trip = serde_json::to_string(&demo)?;
        assert_eq!(Scenario::parse(&round_trip)?, demo);
        Ok(())
    }
}
