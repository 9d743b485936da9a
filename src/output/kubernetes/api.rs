//! The Kubernetes output's client ([`Api`], shared by its tasks: the writer here, the Node's watch
//! in [`super::watch`], the drain in [`super::drain`]) and its writer task ([`NodeWriter`]): the
//! writer brings the Node, as the watch last saw it, to the wanted state with the patches
//! [`super::node::plan`] asks for, creates the Events, and retries what failed with backoff.
//! With `--kubernetes.dry-run` every write is logged and counted instead of sent. Each request is
//! counted
//! (`azure_scheduled_events_kubernetes_requests_total{operation,result}`) by the HTTP status of
//! its answer, whatever the body: a proxy's error page in front of the API server is a
//! `server_error` or a `conflict` as its status says. A failure is logged once per kind
//! (operation and result) until requests succeed again.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use chrono::Utc;
use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use k8s_openapi::api::events::v1::Event as KubeEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{GetParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource as _};
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::node;
use super::wanted::{Blind, Condition, Note, Wanted};
use crate::azure::backoff;
use crate::config::kubernetes::{ApiServer, KubernetesConfig};
use crate::output::metrics::NAMESPACE;

/// Our name as the API server records it: the field manager of our patches and the reporting
/// controller of our Events.
pub const MANAGER: &str = "azure-scheduled-events-exporter";

/// Where Events about cluster-scoped objects such as Nodes go, as the kubelet does.
pub(super) const EVENTS_NAMESPACE: &str = "default";

/// Conflicting patches retried at once, reading the Node again each time, before backing off.
const CONFLICT_RETRIES: u32 = 5;

/// The most of an answer that is read: a Node with many images is tens of kilobytes, a proxy's
/// page need not be read whole.
pub(super) const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

pub(super) const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(16);

/// resourceVersions the writer remembers: a reconcile sends two patches at most, unless conflicts
/// make it read the Node again, and the watch catches up within a few versions.
const KNOWN_KEPT: usize = 32;

/// The `operation` label values, and those of the drain.
const OPERATIONS: [&str; 5] = [
    "get_node",
    "watch_node",
    "patch_node",
    "patch_node_status",
    "create_event",
];
const DRAIN_OPERATIONS: [&str; 2] = ["list_pods", "evict_pod"];
/// The writes a dry run logs and counts instead of sending.
const WRITES: [&str; 3] = ["patch_node", "patch_node_status", "create_event"];
/// The `result` label values every operation can have.
const RESULTS: [&str; 7] = [
    "ok",
    "conflict",
    "forbidden",
    "not_found",
    "rejected",
    "server_error",
    "unreachable",
];

/// The output's metric families, registered only when the output is on; the drain's only with
/// `--kubernetes.drain-events`, the dry run's only with `--kubernetes.dry-run`.
#[derive(Debug)]
pub struct KubernetesMetrics {
    requests: IntCounterVec,
    dry_run_writes: Option<IntCounterVec>,
    pub(super) drain: Option<DrainMetrics>,
}

/// `azure_scheduled_events_kubernetes_drain_*_total`.
#[derive(Debug)]
pub(super) struct DrainMetrics {
    pub evicted: IntCounter,
    pub refused: IntCounter,
    pub remaining: IntCounter,
}

impl KubernetesMetrics {
    pub fn new(registry: &Registry, drain: bool, dry_run: bool) -> Result<Self, prometheus::Error> {
        let requests = IntCounterVec::new(
            Opts::new(
                "kubernetes_requests_total",
                "Requests to the Kubernetes API server by the Kubernetes output (--kubernetes.node-name), by operation and result; result=\"dropped\" counts Events never sent because too many were waiting.",
            )
            .namespace(NAMESPACE),
            &["operation", "result"],
        )?;
        let operations = OPERATIONS
            .iter()
            .chain(DRAIN_OPERATIONS.iter().filter(|_| drain));
        for operation in operations {
            for result in RESULTS {
                requests.with_label_values(&[operation, result]);
            }
        }
        for result in ["already_exists", "dropped"] {
            requests.with_label_values(&["create_event", result]);
        }
        registry.register(Box::new(requests.clone()))?;
        let dry_run_writes = if dry_run {
            let writes = IntCounterVec::new(
                Opts::new(
                    "kubernetes_dry_run_writes_total",
                    "Writes to the Kubernetes API server that --kubernetes.dry-run logged and did not send, by operation.",
                )
                .namespace(NAMESPACE),
                &["operation"],
            )?;
            for operation in WRITES.iter().chain(["evict_pod"].iter().filter(|_| drain)) {
                writes.with_label_values(&[operation]);
            }
            registry.register(Box::new(writes.clone()))?;
            Some(writes)
        } else {
            None
        };
        let drain = if drain {
            let counter = |name: &str, help: &str| -> Result<IntCounter, prometheus::Error> {
                let counter = IntCounter::with_opts(Opts::new(name, help).namespace(NAMESPACE))?;
                registry.register(Box::new(counter.clone()))?;
                Ok(counter)
            };
            Some(DrainMetrics {
                evicted: counter(
                    "kubernetes_drain_pods_evicted_total",
                    "Pods the drain (--kubernetes.drain-events) evicted through the Eviction API (answered 201).",
                )?,
                refused: counter(
                    "kubernetes_drain_evictions_refused_total",
                    "Evictions a PodDisruptionBudget refused (answered 429); the drain retries them until --kubernetes.drain-margin before NotBefore.",
                )?,
                remaining: counter(
                    "kubernetes_drain_pods_remaining_total",
                    "Pods still running on the node when a drain stopped at its deadline (NotBefore minus --kubernetes.drain-margin) without evicting them.",
                )?,
            })
        } else {
            None
        };
        Ok(Self {
            requests,
            dry_run_writes,
            drain,
        })
    }

    pub(super) fn record(&self, operation: &str, result: &str) {
        self.requests.with_label_values(&[operation, result]).inc();
    }

    pub fn dropped(&self) {
        self.record("create_event", "dropped");
    }
}

/// A request that failed.
#[derive(Debug)]
pub(super) struct Failure {
    pub operation: &'static str,
    pub result: &'static str,
    pub error: String,
}

/// Logs each kind of failure (operation and result) once until requests succeed again.
#[derive(Debug)]
pub(super) struct FailureLog {
    node: String,
    what: &'static str,
    logged: HashSet<(&'static str, &'static str)>,
}

impl FailureLog {
    pub fn new(node: &str, what: &'static str) -> Self {
        Self {
            node: node.to_owned(),
            what,
            logged: HashSet::new(),
        }
    }

    pub fn failed(&mut self, failure: &Failure, retry_in: Duration) {
        if self.logged.insert((failure.operation, failure.result)) {
            tracing::warn!(
                node = %self.node,
                operation = failure.operation,
                result = failure.result,
                error = %failure.error,
                retry_in = ?retry_in,
                "Kubernetes API request failed ({}); retrying with backoff (logged once until requests succeed)",
                self.what
            );
        }
    }

    pub fn succeeded(&mut self) {
        if !self.logged.is_empty() {
            tracing::info!(node = %self.node, "Kubernetes API requests succeed again ({})", self.what);
            self.logged.clear();
        }
    }
}

/// The output's client: one per output, cloned into each of its tasks.
#[derive(Clone)]
pub struct Api {
    pub(super) node_name: String,
    client: Client,
    /// For the Node's watch, which stays open for minutes: no read timeout, the watch bounds it.
    watch_client: Client,
    /// For the drain: without the client library's own retries of a 429 (up to fifteen, for
    /// minutes), as a budget's refusal is retried by the drain against its deadline.
    drain_client: Client,
    pub(super) nodes: Arc<kube::core::Request>,
    pub(super) metrics: Arc<KubernetesMetrics>,
    pub(super) dry_run: bool,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("node_name", &self.node_name)
            .field("dry_run", &self.dry_run)
            .finish_non_exhaustive()
    }
}

impl Api {
    /// A client for the API server `config` names; fails only on an unusable kubeconfig.
    pub async fn connect(
        config: &KubernetesConfig,
        metrics: Arc<KubernetesMetrics>,
    ) -> anyhow::Result<Self> {
        let mut client_config = match &config.api_server {
            ApiServer::InCluster(client_config) => (**client_config).clone(),
            ApiServer::Kubeconfig { path, file } => kube::Config::from_custom_kubeconfig(
                (**file).clone(),
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .with_context(|| format!("cannot use the kubeconfig {}", path.display()))?,
        };
        // Bounded, so a hanging API server is a failure retried with backoff, not a stuck task.
        client_config.connect_timeout = Some(Duration::from_secs(5));
        client_config.write_timeout = Some(Duration::from_secs(10));
        let mut watch_config = client_config.clone();
        watch_config.read_timeout = None;
        client_config.read_timeout = Some(Duration::from_secs(10));
        let mut drain_config = client_config.clone();
        drain_config.default_retry = false;
        let names = |types: &[azure_scheduled_events_core::event::EventType]| {
            types
                .iter()
                .map(|t| t.as_str().to_owned())
                .collect::<Vec<_>>()
        };
        let actions = &config.actions;
        tracing::info!(
            node = %config.node_name,
            api_server = %client_config.cluster_url,
            taint_events = ?names(&actions.taint_events),
            cordon_events = ?names(&actions.cordon_events),
            drain_events = ?names(&actions.drain_events),
            drain_margin = ?config.drain_margin,
            drain_delay = ?config.drain_delay,
            drain_pod_selector = ?config.drain_pod_selectors,
            exclude_from_load_balancers_events = ?names(&actions.exclude_from_load_balancers_events),
            advisory_taint = actions.advisory_taint,
            dry_run = config.dry_run,
            resync_interval = ?config.resync_interval,
            imds_unknown_after = ?config.imds_unknown_after,
            aks_condition_names = config.aks_condition_names,
            "writing scheduled events to the Kubernetes node"
        );
        let client = Client::try_from(client_config).context("cannot build a Kubernetes client")?;
        let watch_client =
            Client::try_from(watch_config).context("cannot build a Kubernetes client")?;
        let drain_client =
            Client::try_from(drain_config).context("cannot build a Kubernetes client")?;
        Ok(Self {
            node_name: config.node_name.clone(),
            client,
            watch_client,
            drain_client,
            nodes: Arc::new(kube::core::Request::new(Node::url_path(&(), None))),
            metrics,
            dry_run: config.dry_run,
        })
    }

    /// The watch's client, for [`super::watch`].
    pub(super) fn watch_client(&self) -> &Client {
        &self.watch_client
    }

    /// Reads this Node.
    pub(super) async fn get_node(&self) -> Result<Node, Failure> {
        let node = self
            .send(self.nodes.get(&self.node_name, &GetParams::default()))
            .await;
        self.count("get_node", node)
    }

    /// With `--kubernetes.dry-run`: logs and counts the write `operation` would send, and says
    /// so (the caller then does not send it).
    pub(super) fn dry_run(&self, operation: &'static str, what: &str, body: &Value) -> bool {
        if !self.dry_run {
            return false;
        }
        if let Some(writes) = &self.metrics.dry_run_writes {
            writes.with_label_values(&[operation]).inc();
        }
        tracing::info!(
            node = %self.node_name,
            operation,
            target = what,
            body = %body,
            "dry run: Kubernetes API write not sent"
        );
        true
    }

    /// Sends a request and reads the object it answers; a failure is classified by the HTTP
    /// status alone, as the body may be anything a proxy sends (HTML, JSON of its own, bytes).
    pub(super) async fn send<T: DeserializeOwned>(
        &self,
        request: Result<hyper::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<T, RequestError> {
        self.send_on(&self.client, request).await
    }

    /// [`Self::send`] for the drain: a 429 comes back at once.
    pub(super) async fn send_drain<T: DeserializeOwned>(
        &self,
        request: Result<hyper::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<T, RequestError> {
        self.send_on(&self.drain_client, request).await
    }

    async fn send_on<T: DeserializeOwned>(
        &self,
        client: &Client,
        request: Result<hyper::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<T, RequestError> {
        let transport = |e: &dyn std::fmt::Display| RequestError::Transport(e.to_string());
        let request = request.map_err(|e| transport(&e))?;
        let response = client
            .send(request.map(kube::client::Body::from))
            .await
            .map_err(|e| transport(&e))?;
        let code = response.status();
        let body = http_body_util::Limited::new(response.into_body(), MAX_ANSWER_BYTES)
            .collect()
            .await
            .map_err(|e| transport(&e))?
            .to_bytes();
        if code.is_client_error() || code.is_server_error() {
            return Err(status_error(code.as_u16(), &body));
        }
        serde_json::from_slice(&body).map_err(|e| {
            RequestError::Transport(format!("HTTP {code}: not the object asked for: {e}"))
        })
    }

    /// Counts one request and classifies its failure.
    pub(super) fn count<T>(
        &self,
        operation: &'static str,
        result: Result<T, RequestError>,
    ) -> Result<T, Failure> {
        let outcome = match &result {
            Ok(_) => "ok",
            Err(error) => classify(error),
        };
        self.metrics.record(operation, outcome);
        result.map_err(|error| Failure {
            operation,
            result: outcome,
            error: error.to_string(),
        })
    }
}

/// The error of an answer with status `code`: the Status object's message, else the start of
/// the body.
pub(super) fn status_error(code: u16, body: &[u8]) -> RequestError {
    let message = serde_json::from_slice::<kube::core::Status>(body)
        .ok()
        .map(|status| status.message)
        .filter(|message| !message.is_empty())
        .unwrap_or_else(|| excerpt(body));
    RequestError::Status { code, message }
}

/// Writes this machine's Node and creates Events about it.
#[derive(Debug)]
pub struct NodeWriter {
    api: Api,
    events: kube::core::Request,
    /// The Node's uid once seen, for the Events' `regarding`.
    uid: Option<String>,
    /// resourceVersions of the Node the writer has known (its patches' answers, its reads, what
    /// the watch delivered): one delivered again (the watch catching up with the writer's own
    /// patches, a full read that crossed one) is older than what the writer knows, not news.
    known: VecDeque<String>,
    /// The last dry-run plan logged, so that the same writes are logged once.
    dry_run_logged: Option<node::Plan>,
    failures: FailureLog,
}

impl NodeWriter {
    pub fn new(api: Api) -> Self {
        let failures = FailureLog::new(&api.node_name, "writing the Node");
        Self {
            api,
            events: kube::core::Request::new(KubeEvent::url_path(&(), Some(EVENTS_NAMESPACE))),
            uid: None,
            known: VecDeque::new(),
            dry_run_logged: None,
            failures,
        }
    }

    /// Until the output is dropped: brings the Node, as the watch last delivered it, to the
    /// latest wanted state on every change of either, creates the queued Events, and backs off
    /// while requests fail. Events wait in the channel, whose bound is the queue's: only the one
    /// being sent is taken out.
    pub async fn run(
        mut self,
        mut wanted: watch::Receiver<Option<Wanted>>,
        mut blind: watch::Receiver<Option<Blind>>,
        mut notes: mpsc::Receiver<Note>,
        mut seen: watch::Receiver<Option<Node>>,
    ) {
        let mut head: Option<Note> = None;
        let mut dirty = false;
        let mut current: Option<Node> = None;
        let mut retry_at: Option<Instant> = None;
        let mut failures: u32 = 0;
        // When a blind agent's conditions are due to turn Unknown, until that wake-up is taken:
        // past by the time the loop comes round (another wake-up came just before it), it
        // still wakes the writer.
        // The agent starts blind (until its first document), so the first wake-up may be due
        // before any change.
        let mut blind_at: Option<Instant> = blind.borrow_and_update().as_ref().map(|b| b.from);
        loop {
            let due = match retry_at {
                Some(at) => at,
                None if dirty || head.is_some() => Instant::now(),
                None => Instant::now() + Duration::from_secs(86_400),
            };
            tokio::select! {
                biased;
                changed = wanted.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    dirty = true;
                    continue;
                }
                changed = blind.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    blind_at = blind.borrow_and_update().as_ref().map(|b| b.from);
                    dirty = true;
                    continue;
                }
                () = tokio::time::sleep_until(blind_at.unwrap_or(due)), if blind_at.is_some() => {
                    blind_at = None;
                    dirty = true;
                    continue;
                }
                changed = seen.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    if let Some(node) = seen.borrow_and_update().clone()
                        && self.learn(&node)
                    {
                        current = Some(node);
                        dirty = true;
                    }
                    continue;
                }
                note = notes.recv(), if head.is_none() => {
                    match note {
                        Some(note) => head = Some(note),
                        None => return,
                    }
                    continue;
                }
                () = tokio::time::sleep_until(due) => {}
            }
            let mut result = Ok(());
            if (dirty || retry_at.is_some())
                && let Some(node) = current.take()
            {
                self.uid.clone_from(&node.metadata.uid);
                let target = wanted.borrow_and_update().clone();
                let blind_conditions = blind
                    .borrow()
                    .as_ref()
                    .and_then(|b| b.conditions_at(Instant::now()).map(<[Condition]>::to_vec));
                // Blind, the conditions say Unknown; what the last document wanted stays.
                let conditions =
                    blind_conditions.or_else(|| target.as_ref().map(|t| t.conditions.clone()));
                let (node, reconciled) = match &conditions {
                    Some(conditions) => self.reconcile(node, conditions, target.as_ref()).await,
                    None => (node, Ok(())),
                };
                current = Some(node);
                result = reconciled;
                if result.is_ok() {
                    dirty = false;
                }
            }
            // Events go out even when the Node cannot be written (and the other way round).
            let events = self.create_events(&mut head, &mut notes).await;
            match result.and(events) {
                Ok(()) => {
                    self.failures.succeeded();
                    retry_at = None;
                    failures = 0;
                }
                Err(failure) => {
                    let backoff = backoff::delay(FIRST_BACKOFF, MAX_BACKOFF, failures, None);
                    failures = failures.saturating_add(1);
                    self.failures.failed(&failure, backoff);
                    retry_at = Some(Instant::now() + backoff);
                }
            }
        }
    }

    /// Patches `current` until it is as `wanted`; a conflict reads the Node again. Gives back
    /// the Node as last known.
    async fn reconcile(
        &mut self,
        mut current: Node,
        conditions: &[Condition],
        wanted: Option<&Wanted>,
    ) -> (Node, Result<(), Failure>) {
        let name = self.api.node_name.clone();
        let params = PatchParams {
            field_manager: Some(MANAGER.into()),
            ..PatchParams::default()
        };
        if self.api.dry_run {
            self.log_dry_run(node::plan_with(&current, conditions, wanted, Utc::now()));
            return (current, Ok(()));
        }
        let mut conflicts = 0;
        // Each round sends one patch; two suffice unless someone else writes the Node meanwhile.
        for _ in 0..2 * (CONFLICT_RETRIES + 1) {
            let plan = node::plan_with(&current, conditions, wanted, Utc::now());
            let (operation, request) = if let Some(status) = plan.status {
                let patch = Patch::Strategic(status);
                (
                    "patch_node_status",
                    self.api
                        .nodes
                        .patch_subresource("status", &name, &params, &patch),
                )
            } else if let Some(spec) = plan.spec {
                let patch = Patch::Strategic(spec);
                ("patch_node", self.api.nodes.patch(&name, &params, &patch))
            } else {
                return (current, Ok(()));
            };
            let sent: Result<Node, _> = self.api.send(request).await;
            match self.api.count(operation, sent) {
                Ok(node) => {
                    self.learn(&node);
                    current = node;
                }
                Err(failure) if failure.result == "conflict" && conflicts < CONFLICT_RETRIES => {
                    conflicts += 1;
                    match self.api.get_node().await {
                        Ok(node) => {
                            self.learn(&node);
                            current = node;
                        }
                        Err(failure) => return (current, Err(failure)),
                    }
                }
                Err(failure) => return (current, Err(failure)),
            }
        }
        (
            current,
            Err(Failure {
                operation: "patch_node",
                result: "conflict",
                error: "the Node kept changing under every patch".into(),
            }),
        )
    }

    /// Records `node`'s resourceVersion; whether it is one the writer did not know.
    fn learn(&mut self, node: &Node) -> bool {
        let Some(version) = &node.metadata.resource_version else {
            return true;
        };
        if self.known.contains(version) {
            return false;
        }
        if self.known.len() >= KNOWN_KEPT {
            self.known.pop_front();
        }
        self.known.push_back(version.clone());
        true
    }

    /// Logs the writes of `plan` once: the Node does not change in a dry run, so the same plan
    /// comes back at every change of the watched Node.
    fn log_dry_run(&mut self, plan: node::Plan) {
        let stable = node::Plan {
            status: plan.status.clone().map(|mut status| {
                let conditions = status
                    .pointer_mut("/status/conditions")
                    .and_then(Value::as_array_mut);
                for condition in conditions.into_iter().flatten() {
                    if let Some(condition) = condition.as_object_mut() {
                        condition.remove("lastHeartbeatTime");
                        condition.remove("lastTransitionTime");
                    }
                }
                status.as_object_mut().map(|o| o.remove("metadata"));
                status
            }),
            spec: plan.spec.clone().map(|mut spec| {
                if let Some(metadata) = spec.get_mut("metadata").and_then(Value::as_object_mut) {
                    metadata.remove("resourceVersion");
                }
                spec
            }),
        };
        if self.dry_run_logged.as_ref() == Some(&stable) {
            return;
        }
        let node = format!("nodes/{}", self.api.node_name);
        if let Some(status) = &plan.status {
            self.api
                .dry_run("patch_node_status", &format!("{node}/status"), status);
        }
        if let Some(spec) = &plan.spec {
            self.api.dry_run("patch_node", &node, spec);
        }
        self.dry_run_logged = Some(stable);
    }

    /// Creates the queued Events in order, `head` first; one that exists already was created
    /// before. The Event that fails stays in `head`.
    async fn create_events(
        &mut self,
        head: &mut Option<Note>,
        notes: &mut mpsc::Receiver<Note>,
    ) -> Result<(), Failure> {
        while let Some(note) = head.take().or_else(|| notes.try_recv().ok()) {
            let event = self.event(&note);
            if self.api.dry_run {
                let body = serde_json::to_value(&event).unwrap_or_default();
                self.api
                    .dry_run("create_event", &format!("events/{}", note.name), &body);
                continue;
            }
            let body = serde_json::to_vec(&event).unwrap_or_default();
            let created: Result<KubeEvent, _> = self
                .api
                .send(self.events.create(&PostParams::default(), body))
                .await;
            let counted = match created {
                Err(RequestError::Status { code: 409, .. }) => {
                    self.api.metrics.record("create_event", "already_exists");
                    Ok(())
                }
                other => self.api.count("create_event", other).map(drop),
            };
            if let Err(failure) = counted {
                *head = Some(note);
                return Err(failure);
            }
        }
        Ok(())
    }

    fn event(&self, note: &Note) -> KubeEvent {
        let node = &self.api.node_name;
        KubeEvent {
            metadata: ObjectMeta {
                name: Some(note.name.clone()),
                namespace: Some(EVENTS_NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(
                Timestamp::from_microsecond(note.at.timestamp_micros())
                    .unwrap_or(Timestamp::UNIX_EPOCH),
            )),
            action: Some(note.action.into()),
            reason: Some(truncated(&note.reason, 128)),
            note: Some(truncated(&note.note, 1024)),
            type_: Some(if note.warning { "Warning" } else { "Normal" }.into()),
            regarding: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.clone()),
                uid: self.uid.clone(),
                ..ObjectReference::default()
            }),
            reporting_controller: Some(MANAGER.into()),
            reporting_instance: Some(truncated(&format!("{MANAGER}-{node}"), 128)),
            ..KubeEvent::default()
        }
    }
}

/// `text` cut to the `max` bytes the API server accepts for the field, at a character boundary.
fn truncated(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum RequestError {
    /// An answer with an error status; the message is the Status object's, else the start of
    /// the body.
    #[error("HTTP {code}: {message}")]
    Status { code: u16, message: String },
    /// No usable answer: connection, TLS, timeout, or a body that is not the object asked for.
    #[error("{0}")]
    Transport(String),
}

/// The first line of a body, shortened, for one log line.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(1024)]);
    let line = text
        .split(['\r', '\n'])
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("(empty body)");
    line.chars().take(200).collect()
}

/// The `result` label of a failed request, by its HTTP status.
pub(super) fn classify(error: &RequestError) -> &'static str {
    match error {
        RequestError::Status { code, .. } => match code {
            401 | 403 => "forbidden",
            404 => "not_found",
            409 => "conflict",
            500..=599 => "server_error",
            _ => "rejected",
        },
        RequestError::Transport(_) => "unreachable",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_cut_to_what_the_api_server_accepts() {
        assert_eq!(truncated("RebootScheduled", 128), "RebootScheduled");
        assert_eq!(truncated(&"é".repeat(100), 127).len(), 126);
    }
}
