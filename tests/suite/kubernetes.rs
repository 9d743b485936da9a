//! The Kubernetes output against a stand-in API server, with events played by the simulator:
//! the node condition, Events, taint and cordon appear with an event of this VM and go away
//! after it; other owners' taints and an operator's cordon survive; a restart neither doubles nor
//! forgets; conflicts are retried; an API server that refuses or hangs never delays polling.

#![cfg(feature = "kubernetes")]

use crate::apiserver;
use crate::common;

#[cfg(feature = "external-tools")]
mod chart;
mod conditions;
mod drain;

use std::future::Future;
use std::time::Duration;

use apiserver::ApiServer;
use azure_scheduled_events_simulator::{Fault, FaultTarget};
use common::process::{AgentProcess, command};
use common::{Agent, Imds, PATIENCE, THIS_VM, TempDir, TestResult, document, wait};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const NODE: &str = "aks-pool-12345678-vmss000000";
const REBOOT: &str = "B0000000-0000-4000-8000-000000000001";
const OTHER_VM: &str = "test-vmss_1";
const TAINT_KEY: &str = "azure-scheduled-events/impact";
const APPLIED: &str = "azure-scheduled-events/applied";

/// A Node as the kubelet leaves it: Ready, with a taint of another owner.
fn kubelet_node() -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(NODE.into()),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: Some(vec![gpu_taint()]),
            ..NodeSpec::default()
        }),
        status: Some(k8s_openapi::api::core::v1::NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: Some("KubeletReady".into()),
                ..NodeCondition::default()
            }]),
            ..Default::default()
        }),
    }
}

fn gpu_taint() -> Taint {
    Taint {
        key: "dedicated".into(),
        value: Some("gpu".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }
}

fn reboot(status: &str, vm: &str) -> serde_json::Value {
    let not_before = if status == "Started" {
        ""
    } else {
        "Mon, 11 Apr 2050 22:26:58 GMT"
    };
    reboot_not_before(status, vm, not_before)
}

fn reboot_not_before(status: &str, vm: &str, not_before: &str) -> serde_json::Value {
    serde_json::json!({
        "EventId": REBOOT, "EventStatus": status, "EventType": "Reboot", "ResourceType": "VirtualMachine",
        "Resources": [vm], "NotBefore": not_before, "Description": "", "EventSource": "Platform",
        "DurationInSeconds": -1
    })
}

/// An API server and a kubeconfig file naming it.
struct Cluster {
    api: ApiServer,
    dir: TempDir,
}

impl Cluster {
    async fn start(node: Node) -> Result<Self, Box<dyn std::error::Error>> {
        let api = ApiServer::start(node).await?;
        let dir = TempDir::new("kubernetes")?;
        std::fs::write(dir.path("kubeconfig"), api.kubeconfig())?;
        std::fs::write(dir.path("boot_id"), "boot-1\n")?;
        Ok(Self { api, dir })
    }

    /// An agent writing the Node, with its state file in this cluster's directory.
    async fn agent(
        &self,
        imds: &Imds,
        extra: &[&str],
    ) -> Result<Agent, Box<dyn std::error::Error>> {
        let mut flags = vec![
            format!("--kubernetes.node-name={NODE}"),
            format!(
                "--kubernetes.kubeconfig={}",
                self.dir.path("kubeconfig").display()
            ),
            format!("--state.file={}", self.dir.path("state.json").display()),
            format!(
                "--state.boot-id-file={}",
                self.dir.path("boot_id").display()
            ),
        ];
        if !extra
            .iter()
            .any(|f| f.starts_with("--kubernetes.resync-interval"))
        {
            flags.push("--kubernetes.resync-interval=1s".to_owned());
        }
        flags.extend(extra.iter().map(|s| (*s).to_owned()));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        Agent::start(imds, &flags).await
    }

    fn condition(&self) -> Option<NodeCondition> {
        self.api
            .node()
            .status?
            .conditions?
            .into_iter()
            .find(|c| c.type_ == "AzureScheduledEvent")
    }

    fn taints(&self) -> Vec<Taint> {
        self.api
            .node()
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
    }

    fn our_taint(&self) -> Option<String> {
        self.taints()
            .into_iter()
            .find(|t| t.key == TAINT_KEY)
            .and_then(|t| t.value)
    }

    fn cordoned(&self) -> bool {
        self.api
            .node()
            .spec
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
    }

    fn annotation(&self) -> Option<String> {
        self.api.node().metadata.annotations?.get(APPLIED).cloned()
    }

    /// Reasons of the Events about the Node, sorted.
    fn event_reasons(&self) -> Vec<String> {
        let mut reasons: Vec<String> = self
            .api
            .events()
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(NODE))
            .filter_map(|e| e.reason)
            .collect();
        reasons.sort();
        reasons
    }

    fn reason(&self) -> Option<String> {
        self.condition().and_then(|c| c.reason)
    }
}

fn imds_gets(m: &common::Exposition) -> f64 {
    m.get(r#"azure_scheduled_events_imds_requests_total{operation="events"}"#)
}

fn kube_requests(m: &common::Exposition, operation: &str, result: &str) -> f64 {
    m.get(&format!(
        r#"azure_scheduled_events_kubernetes_requests_total{{operation="{operation}",result="{result}"}}"#
    ))
}

async fn within<T>(what: &str, future: impl Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(PATIENCE, future)
        .await
        .map_err(|_| format!("{what} took longer than {PATIENCE:?}"))
}

/// The flags that taint and cordon the node for Reboots.
const TAINT_AND_CORDON: [&str; 2] = [
    "--kubernetes.taint-events=Reboot",
    "--kubernetes.cordon-events=Reboot",
];

/// An agent with [`TAINT_AND_CORDON`] that has written the condition `False` for an empty
/// document.
async fn watching_an_empty_document() -> Result<(Cluster, Imds, Agent), Box<dyn std::error::Error>>
{
    let cluster = Cluster::start(kubelet_node()).await?;
    let imds = Imds::start().await?;
    imds.sim.set_document(document(1, &[]));
    let agent = cluster.agent(&imds, &TAINT_AND_CORDON).await?;
    wait("the condition False")
        .until(async || cluster.reason().as_deref() == Some("NoScheduledEvents"))
        .await?;
    Ok((cluster, imds, agent))
}

#[tokio::test]
async fn condition_events_taint_and_cordon_follow_an_event_of_this_vm() -> TestResult {
    let (cluster, imds, agent) = watching_an_empty_document().await?;
    let condition = cluster.condition().ok_or("no condition")?;
    assert_eq!(condition.status, "False");
    assert!(!cluster.cordoned());
    assert_eq!(cluster.our_taint(), None);

    let appeared = tokio::time::Instant::now();
    imds.sim
        .set_document(document(2, &[reboot("Scheduled", THIS_VM)]));
    wait("condition, taint and cordon")
        .until(async || {
            cluster.reason().as_deref() == Some("RebootScheduled")
                && cluster.our_taint().as_deref() == Some("Reboot")
                && cluster.cordoned()
        })
        .await?;
    eprintln!(
        "condition, taint and cordon on the Node {:?} after the event appeared in IMDS (--poll.interval=50ms)",
        appeared.elapsed()
    );
    let condition = cluster.condition().ok_or("no condition")?;
    assert_eq!(condition.status, "True");
    let message = condition.message.unwrap_or_default();
    assert!(
        message.contains(REBOOT) && message.contains("NotBefore Mon, 11 Apr 2050 22:26:58 GMT"),
        "{message}"
    );
    let became_true = condition.last_transition_time;
    assert!(cluster.cordoned(), "cordoned for a Reboot");
    assert!(
        cluster.taints().contains(&gpu_taint()),
        "other owners' taints stay"
    );
    assert_eq!(cluster.taints().len(), 2);
    assert_eq!(
        cluster.annotation().as_deref(),
        Some(r#"{"taint":true,"cordon":true}"#)
    );
    wait("the Event")
        .until(async || cluster.event_reasons() == ["RebootScheduled"])
        .await?;
    let event = cluster.api.events().into_iter().next().ok_or("no Event")?;
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains(REBOOT)
            && note.contains("Reboot")
            && note.contains("NotBefore")
            && note.contains("DurationInSeconds -1"),
        "{note}"
    );
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.regarding.and_then(|r| r.uid).as_deref(),
        Some("5d2a4c8e-0000-4000-8000-000000000001")
    );

    // Past the second lastTransitionTime was written in, so that a rewritten one would differ.
    let written = became_true
        .as_ref()
        .map(|t| t.0.as_second())
        .ok_or("no lastTransitionTime")?;
    wait("the clock past the second of lastTransitionTime")
        .until(async || chrono::Utc::now().timestamp() > written)
        .await?;
    imds.sim.set_document(document(
        3,
        &[reboot_not_before(
            "Scheduled",
            THIS_VM,
            "Mon, 11 Apr 2050 23:00:00 GMT",
        )],
    ));
    wait("the Updated Event")
        .until(async || cluster.event_reasons() == ["RebootScheduled", "RebootUpdated"])
        .await?;
    wait("the new NotBefore in the message")
        .until(async || {
            cluster
                .condition()
                .and_then(|c| c.message)
                .is_some_and(|m| m.contains("23:00:00"))
        })
        .await?;
    assert_eq!(
        cluster.condition().and_then(|c| c.last_transition_time),
        became_true,
        "lastTransitionTime changes only with the status"
    );

    imds.sim
        .set_document(document(4, &[reboot("Started", THIS_VM)]));
    wait("the condition Started")
        .until(async || cluster.reason().as_deref() == Some("RebootStarted"))
        .await?;
    assert_eq!(
        cluster.condition().and_then(|c| c.last_transition_time),
        became_true,
        "lastTransitionTime changes only with the status"
    );
    wait("the Started Event")
        .until(async || {
            cluster.event_reasons() == ["RebootScheduled", "RebootStarted", "RebootUpdated"]
        })
        .await?;

    imds.sim.set_document(document(5, &[]));
    wait("the taint gone")
        .until(async || cluster.our_taint().is_none())
        .await?;
    wait("the condition False")
        .until(async || cluster.reason().as_deref() == Some("NoScheduledEvents"))
        .await?;
    wait("uncordoned")
        .until(async || !cluster.cordoned())
        .await?;
    wait("the Completed Event")
        .until(async || {
            cluster.event_reasons()
                == [
                    "RebootCompleted",
                    "RebootScheduled",
                    "RebootStarted",
                    "RebootUpdated",
                ]
        })
        .await?;
    assert_eq!(
        cluster.taints(),
        [gpu_taint()],
        "exactly what the agent added is gone"
    );
    assert_eq!(cluster.annotation(), None);
    let ready = cluster
        .api
        .node()
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default();
    assert!(
        ready
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        "other conditions untouched"
    );

    // The Events and the Node's patches are sent by tasks of their own: both are waited for.
    let m = agent
        .wait_for("four Events and two patches counted", |m| {
            kube_requests(m, "create_event", "ok") >= 4.0
                && kube_requests(m, "patch_node", "ok") >= 2.0
        })
        .await?;
    assert_eq!(
        kube_requests(&m, "create_event", "ok"),
        4.0,
        "one per transition"
    );
    assert_eq!(kube_requests(&m, "create_event", "already_exists"), 0.0);
    agent.stop().await
}

#[tokio::test]
async fn an_operators_cordon_survives_the_event() -> TestResult {
    let mut node = kubelet_node();
    if let Some(spec) = node.spec.as_mut() {
        spec.unschedulable = Some(true);
    }
    let cluster = Cluster::start(node).await?;
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot("Scheduled", THIS_VM)]));
    let agent = cluster
        .agent(&imds, &["--kubernetes.cordon-events=Reboot"])
        .await?;
    wait("the condition True")
        .until(async || cluster.reason().as_deref() == Some("RebootScheduled"))
        .await?;
    assert!(cluster.cordoned());
    assert_eq!(cluster.annotation(), None, "the cordon is not the agent's");

    imds.sim.set_document(document(2, &[]));
    wait("the condition False")
        .until(async || cluster.reason().as_deref() == Some("NoScheduledEvents"))
        .await?;
    // Two resyncs later (fifty polls: at least 2.5 s) the node is still as the operator left it.
    imds.polled(50).await?;
    assert!(
        cluster.cordoned(),
        "never uncordons a node it did not cordon"
    );
    assert_eq!(cluster.taints(), [gpu_taint()]);
    agent.stop().await
}

#[tokio::test]
async fn a_taint_or_cordon_removed_by_hand_comes_back_while_the_event_is_pending() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot("Scheduled", THIS_VM)]));
    let agent = cluster
        .agent(
            &imds,
            &[
                "--kubernetes.taint-events=Reboot",
                "--kubernetes.cordon-events=Reboot",
            ],
        )
        .await?;
    wait("the taint")
        .until(async || cluster.our_taint().is_some() && cluster.cordoned())
        .await?;

    cluster.api.edit(|node| {
        if let Some(spec) = node.spec.as_mut() {
            spec.taints = Some(vec![gpu_taint()]);
            spec.unschedulable = Some(false);
        }
    });
    assert_eq!(cluster.our_taint(), None);
    wait("the taint back")
        .until(async || cluster.our_taint().as_deref() == Some("Reboot"))
        .await?;
    wait("the cordon back")
        .until(async || cluster.cordoned())
        .await?;
    assert_eq!(cluster.taints().len(), 2);
    assert_eq!(
        cluster.event_reasons(),
        ["RebootScheduled"],
        "no Event for a resync"
    );
    agent.stop().await
}

/// The first half of a restart: a Reboot of this VM is pending, and an agent with
/// [`TAINT_AND_CORDON`] tainted and cordoned the node, wrote its Event, and stopped.
async fn tainted_cordoned_and_stopped() -> Result<(Cluster, Imds), Box<dyn std::error::Error>> {
    let cluster = Cluster::start(kubelet_node()).await?;
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot("Scheduled", THIS_VM)]));
    let first = cluster.agent(&imds, &TAINT_AND_CORDON).await?;
    wait("taint, cordon and Event")
        .until(async || {
            cluster.our_taint().is_some()
                && cluster.cordoned()
                && cluster.event_reasons() == ["RebootScheduled"]
        })
        .await?;
    within("stopping", first.stop()).await??;
    Ok((cluster, imds))
}

/// Lets `agent` poll a while and read the Node again twice (`--kubernetes.resync-interval=1s`):
/// twenty polls, then fifty more (at least 2.5 s).
async fn polls_and_resyncs(agent: &Agent, imds: &Imds) -> TestResult {
    agent
        .wait_for("a few polls", |m| imds_gets(m) >= 20.0)
        .await?;
    imds.polled(50).await?;
    Ok(())
}

#[tokio::test]
async fn a_restart_in_the_middle_neither_doubles_nor_forgets() -> TestResult {
    let (cluster, imds) = tainted_cordoned_and_stopped().await?;
    let version = cluster.api.resource_version();

    let second = cluster.agent(&imds, &TAINT_AND_CORDON).await?;
    polls_and_resyncs(&second, &imds).await?;
    assert_eq!(
        cluster.api.resource_version(),
        version,
        "the Node was as wanted: not written"
    );
    assert_eq!(
        cluster.event_reasons(),
        ["RebootScheduled"],
        "no Event twice"
    );
    assert_eq!(cluster.api.answered("create_event", 201), 1);
    assert_eq!(cluster.taints().len(), 2);

    imds.sim.set_document(document(2, &[]));
    wait("the taint gone")
        .until(async || cluster.our_taint().is_none())
        .await?;
    wait("uncordoned")
        .until(async || !cluster.cordoned())
        .await?;
    assert_eq!(cluster.annotation(), None);
    wait("the Cancelled Event")
        .until(async || cluster.event_reasons() == ["RebootCancelled", "RebootScheduled"])
        .await?;
    second.stop().await
}

#[tokio::test]
async fn an_event_that_ended_while_the_agent_was_down_is_cleaned_up() -> TestResult {
    let (cluster, imds) = tainted_cordoned_and_stopped().await?;

    imds.sim.set_document(document(2, &[]));
    let second = cluster.agent(&imds, &TAINT_AND_CORDON).await?;
    wait("the taint gone")
        .until(async || cluster.our_taint().is_none() && !cluster.cordoned())
        .await?;
    assert_eq!(cluster.taints(), [gpu_taint()]);
    wait("the Event")
        .until(async || cluster.event_reasons() == ["RebootEndedWhileDown", "RebootScheduled"])
        .await?;
    second.stop().await
}

#[tokio::test]
async fn a_restart_that_cannot_name_this_vm_lifts_nothing() -> TestResult {
    let (cluster, imds) = tainted_cordoned_and_stopped().await?;
    let version = cluster.api.resource_version();

    // Instance metadata fails: the second agent reads the document but cannot tell which
    // events name this VM.
    imds.sim
        .inject_fault(Fault::status(500).on(FaultTarget::Instance).until_cleared());
    let second = cluster.agent(&imds, &TAINT_AND_CORDON).await?;
    polls_and_resyncs(&second, &imds).await?;
    assert_eq!(
        cluster.api.resource_version(),
        version,
        "the Node is untouched"
    );
    assert_eq!(cluster.our_taint().as_deref(), Some("Reboot"));
    assert!(cluster.cordoned());
    second.stop().await
}

#[tokio::test]
async fn a_conflict_is_retried() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    cluster.api.conflict_next_patches(3);
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot("Scheduled", THIS_VM)]));
    let agent = cluster
        .agent(&imds, &["--kubernetes.taint-events=Reboot"])
        .await?;
    wait("condition and taint")
        .until(async || {
            cluster.reason().as_deref() == Some("RebootScheduled") && cluster.our_taint().is_some()
        })
        .await?;
    assert_eq!(
        cluster.api.answered("patch_node_status", 409) + cluster.api.answered("patch_node", 409),
        3
    );
    let m = agent.metrics().await?;
    assert_eq!(
        kube_requests(&m, "patch_node_status", "conflict")
            + kube_requests(&m, "patch_node", "conflict"),
        3.0
    );
    assert_eq!(
        cluster.taints().len(),
        2,
        "one taint of ours, the other owner's kept"
    );
    agent.stop().await
}

#[tokio::test]
async fn a_forbidding_api_server_is_counted_retried_and_never_delays_polling() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    cluster.api.forbid("patch_node_status");
    cluster.api.forbid("create_event");
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot("Scheduled", THIS_VM)]));
    let agent = cluster
        .agent(&imds, &["--kubernetes.taint-events=Reboot"])
        .await?;
    let m = agent
        .wait_for("refusals counted", |m| {
            kube_requests(m, "patch_node_status", "forbidden") >= 2.0
                && kube_requests(m, "create_event", "forbidden") >= 2.0
        })
        .await?;
    let gets = imds_gets(&m);
    agent
        .wait_for("polling going on", |m| imds_gets(m) >= gets + 20.0)
        .await?;
    assert_eq!(cluster.condition(), None);
    assert!(cluster.event_reasons().is_empty());

    cluster.api.allow_all();
    wait("the condition after the backoff")
        .until(async || cluster.reason().as_deref() == Some("RebootScheduled"))
        .await?;
    wait("the Event after the backoff")
        .until(async || cluster.event_reasons() == ["RebootScheduled"])
        .await?;
    assert_eq!(cluster.our_taint().as_deref(), Some("Reboot"));
    agent.stop().await
}

#[tokio::test]
async fn a_proxys_error_page_is_counted_by_its_http_status_and_a_409_is_retried_as_a_conflict()
-> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    let html: &[u8] = b"<html><body><h1>502 Bad Gateway</h1></body></html>";
    let json: &[u8] = br#"{"error":"upstream unavailable"}"#;
    let binary: &[u8] = b"\xff\xfe\x00garbage";
    cluster.api.proxy_answers("patch_node_status", 1, 500, html);
    // Not 503: the client library retries that one itself.
    cluster.api.proxy_answers("patch_node_status", 1, 500, json);
    cluster
        .api
        .proxy_answers("patch_node_status", 1, 502, binary);
    cluster.api.proxy_answers("create_event", 1, 500, json);
    cluster.api.proxy_answers("patch_node_status", 1, 409, json);
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot("Scheduled", THIS_VM)]));
    let agent = cluster.agent(&imds, &[]).await?;
    wait("the condition, once the proxy lets requests through")
        .until(async || cluster.reason().as_deref() == Some("RebootScheduled"))
        .await?;
    wait("the Event too")
        .until(async || cluster.event_reasons() == ["RebootScheduled"])
        .await?;
    let m = agent.metrics().await?;
    assert_eq!(
        kube_requests(&m, "patch_node_status", "server_error"),
        3.0,
        "500 and 502 pages, whatever their body"
    );
    assert_eq!(kube_requests(&m, "create_event", "server_error"), 1.0);
    assert_eq!(kube_requests(&m, "patch_node_status", "conflict"), 1.0);
    assert_eq!(kube_requests(&m, "patch_node_status", "rejected"), 0.0);
    assert_eq!(kube_requests(&m, "create_event", "rejected"), 0.0);
    assert!(
        cluster.api.answered("get_node", 200) >= 2,
        "the 409 read the Node again, as a conflict does"
    );
    agent.stop().await
}

#[tokio::test]
async fn dropped_events_are_logged_once_a_minute_not_one_line_each() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    cluster.api.hang();
    let imds = Imds::start().await?;
    // 100 events naming this VM: 100 Kubernetes Events for a queue of 64.
    let events: Vec<serde_json::Value> = (0..100)
        .map(|i| {
            let mut event = reboot("Scheduled", THIS_VM);
            event["EventId"] = format!("B0000000-0000-4000-8000-{i:012}").into();
            event
        })
        .collect();
    imds.sim.set_document(document(1, &events));
    let mut command = command(&[
        &format!("--imds.url={}", imds.url()),
        &format!("--kubernetes.node-name={NODE}"),
        &format!(
            "--kubernetes.kubeconfig={}",
            cluster.dir.path("kubeconfig").display()
        ),
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=50ms",
    ]);
    command.env("AZURE_SCHEDULED_EVENTS_STATE_FILE", "");
    let process = tokio::task::spawn_blocking(move || {
        AgentProcess::spawn(command).map_err(|e| e.to_string())
    })
    .await??;
    process
        .wait_for_metrics("30 Events dropped", |metrics| {
            let dropped = metrics
                .lines()
                .find(|l| l.contains(r#"operation="create_event",result="dropped""#))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
            dropped >= 30.0
        })
        .await?;
    let lines = process.lines_so_far()?;
    let warnings: Vec<_> = lines
        .iter()
        .filter(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Kubernetes Events not created"))
        })
        .collect();
    assert_eq!(warnings.len(), 1, "one line for every drop: {warnings:?}");
    assert_eq!(warnings[0]["dropped"], 1, "{:?}", warnings[0]);
    Ok(())
}

#[tokio::test]
async fn a_hanging_api_server_does_not_delay_polls() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    cluster.api.hang();
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot("Scheduled", THIS_VM)]));
    let agent = cluster
        .agent(&imds, &["--kubernetes.taint-events=Reboot"])
        .await?;
    let first = agent
        .wait_for("the first poll", |m| imds_gets(m) >= 1.0)
        .await?;
    let from = imds_gets(&first);
    let hanging = tokio::time::Instant::now();
    let m = wait("10 more polls while every API server request hangs")
        .within(Duration::from_secs(2))
        .until(async || {
            let m = agent.metrics().await?;
            Ok::<_, reqwest::Error>((imds_gets(&m) - from >= 10.0).then_some(m))
        })
        .await
        .map_err(|e| format!("polling stalled: {e}"))?;
    let polls = imds_gets(&m) - from;
    eprintln!(
        "{polls} IMDS GETs in {:?} at --poll.interval=50ms while every API server request hangs",
        hanging.elapsed()
    );
    assert!(polls >= 10.0, "polling stalled: {polls} GETs in 2 s");
    assert_eq!(
        m.value(r#"azure_scheduled_events_pending{affects_this_vm="true",event_status="Scheduled",event_type="Reboot"}"#),
        Some(1.0)
    );
    assert_eq!(cluster.condition(), None);
    within("stopping while a request hangs", agent.stop()).await??;
    Ok(())
}

#[tokio::test]
async fn another_vms_event_changes_nothing_on_this_node() -> TestResult {
    let (cluster, imds, agent) = watching_an_empty_document().await?;
    let before = cluster.api.node();

    imds.sim
        .set_document(document(2, &[reboot("Scheduled", OTHER_VM)]));
    agent
        .wait_for("the other VM's event seen", |m| {
            m.pending("Reboot", "Scheduled", "false") == 1.0
        })
        .await?;
    // Fifty more polls, at least 2.5 s: two resyncs.
    imds.polled(50).await?;
    assert_eq!(cluster.api.node(), before, "the Node is unchanged");
    assert!(cluster.event_reasons().is_empty(), "no Event");
    agent.stop().await
}

#[tokio::test]
async fn outside_a_pod_the_kubeconfig_named_by_kubeconfig_is_used() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot("Scheduled", THIS_VM)]));
    // The binary as users run it outside a cluster: no service account, no --kubernetes.kubeconfig,
    // only the KUBECONFIG variable kubectl reads too.
    let imds_url = format!("--imds.url={}", imds.url());
    let node = format!("--kubernetes.node-name={NODE}");
    let mut command = command(&[
        &imds_url,
        &node,
        "--web.listen-address=127.0.0.1:0",
        "--poll.interval=50ms",
    ]);
    command.env("KUBECONFIG", cluster.dir.path("kubeconfig"));
    let mut process = tokio::task::spawn_blocking(move || {
        AgentProcess::spawn(command).map_err(|e| e.to_string())
    })
    .await??;
    let seen = wait("the condition True")
        .until(async || cluster.reason().as_deref() == Some("RebootScheduled"))
        .await;
    // The Event is a request of its own, after the condition's.
    let event = wait("the Event")
        .until(async || cluster.event_reasons() == ["RebootScheduled"])
        .await;
    process.terminate()?;
    seen?;
    event?;
    assert_eq!(cluster.event_reasons(), ["RebootScheduled"]);
    Ok(())
}

#[tokio::test]
async fn the_request_counter_exists_only_with_the_kubernetes_output() -> TestResult {
    let imds = Imds::start().await?;
    let off = Agent::start(&imds, &[]).await?;
    let m = off.metrics().await?;
    assert!(!m.0.contains("azure_scheduled_events_kubernetes_requests_total"));
    off.stop().await?;

    let cluster = Cluster::start(kubelet_node()).await?;
    let on = cluster.agent(&imds, &[]).await?;
    let m = on.metrics().await?;
    assert_eq!(
        kube_requests(&m, "patch_node", "forbidden"),
        0.0,
        "pre-created"
    );
    assert!(m.0.contains("# TYPE azure_scheduled_events_kubernetes_requests_total counter"));
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/metrics.md"))?;
    assert!(
        docs.contains("azure_scheduled_events_kubernetes_requests_total"),
        "documented"
    );
    on.stop().await
}

#[test]
fn bad_kubernetes_settings_name_their_flag() -> TestResult {
    use azure_scheduled_events_exporter::config::{Cli, LogFormat};
    use clap::Parser;
    let dir = TempDir::new("kubernetes-config")?;
    let missing = format!("--kubernetes.kubeconfig={}", dir.path("missing").display());
    std::fs::write(
        dir.path("kubeconfig"),
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:1\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\nusers:\n- name: u\n  user: {}\ncurrent-context: c\n",
    )?;
    let valid = format!(
        "--kubernetes.kubeconfig={}",
        dir.path("kubeconfig").display()
    );
    for (args, flag) in [
        (
            vec!["--kubernetes.taint-events=Reboot"],
            "--kubernetes.taint-events",
        ),
        (
            vec!["--kubernetes.node-name=Node_1", missing.as_str()],
            "--kubernetes.node-name",
        ),
        (
            vec![&format!("--kubernetes.node-name={NODE}"), missing.as_str()],
            "--kubernetes.kubeconfig",
        ),
        (
            vec![
                &format!("--kubernetes.node-name={NODE}"),
                valid.as_str(),
                "--kubernetes.cordon-events=Hibernate",
            ],
            "--kubernetes.cordon-events",
        ),
        (
            vec!["--kubernetes.drain-events=Reboot"],
            "--kubernetes.drain-events",
        ),
        (vec!["--kubernetes.dry-run"], "--kubernetes.dry-run"),
        (
            vec![
                &format!("--kubernetes.node-name={NODE}"),
                valid.as_str(),
                "--kubernetes.drain-events=Reboot,SpotRebalanceRecommendation",
            ],
            "--kubernetes.drain-events",
        ),
        (
            vec![
                &format!("--kubernetes.node-name={NODE}"),
                valid.as_str(),
                "--kubernetes.drain-margin=0s",
            ],
            "--kubernetes.drain-margin",
        ),
        (
            vec![
                &format!("--kubernetes.node-name={NODE}"),
                valid.as_str(),
                "--kubernetes.exclude-from-load-balancers-events=Reboot,Hibernate",
            ],
            "--kubernetes.exclude-from-load-balancers-events",
        ),
    ] {
        // An event type is refused as clap parses it, the rest as the flags are validated.
        let refusal = match Cli::try_parse_from(
            std::iter::once("azure-scheduled-events-exporter").chain(args.iter().map(|s| &**s)),
        ) {
            Err(e) => e.to_string(),
            Ok(cli) => match cli.agent.validate(LogFormat::Json) {
                Ok(_) => return Err(format!("{args:?} was accepted").into()),
                Err(e) => e.to_string(),
            },
        };
        assert!(refusal.contains(flag), "{args:?}: {refusal}");
    }
    Ok(())
}
