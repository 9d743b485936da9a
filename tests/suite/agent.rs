//! The agent against the simulator over real HTTP on loopback: the lifecycle on /metrics, every
//! fault kind, health, and the real-world documents.

use crate::common;

use std::time::Duration;

use azure_scheduled_events_exporter::azure::imds::ImdsError;
use azure_scheduled_events_simulator::{Fault, Scenario};
use common::{Agent, Exposition, Imds, THIS_VM, TestResult, wait};

const FREEZE: &str = "11111111-AAAA-4BBB-8CCC-000000000001";
const REDEPLOY: &str = "22222222-AAAA-4BBB-8CCC-000000000002";
const NEIGHBOUR: &str = "33333333-AAAA-4BBB-8CCC-000000000003";
const HARDWARE: &str = "44444444-AAAA-4BBB-8CCC-000000000004";

fn scenario(yaml: &str) -> Result<Scenario, Box<dyn std::error::Error>> {
    Ok(Scenario::parse(yaml)?)
}

#[tokio::test]
async fn an_event_is_scheduled_started_and_completed_on_metrics() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(scenario(&format!(
        r#"
events:
  - {{ id: "{FREEZE}", type: Freeze, resources: [{THIS_VM}, test-vmss_1], duration_in_seconds: 5, notice: 4s, runs_for: 2s }}
  - {{ id: "{REDEPLOY}", type: Redeploy, resources: [{THIS_VM}], notice: 10m, cancel_after: 2s }}
  - {{ id: "{NEIGHBOUR}", type: Reboot, resources: [test-vmss_1], notice: 10m }}
  - {{ id: "{HARDWARE}", type: Reboot, status: Started, resources: [{THIS_VM}], at: 1s, runs_for: 3s }}
"#
    ))?);
    let agent = Agent::start(&imds, &[]).await?;

    let scheduled = agent
        .wait_for("the Freeze to be scheduled, IMDS up", |m| {
            m.event_info(FREEZE).is_some() && m.up() == Some(1.0)
        })
        .await?;
    let info = scheduled.event_info(FREEZE).ok_or("no event_info")?;
    assert!(
        info.contains(r#"event_status="Scheduled""#) && info.contains(r#"event_type="Freeze""#),
        "{info}"
    );
    assert!(
        info.contains(r#"affects_this_vm="true""#) && info.contains(r#"event_source="Platform""#),
        "{info}"
    );
    let until = scheduled
        .event_value("event_seconds_until_not_before", FREEZE)
        .ok_or("no seconds until")?;
    assert!(
        until > 0.0 && until <= 4.0,
        "seconds until NotBefore: {until}"
    );
    assert!(
        scheduled
            .event_value("event_not_before_timestamp_seconds", FREEZE)
            .is_some()
    );
    assert_eq!(
        scheduled.event_value("event_duration_seconds", FREEZE),
        Some(5.0)
    );
    assert_eq!(scheduled.event_value("event_resources", FREEZE), Some(2.0));
    assert!(
        scheduled.event_info(NEIGHBOUR).is_none(),
        "an event of another VM has no per-event series"
    );
    assert_eq!(scheduled.pending("Reboot", "Scheduled", "false"), 1.0);

    let started = agent
        .wait_for("the Freeze to start", |m| {
            m.event_info(FREEZE)
                .is_some_and(|l| l.contains(r#"event_status="Started""#))
        })
        .await?;
    assert_eq!(
        started.event_value("event_not_before_timestamp_seconds", FREEZE),
        None,
        "NotBefore is empty once Started"
    );
    assert_eq!(
        started.event_value("event_seconds_until_not_before", FREEZE),
        None
    );

    // A batch counts its transitions before it replaces the per-event series: a scrape may fall
    // between the two, so both are waited for.
    let done = agent
        .wait_for("the Freeze to complete and its series to go", |m| {
            m.transitions("Freeze", "completed") == 1.0
                && m.event_info(FREEZE).is_none()
                && m.event_value("event_duration_seconds", FREEZE).is_none()
        })
        .await?;
    assert_eq!(done.transitions("Freeze", "scheduled"), 1.0);
    assert_eq!(done.transitions("Freeze", "started"), 1.0);
    assert_eq!(done.transitions("Freeze", "cancelled"), 0.0);

    let cancelled = agent
        .wait_for("the Redeploy to be cancelled and its series to go", |m| {
            m.transitions("Redeploy", "cancelled") == 1.0 && m.event_info(REDEPLOY).is_none()
        })
        .await?;
    assert_eq!(cancelled.transitions("Redeploy", "completed"), 0.0);

    let hardware = agent
        .wait_for("the hardware failure to complete", |m| {
            m.transitions("Reboot", "completed") == 1.0
                && m.value("azure_scheduled_events_document_incarnation")
                    .is_some_and(|i| i >= 5.0)
        })
        .await?;
    assert_eq!(
        hardware.transitions("Reboot", "started"),
        1.0,
        "appeared directly Started"
    );
    assert_eq!(
        hardware.transitions("Reboot", "scheduled"),
        1.0,
        "only the neighbour's Reboot was announced"
    );
    agent.stop().await
}

/// Puts a scheduled event in place, injects `fault` on every poll, and checks that the agent
/// stays up, reports the failure, keeps the event, and recovers.
async fn fault_is_survived(fault: Fault, reason: &str) -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(scenario(&format!(
        "events:\n  - {{ id: \"{FREEZE}\", type: Freeze, resources: [{THIS_VM}], notice: 10m }}\n"
    ))?);
    let agent = Agent::start(&imds, &[]).await?;
    let before = agent
        .wait_for("the event", |m| {
            m.event_info(FREEZE).is_some() && m.up() == Some(1.0)
        })
        .await?;
    let known = before.event_info(FREEZE).map(str::to_owned);

    imds.sim.inject_fault(fault.until_cleared());
    let failing = agent
        .wait_for(&format!("up 0 and a {reason} failure"), |m| {
            m.up() == Some(0.0) && m.failures(reason) >= 2.0
        })
        .await?;
    assert_eq!(
        failing.event_info(FREEZE).map(str::to_owned),
        known,
        "a failed poll keeps the known event"
    );
    assert!(
        failing
            .event_value("event_seconds_until_not_before", FREEZE)
            .is_some()
    );
    assert_eq!(failing.pending("Freeze", "Scheduled", "true"), 1.0);
    assert_eq!(
        failing.transitions("Freeze", "cancelled") + failing.transitions("Freeze", "completed"),
        0.0
    );
    let (health, _) = agent.get("/healthz").await?;
    assert_eq!(
        health, 200,
        "a failing IMDS is not a reason to restart the agent"
    );

    imds.sim.clear_faults();
    let recovered = agent.wait_for("recovery", |m| m.up() == Some(1.0)).await?;
    assert_eq!(recovered.event_info(FREEZE).map(str::to_owned), known);
    assert_eq!(
        recovered.transitions("Freeze", "cancelled") + recovered.transitions("Freeze", "completed"),
        0.0
    );
    assert_eq!(
        recovered.transitions("Freeze", "scheduled"),
        1.0,
        "the event is not announced twice"
    );
    let others: f64 = ImdsError::KINDS
        .iter()
        .filter(|r| **r != reason)
        .map(|r| recovered.failures(r))
        .sum();
    assert_eq!(
        others, 0.0,
        "failures counted under {reason} only:\n{}",
        recovered.0
    );
    agent.stop().await
}

#[tokio::test]
async fn http_500_is_survived() -> TestResult {
    fault_is_survived(Fault::status(500), "http_5xx").await
}

#[tokio::test]
async fn http_503_with_an_html_body_is_survived() -> TestResult {
    fault_is_survived(
        Fault::status(503).with_body("<html><body><h1>Service Unavailable</h1></body></html>"),
        "http_5xx",
    )
    .await
}

#[tokio::test]
async fn http_429_is_survived() -> TestResult {
    fault_is_survived(Fault::status(429).with_retry_after(1), "http_429").await
}

#[tokio::test]
async fn http_410_is_survived() -> TestResult {
    fault_is_survived(Fault::status(410), "http_410").await
}

#[tokio::test]
async fn a_garbage_body_is_survived() -> TestResult {
    fault_is_survived(Fault::garbage(), "decode").await
}

#[tokio::test]
async fn truncated_json_is_survived() -> TestResult {
    fault_is_survived(Fault::truncated(), "decode").await
}

#[tokio::test]
async fn a_dropped_connection_is_survived() -> TestResult {
    fault_is_survived(Fault::drop_connection(), "transport").await
}

#[tokio::test]
async fn a_3s_delay_is_a_timeout_and_survived() -> TestResult {
    fault_is_survived(Fault::delay(Duration::from_secs(3)), "timeout").await
}

#[tokio::test]
async fn ready_only_after_imds_answers_and_alive_while_waiting() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim
        .inject_fault(Fault::delay(Duration::from_secs(4)).until_cleared());
    let agent = Agent::start(&imds, &["--imds.first-timeout=60s"]).await?;
    // The first GET has reached IMDS, which holds it.
    imds.polled(0).await?;
    assert_eq!(
        agent.get("/readyz").await?.0,
        503,
        "not ready before a first document"
    );
    assert_eq!(
        agent.get("/healthz").await?.0,
        200,
        "alive while the first request is slow"
    );
    assert_eq!(agent.metrics().await?.up(), Some(0.0));
    imds.sim.clear_faults();
    // The first, delayed request still completes: then the agent is ready.
    wait("/readyz to answer 200")
        .within(Duration::from_secs(45))
        .until(async || agent.get("/readyz").await.map(|(status, _)| status == 200))
        .await?;
    assert_eq!(agent.metrics().await?.up(), Some(1.0));
    agent.stop().await
}

#[tokio::test]
async fn vm_identity_comes_from_instance_metadata() -> TestResult {
    let imds = Imds::start().await?;
    let agent = Agent::start(&imds, &[]).await?;
    let m = agent
        .wait_for("vm_info", |m| m.has("azure_scheduled_events_vm_info{"))
        .await?;
    assert!(m.has(&format!(r#"vm_name="{THIS_VM}""#)), "{}", m.0);
    assert!(m.has(r#"vm_scale_set_name="test-vmss""#));
    assert!(m.get(r#"azure_scheduled_events_imds_requests_total{operation="instance"}"#) >= 1.0);
    agent.stop().await
}

#[tokio::test]
async fn vm_name_flag_overrides_instance_metadata() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(scenario(&format!(
        "events:\n  - {{ id: \"{NEIGHBOUR}\", type: Reboot, resources: [other_7], notice: 10m }}\n"
    ))?);
    let agent = Agent::start(&imds, &["--vm.name=OTHER_7"]).await?;
    let m = agent
        .wait_for("the event as this VM's", |m| {
            m.event_info(NEIGHBOUR).is_some()
        })
        .await?;
    assert!(
        m.event_info(NEIGHBOUR)
            .is_some_and(|l| l.contains(r#"affects_this_vm="true""#))
    );
    assert_eq!(m.pending("Reboot", "Scheduled", "true"), 1.0);
    agent.stop().await
}

#[tokio::test]
async fn unreachable_instance_metadata_leaves_affects_unknown_until_it_answers() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.inject_fault(
        Fault::status(500)
            .on(azure_scheduled_events_simulator::FaultTarget::Instance)
            .until_cleared(),
    );
    imds.sim.load_scenario(scenario(&format!(
        "events:\n  - {{ id: \"{NEIGHBOUR}\", type: Reboot, resources: [other_7], notice: 10m }}\n"
    ))?);
    let agent = Agent::start(&imds, &[]).await?;
    let m = agent
        .wait_for("the event, and instance metadata's failure", |m| {
            m.event_info(NEIGHBOUR).is_some()
                && m.get(r#"azure_scheduled_events_imds_request_failures_total{operation="instance",reason="http_5xx"}"#) >= 1.0
        })
        .await?;
    assert!(
        m.event_info(NEIGHBOUR)
            .is_some_and(|l| l.contains(r#"affects_this_vm="unknown""#)),
        "{}",
        m.0
    );
    assert_eq!(m.pending("Reboot", "Scheduled", "unknown"), 1.0);
    assert!(!m.has("azure_scheduled_events_vm_info{"));
    assert_eq!(m.up(), Some(1.0), "instance metadata does not decide up");

    // Instance metadata answers again: the same document's event is now known not to be
    // this VM's, without a new document (and, not this VM's, it has no per-event series).
    imds.sim.clear_faults();
    // vm_info is set when instance metadata is read, the event decided on after that poll's GET:
    // a scrape in between sees the one without the other.
    let m = agent
        .wait_for(
            "the VM's name, from instance metadata, and the event decided",
            |m| {
                m.has("azure_scheduled_events_vm_info{")
                    && m.pending("Reboot", "Scheduled", "unknown") == 0.0
            },
        )
        .await?;
    assert_eq!(m.event_info(NEIGHBOUR), None, "{}", m.0);
    assert_eq!(m.pending("Reboot", "Scheduled", "false"), 1.0);
    assert_eq!(m.pending("Reboot", "Scheduled", "unknown"), 0.0);
    agent.stop().await
}

/// Expected reading of each real-world document: `(file, incarnation, [(type, status, count)], per-event checks)`.
struct Expected {
    file: &'static str,
    incarnation: f64,
    pending: &'static [(&'static str, &'static str, f64)],
    /// `(event_id, NotBefore as Unix time or None, DurationInSeconds or None)`
    events: &'static [(&'static str, Option<f64>, Option<f64>)],
}

const DOCUMENTS: &[Expected] = &[
    Expected {
        file: "01-empty-events-compact-di190.json",
        incarnation: 190.0,
        pending: &[],
        events: &[],
    },
    Expected {
        file: "02-two-reboots-scheduled-compact-legacy-di192.json",
        incarnation: 192.0,
        pending: &[("Reboot", "Scheduled", 2.0)],
        events: &[
            (
                "28512AF7-C957-4500-9BC4-842D6FB531E4",
                Some(1_516_828_844.0),
                None,
            ),
            (
                "A626E37F-793E-44E1-89B5-99AE0B96044C",
                Some(1_516_828_844.0),
                None,
            ),
        ],
    },
    Expected {
        file: "04-reboot-scheduled-legacy-2017-08-01-di1.json",
        incarnation: 1.0,
        pending: &[("Reboot", "Scheduled", 1.0)],
        events: &[(
            "F3E6E2D2-E86A-47F0-AA8E-18918049A2B1",
            Some(1_561_911_723.0),
            None,
        )],
    },
    Expected {
        file: "08-preempt-scheduled-duration-minus1-di1.json",
        incarnation: 1.0,
        pending: &[("Preempt", "Scheduled", 1.0)],
        events: &[(
            "C1BF8322-4CBF-4FC4-9C45-B40CF3106D0E",
            Some(1_660_064_852.0),
            Some(-1.0),
        )],
    },
    Expected {
        file: "15-docs-seq2-freeze-scheduled-livemigration-two-resources-di2-2022.json",
        incarnation: 2.0,
        pending: &[("Freeze", "Scheduled", 1.0)],
        events: &[(
            "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
            Some(1_649_716_018.0),
            Some(5.0),
        )],
    },
    Expected {
        file: "19-reboot-scheduled-user-empty-description-duration-minus1-di2.json",
        incarnation: 2.0,
        pending: &[("Reboot", "Scheduled", 1.0)],
        events: &[(
            "4CAEA225-A741-474D-A72E-428C86FCD853",
            Some(1_626_929_417.0),
            Some(-1.0),
        )],
    },
    Expected {
        file: "20-empty-after-approval-incarnation-jump-di4.json",
        incarnation: 4.0,
        pending: &[],
        events: &[],
    },
    Expected {
        file: "21-fixture-six-events-missing-notbefore-empty-resources.json",
        incarnation: 5.0,
        pending: &[("Reboot", "Scheduled", 5.0), ("Reboot", "Started", 1.0)],
        events: &[
            (
                "102d9444-d2cd-49c7-8624-8643e7171291",
                Some(1_568_917_787.0),
                None,
            ),
            (
                "402d9444-d2cd-49c7-8624-8643e7171292",
                Some(1_530_473_489.0),
                None,
            ),
            (
                "502d9444-d2cd-49c7-8624-8643e7171293",
                Some(1_545_244_187.0),
                None,
            ),
            ("602d9444-d2cd-49c7-8624-8643e7171293", None, None),
        ],
    },
    Expected {
        file: "22-fixture-reboot-mixed-resources-duration-minus1.json",
        incarnation: 1.0,
        pending: &[("Reboot", "Scheduled", 1.0)],
        events: &[(
            "602d9444-d2cd-49c7-8624-8643e7171297",
            Some(1_474_309_787.0),
            Some(-1.0),
        )],
    },
];

fn fixture(file: &str) -> Result<bytes::Bytes, std::io::Error> {
    std::fs::read(format!(
        "{}/tests/fixtures/imds-documents/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .map(Into::into)
}

fn total_pending(m: &Exposition) -> f64 {
    m.0.lines()
        .filter(|l| l.starts_with("azure_scheduled_events_pending{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test]
async fn every_real_world_document_is_read_right() -> TestResult {
    for expected in DOCUMENTS {
        let imds = Imds::start().await?;
        imds.sim.set_document(fixture(expected.file)?);
        let agent = Agent::start(&imds, &["--report.neighbours"]).await?;
        let want: f64 = expected.pending.iter().map(|(_, _, n)| n).sum();
        // The incarnation is set before the events' series are replaced: both are waited for.
        let m = agent
            .wait_for(expected.file, |m| {
                m.up() == Some(1.0)
                    && m.value("azure_scheduled_events_document_incarnation")
                        == Some(expected.incarnation)
                    && total_pending(m) == want
                    && expected
                        .events
                        .iter()
                        .all(|(id, _, _)| m.event_info(id).is_some())
            })
            .await?;
        for (event_type, status, count) in expected.pending {
            let counted =
                m.pending(event_type, status, "false") + m.pending(event_type, status, "true");
            assert_eq!(counted, *count, "{}: {event_type}/{status}", expected.file);
        }
        for (id, not_before, duration) in expected.events {
            assert!(
                m.event_info(id).is_some(),
                "{}: {id} has event_info",
                expected.file
            );
            assert_eq!(
                m.event_value("event_not_before_timestamp_seconds", id),
                *not_before,
                "{}: NotBefore of {id}",
                expected.file
            );
            assert_eq!(
                m.event_value("event_duration_seconds", id),
                *duration,
                "{}: DurationInSeconds of {id}",
                expected.file
            );
        }
        agent.stop().await?;
    }
    Ok(())
}

#[tokio::test]
async fn the_nonconformant_document_fails_safe_and_keeps_what_was_known() -> TestResult {
    let imds = Imds::start().await?;
    let good = "15-docs-seq2-freeze-scheduled-livemigration-two-resources-di2-2022.json";
    imds.sim.set_document(fixture(good)?);
    let agent = Agent::start(&imds, &["--vm.name=WestNO_1"]).await?;
    let freeze = "C7061BAC-AFDC-4513-B24B-AA5F13A16123";
    let known = agent
        .wait_for("the docs Freeze", |m| m.event_info(freeze).is_some())
        .await?;

    imds.sim.set_document(fixture(
        "23-fixture-nonconformant-string-incarnation-bad-notbefore-terminate.json",
    )?);
    let m = agent
        .wait_for("the bad document to be refused", |m| {
            m.up() == Some(0.0) && m.failures("decode") >= 1.0
        })
        .await?;
    assert_eq!(
        m.event_info(freeze),
        known.event_info(freeze),
        "the known Freeze is kept"
    );
    assert_eq!(
        m.value("azure_scheduled_events_document_incarnation"),
        Some(2.0)
    );
    assert!(
        !m.has(r#"event_id="123""#),
        "nothing of the refused document is exported"
    );
    assert_eq!(
        m.transitions("Freeze", "cancelled") + m.transitions("Freeze", "completed"),
        0.0
    );
    assert_eq!(agent.get("/healthz").await?.0, 200, "the agent stays up");
    agent.stop().await
}

#[tokio::test]
async fn an_older_api_version_is_requested_and_read() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(scenario(&format!(
        "events:\n  - {{ id: \"{FREEZE}\", type: Freeze, resources: [{THIS_VM}], notice: 10m, duration_in_seconds: 9, description: paused }}\n"
    ))?);
    let agent = Agent::start(&imds, &["--imds.api-version=2017-08-01"]).await?;
    let m = agent
        .wait_for("the Freeze", |m| m.event_info(FREEZE).is_some())
        .await?;
    assert_eq!(
        m.event_value("event_duration_seconds", FREEZE),
        None,
        "no DurationInSeconds before 2020-07-01"
    );
    assert!(
        m.event_info(FREEZE)
            .is_some_and(|l| l.contains(r#"event_source="""#))
    );
    assert!(m.has(r#"api_version="2017-08-01""#));
    agent.stop().await
}

#[tokio::test]
async fn a_body_over_the_size_cap_is_refused_and_the_known_event_kept() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.set_document(fixture(
        "15-docs-seq2-freeze-scheduled-livemigration-two-resources-di2-2022.json",
    )?);
    let agent = Agent::start(&imds, &["--vm.name=WestNO_0"]).await?;
    let freeze = "C7061BAC-AFDC-4513-B24B-AA5F13A16123";
    let known = agent
        .wait_for("the docs Freeze", |m| m.event_info(freeze).is_some())
        .await?;

    // A valid but empty document padded past 4 MiB: read as-is it would cancel the Freeze.
    let mut huge = br#"{"DocumentIncarnation":3,"Events":[]"#.to_vec();
    huge.resize(5 * 1024 * 1024, b' ');
    huge.push(b'}');
    imds.sim.set_document(huge.into());
    let m = agent
        .wait_for("a too_large failure", |m| {
            m.up() == Some(0.0) && m.failures("too_large") >= 1.0
        })
        .await?;
    assert_eq!(m.event_info(freeze), known.event_info(freeze));
    assert_eq!(m.transitions("Freeze", "cancelled"), 0.0);
    agent.stop().await
}

#[tokio::test]
async fn a_redirect_is_not_followed() -> TestResult {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let imds = Imds::start().await?;
    imds.sim.load_scenario(scenario(&format!(
        "events:\n  - {{ type: Reboot, resources: [{THIS_VM}], notice: 10m }}\n"
    ))?);
    // An endpoint that sends every request on to the simulator.
    let redirector = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let redirector_url = format!("http://{}", redirector.local_addr()?);
    let target = format!(
        "{}/metadata/scheduledevents?api-version=2020-07-01",
        imds.url()
    );
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = redirector.accept().await {
            let target = target.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                while let Ok(n) = stream.read(&mut request).await {
                    if n == 0 {
                        break;
                    }
                    let answer = format!(
                        "HTTP/1.1 302 Found\r\nLocation: {target}\r\nContent-Length: 0\r\n\r\n"
                    );
                    if stream.write_all(answer.as_bytes()).await.is_err() {
                        break;
                    }
                }
            });
        }
    });

    let url = format!("--imds.url={redirector_url}");
    let agent = Agent::start(&imds, &[&url]).await?;
    let m = agent
        .wait_for("redirects to be refused", |m| {
            m.failures("http_other") >= 3.0
        })
        .await?;
    assert_eq!(m.up(), Some(0.0));
    assert_eq!(
        imds.sim.requests(),
        0,
        "the simulator behind the redirect was never asked"
    );
    agent.stop().await
}
