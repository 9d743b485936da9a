//! The tests of this module that run a real Alertmanager or amtool.

use super::*;

use std::process::{Command, Stdio};

use serde_json::json;

use crate::common::wait;
use crate::notify::receiver::Hit;
use crate::ops::Process;

/// The Alertmanager binary: Debian names it `prometheus-alertmanager`, upstream `alertmanager`.
fn binary() -> Result<&'static str, String> {
    for name in ["prometheus-alertmanager", "alertmanager"] {
        let found = Command::new(name)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if found {
            return Ok(name);
        }
    }
    Err("Alertmanager is required (Debian package prometheus-alertmanager; .ci/run installs it): neither prometheus-alertmanager nor alertmanager is on PATH".into())
}

/// A real Alertmanager on 127.0.0.1:`port`, no gossip, its storage in `dir`, notifying
/// `webhook` of groups by EventId quickly.
struct Alertmanager {
    process: Process,
    port: u16,
}

impl Alertmanager {
    async fn start(
        dir: &TempDir,
        name: &str,
        port: u16,
        webhook: &str,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let receiver =
            format!("webhook_configs:\n      - url: {webhook}\n        send_resolved: true");
        Self::start_with(dir, name, port, &receiver).await
    }

    /// As [`Alertmanager::start`], notifying the one receiver whose configuration is `receiver`
    /// (e.g. `slack_configs: ...`, indented for its place under `receivers: - name: hook`).
    async fn start_with(
        dir: &TempDir,
        name: &str,
        port: u16,
        receiver: &str,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let config = dir.path(&format!("{name}.yml"));
        std::fs::write(
            &config,
            format!(
                "route:\n  receiver: hook\n  group_by: [event_id]\n  group_wait: 5s\n  group_interval: 2s\n  repeat_interval: 1h\nreceivers:\n  - name: hook\n    {receiver}\n"
            ),
        )?;
        let storage = dir.path(&format!("{name}-data"));
        std::fs::create_dir_all(&storage)?;
        let log = std::fs::File::create(dir.path(&format!("{name}.log")))?;
        let process = Process::spawn(
            name,
            Command::new(binary()?)
                .arg(format!("--config.file={}", config.display()))
                .arg(format!("--storage.path={}", storage.display()))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .arg("--cluster.listen-address=")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log),
        )?;
        let alertmanager = Self { process, port };
        let client = http()?;
        let ready = format!("{}/-/ready", alertmanager.url());
        let started = wait(&format!("Alertmanager {name} to be ready on port {port}"))
            .until(async || {
                client
                    .get(&ready)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            })
            .await;
        if let Err(e) = started {
            let log = std::fs::read_to_string(dir.path(&format!("{name}.log")))?;
            return Err(format!("{e}:\n{log}").into());
        }
        Ok(alertmanager)
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The alerts it holds (`GET /api/v2/alerts`).
    async fn alerts(&self) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
        let body: Value = http()?
            .get(format!("{}/api/v2/alerts", self.url()))
            .send()
            .await?
            .text()
            .await
            .map(|text| serde_json::from_str(&text).unwrap_or(Value::Null))?;
        Ok(body.as_array().cloned().unwrap_or_default())
    }

    /// Waits until it holds an active alert of [`EVENT`] for each VM of `vms`.
    async fn wait_for_alerts(
        &self,
        vms: &[&str],
    ) -> Result<Vec<Value>, Box<dyn std::error::Error>> {
        let mut last = Vec::new();
        let held = wait(&format!(
            "Alertmanager on {} to hold the alerts of {vms:?}",
            self.port
        ))
        .until(async || {
            let alerts = self.alerts().await?;
            let held: BTreeSet<&str> = alerts
                .iter()
                .filter(|a| a["labels"]["event_id"] == EVENT && a["status"]["state"] == "active")
                .filter_map(|a| a["labels"]["vm_name"].as_str())
                .collect();
            if vms.iter().all(|vm| held.contains(vm)) {
                return Ok::<_, Box<dyn std::error::Error>>(Some(alerts));
            }
            last = alerts;
            Ok(None)
        })
        .await;
        held.map_err(|e| format!("{e}: {last:?}").into())
    }

    /// The sum of the series of its own metrics written `series` (a name, or a name with its
    /// labels).
    async fn metric(&self, series: &str) -> Result<f64, Box<dyn std::error::Error>> {
        let text = http()?
            .get(format!("{}/metrics", self.url()))
            .send()
            .await?
            .text()
            .await?;
        Ok(text
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix(series)?;
                let value = match rest.strip_prefix(' ') {
                    Some(value) => value,
                    None if rest.starts_with('{') => rest.rsplit_once(' ')?.1,
                    None => return None,
                };
                value.trim().parse::<f64>().ok()
            })
            .sum())
    }

    /// How many times it has flushed a group that holds alerts, as its notification log counts
    /// them: each flush asks the log whether the group was notified already, once per receiver.
    /// A flush with nothing new sends nothing: this is how a test sees that it happened.
    async fn flushes(&self) -> Result<f64, Box<dyn std::error::Error>> {
        self.metric("alertmanager_nflog_queries_total").await
    }

    /// Waits until it has flushed `count` more times than `since` (a count of [`Self::flushes`]).
    async fn flushed(&self, since: f64, count: f64) -> Result<(), String> {
        wait(&format!("{count} more group flushes of Alertmanager"))
            .until(async || self.flushes().await.map(|n| n >= since + count))
            .await
    }
}

fn http() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder().no_proxy().build()
}

/// A receivers file in `dir` with one `alertmanager` receiver, `fleet-am`, posting to `url`;
/// `extra` adds settings (lines of the receiver, e.g. `"    resend_interval: 1s\n"`).
fn alertmanager_receiver(dir: &TempDir, url: &str, extra: &str) -> Result<String, std::io::Error> {
    write(
        dir,
        "receivers.yaml",
        &format!(
            "receivers:\n  - name: fleet-am\n    format: alertmanager\n    url: {url}\n{extra}"
        ),
    )
}

/// The VMs of the alerts of one Alertmanager webhook notification.
fn vms(hit: &Hit) -> BTreeSet<String> {
    hit.json()["alerts"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|a| a["labels"]["vm_name"].as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn three_vms_sharing_an_event_make_one_notification_and_one_resolved_notification()
-> TestResult {
    let webhook = Receiver::start().await?;
    let dir = TempDir::new("am-group")?;
    let am = Alertmanager::start(&dir, "am", free_port()?, &webhook.url("/am")).await?;
    let config = alertmanager_receiver(&dir, &am.url(), "    resend_interval: 1s\n")?;
    let fleet = fleet(&config).await?;

    let first = webhook.wait_for("/am", 1).await?.remove(0);
    let body = first.json();
    assert_eq!(body["status"], "firing", "{body}");
    assert_eq!(body["groupLabels"]["event_id"], EVENT, "{body}");
    assert_eq!(
        vms(&first),
        VMS.iter().map(|v| v.to_string()).collect::<BTreeSet<_>>(),
        "one notification holds the three VMs: {body}"
    );
    for alert in body["alerts"].as_array().cloned().unwrap_or_default() {
        let labels = &alert["labels"];
        assert_eq!(labels["alertname"], "AzureScheduledEvent", "{alert}");
        assert_eq!(labels["event_type"], "Reboot", "{alert}");
        assert_eq!(labels["event_source"], "Platform", "{alert}");
        assert_eq!(
            labels["severity"], "warning",
            "one VM's reboot never pages: {alert}"
        );
        assert_eq!(labels["vm_scale_set_name"], "pool", "{alert}");
        let annotations = &alert["annotations"];
        assert_eq!(annotations["not_before"], "Mon, 19 Sep 2033 18:29:47 GMT");
        assert_eq!(annotations["duration_in_seconds"], "9");
        assert_eq!(
            annotations["description"],
            "Host server is undergoing maintenance."
        );
        assert!(
            annotations["runbook_url"]
                .as_str()
                .is_some_and(|u| u.starts_with("https://") && u.contains("runbook.md#")),
            "{alert}"
        );
        assert!(
            annotations["summary"]
                .as_str()
                .is_some_and(|s| s.contains("pool_2")),
            "{alert}"
        );
    }

    // Ended for all three VMs just after one of Alertmanager's group flushes (every 2 s from the
    // first notification), so all three resolves arrive before the next.
    am.flushed(am.flushes().await?, 1.0).await?;
    for (imds, _) in &fleet {
        imds.sim.set_document(document(2, &[]));
    }
    let hits = webhook.wait_for("/am", 2).await?;
    let resolved = hits[1].json();
    assert_eq!(resolved["status"], "resolved", "{resolved}");
    assert_eq!(vms(&hits[1]).len(), 3, "{resolved}");
    // Alertmanager has nothing new to say: the resolves emptied its group, and the agents, whose
    // alerts are all accepted, send nothing more at their next resend (resend_interval 1s, passed
    // once each has polled 25 times more at 50 ms), so nothing can fill it again.
    let received = am.metric("alertmanager_alerts_received_total").await?;
    for (imds, _) in &fleet {
        imds.polled(25).await?;
    }
    assert_eq!(
        am.metric("alertmanager_alerts_received_total").await?,
        received,
        "an agent sent alerts after its resolve was accepted"
    );
    assert_eq!(
        am.metric(r#"alertmanager_alerts{state="active"}"#).await?,
        0.0
    );
    let statuses: Vec<Value> = webhook
        .hits_on("/am")
        .iter()
        .map(|h| h.json()["status"].clone())
        .collect();
    assert_eq!(
        statuses,
        ["firing", "resolved"],
        "one notification, one resolved notification"
    );
    for (_, agent) in fleet {
        agent.stop().await?;
    }
    Ok(())
}

#[tokio::test]
async fn chat_through_alertmanager_is_one_message_per_event_even_when_the_first_vms_agent_is_down()
-> TestResult {
    // Slack as Alertmanager's receiver (its slack_configs post to the stand-in), the agents
    // posting alerts: the first VM of `Resources` has no agent, the two others report the event.
    let slack = Receiver::start().await?;
    let dir = TempDir::new("am-slack")?;
    let receiver = format!(
        "slack_configs:\n      - api_url: {}\n        channel: '#ops'\n        send_resolved: true",
        slack.url("/slack")
    );
    let am = Alertmanager::start_with(&dir, "am", free_port()?, &receiver).await?;
    let config = alertmanager_receiver(&dir, &am.url(), "")?;
    let agents = fleet_of(&VMS[1..], &config).await?;
    am.wait_for_alerts(&VMS[1..]).await?;
    let first = slack.wait_for("/slack", 1).await?;
    let text = &first[0].body;
    assert!(text.contains(EVENT), "the message names the event: {text}");
    // Both alerts were in Alertmanager before its group_wait (5 s) ended; after two more
    // group flushes (every group_interval, 2 s), still one message.
    am.wait_for_alerts(&VMS[1..]).await?;
    am.flushed(am.flushes().await?, 2.0).await?;
    let messages = slack.hits_on("/slack");
    assert_eq!(
        messages.len(),
        1,
        "one Slack message for the event, not one per VM: {messages:?}"
    );
    for (_, agent) in agents {
        agent.stop().await?;
    }
    Ok(())
}

#[tokio::test]
async fn the_scale_set_label_is_the_one_instance_metadata_names() -> TestResult {
    // A Flexible scale set's VM names carry no `_<instance id>`: only instance metadata says
    // which scale set the VM is in.
    let webhook = Receiver::start().await?;
    let dir = TempDir::new("am-scale-set")?;
    let am = Alertmanager::start(&dir, "am", free_port()?, &webhook.url("/am")).await?;
    let config = alertmanager_receiver(&dir, &am.url(), "")?;
    let mut compute = example_compute("web-flex-3f2a1b");
    compute.vm_scale_set_name = "web-flex".into();
    let imds = Imds::start_as(compute).await?;
    let event = json!({
        "EventId": EVENT,
        "EventType": "Reboot",
        "ResourceType": "VirtualMachine",
        "Resources": ["web-flex-3f2a1b"],
        "EventStatus": "Scheduled",
        "NotBefore": "Mon, 19 Sep 2033 18:29:47 GMT",
        "Description": "",
        "EventSource": "Platform",
        "DurationInSeconds": 9
    });
    imds.sim.set_document(document(1, &[event]));
    let agent = Agent::start(&imds, &["--notify.config-file", &config]).await?;
    let alerts = am.wait_for_alerts(&["web-flex-3f2a1b"]).await?;
    let alert = alerts
        .iter()
        .find(|a| a["labels"]["vm_name"] == "web-flex-3f2a1b")
        .ok_or("no alert")?;
    assert_eq!(alert["labels"]["vm_scale_set_name"], "web-flex", "{alert}");
    agent.stop().await?;
    Ok(())
}

#[tokio::test]
async fn an_alertmanager_restarted_mid_event_holds_the_alert_again() -> TestResult {
    let webhook = Receiver::start().await?;
    let dir = TempDir::new("am-restart")?;
    let port = free_port()?;
    let mut first = Alertmanager::start(&dir, "am-a", port, &webhook.url("/a")).await?;
    let second = Alertmanager::start(&dir, "am-b", free_port()?, &webhook.url("/b")).await?;
    let config = write(
        &dir,
        "receivers.yaml",
        &format!(
            "receivers:\n  - name: ha\n    format: alertmanager\n    urls: [{}, {}]\n    resend_interval: 500ms\n",
            first.url(),
            second.url()
        ),
    )?;
    let imds = Imds::start().await?;
    imds.sim.set_document(document(1, &[reboot("Scheduled")]));
    let agent = Agent::start(
        &imds,
        &["--vm.name=pool_1", "--notify.config-file", &config],
    )
    .await?;
    first.wait_for_alerts(&["pool_1"]).await?;
    second.wait_for_alerts(&["pool_1"]).await?;

    // Restarted with empty storage: an Alertmanager keeps no alerts across a restart.
    first.process.kill();
    let restarted = Alertmanager::start(&dir, "am-a-again", port, &webhook.url("/a")).await?;
    let alerts = restarted.wait_for_alerts(&["pool_1"]).await?;
    let alert = alerts
        .iter()
        .find(|a| a["labels"]["event_id"] == EVENT)
        .ok_or("no alert")?;
    assert_eq!(alert["annotations"]["event_status"], "Scheduled", "{alert}");
    drop(first);
    agent.stop().await?;
    Ok(())
}

/// `amtool` with `args`, run in the repository: whether it succeeded, and what it said.
fn amtool(args: &[&str]) -> Result<(bool, String), crate::ops::Error> {
    crate::ops::run("amtool", args, "prometheus-alertmanager")
}

#[test]
fn the_example_route_passes_amtool_groups_by_event_and_pages_only_for_critical() -> TestResult {
    let example = "examples/alertmanager-agent-route.yml";
    let (ok, report) = amtool(&["check-config", example])?;
    assert!(ok, "amtool check-config {example}:\n{report}");
    let config = crate::ops::yaml(&crate::ops::repo().join(example))?;
    let route = config["route"]["routes"]
        .as_array()
        .and_then(|routes| {
            routes.iter().find(|r| {
                r["matchers"]
                    .as_array()
                    .is_some_and(|m| m.iter().any(|m| m == "alertname=\"AzureScheduledEvent\""))
            })
        })
        .ok_or("no route for AzureScheduledEvent")?;
    assert_eq!(
        route["group_by"],
        serde_json::json!(["event_id"]),
        "{route:?}"
    );
    let file = format!("--config.file={example}");
    for (severity, receiver) in [("critical", "pager"), ("warning", "chat"), ("info", "chat")] {
        let (ok, report) = amtool(&[
            "config",
            "routes",
            "test",
            &file,
            &format!("--verify.receivers={receiver}"),
            "alertname=AzureScheduledEvent",
            &format!("severity={severity}"),
            &format!("event_id={EVENT}"),
            "vm_name=pool_1",
        ])?;
        assert!(ok, "a {severity} alert goes to {receiver}:\n{report}");
    }
    Ok(())
}
