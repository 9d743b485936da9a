//! The notice each event gave (`azure_scheduled_events_event_notice_seconds`), as a Prometheus
//! that scrapes the agent reads it: absent at idle, one observation per event in the bucket its
//! notice belongs to, none again after a restart.

use crate::common;

use azure_scheduled_events_simulator::{Fault, FaultTarget};
use chrono::{DateTime, Duration, Utc};
use common::{Agent, Exposition, Imds, THIS_VM, TempDir, TestResult};

const NOTICE: &str = "azure_scheduled_events_event_notice_seconds";
const REBOOT: &str = "A0000000-0000-4000-8000-0000000000A1";
const FREEZE: &str = "A0000000-0000-4000-8000-0000000000A2";
const PREEMPT: &str = "A0000000-0000-4000-8000-0000000000A3";
const NEIGHBOURS: &str = "A0000000-0000-4000-8000-0000000000A4";

/// One Scheduled event of `event_type` naming `vm`, with `not_before` as Azure writes it.
fn event(id: &str, event_type: &str, vm: &str, not_before: DateTime<Utc>) -> serde_json::Value {
    serde_json::json!({
        "EventId": id,
        "EventType": event_type,
        "ResourceType": "VirtualMachine",
        "Resources": [vm],
        "EventStatus": "Scheduled",
        "NotBefore": not_before.format("%a, %d %b %Y %H:%M:%S GMT").to_string(),
        "Description": "",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    })
}

fn document(incarnation: u64, events: &[&serde_json::Value]) -> bytes::Bytes {
    serde_json::json!({ "DocumentIncarnation": incarnation, "Events": events })
        .to_string()
        .into()
}

/// The value of the notice histogram's `series` (`_bucket`, `_count`) for a Regular VM's
/// `event_type`, with `le` for a bucket.
fn notice(m: &Exposition, series: &str, event_type: &str, le: Option<&str>) -> Option<f64> {
    // The encoder writes `le` last.
    let le = le.map_or(String::new(), |le| format!(",le=\"{le}\""));
    m.value(&format!(
        "{NOTICE}_{series}{{event_type=\"{event_type}\",priority=\"Regular\"{le}}}"
    ))
}

/// Every series of the notice histogram in `m`.
fn notice_lines(m: &Exposition) -> Vec<&str> {
    m.0.lines().filter(|l| l.starts_with(NOTICE)).collect()
}

/// Asserts that `event_type` was observed once, in the bucket whose upper bound is `le`: the
/// bucket below holds nothing, `le` and every one above hold it.
fn observed_once_in(m: &Exposition, event_type: &str, below: Option<&str>, le: &str) {
    assert_eq!(
        notice(m, "count", event_type, None),
        Some(1.0),
        "{event_type} observed once:\n{}",
        m.0
    );
    if let Some(below) = below {
        assert_eq!(
            notice(m, "bucket", event_type, Some(below)),
            Some(0.0),
            "{event_type}: nothing at or under {below} s"
        );
    }
    for bound in ["0", "15", "45", "180", "420", "720", "1080", "+Inf"]
        .iter()
        .skip_while(|b| **b != le)
    {
        assert_eq!(
            notice(m, "bucket", event_type, Some(bound)),
            Some(1.0),
            "{event_type}: in every bucket from {le} s up, {bound} too"
        );
    }
}

#[tokio::test]
async fn each_event_of_this_vm_is_observed_once_in_the_bucket_of_its_notice_and_never_again_after_a_restart()
-> TestResult {
    let imds = Imds::start().await?;
    let dir = TempDir::new("notice")?;
    let state_flag = format!("--state.file={}", dir.path("state.json").display());
    let agent = Agent::start(&imds, &[&state_flag]).await?;
    let idle = agent
        .wait_for("instance metadata read and a document", |m| {
            m.up() == Some(1.0) && m.has("azure_scheduled_events_vm_info{")
        })
        .await?;
    assert!(
        notice_lines(&idle).is_empty(),
        "no notice series at idle:\n{}",
        idle.0
    );

    // A Reboot announced ten minutes ahead, and an event of another VM (not this VM's notice).
    let now = Utc::now();
    let reboot = event(REBOOT, "Reboot", THIS_VM, now + Duration::minutes(10));
    let neighbours = event(
        NEIGHBOURS,
        "Redeploy",
        "test-vmss_9",
        now + Duration::minutes(10),
    );
    imds.sim.set_document(document(2, &[&reboot, &neighbours]));
    let m = agent
        .wait_for("the Reboot's notice", |m| {
            notice(m, "count", "Reboot", None).is_some()
        })
        .await?;
    observed_once_in(&m, "Reboot", Some("420"), "720");
    assert!(
        notice(&m, "count", "Redeploy", None).is_none(),
        "another VM's event is not this VM's notice"
    );

    // A Freeze first seen an hour after its NotBefore: it gave no notice the agent saw.
    let freeze = event(FREEZE, "Freeze", THIS_VM, now - Duration::hours(1));
    imds.sim
        .set_document(document(3, &[&reboot, &neighbours, &freeze]));
    let m = agent
        .wait_for("the Freeze's notice", |m| {
            notice(m, "count", "Freeze", None).is_some()
        })
        .await?;
    observed_once_in(&m, "Freeze", None, "0");
    observed_once_in(&m, "Reboot", Some("420"), "720");
    imds.polled(3).await?;
    let later = agent.metrics().await?;
    assert_eq!(
        notice_lines(&later),
        notice_lines(&m),
        "the same events are not observed again at later polls"
    );
    agent.stop().await?;

    // The agent restarts: the state file knew both events, whose notice the earlier run observed.
    let agent = Agent::start(&imds, &[&state_flag]).await?;
    agent
        .wait_for("the events resumed", |m| {
            m.event_info(REBOOT).is_some() && m.event_info(FREEZE).is_some()
        })
        .await?;
    imds.polled(3).await?;
    let resumed = agent.metrics().await?;
    assert!(
        notice_lines(&resumed).is_empty(),
        "resumed events are not observed again:\n{}",
        resumed.0
    );

    // A new event after the restart is: a Spot-like 30 seconds.
    let preempt = event(
        PREEMPT,
        "Preempt",
        THIS_VM,
        Utc::now() + Duration::seconds(30),
    );
    imds.sim
        .set_document(document(4, &[&reboot, &neighbours, &freeze, &preempt]));
    let m = agent
        .wait_for("the Preempt's notice", |m| {
            notice(m, "count", "Preempt", None).is_some()
        })
        .await?;
    observed_once_in(&m, "Preempt", Some("15"), "45");
    assert_eq!(notice(&m, "count", "Reboot", None), None);
    assert_eq!(notice(&m, "count", "Freeze", None), None);
    agent.stop().await?;
    Ok(())
}

#[tokio::test]
async fn an_event_seen_before_instance_metadata_is_read_is_observed_once_it_is() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim
        .inject_fault(Fault::status(500).on(FaultTarget::Instance).until_cleared());
    let reboot = event(
        REBOOT,
        "Reboot",
        THIS_VM,
        Utc::now() + Duration::minutes(10),
    );
    let neighbours = event(NEIGHBOURS, "Redeploy", "test-vmss_9", Utc::now());
    imds.sim.set_document(document(2, &[&reboot, &neighbours]));
    // No --vm.name: only instance metadata says which VM this is, and its priority.
    let agent = Agent::start(&imds, &[]).await?;
    let unknown = agent
        .wait_for("the events seen, this VM unknown", |m| {
            m.event_info(REBOOT).is_some() && m.event_info(NEIGHBOURS).is_some()
        })
        .await?;
    assert!(
        notice_lines(&unknown).is_empty(),
        "nothing observed while the VM is unknown:\n{}",
        unknown.0
    );
    imds.sim.clear_faults();
    let m = agent
        .wait_for("the Reboot's notice", |m| {
            notice(m, "count", "Reboot", None).is_some()
        })
        .await?;
    // Its notice from its first sight, before instance metadata was read.
    observed_once_in(&m, "Reboot", Some("420"), "720");
    assert!(
        notice(&m, "count", "Redeploy", None).is_none(),
        "another VM's event is not this VM's notice"
    );
    agent.stop().await?;
    Ok(())
}
