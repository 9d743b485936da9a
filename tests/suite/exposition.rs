//! The exposition is a contract: a golden file shows it whole, and docs/metrics.md must list
//! exactly the metrics the registry has, with the same types.

use std::collections::BTreeMap;
use std::time::Duration;

use azure_scheduled_events_core::approval::Mode;
use azure_scheduled_events_core::event::{Affects, Document, Event};
use azure_scheduled_events_core::tracker::Tracker;
use azure_scheduled_events_exporter::NotifyMetrics;
use azure_scheduled_events_exporter::StateUp;
use azure_scheduled_events_exporter::azure::imds::{ImdsError, Operation};
use azure_scheduled_events_exporter::azure::wire::Compute;
use azure_scheduled_events_exporter::output::metrics::{EventSeries, Families, Metrics};
use azure_scheduled_events_exporter::output::telemetry::{ExportCounters, Signal};
use chrono::{DateTime, TimeZone, Utc};

use crate::common::TestResult;

/// Ten minutes before the Freeze of the docs example (`Mon, 11 Apr 2022 22:26:58 GMT`).
fn scrape_time() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2022, 4, 11, 22, 16, 58)
        .single()
        .unwrap_or_default()
}

const DOCUMENT: &str = r#"{"DocumentIncarnation": 2, "Events": [
  {"EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123", "EventStatus": "Scheduled", "EventType": "Freeze",
   "ResourceType": "VirtualMachine", "Resources": ["WestNO_0", "WestNO_1"], "NotBefore": "Mon, 11 Apr 2022 22:26:58 GMT",
   "Description": "Virtual machine is being paused because of a memory-preserving Live Migration operation.",
   "EventSource": "Platform", "DurationInSeconds": 5},
  {"EventId": "28512AF7-C957-4500-9BC4-842D6FB531E4", "EventStatus": "Scheduled", "EventType": "Reboot",
   "ResourceType": "VirtualMachine", "Resources": ["WestNO_7"], "NotBefore": "Mon, 11 Apr 2022 23:00:00 GMT",
   "Description": "", "EventSource": "Platform", "DurationInSeconds": -1},
  {"EventId": "6E4C1F1A-0000-4000-8000-00000000ABCD", "EventStatus": "Started", "EventType": "Hibernate",
   "ResourceType": "VirtualMachine", "Resources": ["westno_0"], "NotBefore": "",
   "Description": "", "EventSource": "User", "DurationInSeconds": 0},
  {"EventId": "9A0B3C1D-5E6F-4A7B-8C9D-0E1F2A3B4C5D", "EventStatus": "Advisory",
   "EventType": "SpotRebalanceRecommendation", "ResourceType": "VirtualMachine", "Resources": ["WestNO_0"],
   "NotBefore": "", "Description": "", "EventSource": "Platform", "DurationInSeconds": -1}
]}"#;

/// The default families, without the `process_*` ones whose values change from run to run.
const DEFAULT: Families = Families {
    process: false,
    ..Families::DEFAULT
};

/// Approval on with a hook configured; traces off.
const APPROVAL: Families = Families {
    approval: true,
    hooks: true,
    ..DEFAULT
};

fn populated() -> Result<Metrics, Box<dyn std::error::Error>> {
    populated_with(DEFAULT)
}

fn populated_with(families: Families) -> Result<Metrics, Box<dyn std::error::Error>> {
    let metrics = Metrics::with_clock("2020-07-01", EventSeries::ThisVm, families, scrape_time)?;
    // The state output's family, registered by it in the same registry.
    StateUp::register(metrics.registry())?;
    metrics.set_approval_mode(if families.approval {
        Mode::On
    } else {
        Mode::Off
    });
    let compute = Compute {
        name: "WestNO_0".into(),
        vm_id: "02aab8a4-74ef-476e-8182-f6d2ba4166a6".into(),
        location: "norwayeast".into(),
        zone: "1".into(),
        vm_scale_set_name: "WestNO".into(),
        resource_group_name: "rg-west".into(),
        subscription_id: "8d10da13-8125-4ba9-a717-bf7490507b3d".into(),
        platform_fault_domain: "0".into(),
        platform_update_domain: "3".into(),
        vm_size: "Standard_D4s_v5".into(),
        priority: "Spot".into(),
    };
    metrics.set_vm(Some("WestNO_0"), &compute);
    metrics.record_request(Operation::Instance, Duration::from_millis(4), None);
    metrics.record_request(Operation::Events, Duration::from_millis(3), None);
    metrics.record_request(
        Operation::Events,
        Duration::from_secs(2),
        Some(&ImdsError::Timeout(Duration::from_secs(2))),
    );
    metrics.record_request(Operation::Events, Duration::from_millis(2), None);

    let mut tracker = Tracker::new();
    let observation = tracker.observe(Document::from_json(DOCUMENT.as_bytes())?, scrape_time());
    for transition in &observation.transitions {
        metrics.record_transition(transition);
    }
    metrics.set_events(2, this_vm(tracker.events().iter().map(|t| t.event.clone())));
    metrics.record_poll(scrape_time(), true);
    Ok(metrics)
}

/// As [`populated`], with the families registered only when notification receivers are
/// configured, so the docs check sees every family the agent can export.
/// Every family the agent can register: the optional ones and the notifications'.
fn populated_with_notifications() -> Result<Metrics, Box<dyn std::error::Error>> {
    let metrics = populated_with(Families::ALL)?;
    NotifyMetrics::register(metrics.registry(), &["ops-slack", "pagerduty"])?;
    ExportCounters::register(metrics.registry(), Signal::Traces)?;
    ExportCounters::register(metrics.registry(), Signal::Logs)?;
    Ok(metrics)
}

/// The exposition with the one value that depends on the checkout (the git revision) fixed.
fn normalized(metrics: &Metrics) -> Result<String, prometheus::Error> {
    let text = metrics.encode()?;
    Ok(text
        .lines()
        .map(|line| match line.find("revision=\"") {
            Some(start) => {
                let value_start = start + "revision=\"".len();
                let end = line[value_start..]
                    .find('"')
                    .map_or(line.len(), |e| value_start + e);
                format!("{}REVISION{}\n", &line[..value_start], &line[end..])
            }
            None => format!("{line}\n"),
        })
        .collect())
}

fn assert_golden(families: Families, file: &str) -> TestResult {
    let actual = normalized(&populated_with(families)?)?;
    let path = format!("{}/tests/golden/{file}", env!("CARGO_MANIFEST_DIR"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &actual)?;
    }
    let expected = std::fs::read_to_string(&path)?;
    assert!(
        actual == expected,
        "exposition differs from {path} (rerun with UPDATE_GOLDEN=1 and review the diff):\n{actual}"
    );
    Ok(())
}

#[test]
fn exposition_matches_the_golden_file() -> TestResult {
    assert_golden(DEFAULT, "metrics.prom")
}

#[test]
fn exposition_with_approval_and_a_hook_matches_its_golden_file() -> TestResult {
    assert_golden(APPROVAL, "metrics-approval.prom")
}

#[test]
fn families_of_features_that_are_off_are_not_exported() -> TestResult {
    let text = populated()?.encode()?;
    for absent in [
        "azure_scheduled_events_approvals_total",
        "azure_scheduled_events_approval_failures_total",
        "azure_scheduled_events_approval_decisions_total",
        "azure_scheduled_events_hook_runs_total",
        "azure_scheduled_events_otlp_spans_",
        r#"operation="approve""#,
        "process_",
        // What a fleet would pay for without reading: a histogram of the one instance read at
        // start, failure reasons that never happened, other VMs' counts with none of their events.
        r#"azure_scheduled_events_imds_request_duration_seconds_bucket{operation="instance""#,
        r#"reason="connect""#,
        r#"affects_this_vm="false",event_status="Started",event_type="Terminate""#,
    ] {
        assert!(!text.contains(absent), "{absent} is exported:\n{text}");
    }
    for present in [
        r#"azure_scheduled_events_approval_mode{mode="off"} 1"#,
        r#"azure_scheduled_events_reboots_total{clean="false",expected="false"} 0"#,
        r#"azure_scheduled_events_transitions_total{event_type="Terminate",transition="cancelled"} 0"#,
        r#"azure_scheduled_events_pending{affects_this_vm="true",event_status="Started",event_type="Terminate"} 0"#,
        r#"azure_scheduled_events_imds_requests_total{operation="instance"}"#,
        r#"azure_scheduled_events_imds_request_duration_seconds_bucket{operation="events",le="2.5"} 3"#,
    ] {
        assert!(text.contains(present), "{present} is missing:\n{text}");
    }
    let approval = populated_with(APPROVAL)?.encode()?;
    for present in [
        r#"azure_scheduled_events_approval_failures_total{event_type="Reboot",reason="hook_failed"} 0"#,
        r#"azure_scheduled_events_approvals_total{event_type="Preempt"} 0"#,
        r#"azure_scheduled_events_hook_runs_total{hook="recover",result="ok"} 0"#,
        r#"azure_scheduled_events_imds_requests_total{operation="approve"} 0"#,
    ] {
        assert!(
            approval.contains(present),
            "{present} is missing:\n{approval}"
        );
    }
    Ok(())
}

#[test]
fn per_event_series_describe_events_of_this_vm_only() -> TestResult {
    let text = populated()?.encode()?;
    let freeze = r#"event_id="C7061BAC-AFDC-4513-B24B-AA5F13A16123""#;
    assert!(
        text.contains(&format!(
            "azure_scheduled_events_event_seconds_until_not_before{{{freeze}}} 600\n"
        )),
        "{text}"
    );
    assert!(text.contains(&format!(
        "azure_scheduled_events_event_not_before_timestamp_seconds{{{freeze}}} 1649716018\n"
    )));
    assert!(text.contains(&format!(
        "azure_scheduled_events_event_duration_seconds{{{freeze}}} 5\n"
    )));
    assert!(text.contains(&format!(
        "azure_scheduled_events_event_resources{{{freeze}}} 2\n"
    )));
    assert!(
        !text.contains("28512AF7-C957-4500-9BC4-842D6FB531E4"),
        "an event for WestNO_7 only is not exported per event"
    );
    assert!(text.contains(r#"azure_scheduled_events_pending{affects_this_vm="false",event_status="Scheduled",event_type="Reboot"} 1"#));
    assert!(text.contains(r#"azure_scheduled_events_pending{affects_this_vm="true",event_status="Started",event_type="Hibernate"} 1"#));
    assert!(text.contains(r#"azure_scheduled_events_advisories{affects_this_vm="true",event_status="Advisory",event_type="SpotRebalanceRecommendation"} 1"#));
    assert!(
        !text.contains(
            r#"azure_scheduled_events_pending{affects_this_vm="true",event_status="Advisory""#
        ),
        "an advisory is never a pending impact"
    );
    assert!(
        !text.contains(
            r#"azure_scheduled_events_event_seconds_until_not_before{event_id="6E4C1F1A"#
        ),
        "a Started event has an empty NotBefore, so no time series"
    );
    Ok(())
}

#[test]
fn all_events_flag_exports_every_event() -> TestResult {
    let metrics = Metrics::with_clock("2020-07-01", EventSeries::All, DEFAULT, scrape_time)?;
    let document = Document::from_json(DOCUMENT.as_bytes())?;
    metrics.set_events(2, this_vm(document.events));
    let text = metrics.encode()?;
    assert!(text.contains(r#"azure_scheduled_events_event_info{affects_this_vm="false",cause="other",event_id="28512AF7-C957-4500-9BC4-842D6FB531E4""#));
    Ok(())
}

/// `events` as the event views of VM `WestNO_0` say them, first sight unknown.
fn this_vm(
    events: impl IntoIterator<Item = Event>,
) -> Vec<(Event, Affects, Option<DateTime<Utc>>)> {
    events
        .into_iter()
        .map(|event| {
            let affects = event.affects(Some("WestNO_0"));
            (event, affects, None)
        })
        .collect()
}

/// `name -> type` from the tables of docs/metrics.md.
fn documented() -> Result<BTreeMap<String, String>, std::io::Error> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))?;
    Ok(text
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            (name.starts_with("azure_scheduled_events_") || name.starts_with("process_")).then(
                || {
                    (
                        name.to_owned(),
                        cells.get(2).copied().unwrap_or("").to_owned(),
                    )
                },
            )
        })
        .collect())
}

#[test]
fn docs_metrics_md_lists_exactly_the_registered_metrics() -> TestResult {
    let metrics = populated_with_notifications()?;
    let registered: Vec<String> = metrics
        .families()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let docs = documented()?;
    let documented: Vec<String> = docs.keys().cloned().collect();
    assert_eq!(
        documented, registered,
        "docs/metrics.md and the registry disagree"
    );

    for line in metrics.encode()?.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or("malformed TYPE line")?;
            assert_eq!(
                docs.get(name).map(String::as_str),
                Some(kind),
                "type of {name} in docs/metrics.md"
            );
        }
    }
    Ok(())
}

#[test]
fn every_metric_has_help_text() -> TestResult {
    for (name, help) in populated_with_notifications()?.families() {
        assert!(help.len() > 20, "{name} has no real HELP: {help:?}");
    }
    Ok(())
}
