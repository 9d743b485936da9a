//! What the conditions say when the agent cannot see, and in whose words: `Unknown` after
//! `--kubernetes.imds-unknown-after` without a document (with nothing lifted), back with the next
//! one; AKS node-problem-detector's names and messages with `--kubernetes.aks-condition-names`;
//! a start before the Node is registered or initialised; the client library's own error lines
//! folded into the agent's one line per kind; every `--kubernetes.*` value validated.

use azure_scheduled_events_simulator::Fault;
use k8s_openapi::api::core::v1::{NodeCondition, Taint};

use super::{Cluster, NODE, REBOOT, TAINT_AND_CORDON, kube_requests, kubelet_node, reboot};
use crate::common::process::{AgentProcess, command};
use crate::common::{Imds, THIS_VM, TestResult, document, wait};

fn condition(cluster: &Cluster, type_: &str) -> Option<NodeCondition> {
    cluster
        .api
        .node()
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == type_)
}

/// `(status, reason)` of the condition of that type.
fn status(cluster: &Cluster, type_: &str) -> Option<(String, String)> {
    condition(cluster, type_).map(|c| (c.status, c.reason.unwrap_or_default()))
}

fn pair(status: &str, reason: &str) -> Option<(String, String)> {
    Some((status.to_owned(), reason.to_owned()))
}

#[tokio::test]
async fn a_blind_agent_says_unknown_lifts_nothing_and_says_true_again_with_the_next_document()
-> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot("Scheduled", THIS_VM)]));
    let mut flags = TAINT_AND_CORDON.to_vec();
    flags.push("--kubernetes.imds-unknown-after=1s");
    let agent = cluster.agent(&imds, &flags).await?;
    wait("condition, taint and cordon")
        .until(async || {
            cluster.reason().as_deref() == Some("RebootScheduled")
                && cluster.our_taint().is_some()
                && cluster.cordoned()
        })
        .await?;
    let applied = cluster.annotation();

    imds.sim.inject_fault(Fault::garbage().until_cleared());
    wait("the condition Unknown")
        .until(async || {
            status(&cluster, "AzureScheduledEvent") == pair("Unknown", "ImdsUnreachable")
        })
        .await?;
    let message = cluster
        .condition()
        .and_then(|c| c.message)
        .unwrap_or_default();
    assert!(
        message.starts_with("No valid Scheduled Events document since ")
            && message.contains("decode"),
        "the message names the failure's kind: {message}"
    );
    imds.polled(20).await?;
    assert_eq!(cluster.our_taint().as_deref(), Some("Reboot"), "taint kept");
    assert!(cluster.cordoned(), "cordon kept");
    assert_eq!(cluster.annotation(), applied, "still the agent's");

    imds.sim.clear_faults();
    wait("the condition True again")
        .until(async || status(&cluster, "AzureScheduledEvent") == pair("True", "RebootScheduled"))
        .await?;
    assert_eq!(cluster.our_taint().as_deref(), Some("Reboot"));
    agent.stop().await
}

#[tokio::test]
async fn aks_names_say_unknown_from_the_start_and_what_karpenter_parses_for_a_preemption()
-> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    let imds = Imds::start().await?;
    imds.sim.inject_fault(Fault::garbage().until_cleared());
    let agent = cluster
        .agent(
            &imds,
            &[
                "--kubernetes.aks-condition-names",
                "--kubernetes.imds-unknown-after=1s",
            ],
        )
        .await?;
    // The Node's first reads and writes back off on failure (1 s doubling to 16 s): on a loaded
    // machine a few failed requests take this past the usual 20 s.
    // Unknown from the start, with why once the first poll failed.
    wait("both conditions Unknown, before any document, with why")
        .within(std::time::Duration::from_secs(90))
        .until(async || {
            status(&cluster, "VMEventScheduled") == pair("Unknown", "NoVMEventScheduled")
                && status(&cluster, "PreemptionScheduled")
                    == pair("Unknown", "NoPreemptionScheduled")
                && condition(&cluster, "PreemptionScheduled")
                    .and_then(|c| c.message)
                    .is_some_and(|m| m.starts_with("IMDS query failed"))
        })
        .await?;
    let message = condition(&cluster, "VMEventScheduled")
        .and_then(|c| c.message)
        .unwrap_or_default();
    assert!(
        message.starts_with("IMDS query failed, decode"),
        "{message}"
    );

    imds.sim.clear_faults();
    let mut preempt = reboot("Scheduled", THIS_VM);
    preempt["EventType"] = "Preempt".into();
    preempt["NotBefore"] = "2050-04-11T22:26:58Z".into();
    preempt["Description"] = "Spot capacity is needed back.".into();
    imds.sim.set_document(document(1, &[preempt]));
    wait("both conditions True")
        .until(async || {
            status(&cluster, "VMEventScheduled") == pair("True", "VMEventScheduled")
                && status(&cluster, "PreemptionScheduled") == pair("True", "SpotEvictionIncoming")
        })
        .await?;
    let message = |type_: &str| {
        condition(&cluster, type_)
            .and_then(|c| c.message)
            .unwrap_or_default()
    };
    assert_eq!(
        message("VMEventScheduled"),
        "Preempt Scheduled: Mon, 11 Apr 2050 22:26:58 GMT. DurationInSeconds: -1. Spot capacity is needed back. For more information, see https://aka.ms/aks/scheduledevents."
    );
    assert_eq!(
        message("PreemptionScheduled"),
        format!(
            "Preempt Scheduled: Mon, 11 Apr 2050 22:26:58 GMT. For more information, see https://aka.ms/aks/scheduledevents. EventId: {REBOOT}"
        )
    );
    assert_eq!(
        cluster.condition(),
        None,
        "AzureScheduledEvent is not written beside them"
    );

    imds.sim.set_document(document(2, &[]));
    wait("both conditions False")
        .until(async || {
            status(&cluster, "VMEventScheduled") == pair("False", "NoVMEventScheduled")
                && status(&cluster, "PreemptionScheduled") == pair("False", "NoPreemptionScheduled")
        })
        .await?;
    assert_eq!(message("VMEventScheduled"), "VM has no scheduled event");
    agent.stop().await
}

#[tokio::test]
async fn a_blind_start_turns_the_previous_agents_condition_unknown_before_the_first_answer()
-> TestResult {
    // The previous agent said nothing was scheduled; the new one starts with an IMDS that never
    // answers its first request (--imds.first-timeout: 2 minutes by default). The time without a
    // document counts from the start, not from the first request's failure.
    let mut node = kubelet_node();
    if let Some(status) = node.status.as_mut() {
        status
            .conditions
            .get_or_insert_default()
            .push(NodeCondition {
                type_: "AzureScheduledEvent".into(),
                status: "False".into(),
                reason: Some("NoScheduledEvents".into()),
                message: Some("No scheduled event names this VM.".into()),
                ..NodeCondition::default()
            });
    }
    let cluster = Cluster::start(node).await?;
    let imds = Imds::start().await?;
    imds.sim
        .inject_fault(Fault::delay(std::time::Duration::from_secs(3600)).until_cleared());
    let agent = process(&cluster, &imds, &["--kubernetes.imds-unknown-after=1s"]).await?;
    wait("the condition Unknown while the first request waits")
        .until(async || status(&cluster, "AzureScheduledEvent") == pair("Unknown", "NoDocumentYet"))
        .await?;
    assert_eq!(
        imds.sim.requests(),
        1,
        "the first request still waits: no answer, no second poll"
    );
    let message = condition(&cluster, "AzureScheduledEvent")
        .and_then(|c| c.message)
        .unwrap_or_default();
    assert!(
        message.starts_with("No valid Scheduled Events document since the agent started at ")
            && message.contains("no answer yet"),
        "{message}"
    );
    drop(agent);
    Ok(())
}

/// The agent as a process (its log lines readable), writing the Node of `cluster`.
async fn process(cluster: &Cluster, imds: &Imds, extra: &[&str]) -> Result<AgentProcess, String> {
    let kubeconfig = format!(
        "--kubernetes.kubeconfig={}",
        cluster.dir.path("kubeconfig").display()
    );
    let mut args = vec![
        format!("--imds.url={}", imds.url()),
        format!("--kubernetes.node-name={NODE}"),
        kubeconfig,
        "--web.listen-address=127.0.0.1:0".to_owned(),
        "--poll.interval=50ms".to_owned(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let command = command(&args);
    tokio::task::spawn_blocking(move || AgentProcess::spawn(command).map_err(|e| e.to_string()))
        .await
        .map_err(|e| e.to_string())?
}

fn messages(lines: &[serde_json::Value], start: &str) -> usize {
    lines
        .iter()
        .filter(|l| l["message"].as_str().is_some_and(|m| m.starts_with(start)))
        .count()
}

#[tokio::test]
async fn a_node_not_registered_nor_initialised_is_waited_for_with_one_line() -> TestResult {
    let mut node = kubelet_node();
    if let Some(spec) = node.spec.as_mut() {
        spec.taints.get_or_insert_default().push(Taint {
            key: "node.cloudprovider.kubernetes.io/uninitialized".into(),
            value: Some("true".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
    }
    let cluster = Cluster {
        api: crate::apiserver::ApiServer::start_unregistered(node).await?,
        dir: crate::common::TempDir::new("kubernetes-startup")?,
    };
    std::fs::write(cluster.dir.path("kubeconfig"), cluster.api.kubeconfig())?;
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot("Scheduled", THIS_VM)]));
    let mut agent = process(&cluster, &imds, &["--kubernetes.taint-events=Reboot"]).await?;
    let polls = |m: &str| {
        m.lines()
            .find(|l| {
                l.starts_with(r#"azure_scheduled_events_imds_requests_total{operation="events"}"#)
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    wait("the missing Node read twice")
        .until(async || cluster.api.answered("get_node", 404) >= 2)
        .await?;
    let before = polls(&agent.metrics()?);
    agent
        .wait_for_metrics("polling going on meanwhile", |m| polls(m) >= before + 20.0)
        .await?;
    cluster.api.register();
    wait("the registered Node read, still uninitialised")
        .until(async || cluster.api.answered("get_node", 200) >= 2)
        .await?;
    assert_eq!(
        cluster.api.answered("patch_node_status", 200),
        0,
        "nothing written"
    );
    assert_eq!(
        cluster.api.answered("patch_node", 200),
        0,
        "nothing written"
    );
    assert_eq!(agent.exited()?, None, "never exits for it");

    cluster.api.edit(|node| {
        if let Some(taints) = node.spec.as_mut().and_then(|s| s.taints.as_mut()) {
            taints.retain(|t| !t.key.starts_with("node.cloudprovider"));
        }
    });
    wait("condition and taint once initialised")
        .until(async || {
            cluster.reason().as_deref() == Some("RebootScheduled")
                && cluster.our_taint().as_deref() == Some("Reboot")
        })
        .await?;
    let lines = agent.lines_so_far()?;
    assert_eq!(
        messages(&lines, "waiting for the Node"),
        1,
        "one line for the whole wait: {lines:#?}"
    );
    assert_eq!(
        messages(&lines, "the Node is registered and initialised"),
        1
    );
    assert_eq!(messages(&lines, "Kubernetes API request failed"), 0);
    agent.terminate()?;
    Ok(())
}

#[tokio::test]
async fn a_failing_request_is_one_line_of_the_agents_and_none_of_the_client_library() -> TestResult
{
    let cluster = Cluster::start(kubelet_node()).await?;
    // A 500 is what the client library logs an ERROR line of its own for (as for no answer).
    let status: &[u8] = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcdserver: leader changed","code":500}"#;
    cluster
        .api
        .proxy_answers("patch_node_status", 1000, 500, status);
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot("Scheduled", THIS_VM)]));
    let mut agent = process(&cluster, &imds, &[]).await?;
    agent
        .wait_for_metrics("three failures", |m| {
            kube_requests(
                &crate::common::Exposition(m.to_owned()),
                "patch_node_status",
                "server_error",
            ) >= 3.0
        })
        .await?;
    let lines = agent.lines_so_far()?;
    let errors: Vec<_> = lines.iter().filter(|l| l["level"] == "ERROR").collect();
    assert!(
        errors.is_empty(),
        "no ERROR line of the client library: {errors:#?}"
    );
    assert_eq!(
        messages(&lines, "Kubernetes API request failed"),
        1,
        "one line per kind of failure: {lines:#?}"
    );
    agent.terminate()?;
    Ok(())
}

#[test]
fn every_kubernetes_value_is_checked_with_or_without_a_node_name() -> TestResult {
    use azure_scheduled_events_exporter::config::{Cli, LogFormat};
    use clap::Parser;
    for (flag, name) in [
        ("--kubernetes.drain-margin=0s", "--kubernetes.drain-margin"),
        ("--kubernetes.drain-margin=2h", "--kubernetes.drain-margin"),
        (
            "--kubernetes.resync-interval=2h",
            "--kubernetes.resync-interval",
        ),
        (
            "--kubernetes.resync-interval=10ms",
            "--kubernetes.resync-interval",
        ),
        ("--kubernetes.drain-delay=2h", "--kubernetes.drain-delay"),
        (
            "--kubernetes.imds-unknown-after=5m",
            "--kubernetes.imds-unknown-after",
        ),
        (
            "--kubernetes.drain-pod-selector=app=web!",
            "--kubernetes.drain-pod-selector",
        ),
        (
            "--kubernetes.drain-pod-selector=Frieze:a=b",
            "--kubernetes.drain-pod-selector",
        ),
        (
            "--kubernetes.aks-condition-names",
            "--kubernetes.aks-condition-names",
        ),
    ] {
        // A selector is refused as clap parses it, the rest as the flags are validated; either
        // is one line and exit code 64 (tests/suite/binary.rs).
        let refusal = match Cli::try_parse_from(["azure-scheduled-events-exporter", flag]) {
            Err(e) => e.to_string(),
            Ok(cli) => match cli.agent.validate(LogFormat::Json) {
                Ok(_) => return Err(format!("{flag} was accepted without a node name").into()),
                Err(e) => e.to_string(),
            },
        };
        assert!(refusal.contains(name), "{flag}: {refusal}");
    }
    Ok(())
}
