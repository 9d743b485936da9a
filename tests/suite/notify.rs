//! Notifications as receivers get them: real HTTP over loopback to receivers written here, each
//! body checked against the receiver's documented schema, retries and refusals, a receiver that
//! hangs or is down, a restart with the same state file, and a receiver behind an HTTPS proxy.

use crate::common;
pub(crate) mod receiver;

use std::time::Duration;

use azure_scheduled_events_exporter::config::notify::FIELDS;
use azure_scheduled_events_simulator::Scenario;
use chrono::{DateTime, Utc};
use common::process::{AgentProcess, command};
use common::{Agent, Exposition, Imds, THIS_VM, TempDir, TestResult, document};
use receiver::{Answer, Hit, Proxy, Receiver, status};
use serde_json::Value;

const REBOOT: &str = "5DD55B64-45AD-49D3-BBC9-F57D4EA97BD7";
const OTHER: &str = "0E1C5A6B-8A2E-4D63-9D5F-2B0C2F9E7A11";

/// `NotBefore` as Azure writes it, `minutes` from now.
fn not_before(minutes: i64) -> String {
    (Utc::now() + chrono::TimeDelta::minutes(minutes))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}

/// One event as IMDS lists it.
fn event(id: &str, event_type: &str, status: &str, vm: &str) -> Value {
    serde_json::json!({
        "EventId": id,
        "EventStatus": status,
        "EventType": event_type,
        "ResourceType": "VirtualMachine",
        "Resources": [vm],
        "NotBefore": if status == "Scheduled" { not_before(10) } else { String::new() },
        "Description": "Virtual machine is going to be restarted as requested by authorized user.",
        "EventSource": "User",
        "DurationInSeconds": -1,
    })
}

fn write(dir: &TempDir, name: &str, text: &str) -> Result<String, std::io::Error> {
    let path = dir.path(name);
    std::fs::write(&path, text)?;
    Ok(path.display().to_string())
}

fn notifications(exposition: &Exposition, receiver: &str, result: &str) -> f64 {
    exposition.get(&format!(
        r#"azure_scheduled_events_notifications_total{{receiver="{receiver}",result="{result}"}}"#
    ))
}

fn transitions(hits: &[Hit]) -> Vec<String> {
    hits.iter()
        .map(|h| h.json()["transition"].as_str().unwrap_or("?").to_owned())
        .collect()
}

fn text_len(value: &Value) -> usize {
    value.as_str().map_or(0, |s| s.chars().count())
}

/// Slack incoming webhooks: `text` (required when blocks are given, as the fallback), and
/// Block Kit blocks: header (plain_text, at most 150 characters), section (mrkdwn text at most
/// 3000 characters, or at most 10 fields of at most 2000).
fn assert_slack(body: &Value) {
    assert!(text_len(&body["text"]) > 0, "text: {body}");
    let blocks = body["blocks"].as_array().cloned().unwrap_or_default();
    assert!(!blocks.is_empty() && blocks.len() <= 50, "blocks: {body}");
    for block in &blocks {
        match block["type"].as_str() {
            Some("header") => {
                assert_eq!(block["text"]["type"], "plain_text", "{block}");
                let length = text_len(&block["text"]["text"]);
                assert!((1..=150).contains(&length), "{block}");
            }
            Some("section") => {
                let has_text = block.get("text").is_some();
                let fields = block["fields"].as_array().cloned().unwrap_or_default();
                assert!(has_text || !fields.is_empty(), "{block}");
                if has_text {
                    assert_eq!(block["text"]["type"], "mrkdwn", "{block}");
                    assert!((1..=3000).contains(&text_len(&block["text"]["text"])));
                }
                assert!(fields.len() <= 10, "{block}");
                for field in fields {
                    assert_eq!(field["type"], "mrkdwn", "{field}");
                    assert!((1..=2000).contains(&text_len(&field["text"])), "{field}");
                }
            }
            other => panic!("unexpected block type {other:?}: {block}"),
        }
    }
}

/// A Teams Workflows webhook ("Post to a channel when a webhook request is received"): a
/// `message` whose attachment is an Adaptive Card of version 1.4 or later.
fn assert_teams(body: &Value) {
    assert_eq!(body["type"], "message", "{body}");
    let attachments = body["attachments"].as_array().cloned().unwrap_or_default();
    assert_eq!(attachments.len(), 1, "{body}");
    let attachment = &attachments[0];
    assert_eq!(
        attachment["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    let card = &attachment["content"];
    assert_eq!(card["type"], "AdaptiveCard", "{card}");
    assert_eq!(
        card["$schema"],
        "http://adaptivecards.io/schemas/adaptive-card.json"
    );
    let version: Vec<u32> = card["version"]
        .as_str()
        .unwrap_or("")
        .split('.')
        .filter_map(|p| p.parse().ok())
        .collect();
    assert!(version >= vec![1, 4], "version {:?}", card["version"]);
    let elements = card["body"].as_array().cloned().unwrap_or_default();
    assert!(!elements.is_empty(), "{card}");
    for element in &elements {
        match element["type"].as_str() {
            Some("TextBlock") => assert!(text_len(&element["text"]) > 0, "{element}"),
            Some("FactSet") => {
                for fact in element["facts"].as_array().cloned().unwrap_or_default() {
                    assert!(
                        fact["title"].is_string() && fact["value"].is_string(),
                        "{fact}"
                    );
                }
            }
            other => panic!("unexpected card element {other:?}: {element}"),
        }
    }
}

/// PagerDuty Events API v2: routing_key, event_action, dedup_key (at most 255 characters); a
/// trigger also needs payload.summary (at most 1024), payload.source and payload.severity.
fn assert_pagerduty(body: &Value, action: &str) {
    assert_eq!(
        body["routing_key"], "R0UT1NGKEY0000000000000000000000",
        "{body}"
    );
    assert_eq!(body["event_action"], action, "{body}");
    assert!((1..=255).contains(&text_len(&body["dedup_key"])), "{body}");
    if action == "trigger" {
        let payload = &body["payload"];
        assert!(
            (1..=1024).contains(&text_len(&payload["summary"])),
            "{payload}"
        );
        assert!(text_len(&payload["source"]) > 0, "{payload}");
        assert!(
            ["critical", "error", "warning", "info"]
                .contains(&payload["severity"].as_str().unwrap_or("")),
            "{payload}"
        );
        if let Some(timestamp) = payload["timestamp"].as_str() {
            assert!(DateTime::parse_from_rfc3339(timestamp).is_ok(), "{payload}");
        }
    }
}

#[tokio::test]
async fn each_format_gets_a_body_its_receiver_accepts() -> TestResult {
    let imds = Imds::start().await?;
    let receiver = Receiver::start().await?;
    let dir = TempDir::new("notify-formats")?;
    let slack_url = write(&dir, "slack-url", &format!("{}\n", receiver.url("/slack")))?;
    let token = write(&dir, "token", "Bearer s3cret\n")?;
    let key = write(&dir, "pd-key", "R0UT1NGKEY0000000000000000000000\n")?;
    let template = write(
        &dir,
        "slack.j2",
        "{{ event_type }} {{ transition }} on {{ vm_name }} ({{ receiver }})",
    )?;
    let config = write(
        &dir,
        "receivers.yaml",
        &format!(
            r#"receivers:
  - name: generic
    url: {json}
    headers:
      Authorization: {{ value_file: {token} }}
      X-Team: platform
  - name: chat
    format: slack
    url_file: {slack_url}
    template_file: {template}
  - name: teams
    format: teams
    url: {teams}
  - name: pager
    format: pagerduty
    url: {pd}
    routing_key_file: {key}
  - name: everything
    url: {all}
    this_vm_only: false
    transitions: [scheduled, started, updated, completed, cancelled]
"#,
            json = receiver.url("/json"),
            teams = receiver.url("/teams"),
            pd = receiver.url("/pd"),
            all = receiver.url("/all"),
        ),
    )?;
    // Built once: its NotBefore must not move between documents.
    let other = event(OTHER, "Freeze", "Scheduled", "another-vm");
    imds.sim.set_document(document(
        1,
        &[event(REBOOT, "Reboot", "Scheduled", THIS_VM), other.clone()],
    ));
    let agent = Agent::start(&imds, &["--notify.config-file", &config]).await?;

    let json = receiver.wait_for("/json", 1).await?;
    let body = json[0].json();
    let mut keys: Vec<&str> = body
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    keys.sort_unstable();
    let mut expected = FIELDS.to_vec();
    expected.sort_unstable();
    assert_eq!(keys, expected, "the generic body's fields");
    assert_eq!(body["event_id"], REBOOT);
    assert_eq!(body["transition"], "scheduled");
    assert_eq!(body["vm_name"], THIS_VM);
    assert_eq!(body["event_type"], "Reboot");
    assert_eq!(body["event_status"], "Scheduled");
    assert_eq!(body["event_source"], "User");
    assert_eq!(body["affects_this_vm"], "true");
    assert_eq!(body["document_incarnation"], 1);
    assert_eq!(body["trace_id"].as_str().map(str::len), Some(32));
    assert!(DateTime::parse_from_rfc3339(body["timestamp"].as_str().unwrap_or("")).is_ok());
    assert_eq!(json[0].header("authorization"), Some("Bearer s3cret"));
    assert_eq!(json[0].header("x-team"), Some("platform"));
    assert_eq!(json[0].header("content-type"), Some("application/json"));

    let slack = receiver.wait_for("/slack", 1).await?[0].json();
    assert_slack(&slack);
    assert_eq!(
        slack["text"],
        format!("Reboot scheduled on {THIS_VM} (chat)")
    );
    assert_teams(&receiver.wait_for("/teams", 1).await?[0].json());
    let trigger = receiver.wait_for("/pd", 1).await?[0].json();
    assert_pagerduty(&trigger, "trigger");
    assert_eq!(trigger["payload"]["source"], THIS_VM);

    // Another VM's event goes only to the receiver that asked for every VM's.
    let all = receiver.wait_for("/all", 2).await?;
    let all_ids: Vec<String> = all
        .iter()
        .map(|h| h.json()["event_id"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(all_ids.contains(&OTHER.to_owned()), "{all_ids:?}");

    // Started, then gone: the incident PagerDuty opened resolves itself.
    imds.sim.set_document(document(
        2,
        &[event(REBOOT, "Reboot", "Started", THIS_VM), other],
    ));
    receiver.wait_for("/pd", 2).await?;
    imds.sim.set_document(document(3, &[]));
    let pd = receiver.wait_for("/pd", 3).await?;
    let actions: Vec<Value> = pd
        .iter()
        .map(|h| h.json()["event_action"].clone())
        .collect();
    assert_eq!(actions, ["trigger", "trigger", "resolve"]);
    assert_pagerduty(&pd[1].json(), "trigger");
    assert_pagerduty(&pd[2].json(), "resolve");
    let keys: Vec<Value> = pd.iter().map(|h| h.json()["dedup_key"].clone()).collect();
    assert!(keys.iter().all(|k| *k == keys[0]), "one incident: {keys:?}");
    for hit in receiver.wait_for("/slack", 3).await? {
        assert_slack(&hit.json());
    }
    for hit in receiver.wait_for("/teams", 3).await? {
        assert_teams(&hit.json());
    }
    assert_eq!(
        transitions(&receiver.wait_for("/json", 3).await?),
        ["scheduled", "started", "completed"]
    );
    let all = receiver.wait_for("/all", 5).await?;
    assert_eq!(
        all.iter()
            .filter(|h| h.json()["event_id"] == OTHER)
            .map(|h| h.json()["transition"].clone())
            .collect::<Vec<_>>(),
        ["scheduled", "cancelled"]
    );
    let exposition = agent
        .wait_for("every delivery counted", |e| {
            notifications(e, "pager", "delivered") == 3.0
        })
        .await?;
    assert_eq!(notifications(&exposition, "generic", "failed"), 0.0);
    assert!(
        exposition.has(r#"azure_scheduled_events_notifications_dropped_total{receiver="chat"} 0"#)
    );
    agent.stop().await
}

#[tokio::test]
async fn an_approval_is_notified_when_a_receiver_asks_for_it() -> TestResult {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(Scenario::parse(&format!(
        "events:\n  - {{ id: \"{REBOOT}\", type: Reboot, source: User, resources: [{THIS_VM}], notice: 10m }}\n"
    ))?);
    let receiver = Receiver::start().await?;
    let dir = TempDir::new("notify-approved")?;
    let config = write(
        &dir,
        "receivers.yaml",
        &format!(
            "receivers:\n  - name: approvals\n    url: {}\n    transitions: [approved]\n  - name: lifecycle\n    url: {}\n",
            receiver.url("/approvals"),
            receiver.url("/lifecycle")
        ),
    )?;
    let agent = Agent::start(&imds, &["--approve", "--notify.config-file", &config]).await?;
    let approved = receiver.wait_for("/approvals", 1).await?;
    assert_eq!(transitions(&approved), ["approved"]);
    assert_eq!(approved[0].json()["event_id"], REBOOT);
    assert!(!imds.sim.approvals().is_empty(), "IMDS got the approval");
    let lifecycle = receiver.wait_for("/lifecycle", 1).await?;
    assert_eq!(transitions(&lifecycle)[0], "scheduled");
    assert!(
        !transitions(&receiver.hits_on("/lifecycle")).contains(&"approved".to_owned()),
        "approvals only to receivers that list them"
    );
    agent.stop().await
}

#[tokio::test]
async fn every_update_of_an_event_is_notified() -> TestResult {
    let imds = Imds::start().await?;
    let receiver = Receiver::start().await?;
    let dir = TempDir::new("notify-updates")?;
    let config = write(
        &dir,
        "receivers.yaml",
        &format!(
            "receivers:\n  - name: updates\n    url: {}\n    transitions: [updated]\n",
            receiver.url("/updates")
        ),
    )?;
    let mut reboot = event(REBOOT, "Reboot", "Scheduled", THIS_VM);
    imds.sim.set_document(document(1, &[reboot.clone()]));
    let agent = Agent::start(&imds, &["--notify.config-file", &config]).await?;
    agent
        .wait_for("the first document", |e| e.up() == Some(1.0))
        .await?;
    // Azure moves NotBefore twice: two updates, each its own notification.
    for (incarnation, minutes) in [(2, 20), (3, 30)] {
        reboot["NotBefore"] = Value::from(not_before(minutes));
        imds.sim
            .set_document(document(incarnation, &[reboot.clone()]));
        receiver
            .wait_for("/updates", incarnation as usize - 1)
            .await?;
    }
    let hits = receiver.hits_on("/updates");
    assert_eq!(transitions(&hits), ["updated", "updated"]);
    assert_eq!(hits[1].json()["not_before"], reboot["NotBefore"]);
    agent.stop().await
}

#[tokio::test]
async fn a_503_then_200_delivers_once_and_retry_after_is_honoured() -> TestResult {
    let imds = Imds::start().await?;
    let receiver = Receiver::start().await?;
    receiver.script([
        Answer::Status {
            code: 429,
            retry_after: Some(1),
            body: "slow down",
        },
        status(503),
    ]);
    imds.sim.set_document(document(
        1,
        &[event(REBOOT, "Reboot", "Scheduled", THIS_VM)],
    ));
    let url = receiver.url("/hook");
    let agent = Agent::start(&imds, &["--notify.webhook-url", &url]).await?;
    let hits = receiver.wait_for("/hook", 3).await?;
    let exposition = agent
        .wait_for("the delivery counted", |e| {
            notifications(e, "webhook-1", "delivered") == 1.0
        })
        .await?;
    assert_eq!(notifications(&exposition, "webhook-1", "failed"), 0.0);
    assert!(
        hits[1].instant - hits[0].instant >= Duration::from_millis(950),
        "Retry-After: 1 was honoured: {:?}",
        hits[1].instant - hits[0].instant
    );
    assert!(
        hits.iter().all(|h| h.body == hits[0].body),
        "the same body each time"
    );
    // Thirty more polls: at least 1.5 s.
    imds.polled(30).await?;
    assert_eq!(receiver.hits_on("/hook").len(), 3, "nothing after the 200");
    agent.stop().await
}

#[tokio::test]
async fn a_400_is_not_retried() -> TestResult {
    let imds = Imds::start().await?;
    let receiver = Receiver::start().await?;
    receiver.then_answer(Answer::Status {
        code: 400,
        retry_after: None,
        body: "invalid_payload",
    });
    imds.sim.set_document(document(
        1,
        &[event(REBOOT, "Reboot", "Scheduled", THIS_VM)],
    ));
    let url = receiver.url("/hook");
    let agent = Agent::start(&imds, &["--notify.webhook-url", &url]).await?;
    agent
        .wait_for("the refusal counted", |e| {
            notifications(e, "webhook-1", "rejected") == 1.0
        })
        .await?;
    // Backoff starts at 500 ms: a retry would have come within forty polls (at least 2 s).
    imds.polled(40).await?;
    assert_eq!(receiver.hits_on("/hook").len(), 1);
    let exposition = agent.metrics().await?;
    assert_eq!(notifications(&exposition, "webhook-1", "delivered"), 0.0);
    assert_eq!(notifications(&exposition, "webhook-1", "failed"), 0.0);
    agent.stop().await
}

#[tokio::test]
async fn a_receiver_that_hangs_or_is_down_does_not_hold_up_polling() -> TestResult {
    let imds = Imds::start().await?;
    let hanging = Receiver::start().await?;
    hanging.then_answer(Answer::Hang);
    // Nothing listens on port 1, and the kernel never hands it out to a listener on port 0: a port
    // that was merely free could go to another test's receiver, which would then get this
    // agent's retries.
    let down = "127.0.0.1:1";
    let dir = TempDir::new("notify-hang")?;
    let config = write(
        &dir,
        "receivers.yaml",
        &format!(
            "receivers:\n  - name: hanging\n    url: {}\n    timeout: 60s\n  - name: down\n    url: http://{down}/hook\n",
            hanging.url("/hook")
        ),
    )?;
    imds.sim.set_document(document(
        1,
        &[event(REBOOT, "Reboot", "Scheduled", THIS_VM)],
    ));
    let agent = Agent::start(&imds, &["--notify.config-file", &config]).await?;
    hanging.wait_for("/hook", 1).await?;
    // While the first POST hangs and the other receiver refuses connections, the loop sees
    // every next document and answers scrapes.
    for (incarnation, state) in [(2, "Started"), (3, "")] {
        let events = if state.is_empty() {
            vec![]
        } else {
            vec![event(REBOOT, "Reboot", state, THIS_VM)]
        };
        imds.sim.set_document(document(incarnation, &events));
        let requests = imds.sim.requests();
        let exposition = agent
            .wait_for("the next document", |e| {
                e.value("azure_scheduled_events_document_incarnation") == Some(incarnation as f64)
            })
            .await?;
        assert!(imds.sim.requests() > requests);
        assert_eq!(
            notifications(&exposition, "hanging", "delivered")
                + notifications(&exposition, "hanging", "failed"),
            0.0,
            "the first POST still hangs"
        );
    }
    let exposition = agent.metrics().await?;
    assert_eq!(exposition.transitions("Reboot", "completed"), 1.0);
    assert_eq!(
        hanging.hits_on("/hook").len(),
        1,
        "one at a time per receiver"
    );
    agent.stop().await
}

#[tokio::test]
async fn a_restart_with_the_same_state_file_sends_nothing_twice() -> TestResult {
    let imds = Imds::start().await?;
    let receiver = Receiver::start().await?;
    let dir = TempDir::new("notify-restart")?;
    let state = dir.path("state.json").display().to_string();
    let state_flag = format!("--state.file={state}");
    let url = receiver.url("/hook");
    let flags = ["--notify.webhook-url", url.as_str(), state_flag.as_str()];
    imds.sim.set_document(document(
        1,
        &[event(REBOOT, "Reboot", "Scheduled", THIS_VM)],
    ));

    let first = Agent::start(&imds, &flags).await?;
    receiver.wait_for("/hook", 1).await?;
    first.stop().await?;
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&state)?)?;
    assert_eq!(
        written["notifications"][REBOOT]["webhook-1"],
        serde_json::json!(["scheduled"]),
        "{written}"
    );

    // The same document after a restart: the event is resumed, not new.
    let second = Agent::start(&imds, &flags).await?;
    second
        .wait_for("the first document", |e| e.up() == Some(1.0))
        .await?;
    imds.sim
        .set_document(document(2, &[event(REBOOT, "Reboot", "Started", THIS_VM)]));
    receiver.wait_for("/hook", 2).await?;
    second.stop().await?;

    let third = Agent::start(&imds, &flags).await?;
    third
        .wait_for("the first document", |e| e.up() == Some(1.0))
        .await?;
    imds.sim.set_document(document(3, &[]));
    let hits = receiver.wait_for("/hook", 3).await?;
    imds.polled(10).await?;
    assert_eq!(
        transitions(&receiver.hits_on("/hook")),
        ["scheduled", "started", "completed"],
        "each transition once across three runs: {hits:?}"
    );
    third.stop().await
}

#[tokio::test]
async fn an_event_that_comes_and_goes_under_one_incarnation_is_notified_once() -> TestResult {
    let imds = Imds::start().await?;
    let receiver = Receiver::start().await?;
    let url = receiver.url("/hook");
    // Two replicas answering in turn, one of them behind: the same incarnation with and without
    // the event.
    let with = document(4, &[event(REBOOT, "Reboot", "Scheduled", THIS_VM)]);
    let without = document(4, &[]);
    imds.sim.set_document(with.clone());
    let agent = Agent::start(&imds, &["--notify.webhook-url", url.as_str()]).await?;
    receiver.wait_for("/hook", 1).await?;
    for _ in 0..15 {
        imds.sim.set_document(without.clone());
        imds.polled(1).await?;
        imds.sim.set_document(with.clone());
        imds.polled(1).await?;
    }
    assert_eq!(
        transitions(&receiver.hits_on("/hook")),
        ["scheduled"],
        "no cancel, no second scheduled over 30 flapping documents"
    );
    let exposition = agent.metrics().await?;
    assert_eq!(exposition.transitions("Reboot", "scheduled"), 1.0);
    assert_eq!(exposition.transitions("Reboot", "cancelled"), 0.0);
    assert!(
        exposition.event_info(REBOOT).is_some(),
        "the event stays shown"
    );

    // Missing for good, still under the one incarnation: the end is reported once confirmed.
    imds.sim.set_document(without);
    let hits = receiver.wait_for("/hook", 2).await?;
    assert_eq!(transitions(&hits), ["scheduled", "cancelled"]);
    let exposition = agent.metrics().await?;
    assert_eq!(exposition.transitions("Reboot", "cancelled"), 1.0);
    assert_eq!(exposition.event_info(REBOOT), None);
    agent.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_receiver_behind_https_proxy_gets_its_notification_while_imds_is_reached_directly()
-> TestResult {
    let imds = Imds::start().await?;
    let receiver = Receiver::start_tls().await?;
    let proxy = Proxy::start().await?;
    let dir = TempDir::new("notify-proxy")?;
    let ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/notify/ca.pem");
    let config = write(
        &dir,
        "receivers.yaml",
        &format!(
            "receivers:\n  - name: outside\n    url: https://localhost:{}/hook\n    ca_file: {ca}\n",
            receiver.addr.port()
        ),
    )?;
    imds.sim.set_document(document(
        1,
        &[event(REBOOT, "Reboot", "Scheduled", THIS_VM)],
    ));
    let imds_url = format!("--imds.url={}", imds.url());
    let mut command = command(&[
        &imds_url,
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=50ms",
        "--notify.config-file",
        &config,
    ]);
    command.env("HTTPS_PROXY", format!("http://{}", proxy.addr));
    let process = tokio::task::spawn_blocking(move || {
        AgentProcess::spawn(command).map_err(|e| e.to_string())
    })
    .await??;
    let (process, line) = tokio::task::spawn_blocking(move || {
        let line = process.next_line_where(|l| l["message"] == "event scheduled");
        (process, line)
    })
    .await?;
    let line = line?;
    let hits = receiver.wait_for("/hook", 1).await?;
    let body = hits[0].json();
    assert_eq!(
        proxy.requests(),
        [format!(
            "CONNECT localhost:{} HTTP/1.1",
            receiver.addr.port()
        )],
        "only the receiver goes through the proxy"
    );
    assert!(imds.sim.requests() > 0, "IMDS was polled, directly");

    // The generic body is the event's log line: every field of the line, with the same value.
    let log = line.as_object().ok_or("log line is not an object")?;
    for (field, value) in log {
        if matches!(field.as_str(), "timestamp" | "level" | "message" | "target") {
            continue;
        }
        assert_eq!(
            body[field.as_str()],
            *value,
            "field {field}: {line} vs {body}"
        );
    }
    for field in FIELDS {
        assert!(
            field == "timestamp" || log.contains_key(field) || body[field].is_null(),
            "{field} is in the body but not in the log line: {line} vs {body}"
        );
    }
    let delivered =
        r#"azure_scheduled_events_notifications_total{receiver="outside",result="delivered"} 1"#;
    let metrics = process
        .wait_for_series(delivered)
        .await
        .unwrap_or_else(|e| e);
    assert!(
        metrics.contains(
            r#"azure_scheduled_events_notifications_total{receiver="outside",result="delivered"} 1"#
        ),
        "{metrics}"
    );
    Ok(())
}

#[test]
fn a_bad_template_or_receiver_exits_64_with_one_line_naming_the_file() -> TestResult {
    let dir = TempDir::new("notify-config")?;
    let unknown = write(&dir, "unknown.j2", "{{ event_type }} {{ evnt_id }}")?;
    let broken = write(&dir, "broken.j2", "{% if event_type %}no end")?;
    for (name, receiver, expected) in [
        (
            "unknown.yaml",
            format!("    url: http://127.0.0.1:9/\n    template_file: {unknown}\n"),
            vec![unknown.as_str(), "unknown field \"evnt_id\""],
        ),
        (
            "broken.yaml",
            format!("    url: http://127.0.0.1:9/\n    template_file: {broken}\n"),
            vec![broken.as_str(), "syntax error"],
        ),
        (
            "nourl.yaml",
            "    format: slack\n".to_owned(),
            vec!["url or url_file is required"],
        ),
        (
            "nokey.yaml",
            "    format: pagerduty\n".to_owned(),
            vec!["routing_key"],
        ),
        (
            "typo.yaml",
            "    url: http://127.0.0.1:9/\n    transitions: [scheduled, begun]\n".to_owned(),
            vec!["\"begun\""],
        ),
    ] {
        let config = write(&dir, name, &format!("receivers:\n  - name: r\n{receiver}"))?;
        let output = command(&["--notify.config-file", &config]).output()?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{name}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{name}: {stderr}");
        assert!(stderr.contains("--notify.config-file"), "{name}: {stderr}");
        for needle in expected {
            assert!(stderr.contains(needle), "{name}: {needle} in {stderr}");
        }
    }
    let output = command(&["--notify.webhook-url", "hooks.example.com/x"]).output()?;
    assert_eq!(output.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--notify.webhook-url"));
    Ok(())
}

#[tokio::test]
async fn a_template_that_loops_is_stopped_counted_and_never_stops_polling() -> TestResult {
    let imds = Imds::start().await?;
    let receiver = Receiver::start().await?;
    let dir = TempDir::new("notify-looping-template")?;
    let looping = write(
        &dir,
        "looping.j2",
        "{% for i in range(100000) %}{% for j in range(100000) %}{% if i < 0 %}{{ event_type }}{% endif %}{% endfor %}{% endfor %}",
    )?;
    let config = write(
        &dir,
        "receivers.yaml",
        &format!(
            "receivers:\n  - name: looping\n    url: {}\n    template_file: {looping}\n  - name: plain\n    url: {}\n",
            receiver.url("/looping"),
            receiver.url("/plain")
        ),
    )?;
    imds.sim.set_document(document(
        1,
        &[event(REBOOT, "Reboot", "Scheduled", THIS_VM)],
    ));
    let url = format!("--imds.url={}", imds.url());
    let process = AgentProcess::spawn(command(&[
        &url,
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=100ms",
        "--notify.config-file",
        &config,
    ]))?;
    let (process, line) = tokio::task::spawn_blocking(move || {
        let line = process
            .next_line_where(|l| l["message"] == "notification not sent: its template failed");
        (process, line)
    })
    .await?;
    let line = line?;
    assert_eq!(line["receiver"], "looping", "{line}");
    assert_eq!(line["level"], "ERROR", "{line}");
    assert!(
        line["error"].as_str().is_some_and(|e| e.contains("budget")),
        "{line}"
    );
    receiver.wait_for("/plain", 1).await?;
    // The loop went on polling and answering while the template ran and after.
    imds.polled(5).await?;
    let health = reqwest::get(format!("http://{}/healthz", process.address())).await?;
    assert_eq!(health.status(), 200);
    let exposition = Exposition(tokio::task::spawn_blocking(move || process.metrics()).await??);
    assert_eq!(notifications(&exposition, "looping", "rejected"), 1.0);
    assert_eq!(notifications(&exposition, "plain", "delivered"), 1.0);
    assert!(
        receiver.hits_on("/looping").is_empty(),
        "nothing sent for it"
    );
    Ok(())
}

/// Detection to delivery over 200 transitions to a loopback receiver: printed, not asserted.
#[tokio::test]
async fn detection_to_delivery_latency_over_200_transitions() -> TestResult {
    let imds = Imds::start().await?;
    let receiver = Receiver::start().await?;
    let url = receiver.url("/hook");
    imds.sim.set_document(document(1, &[]));
    let agent = Agent::start(&imds, &["--notify.webhook-url", &url]).await?;
    agent
        .wait_for("the first document", |e| e.up() == Some(1.0))
        .await?;
    let mut incarnation = 1;
    for round in 0..100u32 {
        let id = format!("{:08X}-0000-4000-8000-000000000000", round + 1);
        for events in [vec![event(&id, "Freeze", "Scheduled", THIS_VM)], vec![]] {
            incarnation += 1;
            imds.sim.set_document(document(incarnation, &events));
            receiver
                .wait_for("/hook", (incarnation - 1) as usize)
                .await?;
        }
    }
    let hits = receiver.hits_on("/hook");
    assert_eq!(hits.len(), 200, "each transition delivered once");
    let mut latencies: Vec<f64> = hits
        .iter()
        .filter_map(|h| {
            let seen = DateTime::parse_from_rfc3339(h.json()["timestamp"].as_str()?).ok()?;
            Some((h.at - seen.with_timezone(&Utc)).num_microseconds()? as f64 / 1000.0)
        })
        .collect();
    assert_eq!(latencies.len(), 200);
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() as f64 * q).ceil() as usize).saturating_sub(1)];
    eprintln!(
        "notification latency, transition seen -> receiver got it, 200 transitions over loopback: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        at(0.50),
        at(0.99),
        at(1.0)
    );
    agent.stop().await
}

#[tokio::test]
async fn notifications_dropped_for_a_receiver_that_hangs_are_logged_once_with_a_count() -> TestResult
{
    // A receiver that never answers fills its queue (256); the rest of 400 new events are
    // dropped: counted each, logged once a minute rather than once each.
    let imds = Imds::start().await?;
    let hanging = Receiver::start().await?;
    hanging.then_answer(Answer::Hang);
    let dir = TempDir::new("notify-drops")?;
    let config = write(
        &dir,
        "receivers.yaml",
        &format!(
            "receivers:\n  - name: hanging\n    url: {}\n    timeout: 60s\n",
            hanging.url("/hook")
        ),
    )?;
    imds.sim
        .set_document(document(1, &common::freeze_events(400)));
    let url = format!("--imds.url={}", imds.url());
    let mut agent = AgentProcess::spawn(command(&[
        &url,
        "--notify.config-file",
        &config,
        "--web.listen-address=127.0.0.1:0",
        "--log.format=json",
        "--poll.interval=100ms",
    ]))?;
    let dropped = r#"azure_scheduled_events_notifications_dropped_total{receiver="hanging"}"#;
    let metrics = agent
        .wait_for_metrics("the drops counted", |text| {
            Exposition(text.to_owned()).value(dropped) >= Some(100.0)
        })
        .await?;
    let count = Exposition(metrics).get(dropped);
    agent.terminate()?;
    let lines = agent.lines_until(|l| l["message"] == "stopped")?;
    let logged: Vec<_> = lines
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("notification dropped"))
        })
        .collect();
    assert_eq!(logged.len(), 1, "{count} dropped: {logged:#?}");
    assert_eq!(logged[0]["suppressed"], 0, "{logged:#?}");
    assert_eq!(logged[0]["receiver"], "hanging");
    Ok(())
}

#[tokio::test]
async fn a_restart_while_replicas_disagree_neither_ends_nor_announces_the_event_again() -> TestResult
{
    let imds = Imds::start().await?;
    let receiver = Receiver::start().await?;
    let url = receiver.url("/hook");
    let dir = TempDir::new("notify-replicas-restart")?;
    let state = format!("--state.file={}", dir.path("state.json").display());
    let flags = ["--notify.webhook-url", url.as_str(), state.as_str()];
    let newer = document(11, &[event(REBOOT, "Reboot", "Scheduled", THIS_VM)]);
    let older = document(10, &[]);
    let same_without = document(11, &[]);
    imds.sim.set_document(newer.clone());
    let agent = Agent::start(&imds, &flags).await?;
    receiver.wait_for("/hook", 1).await?;
    agent.stop().await?;

    // Restarted while the replica behind answers first, then in turn with the other.
    imds.sim.set_document(older.clone());
    let agent = Agent::start(&imds, &flags).await?;
    imds.polled(3).await?;
    for _ in 0..10 {
        imds.sim.set_document(newer.clone());
        imds.polled(1).await?;
        imds.sim.set_document(older.clone());
        imds.polled(1).await?;
    }
    assert_eq!(transitions(&receiver.hits_on("/hook")), ["scheduled"]);
    let exposition = agent.metrics().await?;
    assert_eq!(exposition.transitions("Reboot", "cancelled"), 0.0);
    assert!(exposition.event_info(REBOOT).is_some(), "still shown");
    agent.stop().await?;

    // Restarted in the middle of a hold under one incarnation: 11 without the event, then with.
    imds.sim.set_document(same_without.clone());
    let agent = Agent::start(&imds, &flags).await?;
    imds.polled(5).await?;
    imds.sim.set_document(newer.clone());
    imds.polled(5).await?;
    assert_eq!(transitions(&receiver.hits_on("/hook")), ["scheduled"]);
    let exposition = agent.metrics().await?;
    assert_eq!(exposition.transitions("Reboot", "cancelled"), 0.0);
    assert_eq!(
        exposition.transitions("Reboot", "scheduled"),
        0.0,
        "not again"
    );

    // Its real end, in a newer incarnation: once.
    imds.sim.set_document(document(12, &[]));
    let hits = receiver.wait_for("/hook", 2).await?;
    assert_eq!(transitions(&hits), ["scheduled", "cancelled"]);
    agent.stop().await
}
