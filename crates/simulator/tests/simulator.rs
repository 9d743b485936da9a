//! The simulator as a client sees it: real HTTP on 127.0.0.1, answered the way Azure IMDS
//! answers, steered through the control API, failing on purpose when told to.
//!
//! Timelines here are seconds long; the pure core's unit tests cover the same lifecycle with
//! explicit clocks. Waits poll with generous deadlines, so a busy machine slows the tests down
//! instead of failing them.

use std::path::Path;
use std::time::{Duration, Instant};

use azure_scheduled_events_protocol::wire::{
    InstanceMetadata, ScheduledEvent, ScheduledEventsDocument,
};
use azure_scheduled_events_simulator::scenario::{HumanDuration, InitialStatus};
use azure_scheduled_events_simulator::{
    DEMO_OTHER_VM, DEMO_VM, Fault, FaultTarget, RunningSimulator, Scenario, ScenarioEvent,
    SimulatorHandle, example_compute,
};
use bytes::Bytes;
use reqwest::StatusCode;
use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// How long a wait may take on a busy machine before the test fails.
const PATIENCE: Duration = Duration::from_secs(20);

const VM: &str = "vmss_0";

struct Imds {
    server: RunningSimulator,
    client: reqwest::Client,
}

impl Imds {
    async fn start() -> Result<Self, Box<dyn std::error::Error>> {
        let sim = SimulatorHandle::with_seed(example_compute(VM), 42);
        let server = RunningSimulator::start(sim).await?;
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(Imds { server, client })
    }

    fn sim(&self) -> &SimulatorHandle {
        self.server.handle()
    }

    fn url(&self, path_and_query: &str) -> String {
        format!("{}{path_and_query}", self.server.url())
    }

    fn events_url(&self, version: &str) -> String {
        self.url(&format!("/metadata/scheduledevents?api-version={version}"))
    }

    /// A GET of the scheduled-events document as a well-behaved client sends it.
    async fn get(&self, version: &str) -> reqwest::Result<reqwest::Response> {
        self.get_url(&self.events_url(version)).await
    }

    /// A GET of any URL with `Metadata: true`.
    async fn get_url(&self, url: &str) -> reqwest::Result<reqwest::Response> {
        self.client.get(url).header("Metadata", "true").send().await
    }

    async fn document(
        &self,
        version: &str,
    ) -> Result<ScheduledEventsDocument, Box<dyn std::error::Error>> {
        let response = self.get(version).await?;
        assert_eq!(response.status(), StatusCode::OK);
        Ok(serde_json::from_slice(&response.bytes().await?)?)
    }

    async fn events(&self) -> Result<Vec<ScheduledEvent>, Box<dyn std::error::Error>> {
        Ok(self.document("2020-07-01").await?.events)
    }

    async fn approve(&self, body: &str) -> reqwest::Result<reqwest::Response> {
        self.client
            .post(self.events_url("2020-07-01"))
            .header("Metadata", "true")
            .body(body.to_owned())
            .send()
            .await
    }

    async fn control(
        &self,
        method: reqwest::Method,
        path: &str,
        body: &str,
    ) -> reqwest::Result<reqwest::Response> {
        self.client
            .request(method, self.url(&format!("/control/{path}")))
            .body(body.to_owned())
            .send()
            .await
    }

    /// Polls the document until `done` holds for its events, or fails after [`PATIENCE`].
    async fn wait_for(
        &self,
        what: &str,
        done: impl Fn(&[ScheduledEvent]) -> bool,
    ) -> Result<Vec<ScheduledEvent>, Box<dyn std::error::Error>> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let events = self.events().await?;
            if done(&events) {
                return Ok(events);
            }
            if Instant::now() > deadline {
                return Err(format!("gave up waiting for {what}; last seen {events:?}").into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn secs(s: u64) -> Option<HumanDuration> {
    Some(HumanDuration(Duration::from_secs(s)))
}

fn one_event(event: ScenarioEvent) -> Scenario {
    Scenario {
        name: Some("test".into()),
        loop_every: None,
        events: vec![event],
    }
}

fn status_is(events: &[ScheduledEvent], status: &str) -> bool {
    events.len() == 1 && events[0].event_status == status
}

async fn json(response: reqwest::Response) -> Result<Value, Box<dyn std::error::Error>> {
    Ok(serde_json::from_slice(&response.bytes().await?)?)
}

// ---------------------------------------------------------------- IMDS's own checks

#[tokio::test]
async fn scheduled_events_require_the_metadata_header() -> TestResult {
    let imds = Imds::start().await?;
    for request in [
        imds.client.get(imds.events_url("2020-07-01")),
        imds.client
            .get(imds.events_url("2020-07-01"))
            .header("Metadata", "false"),
        imds.client
            .post(imds.events_url("2020-07-01"))
            .body(r#"{"StartRequests":[]}"#),
    ] {
        let response = request.send().await?;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body = json(response).await?;
        assert_eq!(
            body["error"],
            "Bad request. Required metadata header not specified"
        );
    }
    Ok(())
}

#[tokio::test]
async fn requests_carrying_x_forwarded_for_are_rejected() -> TestResult {
    let imds = Imds::start().await?;
    let response = imds
        .client
        .get(imds.events_url("2020-07-01"))
        .header("Metadata", "true")
        .header("X-Forwarded-For", "10.0.0.1")
        .send()
        .await?;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(json(response).await?["error"].is_string());
    Ok(())
}

#[tokio::test]
async fn a_missing_or_undocumented_api_version_is_refused_with_newest_versions() -> TestResult {
    let imds = Imds::start().await?;
    for url in [
        imds.url("/metadata/scheduledevents"),
        imds.events_url("2021-02-01"),
        imds.events_url("latest"),
        imds.events_url(""),
    ] {
        let response = imds.get_url(&url).await?;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{url}");
        let body = json(response).await?;
        assert_eq!(
            body["error"],
            "Bad request. api-version was not specified or is invalid"
        );
        assert_eq!(
            body["newest-versions"],
            serde_json::json!(["2023-07-01", "2023-05-01", "2023-03-01"])
        );
    }
    Ok(())
}

#[tokio::test]
async fn every_documented_api_version_is_answered_with_json() -> TestResult {
    let imds = Imds::start().await?;
    for version in [
        "2017-03-01",
        "2017-08-01",
        "2017-11-01",
        "2019-01-01",
        "2019-04-01",
        "2019-08-01",
        "2020-07-01",
    ] {
        let response = imds.get(version).await?;
        assert_eq!(response.status(), StatusCode::OK, "{version}");
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok());
        assert_eq!(content_type, Some("application/json; charset=utf-8"));
        assert_eq!(
            response.text().await?,
            r#"{"DocumentIncarnation":1,"Events":[]}"#
        );
    }
    Ok(())
}

#[tokio::test]
async fn old_api_versions_lose_newer_fields_and_newer_event_types() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim().load_scenario(Scenario {
        name: None,
        loop_every: None,
        events: vec![
            ScenarioEvent {
                description: "maintenance".into(),
                duration_in_seconds: 5,
                ..ScenarioEvent::new("Freeze", &[VM])
            },
            ScenarioEvent::new("Preempt", &[VM]),
            ScenarioEvent::new("Terminate", &[VM]),
        ],
    });

    let old = imds.document("2017-08-01").await?;
    let types: Vec<&str> = old.events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["Freeze"]);
    let freeze = &old.events[0];
    assert_eq!(freeze.description, None);
    assert_eq!(freeze.event_source, None);
    assert_eq!(freeze.duration_in_seconds, None);
    assert_eq!(
        freeze
            .resources
            .as_ref()
            .map(|r| r.iter().collect::<Vec<_>>()),
        Some(vec![VM])
    );

    let types_in = |doc: &ScheduledEventsDocument| -> Vec<String> {
        doc.events.iter().map(|e| e.event_type.clone()).collect()
    };
    assert_eq!(
        types_in(&imds.document("2017-11-01").await?),
        ["Freeze", "Preempt"]
    );

    let new = imds.document("2020-07-01").await?;
    assert_eq!(types_in(&new), ["Freeze", "Preempt", "Terminate"]);
    let freeze = &new.events[0];
    assert_eq!(freeze.description.as_deref(), Some("maintenance"));
    assert_eq!(freeze.event_source.as_deref(), Some("Platform"));
    assert_eq!(freeze.duration_in_seconds, Some(5));
    assert_eq!(freeze.resource_type.as_deref(), Some("VirtualMachine"));
    Ok(())
}

#[tokio::test]
async fn the_incarnation_increments_on_change_and_not_otherwise() -> TestResult {
    let imds = Imds::start().await?;
    let incarnation =
        |doc: &ScheduledEventsDocument| serde_json::to_value(&doc.document_incarnation);
    assert_eq!(incarnation(&imds.document("2020-07-01").await?)?, 1);
    assert_eq!(incarnation(&imds.document("2020-07-01").await?)?, 1);

    let id = imds.sim().add_event(ScenarioEvent::new("Reboot", &[VM]))?;
    assert_eq!(incarnation(&imds.document("2020-07-01").await?)?, 2);
    assert_eq!(incarnation(&imds.document("2019-01-01").await?)?, 2);

    assert!(imds.sim().remove_event(&id));
    let doc = imds.document("2020-07-01").await?;
    assert_eq!(incarnation(&doc)?, 3);
    assert!(doc.events.is_empty());
    assert_eq!(incarnation(&imds.document("2020-07-01").await?)?, 3);
    Ok(())
}

// ---------------------------------------------------------------- lifecycle

#[tokio::test]
async fn a_scenario_event_is_scheduled_then_started_at_not_before_then_removed_after_runs_for()
-> TestResult {
    let imds = Imds::start().await?;
    imds.sim().load_scenario(one_event(ScenarioEvent {
        notice: secs(2),
        runs_for: secs(2),
        ..ScenarioEvent::new("Freeze", &[VM, "vmss_1"])
    }));

    let events = imds.events().await?;
    assert!(status_is(&events, "Scheduled"), "{events:?}");
    let scheduled = &events[0];
    let not_before = scheduled.not_before.as_deref().unwrap_or_default();
    assert!(
        chrono::NaiveDateTime::parse_from_str(not_before, "%a, %d %b %Y %H:%M:%S GMT").is_ok(),
        "{not_before}"
    );
    let id = scheduled.event_id.clone();

    let events = imds
        .wait_for("Started", |e| status_is(e, "Started"))
        .await?;
    assert_eq!(events[0].event_id, id);
    assert_eq!(events[0].not_before.as_deref(), Some(""));

    imds.wait_for("removal", <[ScheduledEvent]>::is_empty)
        .await?;
    Ok(())
}

#[tokio::test]
async fn an_approval_starts_the_event_early_and_is_recorded() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim().load_scenario(one_event(ScenarioEvent {
        id: Some("C7061BAC-AFDC-4513-B24B-AA5F13A16123".into()),
        notice: secs(600),
        runs_for: secs(600),
        ..ScenarioEvent::new("Freeze", &[VM])
    }));
    assert!(status_is(&imds.events().await?, "Scheduled"));

    let response = imds
        .approve(r#"{"StartRequests":[{"EventId":"C7061BAC-AFDC-4513-B24B-AA5F13A16123"}]}"#)
        .await?;
    assert_eq!(response.status(), StatusCode::OK);

    let events = imds.events().await?;
    assert!(status_is(&events, "Started"), "{events:?}");
    assert_eq!(events[0].not_before.as_deref(), Some(""));

    // Approving again (as a second VM would) is still fine.
    let again = imds
        .approve(r#"{"StartRequests":[{"EventId":"C7061BAC-AFDC-4513-B24B-AA5F13A16123"}]}"#)
        .await?;
    assert_eq!(again.status(), StatusCode::OK);

    let approvals = imds.sim().approvals();
    assert_eq!(approvals.len(), 2);
    assert!(
        approvals
            .iter()
            .all(|a| a.event_id == "C7061BAC-AFDC-4513-B24B-AA5F13A16123" && a.known)
    );
    Ok(())
}

#[tokio::test]
async fn a_malformed_approval_is_refused() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim().add_event(ScenarioEvent::new("Freeze", &[VM]))?;
    for body in [
        "",
        "{",
        r#"{"StartRequests":{"EventId":"x"}}"#,
        r#"{"EventId":"x"}"#,
        "[]",
    ] {
        let response = imds.approve(body).await?;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{body:?}");
        assert!(json(response).await?["error"].is_string());
    }
    assert!(imds.sim().approvals().is_empty());
    assert!(status_is(&imds.events().await?, "Scheduled"));
    Ok(())
}

#[tokio::test]
async fn an_approval_of_an_unknown_event_is_refused_but_recorded() -> TestResult {
    let imds = Imds::start().await?;
    let id = imds.sim().add_event(ScenarioEvent::new("Freeze", &[VM]))?;
    let response = imds
        .approve(&format!(
            r#"{{"StartRequests":[{{"EventId":"{id}"}},{{"EventId":"NOT-THERE"}}]}}"#
        ))
        .await?;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let recorded: Vec<(String, bool)> = imds
        .sim()
        .approvals()
        .into_iter()
        .map(|a| (a.event_id, a.known))
        .collect();
    assert_eq!(recorded, [(id, true), ("NOT-THERE".to_owned(), false)]);
    // A request with any unknown id approves nothing.
    assert!(status_is(&imds.events().await?, "Scheduled"));
    Ok(())
}

#[tokio::test]
async fn cancel_after_removes_an_event_while_it_is_still_scheduled() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim().load_scenario(one_event(ScenarioEvent {
        notice: secs(600),
        cancel_after: secs(1),
        ..ScenarioEvent::new("Redeploy", &[VM])
    }));
    assert!(status_is(&imds.events().await?, "Scheduled"));
    let events = imds
        .wait_for("cancellation", |events| !status_is(events, "Scheduled"))
        .await?;
    assert!(events.is_empty(), "{events:?}");
    Ok(())
}

#[tokio::test]
async fn a_hardware_failure_appears_already_started() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim().load_scenario(one_event(ScenarioEvent {
        status: InitialStatus::Started,
        runs_for: secs(600),
        ..ScenarioEvent::new("Reboot", &[VM])
    }));
    let events = imds.events().await?;
    assert!(status_is(&events, "Started"), "{events:?}");
    assert_eq!(events[0].not_before.as_deref(), Some(""));
    Ok(())
}

#[tokio::test]
async fn generated_event_ids_are_upper_case_guids() -> TestResult {
    let imds = Imds::start().await?;
    let id = imds.sim().add_event(ScenarioEvent::new("Freeze", &[VM]))?;
    let lengths: Vec<usize> = id.split('-').map(str::len).collect();
    assert_eq!(lengths, [8, 4, 4, 4, 12], "{id}");
    assert!(
        id.chars()
            .all(|c| c == '-' || c.is_ascii_digit() || c.is_ascii_uppercase()),
        "{id}"
    );
    assert_eq!(imds.events().await?[0].event_id, id);
    Ok(())
}

/// A document laid out the way PowerShell prints one (CRLF, ragged indentation), which a
/// re-serialising simulator would not reproduce.
const REAL_DOCUMENT: &str = "{\r\n    \"DocumentIncarnation\":  2,\r\n    \"Events\":  [\r\n                   {\r\n                       \"EventId\":  \"C7061BAC-AFDC-4513-B24B-AA5F13A16123\",\r\n                       \"EventStatus\":  \"Scheduled\",\r\n                       \"EventType\":  \"Freeze\",\r\n                       \"ResourceType\":  \"VirtualMachine\",\r\n                       \"Resources\":  [\r\n                                         \"WestNO_0\",\r\n                                         \"WestNO_1\"\r\n                                     ],\r\n                       \"NotBefore\":  \"Mon, 11 Apr 2022 22:26:58 GMT\",\r\n                       \"DurationInSeconds\":  5\r\n                   }\r\n               ]\r\n}";

#[tokio::test]
async fn a_document_set_verbatim_is_served_byte_for_byte() -> TestResult {
    let imds = Imds::start().await?;
    for body in [
        REAL_DOCUMENT.as_bytes().to_vec(),
        b"<html>not even JSON\xff</html>".to_vec(),
    ] {
        imds.sim().set_document(Bytes::from(body.clone()));
        for version in ["2017-08-01", "2020-07-01"] {
            let response = imds.get(version).await?;
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(response.bytes().await?.to_vec(), body);
        }
    }
    imds.sim().clear_document();
    assert_eq!(
        imds.get("2020-07-01").await?.text().await?,
        r#"{"DocumentIncarnation":1,"Events":[]}"#
    );
    Ok(())
}

#[tokio::test]
async fn instance_metadata_describes_the_vm() -> TestResult {
    let imds = Imds::start().await?;
    let url = imds.url("/metadata/instance?api-version=2021-02-01");
    let response = imds.get_url(&url).await?;
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.bytes().await?;
    let metadata: InstanceMetadata = serde_json::from_slice(&body)?;
    assert_eq!(metadata.compute, example_compute(VM));
    let raw: Value = serde_json::from_slice(&body)?;
    assert!(raw["network"]["interface"].is_array());

    let compute = imds
        .get_url(&imds.url("/metadata/instance/compute?api-version=2017-04-02"))
        .await?;
    assert_eq!(json(compute).await?["name"], VM);

    let no_header = imds.client.get(&url).send().await?;
    assert_eq!(no_header.status(), StatusCode::BAD_REQUEST);
    let too_old = imds
        .get_url(&imds.url("/metadata/instance?api-version=2017-03-01"))
        .await?;
    assert_eq!(too_old.status(), StatusCode::BAD_REQUEST);
    assert!(json(too_old).await?["newest-versions"].is_array());
    Ok(())
}

#[tokio::test]
async fn unknown_paths_are_404_and_wrong_methods_405() -> TestResult {
    let imds = Imds::start().await?;
    let missing = imds
        .client
        .get(imds.url("/metadata/nothing?api-version=2020-07-01"))
        .send()
        .await?;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let missing = imds.client.get(imds.url("/control/nothing")).send().await?;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    let wrong = imds
        .client
        .put(imds.events_url("2020-07-01"))
        .header("Metadata", "true")
        .send()
        .await?;
    assert_eq!(wrong.status(), StatusCode::METHOD_NOT_ALLOWED);
    let wrong = imds.control(reqwest::Method::POST, "state", "").await?;
    assert_eq!(wrong.status(), StatusCode::METHOD_NOT_ALLOWED);
    Ok(())
}

// ---------------------------------------------------------------- faults

#[tokio::test]
async fn a_status_fault_answers_its_count_of_requests_then_normal_answers_resume() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim().inject_fault(Fault::status(503).times(2));
    for _ in 0..2 {
        let response = imds.get("2020-07-01").await?;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(json(response).await?["error"], "Service Unavailable");
    }
    assert_eq!(imds.get("2020-07-01").await?.status(), StatusCode::OK);
    assert!(imds.sim().faults().is_empty());
    Ok(())
}

#[tokio::test]
async fn a_429_fault_carries_retry_after_and_a_custom_body_is_served_as_given() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim()
        .inject_fault(Fault::status(429).with_retry_after(2));
    imds.sim().inject_fault(
        Fault::status(500).with_body("<html><body>IIS 500 Internal Server Error</body></html>"),
    );

    let limited = imds.get("2020-07-01").await?;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        limited
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("2")
    );

    let iis = imds.get("2020-07-01").await?;
    assert_eq!(iis.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        iis.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(
        iis.text().await?,
        "<html><body>IIS 500 Internal Server Error</body></html>"
    );
    Ok(())
}

#[tokio::test]
async fn a_delay_fault_holds_the_answer_for_at_least_the_delay() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim()
        .inject_fault(Fault::delay(Duration::from_millis(1500)));
    let started = Instant::now();
    let response = imds.get("2020-07-01").await?;
    let waited = started.elapsed();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        waited >= Duration::from_millis(1500),
        "answered after {waited:?}"
    );
    eprintln!("delayed answer after {waited:?}");
    Ok(())
}

#[tokio::test]
async fn a_garbage_fault_answers_200_with_a_body_that_is_not_json() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim().inject_fault(Fault::garbage());
    let response = imds.get("2020-07-01").await?;
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.bytes().await?;
    assert!(serde_json::from_slice::<Value>(&body).is_err());
    Ok(())
}

#[tokio::test]
async fn a_truncated_fault_answers_200_with_json_cut_in_half() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim().add_event(ScenarioEvent::new("Freeze", &[VM]))?;
    let whole = imds.get("2020-07-01").await?.bytes().await?;
    imds.sim().inject_fault(Fault::truncated());
    let response = imds.get("2020-07-01").await?;
    assert_eq!(response.status(), StatusCode::OK);
    let length = response
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let cut = response.bytes().await?;
    assert_eq!(length, Some(cut.len()));
    assert_eq!(cut.len(), whole.len() / 2);
    assert_eq!(&whole[..cut.len()], &cut[..]);
    assert!(serde_json::from_slice::<ScheduledEventsDocument>(&cut).is_err());
    Ok(())
}

#[tokio::test]
async fn a_drop_fault_closes_the_connection_without_an_answer() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim().inject_fault(Fault::drop_connection());
    let result = imds.get("2020-07-01").await;
    assert!(result.is_err(), "got an answer: {result:?}");
    assert_eq!(imds.get("2020-07-01").await?.status(), StatusCode::OK);
    assert_eq!(imds.sim().requests(), 2);
    Ok(())
}

#[tokio::test]
async fn a_faulted_approval_is_not_processed() -> TestResult {
    let imds = Imds::start().await?;
    let id = imds.sim().add_event(ScenarioEvent::new("Freeze", &[VM]))?;
    imds.sim().inject_fault(Fault::status(500));
    let body = format!(r#"{{"StartRequests":[{{"EventId":"{id}"}}]}}"#);
    assert_eq!(
        imds.approve(&body).await?.status(),
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert!(imds.sim().approvals().is_empty());
    assert!(status_is(&imds.events().await?, "Scheduled"));
    Ok(())
}

#[tokio::test]
async fn faults_hit_only_their_target_and_until_cleared_lasts_until_cleared() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim()
        .inject_fault(Fault::status(410).on(FaultTarget::Instance).until_cleared());
    let instance_url = imds.url("/metadata/instance?api-version=2021-02-01");
    for _ in 0..3 {
        let response = imds.get_url(&instance_url).await?;
        assert_eq!(response.status(), StatusCode::GONE);
    }
    assert_eq!(imds.get("2020-07-01").await?.status(), StatusCode::OK);
    imds.sim().clear_faults();
    let response = imds.get_url(&instance_url).await?;
    assert_eq!(response.status(), StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn every_scheduled_events_request_is_counted_whatever_the_answer() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim().inject_fault(Fault::status(503));
    let _ = imds.get("2020-07-01").await?;
    let _ = imds
        .client
        .get(imds.events_url("2020-07-01"))
        .send()
        .await?;
    let _ = imds.get("2020-07-01").await?;
    let _ = imds
        .client
        .get(imds.url("/metadata/instance?api-version=2021-02-01"))
        .send()
        .await?;
    assert_eq!(imds.sim().requests(), 3);
    Ok(())
}

#[tokio::test]
async fn an_approvals_fault_fails_only_the_post_and_polls_are_answered_meanwhile() -> TestResult {
    use reqwest::Method;
    let imds = Imds::start().await?;
    let id = imds.sim().add_event(ScenarioEvent::new("Freeze", &[VM]))?;
    let injected = imds
        .control(
            Method::POST,
            "faults",
            r#"{"kind":"status","status":500,"count":2,"target":"approvals"}"#,
        )
        .await?;
    assert_eq!(injected.status(), StatusCode::NO_CONTENT);
    let body = format!(r#"{{"StartRequests":[{{"EventId":"{id}"}}]}}"#);
    for _ in 0..2 {
        assert!(status_is(&imds.events().await?, "Scheduled"), "GETs pass");
        assert_eq!(
            imds.approve(&body).await?.status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
    assert!(
        imds.sim().approvals().is_empty(),
        "a faulted POST approves nothing"
    );
    assert!(
        imds.sim().faults().is_empty(),
        "both counts used up by POSTs"
    );
    assert_eq!(imds.approve(&body).await?.status(), StatusCode::OK);
    imds.wait_for("the approved event to start", |e| status_is(e, "Started"))
        .await?;
    Ok(())
}

#[tokio::test]
async fn the_request_log_lists_each_request_with_its_method_header_fault_and_body() -> TestResult {
    use reqwest::Method;
    let imds = Imds::start().await?;
    let id = imds.sim().add_event(ScenarioEvent::new("Freeze", &[VM]))?;
    let body = format!(r#"{{"StartRequests":[{{"EventId":"{id}"}}]}}"#);
    let _ = imds.get("2020-07-01").await?;
    imds.sim()
        .inject_fault(Fault::status(503).on(FaultTarget::Approvals));
    let _ = imds.approve(&body).await?;
    let _ = imds.approve(&body).await?;
    let _ = imds
        .client
        .get(imds.events_url("2020-07-01"))
        .send()
        .await?;
    let _ = imds
        .get_url(&imds.url("/metadata/instance?api-version=2021-02-01"))
        .await?;

    let log = imds.sim().request_log();
    let summary: Vec<(u64, &str, Option<&str>, Option<&str>)> = log
        .iter()
        .map(|r| {
            (
                r.number,
                r.method.as_str(),
                r.metadata.as_deref(),
                r.fault.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (1, "GET", Some("true"), None),
            (2, "POST", Some("true"), Some("status")),
            (3, "POST", Some("true"), None),
            (4, "GET", None, None),
        ],
        "instance metadata is not logged"
    );
    let bodies: Vec<Option<&str>> = log.iter().map(|r| r.body.as_deref()).collect();
    assert_eq!(bodies, [None, None, Some(body.as_str()), None]);
    assert!(
        log.windows(2).all(|w| w[0].at <= w[1].at),
        "in arrival order"
    );
    assert_eq!(imds.sim().requests(), 4);

    let response = imds.control(Method::GET, "requests", "").await?;
    assert_eq!(response.status(), StatusCode::OK);
    let listed = json(response).await?;
    assert_eq!(listed[2]["method"], "POST");
    assert_eq!(listed[2]["body"], body.as_str());
    assert_eq!(listed[1]["fault"], "status");
    assert_eq!(listed[3]["metadata"], Value::Null);
    assert_eq!(listed.as_array().map(Vec::len), Some(4));
    Ok(())
}

// ---------------------------------------------------------------- scenarios

#[test]
fn the_shipped_scenarios_parse() -> TestResult {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut parsed = 0;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            Scenario::from_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            parsed += 1;
        }
    }
    assert!(parsed >= 3, "only {parsed} scenarios in {}", dir.display());
    Ok(())
}

#[test]
fn the_shipped_demo_file_is_the_built_in_demo() -> TestResult {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/demo.yaml");
    assert_eq!(
        Scenario::from_file(&path)?,
        Scenario::demo(DEMO_VM, DEMO_OTHER_VM)
    );
    Ok(())
}

#[test]
fn a_scenario_with_an_unknown_field_is_rejected_naming_the_field() {
    let yaml = Scenario::parse("events:\n  - type: Freeze\n    resource: [vm_0]\n");
    assert!(yaml.is_err_and(|e| e.to_string().contains("resource")));
    let json = Scenario::parse(r#"{"events":[{"type":"Freeze","runsfor":"5s"}]}"#);
    assert!(json.is_err_and(|e| e.to_string().contains("runsfor")));
}

#[test]
fn a_missing_scenario_file_names_the_path() {
    let error = Scenario::from_file(Path::new("/nonexistent/scenario.yaml"));
    assert!(error.is_err_and(|e| e.to_string().contains("/nonexistent/scenario.yaml")));
}

#[tokio::test]
async fn a_looping_scenario_replays_with_fresh_event_ids() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim().load_scenario(Scenario::parse(
        "loop: 2s\nevents:\n  - type: Freeze\n    resources: [vmss_0]\n    notice: 30s\n    cancel_after: 1s\n",
    )?);
    let first = imds
        .wait_for("the first appearance", |e| e.len() == 1)
        .await?;
    let second = imds
        .wait_for("a new appearance", |e| {
            e.len() == 1 && e[0].event_id != first[0].event_id
        })
        .await?;
    assert_eq!(second[0].event_status, "Scheduled");
    Ok(())
}

// ---------------------------------------------------------------- control API

#[tokio::test]
async fn the_control_state_shows_document_approvals_faults_and_requests() -> TestResult {
    let imds = Imds::start().await?;
    let id = imds.sim().add_event(ScenarioEvent::new("Freeze", &[VM]))?;
    imds.approve(&format!(r#"{{"StartRequests":[{{"EventId":"{id}"}}]}}"#))
        .await?;
    imds.sim().inject_fault(Fault::garbage().times(3));

    let state = json(imds.control(reqwest::Method::GET, "state", "").await?).await?;
    assert_eq!(state["document"]["Events"][0]["EventId"], id.as_str());
    assert_eq!(state["document"]["Events"][0]["EventStatus"], "Started");
    assert_eq!(state["approvals"][0]["event_id"], id.as_str());
    assert_eq!(state["approvals"][0]["known"], true);
    assert_eq!(
        state["faults"][0],
        serde_json::json!({"kind": "garbage", "count": 3, "target": "scheduled_events"})
    );
    assert_eq!(state["requests"], 1);
    assert_eq!(state["verbatim_document"], Value::Null);
    Ok(())
}

#[tokio::test]
async fn a_document_put_through_the_control_api_is_served_verbatim_until_deleted() -> TestResult {
    use reqwest::Method;
    let imds = Imds::start().await?;
    let body = "{\"DocumentIncarnation\": \"abc123\", \"Events\": [ ]}";
    let put = imds.control(Method::PUT, "document", body).await?;
    assert_eq!(put.status(), StatusCode::NO_CONTENT);
    assert_eq!(imds.get("2019-01-01").await?.text().await?, body);
    let state = json(imds.control(Method::GET, "state", "").await?).await?;
    assert_eq!(state["verbatim_document"], body);

    let delete = imds.control(Method::DELETE, "document", "").await?;
    assert_eq!(delete.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        imds.get("2019-01-01").await?.text().await?,
        r#"{"DocumentIncarnation":1,"Events":[]}"#
    );
    Ok(())
}

#[tokio::test]
async fn scenarios_load_through_the_control_api_as_yaml_or_json() -> TestResult {
    use reqwest::Method;
    let imds = Imds::start().await?;
    let yaml = imds
        .control(
            Method::POST,
            "scenario",
            "name: y\nevents:\n  - type: Reboot\n    resources: [vmss_0]\n",
        )
        .await?;
    assert_eq!(yaml.status(), StatusCode::OK);
    assert_eq!(
        json(yaml).await?,
        serde_json::json!({"name": "y", "events": 1})
    );
    assert_eq!(imds.events().await?[0].event_type, "Reboot");

    let body = r#"{"events":[{"type":"Preempt","resources":["vmss_0"]},{"type":"Freeze"}]}"#;
    let json_scenario = imds.control(Method::POST, "scenario", body).await?;
    assert_eq!(json_scenario.status(), StatusCode::OK);
    let types: Vec<String> = imds
        .events()
        .await?
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(types, ["Preempt", "Freeze"]);

    let typo = imds
        .control(
            Method::POST,
            "scenario",
            "events:\n  - type: Reboot\n    notcie: 1m\n",
        )
        .await?;
    assert_eq!(typo.status(), StatusCode::BAD_REQUEST);
    let message = json(typo).await?["error"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("notcie"), "{message}");
    Ok(())
}

#[tokio::test]
async fn events_are_added_and_removed_through_the_control_api() -> TestResult {
    use reqwest::Method;
    let imds = Imds::start().await?;
    let added = imds
        .control(
            Method::POST,
            "events",
            r#"{"id":"A1","type":"Terminate","resources":["vmss_0"],"notice":"5m"}"#,
        )
        .await?;
    assert_eq!(added.status(), StatusCode::CREATED);
    assert_eq!(json(added).await?, serde_json::json!({"EventId": "A1"}));

    let generated = imds
        .control(
            Method::POST,
            "events",
            "type: Freeze\nresources: [vmss_0]\n",
        )
        .await?;
    assert_eq!(generated.status(), StatusCode::CREATED);
    let generated_id = json(generated).await?["EventId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(generated_id.len(), 36);

    let duplicate = imds
        .control(Method::POST, "events", r#"{"id":"A1","type":"Freeze"}"#)
        .await?;
    assert_eq!(duplicate.status(), StatusCode::CONFLICT);
    let invalid = imds
        .control(Method::POST, "events", r#"{"typ":"Freeze"}"#)
        .await?;
    assert_eq!(invalid.status(), StatusCode::BAD_REQUEST);

    let ids: Vec<String> = imds
        .events()
        .await?
        .into_iter()
        .map(|e| e.event_id)
        .collect();
    assert_eq!(ids, ["A1".to_owned(), generated_id.clone()]);

    let removed = imds.control(Method::DELETE, "events/A1", "").await?;
    assert_eq!(removed.status(), StatusCode::NO_CONTENT);
    let again = imds.control(Method::DELETE, "events/A1", "").await?;
    assert_eq!(again.status(), StatusCode::NOT_FOUND);
    let ids: Vec<String> = imds
        .events()
        .await?
        .into_iter()
        .map(|e| e.event_id)
        .collect();
    assert_eq!(ids, [generated_id]);
    Ok(())
}

#[tokio::test]
async fn faults_are_injected_and_cleared_through_the_control_api() -> TestResult {
    use reqwest::Method;
    let imds = Imds::start().await?;
    let injected = imds
        .control(
            Method::POST,
            "faults",
            r#"{"kind":"status","status":503,"until_cleared":true}"#,
        )
        .await?;
    assert_eq!(injected.status(), StatusCode::NO_CONTENT);
    assert_eq!(
        imds.get("2020-07-01").await?.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        imds.get("2020-07-01").await?.status(),
        StatusCode::SERVICE_UNAVAILABLE
    );

    let cleared = imds.control(Method::DELETE, "faults", "").await?;
    assert_eq!(cleared.status(), StatusCode::NO_CONTENT);
    assert_eq!(imds.get("2020-07-01").await?.status(), StatusCode::OK);

    let typo = imds
        .control(Method::POST, "faults", r#"{"kind":"status","stauts":503}"#)
        .await?;
    assert_eq!(typo.status(), StatusCode::BAD_REQUEST);
    Ok(())
}

#[tokio::test]
async fn stopping_the_server_closes_the_port() -> TestResult {
    let imds = Imds::start().await?;
    let url = imds.events_url("2020-07-01");
    assert_eq!(imds.get("2020-07-01").await?.status(), StatusCode::OK);
    let Imds { server, client } = imds;
    server.stop().await?;
    let result = client.get(&url).header("Metadata", "true").send().await;
    assert!(result.is_err(), "still answering: {result:?}");
    Ok(())
}
