//! What Azure sends beyond the 2020-07-01 contract, against the agent over loopback: Spot
//! rebalance advisories (never a pending impact, never approved), documents of a newer
//! api-version, a connect that never completes, the cause of an event, and predicted hardware
//! failure. The documents are the real-world shaped ones in `tests/fixtures/imds-documents/`.

use crate::common;

use azure_scheduled_events_simulator::{ApiVersion, Fault, Scenario};
use bytes::Bytes;
use common::{Agent, Exposition, Imds, THIS_VM, TestResult, process};

/// The Spot VM of the advisory fixtures.
const SPOT_VM: &str = "aks-spot-31415926-vmss_7";
const ADVISORY: &str = "8F2D6A41-3B7C-4E19-9A5D-2C0B7E6F1D83";
const PREEMPT: &str = "D40E9B27-61C5-4F0A-B8E3-97A1C2F5E604";

fn fixture(file: &str) -> Result<Bytes, std::io::Error> {
    std::fs::read(format!(
        "{}/tests/fixtures/imds-documents/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .map(Into::into)
}

fn total(m: &Exposition, family: &str) -> f64 {
    let prefix = format!("azure_scheduled_events_{family}{{");
    m.0.lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

fn advisories(m: &Exposition, affects: &str) -> f64 {
    m.get(&format!(
        r#"azure_scheduled_events_advisories{{affects_this_vm="{affects}",event_status="Advisory",event_type="SpotRebalanceRecommendation"}}"#
    ))
}

#[tokio::test]
async fn an_advisory_alone_is_shown_but_never_pending() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim
        .set_document(fixture("30-spot-rebalance-advisory-alone-di4.json")?);
    let vm = format!("--vm.name={SPOT_VM}");
    let agent = Agent::start(&imds, &[&vm]).await?;
    // A scrape encodes one family after another while a batch raises them: the transition's
    // counter is waited for with the event's series.
    let m = agent
        .wait_for("the advisory and its transition", |m| {
            m.event_info(ADVISORY).is_some()
                && m.transitions("SpotRebalanceRecommendation", "advisory") == 1.0
        })
        .await?;
    assert_eq!(advisories(&m, "true"), 1.0, "this VM has an advisory");
    assert_eq!(
        total(&m, "pending"),
        0.0,
        "an advisory is no pending impact"
    );
    let info = m.event_info(ADVISORY).unwrap_or_default();
    assert!(
        info.contains(r#"event_status="Advisory""#)
            && info.contains(r#"event_type="SpotRebalanceRecommendation""#),
        "{info}"
    );
    assert_eq!(
        m.transitions("SpotRebalanceRecommendation", "scheduled"),
        0.0
    );
    assert_eq!(
        m.event_value("event_not_before_timestamp_seconds", ADVISORY),
        None,
        "NotBefore is empty"
    );
    agent.stop().await
}

#[tokio::test]
async fn a_preempt_after_an_advisory_is_the_one_pending_impact() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim
        .set_document(fixture("30-spot-rebalance-advisory-alone-di4.json")?);
    let vm = format!("--vm.name={SPOT_VM}");
    let agent = Agent::start(&imds, &[&vm]).await?;
    agent
        .wait_for("the advisory", |m| m.event_info(ADVISORY).is_some())
        .await?;
    imds.sim
        .set_document(fixture("31-spot-rebalance-advisory-then-preempt-di5.json")?);
    let m = agent
        .wait_for("the preempt and its transition", |m| {
            m.event_info(PREEMPT).is_some() && m.transitions("Preempt", "scheduled") == 1.0
        })
        .await?;
    assert_eq!(total(&m, "pending"), 1.0);
    assert_eq!(m.pending("Preempt", "Scheduled", "true"), 1.0);
    assert_eq!(advisories(&m, "true"), 1.0);
    assert_eq!(
        m.transitions("SpotRebalanceRecommendation", "advisory"),
        1.0,
        "the advisory is counted once, not again with the Preempt"
    );
    agent.stop().await
}

#[tokio::test]
async fn an_unknown_event_status_is_an_advisory_not_a_pending_impact() -> TestResult {
    let imds = Imds::start().await?;
    let body =
        String::from_utf8(fixture("31-spot-rebalance-advisory-then-preempt-di5.json")?.to_vec())?
            .replace(
                r#""EventStatus":"Scheduled""#,
                r#""EventStatus":"Deferred""#,
            );
    imds.sim.set_document(body.into());
    let vm = format!("--vm.name={SPOT_VM}");
    let agent = Agent::start(&imds, &[&vm]).await?;
    let m = agent
        .wait_for("both events, the Preempt as an advisory", |m| {
            m.event_info(ADVISORY).is_some()
                && m.event_info(PREEMPT).is_some()
                && m.transitions("Preempt", "advisory") == 1.0
        })
        .await?;
    assert_eq!(total(&m, "pending"), 0.0);
    assert_eq!(
        m.get(r#"azure_scheduled_events_advisories{affects_this_vm="true",event_status="Deferred",event_type="Preempt"}"#),
        1.0
    );
    assert_eq!(m.transitions("Preempt", "scheduled"), 0.0);
    agent.stop().await
}

#[tokio::test]
async fn no_approval_is_posted_for_an_advisory_even_with_approve() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim
        .set_document(fixture("31-spot-rebalance-advisory-then-preempt-di5.json")?);
    let vm = format!("--vm.name={SPOT_VM}");
    let agent = Agent::start(
        &imds,
        &[
            &vm,
            "--approve",
            "--approve.event-types=SpotRebalanceRecommendation,Preempt",
        ],
    )
    .await?;
    let m = agent
        .wait_for("the Preempt approved", |m| {
            m.get(r#"azure_scheduled_events_approvals_total{event_type="Preempt"}"#) >= 1.0
        })
        .await?;
    assert_eq!(
        m.get(r#"azure_scheduled_events_approval_decisions_total{decision="skipped",reason="advisory"}"#),
        1.0,
        "the advisory is refused once, by name"
    );
    let posted: Vec<String> = imds
        .sim
        .approvals()
        .into_iter()
        .map(|a| a.event_id)
        .collect();
    assert_eq!(
        posted,
        [PREEMPT],
        "only the Preempt is POSTed, never the advisory"
    );
    assert!(!m.has(r#"approvals_total{event_type="SpotRebalanceRecommendation"}"#));
    agent.stop().await
}

/// The unpublished version the Spot Plus tests serve and request.
const SPOT_PLUS_VERSION: &str = "2026-09-01";

async fn spot_plus_imds(scenario: Scenario) -> Result<Imds, Box<dyn std::error::Error>> {
    let imds = Imds::start().await?;
    imds.sim
        .accept_api_version(ApiVersion::newer(SPOT_PLUS_VERSION)?);
    imds.sim.load_scenario(scenario);
    Ok(imds)
}

/// Spot Plus compressed to seconds: the advisory, the Preempt a second later, then the VM gone.
fn spot_plus_fast() -> Result<Scenario, Box<dyn std::error::Error>> {
    Ok(Scenario::parse(&format!(
        r#"
events:
  - {{ id: "{ADVISORY}", type: SpotRebalanceRecommendation, status: Advisory, resources: [{THIS_VM}], runs_for: 4s }}
  - {{ id: "{PREEMPT}", type: Preempt, resources: [{THIS_VM}], at: 1s, notice: 1s, runs_for: 2s }}
"#
    ))?)
}

#[tokio::test]
async fn the_simulator_serves_advisories_only_at_the_newer_version_it_was_told() -> TestResult {
    let imds = spot_plus_imds(spot_plus_fast()?).await?;
    let http = reqwest::Client::builder().no_proxy().build()?;
    let get = |version: &str| {
        http.get(format!(
            "{}/metadata/scheduledevents?api-version={version}",
            imds.url()
        ))
        .header("Metadata", "true")
        .send()
    };
    let newer: serde_json::Value =
        serde_json::from_str(&get(SPOT_PLUS_VERSION).await?.text().await?)?;
    let events = newer["Events"].as_array().cloned().unwrap_or_default();
    assert_eq!(events.len(), 1, "{newer}");
    assert_eq!(events[0]["EventType"], "SpotRebalanceRecommendation");
    assert_eq!(events[0]["EventStatus"], "Advisory");
    assert_eq!(events[0]["NotBefore"], "");
    let documented: serde_json::Value =
        serde_json::from_str(&get("2020-07-01").await?.text().await?)?;
    assert_eq!(
        documented["Events"].as_array().map(Vec::len),
        Some(0),
        "2020-07-01 does not know rebalance recommendations: {documented}"
    );
    assert_eq!(get("2026-10-01").await?.status().as_u16(), 400);
    Ok(())
}

#[tokio::test]
async fn the_agent_at_a_newer_api_version_sees_the_advisory_then_the_preempt_then_nothing()
-> TestResult {
    let imds = spot_plus_imds(spot_plus_fast()?).await?;
    let version = format!("--imds.api-version={SPOT_PLUS_VERSION}");
    let agent = Agent::start(&imds, &[&version]).await?;
    let m = agent
        .wait_for("the advisory", |m| m.event_info(ADVISORY).is_some())
        .await?;
    assert_eq!(advisories(&m, "true"), 1.0);
    assert_eq!(
        total(&m, "pending"),
        0.0,
        "the advisory alone pends nothing"
    );
    assert!(m.has(&format!(r#"api_version="{SPOT_PLUS_VERSION}""#)));
    let m = agent
        .wait_for("the Preempt", |m| m.event_info(PREEMPT).is_some())
        .await?;
    assert_eq!(total(&m, "pending"), 1.0, "only the Preempt is pending");
    let m = agent
        .wait_for("the VM gone, the Preempt completed", |m| {
            m.event_info(PREEMPT).is_none()
                && m.event_info(ADVISORY).is_none()
                && m.transitions("Preempt", "completed") == 1.0
        })
        .await?;
    assert_eq!(
        m.transitions("SpotRebalanceRecommendation", "advisory"),
        1.0
    );
    assert_eq!(m.transitions("Preempt", "scheduled"), 1.0);
    assert_eq!(m.up(), Some(1.0));
    agent.stop().await
}

#[tokio::test]
async fn the_shipped_spot_plus_scenario_starts_with_an_advisory_at_the_newer_version() -> TestResult
{
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/spot-plus.yaml");
    let scenario = Scenario::from_file(&path)?;
    let spot_vm = scenario
        .events
        .first()
        .and_then(|e| e.resources.first().cloned())
        .unwrap_or_default();
    let imds = spot_plus_imds(scenario).await?;
    let version = format!("--imds.api-version={SPOT_PLUS_VERSION}");
    let vm = format!("--vm.name={spot_vm}");
    let agent = Agent::start(&imds, &[&version, &vm]).await?;
    let m = agent
        .wait_for("the advisory", |m| advisories(m, "true") == 1.0)
        .await?;
    assert_eq!(total(&m, "pending"), 0.0);
    agent.stop().await
}

#[tokio::test]
async fn the_shipped_iso_8601_scenario_gives_the_agent_each_not_before() -> TestResult {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios/maintenance-iso-8601.yaml");
    let scenario = Scenario::from_file(&path)?;
    let freeze = scenario
        .events
        .first()
        .cloned()
        .ok_or("the scenario has no event")?;
    let freeze_id = freeze.id.clone().ok_or("the Freeze has no fixed id")?;
    let vm = format!(
        "--vm.name={}",
        freeze.resources.first().ok_or("no resource")?
    );
    let imds = Imds::start().await?;
    imds.sim.load_scenario(scenario);
    let agent = Agent::start(&imds, &[&vm]).await?;
    let m = agent
        .wait_for("the Freeze", |m| m.event_info(&freeze_id).is_some())
        .await?;
    let served = imds
        .sim
        .document()
        .events
        .into_iter()
        .find(|e| e.event_id == freeze_id)
        .and_then(|e| e.not_before)
        .ok_or("the simulator serves no NotBefore")?;
    assert!(
        served.len() == 20 && served.as_bytes()[10] == b'T' && served.ends_with('Z'),
        "NotBefore {served:?} is not ISO 8601 as 2026-04-29T18:00:00Z"
    );
    let instant = chrono::DateTime::parse_from_rfc3339(&served)?.timestamp() as f64;
    assert_eq!(
        m.event_value("event_not_before_timestamp_seconds", &freeze_id),
        Some(instant),
        "the agent reads {served}"
    );
    assert_eq!(m.pending("Freeze", "Scheduled", "true"), 1.0);
    agent.stop().await
}

/// A listener on loopback that never accepts: backlog 0 and its queue filled, so that the kernel
/// drops every further SYN and a connect to it never completes, as when a NetworkPolicy or AKS's
/// IMDS restriction drops a pod's traffic to 169.254.169.254. Holds the filling connections.
struct Blackhole {
    _listener: tokio::net::TcpListener,
    _queued: Vec<std::net::TcpStream>,
    url: String,
}

impl Blackhole {
    fn start() -> Result<Self, Box<dyn std::error::Error>> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind("127.0.0.1:0".parse()?)?;
        let listener = socket.listen(0)?;
        let address = listener.local_addr()?;
        let mut queued = Vec::new();
        // Linux queues backlog + 1 connections; a few more to be sure, until one hangs.
        for _ in 0..8 {
            match std::net::TcpStream::connect_timeout(
                &address,
                std::time::Duration::from_millis(200),
            ) {
                Ok(stream) => queued.push(stream),
                Err(_) => break,
            }
        }
        Ok(Self {
            _listener: listener,
            _queued: queued,
            url: format!("http://{address}"),
        })
    }
}

#[tokio::test]
async fn a_connect_that_never_completes_is_connect_timeout_without_waiting_the_first_call_timeout()
-> TestResult {
    let blackhole = Blackhole::start()?;
    // A real IMDS harness for the agent's own wiring; the agent polls the blackhole instead.
    let imds = Imds::start().await?;
    let url = format!("--imds.url={}", blackhole.url);
    let agent = Agent::start(
        &imds,
        &[&url, "--imds.connect-timeout=200ms", "--vm.name=blocked_0"],
    )
    .await?;
    let count = r#"azure_scheduled_events_imds_request_duration_seconds_count{operation="events"}"#;
    let m = agent
        .wait_for("two connect_timeouts, each timed", |m| {
            m.failures("connect_timeout") >= 2.0 && m.get(count) >= 2.0
        })
        .await?;
    assert_eq!(
        m.failures("timeout"),
        0.0,
        "a blocked connect is not a slow IMDS"
    );
    assert_eq!(m.failures("connect"), 0.0);
    assert_eq!(m.up(), Some(0.0));
    let seconds =
        m.get(r#"azure_scheduled_events_imds_request_duration_seconds_sum{operation="events"}"#);
    let requests = m.get(count);
    assert!(
        seconds / requests < 5.0,
        "each try ends at the connect timeout, not at the 5 s first-call timeout: {seconds} s over {requests}"
    );
    agent.stop().await
}

#[tokio::test]
async fn a_slow_answer_is_timeout_not_connect_timeout() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.set_document(Bytes::from_static(
        br#"{"DocumentIncarnation":1,"Events":[]}"#,
    ));
    let agent = Agent::start(&imds, &["--imds.connect-timeout=200ms"]).await?;
    agent
        .wait_for("a first document", |m| m.up() == Some(1.0))
        .await?;
    imds.sim
        .inject_fault(Fault::delay(std::time::Duration::from_secs(3)));
    let m = agent
        .wait_for("a timeout", |m| m.failures("timeout") >= 1.0)
        .await?;
    assert_eq!(
        m.failures("connect_timeout"),
        0.0,
        "IMDS accepted the connection"
    );
    agent.stop().await
}

/// The seven events of fixture 32 and the cause each Description gives.
const CAUSES: [(&str, &str); 7] = [
    ("1E5A2C77-0B4D-4C8E-9F21-6D3A8B0C4E11", "live_migration"),
    ("2F6B3D88-1C5E-4D9F-8A32-7E4B9C1D5F22", "host_maintenance"),
    (
        "3A7C4E99-2D6F-4EA0-9B43-8F5CAD2E6A33",
        "host_infrastructure",
    ),
    ("4B8D5FAA-3E70-4FB1-8C54-9A6DBE3F7B44", "user_request"),
    ("5C9E60BB-4F81-40C2-9D65-AB7ECF408C55", "emergency_repair"),
    ("6DAF71CC-5092-41D3-8E76-BC8FD0519D66", "other"),
    ("7EB082DD-61A3-42E4-9F87-CD90E16AAE77", "other"),
];

// The agent runs as a process; its log lines are read by blocking, so the simulator needs a
// thread of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_description_phrase_gives_its_cause_on_the_info_series_and_the_log_line() -> TestResult
{
    let imds = Imds::start().await?;
    let document = fixture("32-description-phrases-seven-events-di12.json")?;
    let raw: serde_json::Value = serde_json::from_slice(&document)?;
    imds.sim.set_document(document);
    let url = format!("--imds.url={}", imds.url());
    let mut agent = process::AgentProcess::spawn(process::command(&[
        &url,
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=50ms",
        "--vm.name=web-vmss_0",
    ]))?;
    for (index, (id, cause)) in CAUSES.iter().enumerate() {
        let line = agent.next_line_where(|l| l["event_id"] == *id)?;
        assert_eq!(line["cause"], *cause, "{line}");
        assert_eq!(
            line["description"], raw["Events"][index]["Description"],
            "the raw text stays as it was: {line}"
        );
    }
    let metrics = Exposition(agent.metrics()?);
    for (id, cause) in CAUSES {
        let info = metrics.event_info(id).unwrap_or_default();
        assert!(
            info.contains(&format!(r#"cause="{cause}""#)),
            "{id}: {info}"
        );
    }
    agent.terminate()?;
    Ok(())
}

const REDEPLOY: &str = "A3C9E1F0-7D2B-4B6A-8E5F-1C0D9B8A7F66";

/// Fixture 33, with NotBefore three days after now, as the agent reads it now.
fn redeploy_three_days_ahead() -> Result<Bytes, Box<dyn std::error::Error>> {
    let body = String::from_utf8(fixture("33-redeploy-three-days-ahead-di3.json")?.to_vec())?;
    let not_before = (chrono::Utc::now() + chrono::TimeDelta::days(3))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string();
    Ok(body
        .replace("Fri, 27 Nov 2026 19:40:00 GMT", &not_before)
        .into())
}

#[tokio::test]
async fn a_redeploy_three_days_ahead_is_marked_and_approved_early_only_when_asked() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.set_document(redeploy_three_days_ahead()?);
    let policy = [
        "--vm.name=db-vmss_2",
        "--approve",
        "--approve.before-not-before=10m",
    ];
    let agent = Agent::start(&imds, &policy).await?;
    let m = agent
        .wait_for("the redeploy", |m| m.event_info(REDEPLOY).is_some())
        .await?;
    let info = m.event_info(REDEPLOY).unwrap_or_default();
    assert!(
        info.contains(r#"hardware_failure_predicted="true""#),
        "{info}"
    );
    assert!(info.contains(r#"cause="host_maintenance""#), "{info}");
    let m = agent
        .wait_for("a decision", |m| {
            m.get(r#"azure_scheduled_events_approval_decisions_total{decision="skipped",reason="not_allowed"}"#) >= 1.0
        })
        .await?;
    assert!(
        imds.sim.approvals().is_empty(),
        "without the setting a platform Redeploy is not approved"
    );
    assert_eq!(
        m.get(r#"azure_scheduled_events_approval_decisions_total{decision="approved",reason="predicted_hardware_failure"}"#),
        0.0
    );
    agent.stop().await?;

    let early = [&policy[..], &["--approve.predicted-hardware-failure"]].concat();
    let agent = Agent::start(&imds, &early).await?;
    agent
        .wait_for("the early approval", |m| {
            m.get(r#"azure_scheduled_events_approvals_total{event_type="Redeploy"}"#) >= 1.0
                && m.get(r#"azure_scheduled_events_approval_decisions_total{decision="approved",reason="predicted_hardware_failure"}"#) == 1.0
        })
        .await?;
    let posted: Vec<String> = imds
        .sim
        .approvals()
        .into_iter()
        .map(|a| a.event_id)
        .collect();
    assert_eq!(
        posted,
        [REDEPLOY],
        "three days before NotBefore, not ten minutes"
    );
    agent.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_line_of_a_redeploy_three_days_ahead_says_hardware_failure_predicted() -> TestResult
{
    let imds = Imds::start().await?;
    imds.sim.set_document(redeploy_three_days_ahead()?);
    let url = format!("--imds.url={}", imds.url());
    let mut agent = process::AgentProcess::spawn(process::command(&[
        &url,
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=50ms",
        "--vm.name=db-vmss_2",
    ]))?;
    let line = agent.next_line_where(|l| l["event_id"] == REDEPLOY)?;
    assert_eq!(line["message"], "event scheduled", "{line}");
    assert_eq!(line["hardware_failure_predicted"], true, "{line}");
    assert_eq!(line["cause"], "host_maintenance", "{line}");
    agent.terminate()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_advisory_is_one_log_line_that_says_advisory() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim
        .set_document(fixture("30-spot-rebalance-advisory-alone-di4.json")?);
    let url = format!("--imds.url={}", imds.url());
    let vm = format!("--vm.name={SPOT_VM}");
    let mut agent = process::AgentProcess::spawn(process::command(&[
        &url,
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=50ms",
        &vm,
    ]))?;
    let line = agent.next_line_where(|l| l["event_id"] == ADVISORY)?;
    assert_eq!(line["message"], "event advisory", "{line}");
    assert_eq!(line["transition"], "advisory", "{line}");
    assert_eq!(line["advisory"], true, "{line}");
    assert_eq!(line["event_status"], "Advisory", "{line}");
    assert_eq!(line["affects_this_vm"], "true", "{line}");
    // Let it poll the same document many times: no second line for it.
    let polls = |text: &str| {
        Exposition(text.to_owned())
            .get(r#"azure_scheduled_events_imds_requests_total{operation="events"}"#)
    };
    let start = polls(&agent.metrics()?);
    agent
        .wait_for_metrics("10 more polls", |text| polls(text) >= start + 10.0)
        .await?;
    let again: Vec<_> = agent
        .lines_so_far()?
        .into_iter()
        .filter(|l| l["event_id"] == ADVISORY)
        .collect();
    assert!(again.is_empty(), "{again:?}");
    agent.terminate()?;
    Ok(())
}

#[tokio::test]
async fn a_blocked_connect_is_logged_once_with_its_likely_causes_and_the_fix() -> TestResult {
    let blackhole = Blackhole::start()?;
    let url = format!("--imds.url={}", blackhole.url);
    let mut agent = process::AgentProcess::spawn(process::command(&[
        &url,
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=50ms",
        "--imds.connect-timeout=100ms",
        "--vm.name=blocked_0",
    ]))?;
    let line =
        agent.next_line_where(|l| l["reason"] == "connect_timeout" && l.get("fix").is_some())?;
    let causes = line["likely_causes"].as_str().unwrap_or_default();
    for cause in ["host network", "IMDS restriction", "NetworkPolicy"] {
        assert!(causes.contains(cause), "{line}");
    }
    // The fix names the chart's value that puts the agent on the node's network, as the chart's
    // values.yaml spells it.
    let fix = line["fix"].as_str().unwrap_or_default();
    assert!(fix.contains("--set hostNetwork=true"), "{line}");
    let values = std::fs::read_to_string(
        crate::ops::repo().join("deploy/helm/azure-scheduled-events-exporter/values.yaml"),
    )?;
    assert!(
        values.lines().any(|l| l == "hostNetwork: false"),
        "the chart has no top-level hostNetwork value"
    );
    let failures = |text: &str| {
        Exposition(text.to_owned()).get(r#"azure_scheduled_events_imds_request_failures_total{operation="events",reason="connect_timeout"}"#)
    };
    agent
        .wait_for_metrics("4 connect timeouts", |text| failures(text) >= 4.0)
        .await?;
    assert!(failures(&agent.metrics()?) >= 4.0);
    let again: Vec<_> = agent
        .lines_so_far()?
        .into_iter()
        .filter(|l| l.get("likely_causes").is_some())
        .collect();
    assert!(
        again.is_empty(),
        "logged once per outage, not per try: {again:?}"
    );
    agent.terminate()?;
    Ok(())
}
