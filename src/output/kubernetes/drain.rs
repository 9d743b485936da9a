//! The drain (`--kubernetes.drain-events`): hands the node over before Azure takes the VM. Once
//! the node is cordoned (the writer does that, as for `--kubernetes.cordon-events`), it lists the
//! node's pods (field selector `spec.nodeName`) and evicts them through the Eviction API, so
//! PodDisruptionBudgets hold: DaemonSet pods, mirror pods and pods that finished stay; each pod
//! gets its own termination grace period, cut to the time left before NotBefore. An eviction a
//! budget refuses (429) is tried again with backoff until `--kubernetes.drain-margin` before
//! NotBefore; then the drain stops and says which pods stayed (a log line and a Kubernetes
//! Event). It never deletes a pod itself. An event that goes away (cancelled) stops the drain;
//! the writer then lifts only a cordon the agent set. Whatever notice is left, the drain starts at
//! once and tries for at least one margin: an event seen less than a margin before its NotBefore
//! (a Spot eviction seen late), after it while still Scheduled, already under way, or without a
//! NotBefore, drains what it can in one margin.
//!
//! It runs in a task of its own and reads the wanted state the output publishes, so neither the
//! poll loop nor the Node's writer ever waits for it.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Resource as _;
use kube::api::{ListParams, ObjectList};
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::api::{Api, FIRST_BACKOFF, FailureLog, MAX_BACKOFF, RequestError, classify};
use super::wanted::{DrainTarget, Note, Wanted, event_name};
use crate::azure::backoff;
use crate::config::label_selector::DrainPodSelectors;

/// The annotation the kubelet puts on a mirror pod (a static pod's image in the API server).
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// A pod's grace period when its spec gives none, as the API server defaults it.
const DEFAULT_GRACE_SECONDS: i64 = 30;

/// Whether the drain evicts `pod`: not a DaemonSet's (its controller would put it back, and it
/// tolerates the cordon), not a mirror pod (the kubelet owns it), not finished, not already on
/// its way out.
pub fn evictable(pod: &Pod) -> bool {
    let meta = &pod.metadata;
    let daemon_set = meta
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.kind == "DaemonSet" && owner.controller == Some(true));
    let mirror = meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION));
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    !(daemon_set || mirror || finished || meta.deletion_timestamp.is_some())
}

/// The grace period to give `pod`: its own, cut to the seconds left before `deadline`, at
/// least one (zero would mean "at once", which a drain never asks for).
pub fn grace_seconds(pod: &Pod, deadline: DateTime<Utc>, now: DateTime<Utc>) -> i64 {
    let own = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(DEFAULT_GRACE_SECONDS);
    own.min((deadline - now).num_seconds()).max(1)
}

/// When the pods must be gone, and when the drain stops retrying: NotBefore and a margin before
/// it for an event still Scheduled. Whatever notice is left, the drain gets at least one margin
/// from `started` to retry in: an event seen less than a margin before its NotBefore keeps its
/// NotBefore for the pods' grace periods, and one under way, seen after its NotBefore or without
/// one has one margin for both.
pub fn deadlines(
    target: &DrainTarget,
    margin: Duration,
    started: DateTime<Utc>,
) -> (DateTime<Utc>, DateTime<Utc>) {
    let margin = chrono::Duration::from_std(margin).unwrap_or(chrono::Duration::zero());
    match target.not_before {
        Some(not_before) if !target.started && not_before > started => {
            (not_before, (not_before - margin).max(started + margin))
        }
        _ => (started + margin, started + margin),
    }
}

/// The notice the drain has, in words for its first Event: nothing when it has its margin.
fn short_notice(target: &DrainTarget, margin: Duration, started: DateTime<Utc>) -> String {
    let margin_seconds = margin.as_secs();
    match target.not_before {
        _ if target.started => format!(
            " The event is already under way: the drain evicts at once and tries for one margin ({margin_seconds} s)."
        ),
        None => format!(
            " The event has no NotBefore: the drain evicts at once and tries for one margin ({margin_seconds} s)."
        ),
        Some(not_before) if not_before <= started => format!(
            " NotBefore has passed (the event is still Scheduled): the drain evicts at once, grace periods cut to one margin, and tries for one margin ({margin_seconds} s)."
        ),
        Some(not_before) if (not_before - started).to_std().unwrap_or(Duration::ZERO) < margin => {
            format!(
                " Only {} s of notice, less than the drain margin ({margin_seconds} s): the drain evicts at once, grace periods cut to NotBefore, and tries for one margin.",
                (not_before - started).num_seconds()
            )
        }
        Some(_) => String::new(),
    }
}

/// `--kubernetes.drain-delay` as a span of time; saturated, as the flag is at most 1h.
fn delay(delay: Duration) -> chrono::Duration {
    chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::MAX)
}

/// How a drain ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// No pod left to evict.
    Completed,
    /// Time ran out: these pods (`namespace/name`) are still there.
    Incomplete(Vec<String>),
    /// Time ran out before any eviction could be sent, for this reason.
    Stuck(&'static str),
    /// The event went away (or another one took its place).
    Cancelled,
}

/// Drains the node for the events the output asks to drain for.
#[derive(Debug)]
pub struct Drainer {
    api: Api,
    margin: Duration,
    /// `--kubernetes.drain-delay`: from the cordon (and the load-balancer label, written with
    /// it) to the first eviction.
    delay: Duration,
    selectors: DrainPodSelectors,
    notes: mpsc::Sender<Note>,
    failures: FailureLog,
}

impl Drainer {
    pub fn new(
        api: Api,
        margin: Duration,
        delay: Duration,
        selectors: DrainPodSelectors,
        notes: mpsc::Sender<Note>,
    ) -> Self {
        let failures = FailureLog::new(&api.node_name, "draining the node");
        Self {
            api,
            margin,
            delay,
            selectors,
            notes,
            failures,
        }
    }

    /// Until the output is dropped: drains once for each event that asks for it.
    pub async fn run(
        mut self,
        mut wanted: watch::Receiver<Option<Wanted>>,
        mut seen: watch::Receiver<Option<Node>>,
    ) {
        let mut drained: Option<String> = None;
        loop {
            let target = current(&wanted);
            match target {
                Some(target) if drained.as_ref() != Some(&target.event_id) => {
                    drained = Some(target.event_id.clone());
                    self.drain(target, &mut wanted, &mut seen).await;
                }
                _ => {
                    if wanted.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    async fn drain(
        &mut self,
        mut target: DrainTarget,
        wanted: &mut watch::Receiver<Option<Wanted>>,
        seen: &mut watch::Receiver<Option<Node>>,
    ) {
        let started = Utc::now();
        let (deadline, stop_at) = deadlines(&target, self.margin, started);
        // Which pods go, as the Events say it.
        let pods = match self.selectors.for_type(&target.event_type) {
            Some(selector) => format!("the pods labelled {:?}", selector.as_str()),
            None => "its pods".to_owned(),
        };
        tracing::warn!(
            node = %self.api.node_name,
            event_id = %target.event_id,
            event_type = %target.event_type,
            deadline = %deadline.to_rfc3339(),
            "draining the node: evicting its pods before the scheduled event"
        );
        self.note(
            &target,
            "drain-started",
            "DrainStarted",
            true,
            format!(
                "Draining the node for scheduled event {} ({}): evicting {pods} through the Eviction API until {} (NotBefore {}).{}",
                target.event_id,
                target.event_type,
                stop_at.to_rfc3339(),
                target
                    .not_before
                    .map_or_else(|| "none".to_owned(), |t| t.to_rfc3339()),
                short_notice(&target, self.margin, started)
            ),
        );
        let outcome = self.evict_all(&mut target, wanted, seen, started).await;
        let (reason, warning, text) = match &outcome {
            Outcome::Completed => (
                "DrainCompleted",
                false,
                format!(
                    "Drained the node for scheduled event {}: {pods} are evicted, but DaemonSet and mirror pods.",
                    target.event_id
                ),
            ),
            Outcome::Incomplete(left) => (
                "DrainIncomplete",
                true,
                format!(
                    "Drain for scheduled event {} stopped at its deadline; {} pod(s) still running (evictions refused or failing, never forced): {}",
                    target.event_id,
                    left.len(),
                    left.join(", ")
                ),
            ),
            Outcome::Stuck(why) => (
                "DrainIncomplete",
                true,
                format!(
                    "Drain for scheduled event {} stopped at its deadline without evicting: {why}.",
                    target.event_id
                ),
            ),
            Outcome::Cancelled => (
                "DrainCancelled",
                false,
                format!(
                    "Drain for scheduled event {} stopped: the event is no longer pending.",
                    target.event_id
                ),
            ),
        };
        match &outcome {
            Outcome::Incomplete(left) => {
                if let Some(metrics) = &self.api.metrics.drain {
                    metrics.remaining.inc_by(left.len() as u64);
                }
                tracing::warn!(node = %self.api.node_name, event_id = %target.event_id, pods = ?left, "drain stopped at its deadline: these pods are still running");
            }
            _ => {
                tracing::info!(node = %self.api.node_name, event_id = %target.event_id, outcome = reason, "drain ended")
            }
        }
        self.note(&target, "drain-ended", reason, warning, text);
    }

    /// Evicts until no pod is left, time runs out, or the event goes away.
    async fn evict_all(
        &mut self,
        target: &mut DrainTarget,
        wanted: &mut watch::Receiver<Option<Wanted>>,
        seen: &mut watch::Receiver<Option<Node>>,
        started: DateTime<Utc>,
    ) -> Outcome {
        let mut failures: u32 = 0;
        // The pods not evicted yet, by `namespace/name`: what stayed if time runs out.
        let mut left: BTreeSet<String> = BTreeSet::new();
        let mut cordoned = self.api.dry_run;
        // When the drain first saw the node cordoned: the delay runs from then.
        let mut cordoned_at: Option<DateTime<Utc>> = None;
        let mut listed = false;
        loop {
            match current(wanted) {
                Some(now) if now.event_id == target.event_id => *target = now,
                _ => return Outcome::Cancelled,
            }
            let (deadline, stop_at) = deadlines(target, self.margin, started);
            cordoned = cordoned
                || seen
                    .borrow_and_update()
                    .as_ref()
                    .and_then(|n| n.spec.as_ref())
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false);
            if cordoned && cordoned_at.is_none() {
                cordoned_at = Some(Utc::now());
            }
            // Never past the deadline: at `stop_at` the pods get one round of evictions, delay
            // or not.
            if let Some(from) = cordoned_at.map(|at| (at + delay(self.delay)).min(stop_at))
                && let Ok(wait) = (from - Utc::now()).to_std()
                && !wait.is_zero()
            {
                tracing::info!(
                    node = %self.api.node_name,
                    event_id = %target.event_id,
                    wait = ?wait,
                    "drain waits --kubernetes.drain-delay before its first eviction, for load balancers to let the node go"
                );
                tokio::select! {
                    changed = wanted.changed() => {
                        if changed.is_err() || current(wanted).is_none_or(|now| now.event_id != target.event_id) {
                            return Outcome::Cancelled;
                        }
                    }
                    () = tokio::time::sleep(wait) => {}
                }
                continue;
            }
            let mut progress = true;
            if cordoned {
                match self.list_pods(&target.event_type).await {
                    Ok(pods) => {
                        listed = true;
                        let pods: Vec<Pod> = pods.into_iter().filter(evictable).collect();
                        left = pods.iter().map(name).collect();
                        if pods.is_empty() {
                            return Outcome::Completed;
                        }
                        for pod in &pods {
                            if current(wanted).is_none_or(|now| now.event_id != target.event_id) {
                                return Outcome::Cancelled;
                            }
                            let grace = grace_seconds(pod, deadline, Utc::now());
                            match self.evict(pod, grace).await {
                                Evicted::Yes => {
                                    left.remove(&name(pod));
                                }
                                Evicted::Refused => {}
                                Evicted::Failed => progress = false,
                            }
                        }
                        if self.api.dry_run {
                            return if left.is_empty() {
                                Outcome::Completed
                            } else {
                                Outcome::Incomplete(left.into_iter().collect())
                            };
                        }
                    }
                    Err(()) => progress = false,
                }
            }
            if cordoned && left.is_empty() && progress && Utc::now() >= stop_at {
                return Outcome::Completed;
            }
            if Utc::now() >= stop_at {
                // As the API server has the Node now: a cordon written since the last look
                // gets its round of evictions, and the Event never says "not cordoned" of a
                // cordoned node.
                if !cordoned
                    && seen
                        .borrow()
                        .as_ref()
                        .and_then(|n| n.spec.as_ref())
                        .and_then(|s| s.unschedulable)
                        .unwrap_or(false)
                {
                    continue;
                }
                return if !cordoned {
                    Outcome::Stuck("the node is not cordoned (see the failed patch_node requests)")
                } else if !listed {
                    Outcome::Stuck(
                        "the node's pods could not be listed (see the failed list_pods requests)",
                    )
                } else {
                    Outcome::Incomplete(left.into_iter().collect())
                };
            }
            // Evicted pods take their grace period to go: list again soon, and back off while
            // budgets refuse or requests fail.
            let wait = if progress && left.is_empty() {
                FIRST_BACKOFF
            } else {
                let wait = backoff::delay(FIRST_BACKOFF, MAX_BACKOFF, failures, None);
                failures = failures.saturating_add(1);
                wait
            };
            let until_stop = (stop_at - Utc::now()).to_std().unwrap_or(Duration::ZERO);
            let wake = Instant::now() + wait.min(until_stop.max(Duration::from_millis(100)));
            loop {
                tokio::select! {
                    changed = wanted.changed() => {
                        if changed.is_err() || current(wanted).is_none_or(|now| now.event_id != target.event_id) {
                            return Outcome::Cancelled;
                        }
                    }
                    changed = seen.changed(), if !cordoned => {
                        if changed.is_err() {
                            return Outcome::Cancelled;
                        }
                        break;
                    }
                    () = tokio::time::sleep_until(wake) => break,
                }
            }
        }
    }

    /// The pods bound to this node that the drain for `event_type` evicts, from the API server's
    /// cache (`resourceVersion=0`): a wave of drains does not read etcd once a node. The cache
    /// may lag a little; the drain lists again until no pod is left, so a pod it missed is
    /// evicted at the next round and one it lists twice is refused as gone.
    async fn list_pods(&mut self, event_type: &str) -> Result<Vec<Pod>, ()> {
        let mut params = ListParams::default()
            .fields(&format!("spec.nodeName={}", self.api.node_name))
            .match_any();
        if let Some(selector) = self.selectors.for_type(event_type) {
            params = params.labels(selector.as_str());
        }
        let pods = kube::core::Request::new(Pod::url_path(&(), None));
        let listed: Result<ObjectList<Pod>, _> = self.api.send_drain(pods.list(&params)).await;
        match self.api.count("list_pods", listed) {
            Ok(list) => {
                self.failures.succeeded();
                Ok(list.items)
            }
            Err(failure) => {
                self.failures.failed(&failure, FIRST_BACKOFF);
                Err(())
            }
        }
    }

    /// One eviction through the `pods/eviction` subresource, for the pod as listed (its uid).
    async fn evict(&mut self, pod: &Pod, grace: i64) -> Evicted {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod_name, "namespace": namespace},
            "deleteOptions": {
                "gracePeriodSeconds": grace,
                "preconditions": {"uid": pod.metadata.uid},
            },
        });
        let path = format!(
            "{}/{}/eviction",
            Pod::url_path(&(), Some(&namespace)),
            pod_name
        );
        if self.api.dry_run("evict_pod", &path, &body) {
            return Evicted::Yes;
        }
        let request = hyper::Request::post(&path)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(&body).unwrap_or_default())
            .map_err(kube::core::request::Error::BuildRequest);
        let answer: Result<serde_json::Value, RequestError> = self.api.send_drain(request).await;
        match answer {
            Ok(_) => {
                self.api.metrics.record("evict_pod", "ok");
                if let Some(metrics) = &self.api.metrics.drain {
                    metrics.evicted.inc();
                }
                tracing::info!(node = %self.api.node_name, pod = %name(pod), grace_period_seconds = grace, "pod evicted");
                Evicted::Yes
            }
            // A budget doing its job, not a failing request: counted apart, so that the alert on
            // failing requests does not fire while a drain waits for a budget.
            Err(RequestError::Status { code: 429, message }) => {
                if let Some(metrics) = &self.api.metrics.drain {
                    metrics.refused.inc();
                }
                tracing::debug!(node = %self.api.node_name, pod = %name(pod), %message, "eviction refused by a PodDisruptionBudget; trying again");
                Evicted::Refused
            }
            // Gone already, or replaced by a pod of the same name: nothing of ours to evict.
            Err(RequestError::Status {
                code: 404 | 409, ..
            }) => {
                self.api.metrics.record("evict_pod", "not_found");
                Evicted::Yes
            }
            Err(error) => {
                let result = classify(&error);
                self.api.metrics.record("evict_pod", result);
                let failure = super::api::Failure {
                    operation: "evict_pod",
                    result,
                    error: error.to_string(),
                };
                self.failures.failed(&failure, FIRST_BACKOFF);
                Evicted::Failed
            }
        }
    }

    fn note(&self, target: &DrainTarget, suffix: &str, reason: &str, warning: bool, text: String) {
        let note = Note {
            name: event_name(&self.api.node_name, &target.event_id, suffix),
            reason: reason.to_owned(),
            note: text,
            warning,
            action: "Drain",
            at: Utc::now(),
        };
        if self.notes.try_send(note).is_err() {
            self.api.metrics.dropped();
        }
    }
}

/// What became of one eviction.
enum Evicted {
    Yes,
    Refused,
    Failed,
}

/// The drain the output asks for now.
fn current(wanted: &watch::Receiver<Option<Wanted>>) -> Option<DrainTarget> {
    wanted.borrow().as_ref().and_then(|w| w.drain.clone())
}

fn name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap_or_default()
    }

    #[test]
    fn daemon_set_mirror_finished_and_terminating_pods_stay() {
        assert!(evictable(&pod(
            json!({"metadata": {"name": "web", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": true}]}})
        )));
        assert!(!evictable(&pod(
            json!({"metadata": {"name": "agent", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u", "controller": true}]}})
        )));
        assert!(!evictable(&pod(
            json!({"metadata": {"name": "etcd", "annotations": {MIRROR_ANNOTATION: "x"}}})
        )));
        assert!(!evictable(&pod(
            json!({"metadata": {"name": "job"}, "status": {"phase": "Succeeded"}})
        )));
        assert!(!evictable(&pod(
            json!({"metadata": {"name": "going", "deletionTimestamp": "2026-01-01T00:00:00Z"}})
        )));
    }

    #[test]
    fn the_grace_period_is_the_pods_own_cut_to_the_time_left() {
        let now = DateTime::UNIX_EPOCH;
        let long = pod(
            json!({"metadata": {"name": "db"}, "spec": {"containers": [], "terminationGracePeriodSeconds": 600}}),
        );
        let plain = pod(json!({"metadata": {"name": "web"}}));
        let deadline = now + chrono::Duration::seconds(120);
        assert_eq!(grace_seconds(&long, deadline, now), 120);
        assert_eq!(grace_seconds(&plain, deadline, now), 30);
        assert_eq!(grace_seconds(&long, now, now), 1, "never zero");
    }

    #[test]
    fn an_event_under_way_drains_within_one_margin() {
        let now = DateTime::UNIX_EPOCH;
        let not_before = now + chrono::Duration::seconds(600);
        let mut target = DrainTarget {
            event_id: "A".into(),
            event_type: "Reboot".into(),
            not_before: Some(not_before),
            started: false,
        };
        let margin = Duration::from_secs(15);
        assert_eq!(
            deadlines(&target, margin, now),
            (not_before, not_before - chrono::Duration::seconds(15))
        );
        target.started = true;
        let soon = now + chrono::Duration::seconds(15);
        assert_eq!(deadlines(&target, margin, now), (soon, soon));
    }

    #[test]
    fn short_or_late_notice_still_drains_for_one_margin() {
        let now = DateTime::UNIX_EPOCH;
        let margin = Duration::from_secs(15);
        let soon = now + chrono::Duration::seconds(15);
        let short = now + chrono::Duration::seconds(10);
        let mut target = DrainTarget {
            event_id: "A".into(),
            event_type: "Preempt".into(),
            not_before: Some(short),
            started: false,
        };
        assert_eq!(
            deadlines(&target, margin, now),
            (short, soon),
            "grace periods cut to NotBefore, retries for one margin"
        );
        assert!(short_notice(&target, margin, now).contains("Only 10 s of notice"));
        target.not_before = Some(now - chrono::Duration::seconds(30));
        assert_eq!(deadlines(&target, margin, now), (soon, soon), "late");
        assert!(short_notice(&target, margin, now).contains("NotBefore has passed"));
        target.not_before = Some(now + chrono::Duration::seconds(600));
        assert_eq!(short_notice(&target, margin, now), "", "notice enough");
    }
}
