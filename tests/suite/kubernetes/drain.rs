//! Handing the node over before Azure takes it: the drain through the Eviction API (budgets and
//! the deadline hold, DaemonSet and mirror pods stay, a cancel stops it and uncordons), the
//! deadline labels and the load-balancer exclusion that come and go with the event, the advisory
//! taint, a dry run that writes nothing, and what an idle node costs the API server.

use chrono::Utc;
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::{Cluster, NODE, REBOOT, kube_requests, kubelet_node, reboot};
use crate::common::{Agent, Imds, THIS_VM, TestResult, document, wait};

const NOT_BEFORE_LABEL: &str = "azure-scheduled-events/not-before";
const EVENT_TYPE_LABEL: &str = "azure-scheduled-events/event-type";
const EXCLUDE_LB: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// A pod bound to `node`, owned by a controller of `kind` (none for a bare pod).
fn pod(name: &str, node: &str, owner: Option<&str>, grace: Option<i64>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            owner_references: owner.map(|kind| {
                vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: kind.into(),
                    name: name.into(),
                    uid: format!("owner-{name}"),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]
            }),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            termination_grace_period_seconds: grace,
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            ..PodStatus::default()
        }),
    }
}

/// The pods of a typical node: two to evict (a Deployment's with a long grace period, a bare
/// one), and four that stay: a DaemonSet's, a mirror pod, a finished Job's, another node's.
fn typical_pods(cluster: &Cluster) {
    cluster
        .api
        .add_pod(pod("web", NODE, Some("ReplicaSet"), Some(600)));
    cluster.api.add_pod(pod("db", NODE, None, None));
    cluster
        .api
        .add_pod(pod("node-exporter", NODE, Some("DaemonSet"), None));
    let mut mirror = pod("kube-proxy", NODE, None, None);
    mirror.metadata.annotations = Some(
        [("kubernetes.io/config.mirror".to_owned(), "hash".to_owned())]
            .into_iter()
            .collect(),
    );
    cluster.api.add_pod(mirror);
    let mut done = pod("migrate", NODE, Some("Job"), None);
    if let Some(status) = done.status.as_mut() {
        status.phase = Some("Succeeded".into());
    }
    cluster.api.add_pod(done);
    cluster
        .api
        .add_pod(pod("elsewhere", "aks-pool-12345678-vmss000001", None, None));
}

/// NotBefore `seconds` from now, as Azure writes it.
fn in_seconds(seconds: i64) -> String {
    (Utc::now() + chrono::Duration::seconds(seconds))
        .format("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}

fn reboot_at(not_before: &str) -> serde_json::Value {
    super::reboot_not_before("Scheduled", THIS_VM, not_before)
}

fn evicted(cluster: &Cluster) -> Vec<String> {
    let mut names: Vec<String> = cluster
        .api
        .evictions()
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    names.sort();
    names
}

/// Every eviction asked for a grace period of 1 to 10 s (the tests' NotBefore 10 s away, or their
/// margin of 10 s once NotBefore has passed): cut to `what`.
fn graces_cut_to(cluster: &Cluster, what: &str) {
    for (pod, grace) in cluster.api.evictions() {
        let grace = grace.unwrap_or_default();
        assert!(
            (1..=10).contains(&grace),
            "{pod}: its grace period cut to {what}: {grace}"
        );
    }
}

fn terminating(cluster: &Cluster, name: &str) -> bool {
    cluster.api.pods().iter().any(|p| {
        p.metadata.name.as_deref() == Some(name) && p.metadata.deletion_timestamp.is_some()
    })
}

/// The note of the Event of that reason.
fn event_note(cluster: &Cluster, reason: &str) -> Option<String> {
    cluster
        .api
        .events()
        .into_iter()
        .find(|e| e.reason.as_deref() == Some(reason))
        .and_then(|e| e.note)
}

/// An agent draining the node for Reboots, `margin` before NotBefore.
async fn draining(
    cluster: &Cluster,
    imds: &Imds,
    margin: &str,
) -> Result<Agent, Box<dyn std::error::Error>> {
    let margin = format!("--kubernetes.drain-margin={margin}");
    cluster
        .agent(imds, &["--kubernetes.drain-events=Reboot", &margin])
        .await
}

/// Waits for the drain's last Event, of `reason` (`DrainCompleted` or `DrainIncomplete`), and
/// returns its note.
async fn drain_end(cluster: &Cluster, reason: &str) -> Result<String, String> {
    wait("the drain's end")
        .until(async || event_note(cluster, reason).is_some())
        .await?;
    Ok(event_note(cluster, reason).unwrap_or_default())
}

fn label(cluster: &Cluster, key: &str) -> Option<String> {
    cluster.api.node().metadata.labels?.get(key).cloned()
}

#[tokio::test]
async fn a_reboot_drains_every_pod_but_daemon_set_and_mirror_pods() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    typical_pods(&cluster);
    let imds = Imds::start().await?;
    imds.sim.set_document(document(1, &[]));
    let agent = cluster
        .agent(&imds, &["--kubernetes.drain-events=Reboot"])
        .await?;
    wait("the condition False")
        .until(async || cluster.reason().as_deref() == Some("NoScheduledEvents"))
        .await?;
    assert!(
        cluster.api.evictions().is_empty(),
        "nothing pending, nothing evicted"
    );

    imds.sim
        .set_document(document(2, &[reboot_at(&in_seconds(120))]));
    drain_end(&cluster, "DrainCompleted").await?;
    assert!(cluster.cordoned(), "cordoned first");
    assert_eq!(evicted(&cluster), ["default/db", "default/web"]);
    let graces: std::collections::BTreeMap<String, Option<i64>> =
        cluster.api.evictions().into_iter().collect();
    let web = graces
        .get("default/web")
        .copied()
        .flatten()
        .unwrap_or_default();
    assert!(
        (100..=120).contains(&web),
        "600 s of grace cut to the time left before NotBefore: {web}"
    );
    assert_eq!(
        graces.get("default/db").copied().flatten(),
        Some(30),
        "the default grace period, within the time left"
    );
    assert!(terminating(&cluster, "web") && terminating(&cluster, "db"));
    for stays in ["node-exporter", "kube-proxy", "migrate", "elsewhere"] {
        assert!(!terminating(&cluster, stays), "{stays} is left alone");
    }
    let started = event_note(&cluster, "DrainStarted").ok_or("no DrainStarted Event")?;
    assert!(started.contains(REBOOT), "{started}");
    let m = agent.metrics().await?;
    assert_eq!(
        m.get("azure_scheduled_events_kubernetes_drain_pods_evicted_total"),
        2.0
    );
    assert_eq!(
        m.get("azure_scheduled_events_kubernetes_drain_pods_remaining_total"),
        0.0
    );
    assert_eq!(kube_requests(&m, "evict_pod", "ok"), 2.0);

    imds.sim.set_document(document(3, &[]));
    wait("uncordoned once the event is gone")
        .until(async || !cluster.cordoned())
        .await?;
    assert_eq!(cluster.annotation(), None);
    assert_eq!(
        cluster.api.unversioned_patches(),
        0,
        "every Node write is a patch against a resourceVersion"
    );
    assert_eq!(
        cluster.api.answered("evict_pod", 201),
        2,
        "evicted once each"
    );
    agent.stop().await
}

#[tokio::test]
async fn a_budget_that_refuses_until_the_deadline_leaves_its_pod_running_and_says_so() -> TestResult
{
    let cluster = Cluster::start(kubelet_node()).await?;
    typical_pods(&cluster);
    cluster.api.refuse_evictions("default/db");
    let imds = Imds::start().await?;
    // Retries stop 5 s before NotBefore: about 10 s from now, time enough to cordon on a busy machine.
    imds.sim
        .set_document(document(1, &[reboot_at(&in_seconds(15))]));
    let agent = draining(&cluster, &imds, "5s").await?;
    let note = drain_end(&cluster, "DrainIncomplete").await?;
    assert!(
        note.contains("default/db") && !note.contains("default/web"),
        "{note}"
    );
    assert_eq!(evicted(&cluster), ["default/web"]);
    assert!(!terminating(&cluster, "db"), "never forced");
    assert!(
        cluster.api.answered("evict_pod", 429) >= 2,
        "a refused eviction is tried again"
    );
    let m = agent.metrics().await?;
    assert_eq!(
        m.get("azure_scheduled_events_kubernetes_drain_pods_remaining_total"),
        1.0
    );
    assert!(m.get("azure_scheduled_events_kubernetes_drain_evictions_refused_total") >= 2.0);
    let answered = cluster.api.answered("evict_pod", 429);
    imds.polled(40).await?;
    assert_eq!(
        cluster.api.answered("evict_pod", 429),
        answered,
        "no eviction after the deadline"
    );
    agent.stop().await
}

#[tokio::test]
async fn a_cancel_stops_the_drain_and_uncordons() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    typical_pods(&cluster);
    cluster.api.refuse_evictions("default/db");
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot_at(&in_seconds(600))]));
    let agent = cluster
        .agent(&imds, &["--kubernetes.drain-events=Reboot"])
        .await?;
    wait("a refused eviction")
        .until(async || cluster.api.answered("evict_pod", 429) >= 1)
        .await?;
    assert!(cluster.cordoned());

    imds.sim.set_document(document(2, &[]));
    wait("the drain cancelled")
        .until(async || event_note(&cluster, "DrainCancelled").is_some())
        .await?;
    wait("uncordoned")
        .until(async || !cluster.cordoned())
        .await?;
    assert_eq!(cluster.annotation(), None, "nothing of the agent's left");
    let refused = cluster.api.answered("evict_pod", 429);
    cluster.api.allow_evictions("default/db");
    imds.polled(40).await?;
    assert_eq!(cluster.api.answered("evict_pod", 429), refused);
    assert!(!terminating(&cluster, "db"), "no eviction after the cancel");
    agent.stop().await
}

#[tokio::test]
async fn a_cancel_leaves_an_operators_cordon() -> TestResult {
    let mut node = kubelet_node();
    if let Some(spec) = node.spec.as_mut() {
        spec.unschedulable = Some(true);
    }
    let cluster = Cluster::start(node).await?;
    typical_pods(&cluster);
    cluster.api.refuse_evictions("default/db");
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot_at(&in_seconds(600))]));
    let agent = cluster
        .agent(&imds, &["--kubernetes.drain-events=Reboot"])
        .await?;
    wait("a refused eviction")
        .until(async || cluster.api.answered("evict_pod", 429) >= 1)
        .await?;
    imds.sim.set_document(document(2, &[]));
    wait("the drain cancelled")
        .until(async || event_note(&cluster, "DrainCancelled").is_some())
        .await?;
    imds.polled(40).await?;
    assert!(cluster.cordoned(), "the cordon was not the agent's");
    agent.stop().await
}

#[tokio::test]
async fn deadline_labels_and_the_load_balancer_exclusion_come_and_go() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    let imds = Imds::start().await?;
    imds.sim.set_document(document(1, &[]));
    let agent = cluster
        .agent(
            &imds,
            &["--kubernetes.exclude-from-load-balancers-events=Reboot"],
        )
        .await?;
    wait("the condition False")
        .until(async || cluster.reason().as_deref() == Some("NoScheduledEvents"))
        .await?;
    assert_eq!(label(&cluster, NOT_BEFORE_LABEL), None);
    assert_eq!(label(&cluster, EXCLUDE_LB), None);

    imds.sim
        .set_document(document(2, &[reboot("Scheduled", THIS_VM)]));
    wait("the labels")
        .until(async || {
            label(&cluster, NOT_BEFORE_LABEL).is_some() && label(&cluster, EXCLUDE_LB).is_some()
        })
        .await?;
    // Mon, 11 Apr 2050 22:26:58 GMT
    assert_eq!(
        label(&cluster, NOT_BEFORE_LABEL).as_deref(),
        Some("2533328818")
    );
    assert_eq!(label(&cluster, EVENT_TYPE_LABEL).as_deref(), Some("Reboot"));
    assert_eq!(label(&cluster, EXCLUDE_LB).as_deref(), Some("true"));
    let message = cluster
        .condition()
        .and_then(|c| c.message)
        .unwrap_or_default();
    assert!(
        message.contains(REBOOT) && message.contains("Mon, 11 Apr 2050 22:26:58 GMT"),
        "{message}"
    );

    imds.sim
        .set_document(document(3, &[reboot("Started", THIS_VM)]));
    wait("the deadline labels gone once Started")
        .until(async || {
            label(&cluster, NOT_BEFORE_LABEL).is_none()
                && label(&cluster, EVENT_TYPE_LABEL).is_none()
        })
        .await?;
    assert_eq!(
        label(&cluster, EXCLUDE_LB).as_deref(),
        Some("true"),
        "out of load balancers while under way"
    );

    imds.sim.set_document(document(4, &[]));
    wait("the exclusion lifted")
        .until(async || label(&cluster, EXCLUDE_LB).is_none())
        .await?;
    assert_eq!(cluster.annotation(), None);
    assert_eq!(cluster.api.unversioned_patches(), 0);
    agent.stop().await
}

#[tokio::test]
async fn an_operators_load_balancer_exclusion_stays() -> TestResult {
    let mut node = kubelet_node();
    node.metadata.labels = Some(
        [(EXCLUDE_LB.to_owned(), "true".to_owned())]
            .into_iter()
            .collect(),
    );
    let cluster = Cluster::start(node).await?;
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot("Scheduled", THIS_VM)]));
    let agent = cluster
        .agent(
            &imds,
            &["--kubernetes.exclude-from-load-balancers-events=Reboot"],
        )
        .await?;
    wait("the deadline labels")
        .until(async || label(&cluster, NOT_BEFORE_LABEL).is_some())
        .await?;
    assert_eq!(cluster.annotation(), None, "not recorded as the agent's");
    imds.sim.set_document(document(2, &[]));
    wait("the deadline labels gone")
        .until(async || label(&cluster, NOT_BEFORE_LABEL).is_none())
        .await?;
    imds.polled(40).await?;
    assert_eq!(label(&cluster, EXCLUDE_LB).as_deref(), Some("true"));
    agent.stop().await
}

#[tokio::test]
async fn the_advisory_taint_follows_a_spot_rebalance_recommendation() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    let imds = Imds::start().await?;
    let advisory = serde_json::json!({
        "EventId": "A0000000-0000-4000-8000-000000000001", "EventStatus": "Advisory",
        "EventType": "SpotRebalanceRecommendation", "ResourceType": "VirtualMachine",
        "Resources": [THIS_VM], "NotBefore": "", "Description": "", "EventSource": "Platform",
        "DurationInSeconds": -1
    });
    imds.sim.set_document(document(1, &[advisory]));
    let agent = cluster
        .agent(&imds, &["--kubernetes.advisory-taint"])
        .await?;
    let advisory_taint = || {
        cluster
            .taints()
            .into_iter()
            .find(|t| t.key == "azure-scheduled-events/advisory")
    };
    wait("the advisory taint")
        .until(async || advisory_taint().is_some())
        .await?;
    let taint = advisory_taint().ok_or("no taint")?;
    assert_eq!(taint.effect, "PreferNoSchedule");
    assert_eq!(taint.value.as_deref(), Some("SpotRebalanceRecommendation"));
    assert_eq!(
        cluster.reason().as_deref(),
        Some("NoScheduledEvents"),
        "an advisory never sets the condition"
    );
    assert!(!cluster.cordoned());

    imds.sim.set_document(document(2, &[]));
    wait("the advisory taint lifted")
        .until(async || advisory_taint().is_none())
        .await?;
    assert_eq!(cluster.taints(), [super::gpu_taint()]);
    agent.stop().await
}

#[tokio::test]
async fn a_dry_run_writes_nothing() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    typical_pods(&cluster);
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot_at(&in_seconds(120))]));
    let version = cluster.api.resource_version();
    let agent = cluster
        .agent(
            &imds,
            &[
                "--kubernetes.dry-run",
                "--kubernetes.drain-events=Reboot",
                "--kubernetes.taint-events=Reboot",
                "--kubernetes.exclude-from-load-balancers-events=Reboot",
            ],
        )
        .await?;
    let writes = |m: &crate::common::Exposition, operation: &str| {
        m.get(&format!(
            r#"azure_scheduled_events_kubernetes_dry_run_writes_total{{operation="{operation}"}}"#
        ))
    };
    let m = agent
        .wait_for("every write logged", |m| {
            writes(m, "patch_node") >= 1.0
                && writes(m, "patch_node_status") >= 1.0
                && writes(m, "create_event") >= 3.0
                && writes(m, "evict_pod") >= 2.0
        })
        .await?;
    eprintln!(
        "dry run: {}",
        m.0.lines()
            .filter(|l| l.contains("dry_run_writes_total{"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    imds.polled(40).await?;
    assert_eq!(
        cluster.api.resource_version(),
        version,
        "the Node unchanged"
    );
    assert!(cluster.api.events().is_empty(), "no Event");
    assert!(cluster.api.evictions().is_empty(), "no eviction");
    let requests = cluster.api.requests();
    for write in [
        "patch_node",
        "patch_node_status",
        "create_event",
        "evict_pod",
    ] {
        assert_eq!(requests.get(write), None, "{write} sent: {requests:?}");
    }
    let m = agent.metrics().await?;
    assert_eq!(writes(&m, "patch_node"), 1.0, "the same writes logged once");
    assert_eq!(writes(&m, "evict_pod"), 2.0);
    agent.stop().await
}

/// The polls of a minute at the suite's `--poll.interval=50ms` (of twenty at the default `1s`).
const IDLE_POLLS: usize = 1200;

/// What could read the Node of an idle node is its polls (each tells the output the same nothing)
/// and the agent's own timers, the watch's end (290 s) and the resync (an hour). So a minute of
/// the suite's polls, made at `--poll.interval=2ms`, is an idle minute without waiting for one.
#[tokio::test]
async fn idle_for_1200_polls_the_node_is_read_at_most_twice() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    typical_pods(&cluster);
    let imds = Imds::start().await?;
    imds.sim.set_document(document(1, &[]));
    // The default resync (an hour): what a fleet runs.
    let agent = cluster
        .agent(
            &imds,
            &[
                "--kubernetes.resync-interval=1h",
                "--kubernetes.drain-events=Reboot",
                "--kubernetes.taint-events=Reboot",
                "--poll.interval=2ms",
            ],
        )
        .await?;
    wait("the condition False")
        .until(async || cluster.reason().as_deref() == Some("NoScheduledEvents"))
        .await?;
    let started = cluster.api.requests();
    let from = tokio::time::Instant::now();
    imds.polled(IDLE_POLLS).await?;
    let requests = cluster.api.requests();
    let reads = cluster.api.node_reads();
    let idle: usize = requests.values().sum::<usize>() - started.values().sum::<usize>();
    eprintln!(
        "start: {started:?}; then idle for {IDLE_POLLS} polls in {:?} (--poll.interval=2ms, --kubernetes.resync-interval=1h): {idle} requests; Node reads in all {reads}",
        from.elapsed(),
    );
    assert!(reads <= 2, "the Node read {reads} times: {requests:?}");
    assert_eq!(requests.get("get_node"), Some(&1), "{requests:?}");

    let before = cluster.api.requests();
    let event = tokio::time::Instant::now();
    imds.sim
        .set_document(document(2, &[reboot_at(&in_seconds(120))]));
    wait("drained")
        .until(async || event_note(&cluster, "DrainCompleted").is_some())
        .await?;
    imds.sim.set_document(document(3, &[]));
    wait("uncordoned")
        .until(async || {
            !cluster.cordoned() && cluster.reason().as_deref() == Some("NoScheduledEvents")
        })
        .await?;
    wait("the Completed Event")
        .until(async || {
            cluster
                .api
                .events()
                .iter()
                .any(|e| e.reason.as_deref() == Some("RebootCancelled"))
        })
        .await?;
    let after = cluster.api.requests();
    let during: std::collections::BTreeMap<&str, usize> = after
        .iter()
        .map(|(op, n)| (*op, n - before.get(op).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    eprintln!(
        "one Reboot, drained (2 pods) and cancelled, in {:?}: {during:?}, {} requests",
        event.elapsed(),
        during.values().sum::<usize>()
    );
    assert_eq!(
        during.get("get_node"),
        None,
        "the watch delivers the Node: {during:?}"
    );
    assert_eq!(cluster.api.unversioned_patches(), 0);
    agent.stop().await
}

#[tokio::test]
async fn an_event_already_under_way_drains_what_it_can_within_one_margin() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    typical_pods(&cluster);
    let imds = Imds::start().await?;
    // Appeared Started, NotBefore empty: a hardware failure, or an event approved at once.
    imds.sim
        .set_document(document(1, &[reboot("Started", THIS_VM)]));
    let agent = draining(&cluster, &imds, "10s").await?;
    drain_end(&cluster, "DrainCompleted").await?;
    assert_eq!(evicted(&cluster), ["default/db", "default/web"]);
    graces_cut_to(&cluster, "the margin");
    agent.stop().await
}

#[tokio::test]
async fn no_pod_is_evicted_from_a_node_the_agent_could_not_cordon() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    typical_pods(&cluster);
    cluster.api.forbid("patch_node");
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot_at(&in_seconds(8))]));
    let agent = draining(&cluster, &imds, "5s").await?;
    let note = drain_end(&cluster, "DrainIncomplete").await?;
    assert!(note.contains("not cordoned"), "{note}");
    assert!(
        cluster.api.evictions().is_empty(),
        "evicted pods would come back"
    );
    assert_eq!(cluster.api.answered("list_pods", 200), 0);
    let m = agent.metrics().await?;
    assert!(kube_requests(&m, "patch_node", "forbidden") >= 1.0);
    agent.stop().await
}

#[tokio::test]
async fn a_watch_that_ends_is_resumed_without_reading_the_node_and_a_compacted_one_reads_it_again()
-> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    cluster.api.limit_watches(1);
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot("Scheduled", THIS_VM)]));
    let agent = cluster
        .agent(
            &imds,
            &[
                "--kubernetes.resync-interval=1h",
                "--kubernetes.taint-events=Reboot",
            ],
        )
        .await?;
    wait("the taint")
        .until(async || cluster.our_taint().is_some())
        .await?;
    wait("three watches")
        .until(async || cluster.api.answered("watch_node", 200) >= 3)
        .await?;
    assert_eq!(
        cluster.api.answered("get_node", 200),
        1,
        "resumed from its resourceVersion"
    );

    // A change made between two watches arrives with the next one.
    cluster.api.edit(|node| {
        if let Some(spec) = node.spec.as_mut() {
            spec.taints = Some(vec![super::gpu_taint()]);
        }
    });
    wait("the taint back")
        .until(async || cluster.our_taint().is_some())
        .await?;
    assert_eq!(cluster.api.answered("get_node", 200), 1);

    cluster.api.expire_next_watch();
    wait("a watch refused as too old")
        .until(async || cluster.api.answered("watch_node", 410) >= 1)
        .await?;
    wait("the Node read again")
        .until(async || cluster.api.answered("get_node", 200) >= 2)
        .await?;
    let watches = cluster.api.answered("watch_node", 200);
    wait("watching again")
        .until(async || cluster.api.answered("watch_node", 200) > watches)
        .await?;
    assert_eq!(
        cluster.api.answered("watch_node", 410),
        1,
        "once, not in a loop"
    );
    assert_eq!(cluster.api.unversioned_patches(), 0);
    agent.stop().await
}

#[tokio::test]
async fn the_first_eviction_waits_the_drain_delay_after_the_load_balancer_label() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    typical_pods(&cluster);
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot_at(&in_seconds(300))]));
    let agent = cluster
        .agent(
            &imds,
            &[
                "--kubernetes.drain-events=Reboot",
                "--kubernetes.exclude-from-load-balancers-events=Reboot",
                "--kubernetes.drain-delay=3s",
            ],
        )
        .await?;
    drain_end(&cluster, "DrainCompleted").await?;
    assert_eq!(evicted(&cluster), ["default/db", "default/web"]);
    let labelled = cluster
        .api
        .labelled_at(EXCLUDE_LB)
        .ok_or("never excluded from load balancers")?;
    let first = cluster.api.first_eviction_at().ok_or("no eviction")?;
    let waited = first.saturating_duration_since(labelled);
    eprintln!(
        "first eviction {waited:?} after the load-balancer label (--kubernetes.drain-delay=3s)"
    );
    assert!(
        waited >= std::time::Duration::from_secs(3),
        "the delay is waited: {waited:?}"
    );
    agent.stop().await
}

#[tokio::test]
async fn the_drain_delay_never_passes_not_before_minus_the_margin() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    typical_pods(&cluster);
    let imds = Imds::start().await?;
    // An hour's delay, and a NotBefore 12 s away: the pods must be asked to go 5 s before it.
    imds.sim
        .set_document(document(1, &[reboot_at(&in_seconds(12))]));
    let agent = cluster
        .agent(
            &imds,
            &[
                "--kubernetes.drain-events=Reboot",
                "--kubernetes.drain-margin=5s",
                "--kubernetes.drain-delay=1h",
            ],
        )
        .await?;
    drain_end(&cluster, "DrainCompleted").await?;
    assert_eq!(evicted(&cluster), ["default/db", "default/web"]);
    agent.stop().await
}

/// A pod bound to this node with `labels`.
fn labelled_pod(name: &str, labels: &[(&str, &str)]) -> Pod {
    let mut pod = pod(name, NODE, Some("ReplicaSet"), None);
    pod.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    pod
}

#[tokio::test]
async fn a_freeze_evicts_only_the_pods_its_selector_picks_listed_from_the_cache() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    let opted_in = ("example.com/evict-on-freeze", "true");
    cluster.api.add_pod(labelled_pod("cache", &[opted_in]));
    cluster.api.add_pod(labelled_pod("db", &[("app", "db")]));
    cluster.api.add_pod(labelled_pod(
        "batch",
        &[("example.com/evict-on-freeze", "false")],
    ));
    let imds = Imds::start().await?;
    let mut freeze = reboot_at(&in_seconds(300));
    freeze["EventType"] = "Freeze".into();
    freeze["EventId"] = "F0000000-0000-4000-8000-000000000001".into();
    imds.sim.set_document(document(1, &[freeze]));
    let agent = cluster
        .agent(
            &imds,
            &[
                "--kubernetes.drain-events=Freeze,Reboot",
                "--kubernetes.drain-pod-selector=Freeze:example.com/evict-on-freeze=true",
            ],
        )
        .await?;
    drain_end(&cluster, "DrainCompleted").await?;
    assert_eq!(
        evicted(&cluster),
        ["default/cache"],
        "only the pod that opted in"
    );
    let started = event_note(&cluster, "DrainStarted").unwrap_or_default();
    assert!(
        started.contains("example.com/evict-on-freeze=true"),
        "the Event says which pods go: {started}"
    );
    let lists = cluster.api.pod_lists();
    assert!(!lists.is_empty());
    assert!(
        lists.iter().all(|(from_cache, selector)| *from_cache
            && selector.as_deref() == Some("example.com/evict-on-freeze=true")),
        "every list from the API server's cache, with the Freeze selector: {lists:?}"
    );

    // A Reboot has no selector of its own: every pod goes.
    imds.sim.set_document(document(2, &[]));
    wait("uncordoned once the Freeze is gone")
        .until(async || !cluster.cordoned())
        .await?;
    imds.sim
        .set_document(document(3, &[reboot_at(&in_seconds(300))]));
    wait("the rest evicted for the Reboot")
        .until(async || evicted(&cluster).len() == 3)
        .await?;
    assert_eq!(
        evicted(&cluster),
        ["default/batch", "default/cache", "default/db"]
    );
    agent.stop().await
}

#[tokio::test]
async fn a_drain_finishes_when_the_cache_it_lists_from_lags() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    typical_pods(&cluster);
    // The cache still shows the pods running after they were evicted.
    cluster.api.freeze_cache();
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot_at(&in_seconds(300))]));
    let agent = cluster
        .agent(&imds, &["--kubernetes.drain-events=Reboot"])
        .await?;
    wait("both pods evicted")
        .until(async || evicted(&cluster).len() >= 2)
        .await?;
    assert!(
        event_note(&cluster, "DrainCompleted").is_none(),
        "not yet: the cache shows them"
    );
    cluster.api.thaw_cache();
    drain_end(&cluster, "DrainCompleted").await?;
    assert!(terminating(&cluster, "web") && terminating(&cluster, "db"));
    agent.stop().await
}

#[tokio::test]
async fn a_preempt_first_seen_10_s_before_its_not_before_is_drained_at_once() -> TestResult {
    // A Spot eviction seen late: less notice than the 15 s margin.
    let cluster = Cluster::start(kubelet_node()).await?;
    typical_pods(&cluster);
    let imds = Imds::start().await?;
    let mut preempt = reboot_at(&in_seconds(10));
    preempt["EventType"] = "Preempt".into();
    imds.sim.set_document(document(1, &[preempt]));
    let agent = cluster
        .agent(&imds, &["--kubernetes.drain-events=Preempt"])
        .await?;
    let note = drain_end(&cluster, "DrainCompleted").await?;
    assert!(cluster.cordoned(), "cordoned first");
    assert_eq!(evicted(&cluster), ["default/db", "default/web"], "{note}");
    graces_cut_to(&cluster, "NotBefore");
    let started = event_note(&cluster, "DrainStarted").ok_or("no DrainStarted Event")?;
    assert!(
        started.contains("of notice, less than the drain margin (15 s)"),
        "{started}"
    );
    assert_eq!(event_note(&cluster, "DrainIncomplete"), None, "{note}");
    agent.stop().await
}

#[tokio::test]
async fn an_event_seen_after_its_not_before_while_scheduled_is_drained_at_once() -> TestResult {
    let cluster = Cluster::start(kubelet_node()).await?;
    typical_pods(&cluster);
    let imds = Imds::start().await?;
    imds.sim
        .set_document(document(1, &[reboot_at(&in_seconds(-30))]));
    let agent = draining(&cluster, &imds, "10s").await?;
    drain_end(&cluster, "DrainCompleted").await?;
    assert_eq!(evicted(&cluster), ["default/db", "default/web"]);
    graces_cut_to(&cluster, "the margin");
    let started = event_note(&cluster, "DrainStarted").ok_or("no DrainStarted Event")?;
    assert!(started.contains("NotBefore has passed"), "{started}");
    agent.stop().await
}

#[tokio::test]
async fn replicas_answering_incarnations_11_and_10_in_turn_neither_undo_the_drain_nor_notify_twice()
-> TestResult {
    // Two IMDS replicas, one behind: 11 holds the Reboot, 10 does not. The drain must go on (a
    // pod its budget refuses retried until it may go), the cordon stay, and the webhook hear of
    // the event once, then of its real end once.
    let cluster = Cluster::start(kubelet_node()).await?;
    typical_pods(&cluster);
    cluster.api.refuse_evictions("default/db");
    let receiver = crate::notify::receiver::Receiver::start().await?;
    let url = receiver.url("/hook");
    let imds = Imds::start().await?;
    let newer = document(11, &[reboot_at(&in_seconds(300))]);
    let older = document(10, &[]);
    imds.sim.set_document(newer.clone());
    let agent = cluster
        .agent(
            &imds,
            &[
                "--kubernetes.drain-events=Reboot",
                "--kubernetes.drain-margin=5s",
                "--notify.webhook-url",
                url.as_str(),
            ],
        )
        .await?;
    wait("cordoned").until(async || cluster.cordoned()).await?;
    let mut rounds = 0;
    let mut uncordoned = 0;
    let mut allowed = false;
    while rounds < 40 || event_note(&cluster, "DrainCompleted").is_none() {
        rounds += 1;
        imds.sim.set_document(older.clone());
        imds.polled(1).await?;
        imds.sim.set_document(newer.clone());
        imds.polled(1).await?;
        uncordoned += usize::from(!cluster.cordoned());
        if !allowed && cluster.api.answered("evict_pod", 429) >= 2 {
            // The budget lets the pod go now: the drain must still be trying.
            cluster.api.allow_evictions("default/db");
            allowed = true;
        }
        assert!(rounds < 400, "the drain never completed");
    }
    assert_eq!(uncordoned, 0, "the cordon stayed over {rounds} rounds");
    assert_eq!(evicted(&cluster), ["default/db", "default/web"]);
    assert_eq!(event_note(&cluster, "DrainCancelled"), None);
    assert_eq!(cluster.reason().as_deref(), Some("RebootScheduled"));
    let posts = |receiver: &crate::notify::receiver::Receiver| -> Vec<String> {
        receiver
            .hits_on("/hook")
            .iter()
            .map(|h| h.json()["transition"].as_str().unwrap_or("?").to_owned())
            .collect()
    };
    assert_eq!(posts(&receiver), ["scheduled"], "{rounds} rounds");
    let m = agent.metrics().await?;
    assert_eq!(m.transitions("Reboot", "scheduled"), 1.0);
    assert_eq!(m.transitions("Reboot", "cancelled"), 0.0);
    assert_eq!(m.transitions("Reboot", "completed"), 0.0);

    // The real end: a newer incarnation without it.
    imds.sim.set_document(document(12, &[]));
    wait("uncordoned once the event is gone")
        .until(async || !cluster.cordoned())
        .await?;
    receiver.wait_for("/hook", 2).await?;
    imds.polled(5).await?;
    assert_eq!(posts(&receiver), ["scheduled", "cancelled"]);
    agent.stop().await
}
