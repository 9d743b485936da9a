//! One lifecycle span id per event and VM, also for an event that appears before instance
//! metadata has been read: every log line, notification and exported span of the event names
//! the same id, every child span's parent is a span that was exported, and a restart with a
//! state file keeps the id. The built binary, a real OTLP receiver, a webhook receiver, and the
//! simulator failing instance metadata at first.

use crate::common;
use crate::notify::receiver;
use crate::otlp;

use std::collections::BTreeSet;

use azure_scheduled_events_simulator::{Fault, FaultTarget, Scenario};
use common::process::{AgentProcess, command};
use common::{Imds, THIS_VM, TempDir, TestResult};
use otlp::{ReceivedSpan, Receiver};
use serde_json::Value;

/// Upper case, as real IMDS sends it.
const EVENT: &str = "5DD55B64-45AD-49D3-BBC9-F57D4EA97BD7";
const EVENT_TRACE: &str = "5dd55b6445ad49d3bbc9f57d4ea97bd7";

/// The simulator serving a user-initiated Reboot of this VM ten minutes ahead, whose first
/// instance-metadata request fails: the agent sees the event before it knows the VM's name.
async fn imds_failing_instance_metadata_once() -> Result<Imds, Box<dyn std::error::Error>> {
    let imds = Imds::start().await?;
    imds.sim
        .inject_fault(Fault::status(500).on(FaultTarget::Instance));
    imds.sim.load_scenario(Scenario::parse(&format!(
        "events:\n  - {{ id: \"{EVENT}\", type: Reboot, source: User, resources: [{THIS_VM}], notice: 10m }}\n"
    ))?);
    Ok(imds)
}

/// The agent without `--vm.name`, so that only instance metadata names the VM; approving, and
/// exporting spans and notifications.
fn agent(
    imds: &Imds,
    spans: &Receiver,
    hooks: &receiver::Receiver,
    state_file: &str,
) -> Result<AgentProcess, Box<dyn std::error::Error>> {
    let args = [
        format!("--imds.url={}", imds.url()),
        "--web.listen-address=127.0.0.1:0".to_owned(),
        "--poll.interval=50ms".to_owned(),
        format!("--state.file={state_file}"),
        "--approve".to_owned(),
        format!("--notify.webhook-url={}", hooks.url("/hook")),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut command = command(&args);
    command.env("OTEL_EXPORTER_OTLP_ENDPOINT", spans.grpc_url());
    command.env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
    AgentProcess::spawn(command)
}

/// The agent's log lines about [`EVENT`] up to the one whose message is `last`, and whether
/// instance metadata was read on the way.
fn event_lines_until(agent: &AgentProcess, last: &str) -> Result<(Vec<Value>, bool), String> {
    let mut lines = Vec::new();
    let mut identified = false;
    loop {
        let line = agent.next_line_where(|_| true)?;
        identified |= line["message"] == "read instance metadata";
        let done = line["message"] == last;
        if line["event_id"] == EVENT {
            lines.push(line);
        }
        if done {
            return Ok((lines, identified));
        }
    }
}

fn of_event(spans: &[ReceivedSpan]) -> Vec<&ReceivedSpan> {
    spans.iter().filter(|s| s.trace_id == EVENT_TRACE).collect()
}

fn is_decision(span: &ReceivedSpan) -> bool {
    span.event("approval.decision").is_some() && !span.is_lifecycle()
        || span.event("hook.kind").is_some()
}

/// Every span of the event names `span_id` as its lifecycle span: the lifecycle spans are it,
/// every other span is its child, and at least one approval decision is among them.
fn assert_one_lifecycle_span(spans: &[&ReceivedSpan], span_id: &str) {
    let lifecycles: Vec<&&ReceivedSpan> = spans.iter().filter(|s| s.is_lifecycle()).collect();
    assert!(!lifecycles.is_empty(), "no lifecycle span: {spans:#?}");
    for lifecycle in &lifecycles {
        assert_eq!(lifecycle.span_id, span_id, "{lifecycle:#?}");
        assert_eq!(lifecycle.parent_span_id, "", "a lifecycle span is a root");
    }
    let exported: BTreeSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    for child in spans.iter().filter(|s| !s.is_lifecycle()) {
        assert_eq!(child.parent_span_id, span_id, "{child:#?}");
        assert!(
            exported.contains(child.parent_span_id.as_str()),
            "the parent of {child:#?} was exported"
        );
    }
    assert!(
        spans.iter().any(|s| is_decision(s)),
        "an approval decision span: {spans:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_seen_before_instance_metadata_keeps_one_lifecycle_span_id_everywhere()
-> TestResult {
    let spans = Receiver::start().await?;
    let hooks = receiver::Receiver::start().await?;
    let imds = imds_failing_instance_metadata_once().await?;
    let agent = agent(&imds, &spans, &hooks, "")?;

    let (before, _) = event_lines_until(&agent, "event scheduled")?;
    let scheduled = before.last().ok_or("no scheduled line")?;
    assert!(
        scheduled["vm_name"].is_null(),
        "the event appeared before instance metadata named the VM: {scheduled}"
    );
    let span_id = scheduled["span_id"]
        .as_str()
        .ok_or(format!(
            "no span_id before the VM's name is known: {scheduled}"
        ))?
        .to_owned();
    assert_eq!(span_id.len(), 16);

    spans
        .wait_for("the approval and the start", |s| {
            s.iter().any(|s| s.name == "Reboot approval approved")
                && s.iter().any(|s| s.name == "Reboot started")
        })
        .await?;
    assert!(imds.sim.remove_event(EVENT));
    let received = spans
        .wait_for("the lifecycle span", |s| {
            s.iter().any(|s| s.name == "Reboot")
        })
        .await?;
    let (after, identified) = event_lines_until(&agent, "event completed")?;
    assert!(
        identified,
        "instance metadata was read while the event lasted"
    );

    let lines: Vec<&Value> = before.iter().chain(&after).collect();
    for message in [
        "event scheduled",
        "event approved",
        "event started",
        "event completed",
    ] {
        assert!(
            lines.iter().any(|l| l["message"] == message),
            "a line {message:?} among {lines:#?}"
        );
    }
    for line in &lines {
        assert_eq!(line["span_id"], span_id.as_str(), "{line}");
    }
    assert_eq!(
        lines.last().map(|l| l["vm_name"].clone()),
        Some(Value::from(THIS_VM)),
        "later lines name the VM"
    );

    let notifications = hooks.wait_for("/hook", 3).await?;
    let mut transitions = Vec::new();
    for hit in &notifications {
        let body = hit.json();
        assert_eq!(body["event_id"], EVENT);
        assert_eq!(body["span_id"], span_id.as_str(), "{body}");
        transitions.push(body["transition"].as_str().unwrap_or_default().to_owned());
    }
    assert_eq!(transitions, ["scheduled", "started", "completed"]);

    let of_event = of_event(&received);
    assert_one_lifecycle_span(&of_event, &span_id);
    let lifecycle = of_event
        .iter()
        .find(|s| s.is_lifecycle())
        .ok_or("no lifecycle span")?;
    assert_eq!(lifecycle.event("outcome"), Some("completed"));
    assert_eq!(lifecycle.event("vm_name"), Some(THIS_VM));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_with_a_state_file_keeps_the_lifecycle_span_id_given_before_the_vm_was_named()
-> TestResult {
    let dir = TempDir::new("span-ids-restart")?;
    let state_file = dir.path("state.json");
    let state_file = state_file
        .to_str()
        .ok_or("a temporary path that is not UTF-8")?;
    let spans = Receiver::start().await?;
    let hooks = receiver::Receiver::start().await?;
    let imds = imds_failing_instance_metadata_once().await?;

    let first = agent(&imds, &spans, &hooks, state_file)?;
    let (lines, _) = event_lines_until(&first, "event scheduled")?;
    let scheduled = lines.last().ok_or("no scheduled line")?;
    assert!(scheduled["vm_name"].is_null(), "{scheduled}");
    let span_id = scheduled["span_id"]
        .as_str()
        .ok_or("no span_id")?
        .to_owned();
    spans
        .wait_for("the approval", |s| {
            s.iter().any(|s| s.name == "Reboot approval approved")
        })
        .await?;
    first.next_line_where(|l| l["message"] == "read instance metadata")?;
    let mut first = first;
    assert!(
        tokio::task::spawn_blocking(move || first.terminate())
            .await??
            .success()
    );
    let open = spans
        .wait_for("the open lifecycle span", |s| {
            s.iter()
                .any(|s| s.is_lifecycle() && s.event("outcome") == Some("open"))
        })
        .await?;
    let open = open
        .iter()
        .find(|s| s.is_lifecycle())
        .ok_or("no lifecycle span")?;
    assert_eq!(open.span_id, span_id, "the agent stopped with the first id");

    // Instance metadata answers at once now: the restarted agent knows the VM's name from its
    // first document on, and still names the span the first run gave the event.
    // The event is resumed, not announced again; its end is.
    let second = agent(&imds, &spans, &hooks, state_file)?;
    let resumed = second.next_line_where(|l| {
        l["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("resumed the events"))
    })?;
    assert_eq!(resumed["vm_name"], THIS_VM, "{resumed}");
    assert_eq!(resumed["resumed"], 1, "{resumed}");
    assert!(imds.sim.remove_event(EVENT));
    let received = spans
        .wait_for("the final lifecycle span", |s| {
            s.iter()
                .any(|s| s.is_lifecycle() && s.event("outcome") == Some("completed"))
        })
        .await?;
    let (after, _) = event_lines_until(&second, "event completed")?;
    for line in &after {
        assert_eq!(line["span_id"], span_id.as_str(), "{line}");
    }
    let completed = after.last().ok_or("no completed line")?;
    assert_eq!(completed["vm_name"], THIS_VM, "{completed}");
    assert_one_lifecycle_span(&of_event(&received), &span_id);
    for hit in hooks.hits_on("/hook") {
        assert_eq!(hit.json()["span_id"], span_id.as_str());
    }
    Ok(())
}
