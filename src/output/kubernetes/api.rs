//! The Kubernetes output's task: the one place that talks to the API server. It reads the Node,
//! sends the patches [`super::node::plan`] asks for, creates the Events, and retries what failed
//! with backoff. Each request is counted
//! (`azure_scheduled_events_kubernetes_requests_total{operation,result}`) by the HTTP status of
//! its answer, whatever the body: a proxy's error page in front of the API server is a
//! `server_error` or a `conflict` as its status says. A failure is logged once per kind
//! (operation and result) until requests succeed again.

use std::collections::HashSet;
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
use prometheus::{IntCounterVec, Opts, Registry};
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::node;
use super::wanted::{Note, Wanted};
use crate::backoff;
use crate::config::kubernetes::{ApiServer, KubernetesConfig};
use crate::metrics::NAMESPACE;

/// Our name as the API server records it: the field manager of our patches and the reporting
/// controller of our Events.
pub const MANAGER: &str = "azure-scheduled-events-exporter";

/// Where Events about cluster-scoped objects such as Nodes go, as the kubelet does.
const EVENTS_NAMESPACE: &str = "default";

/// Conflicting patches retried at once, reading the Node again each time, before backing off.
const CONFLICT_RETRIES: u32 = 5;

/// The most of an answer that is read: a Node with many images is tens of kilobytes, a proxy's
/// page need not be read whole.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(16);

/// The `operation` label values.
const OPERATIONS: [&str; 4] = [
    "get_node",
    "patch_node",
    "patch_node_status",
    "create_event",
];
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

/// `azure_scheduled_events_kubernetes_requests_total`, registered only when the output is on.
#[derive(Debug)]
pub struct KubernetesMetrics {
    requests: IntCounterVec,
}

impl KubernetesMetrics {
    pub fn new(registry: &Registry) -> Result<Self, prometheus::Error> {
        let requests = IntCounterVec::new(
            Opts::new(
                "kubernetes_requests_total",
                "Requests to the Kubernetes API server by the Kubernetes output (--kubernetes.node-name), by operation and result; result=\"dropped\" counts Events never sent because too many were waiting.",
            )
            .namespace(NAMESPACE),
            &["operation", "result"],
        )?;
        for operation in OPERATIONS {
            for result in RESULTS {
                requests.with_label_values(&[operation, result]);
            }
        }
        for result in ["already_exists", "dropped"] {
            requests.with_label_values(&["create_event", result]);
        }
        registry.register(Box::new(requests.clone()))?;
        Ok(Self { requests })
    }

    fn record(&self, operation: &str, result: &str) {
        self.requests.with_label_values(&[operation, result]).inc();
    }

    pub fn dropped(&self) {
        self.record("create_event", "dropped");
    }
}

/// A request that failed.
#[derive(Debug)]
struct Failure {
    operation: &'static str,
    result: &'static str,
    error: String,
}

/// Writes this machine's Node and creates Events about it.
pub struct NodeWriter {
    node_name: String,
    client: Client,
    nodes: kube::core::Request,
    events: kube::core::Request,
    metrics: Arc<KubernetesMetrics>,
    /// The Node's uid once read, for the Events' `regarding`.
    uid: Option<String>,
    /// Kinds of failure logged since requests last succeeded.
    logged: HashSet<(&'static str, &'static str)>,
}

impl std::fmt::Debug for NodeWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeWriter")
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

impl NodeWriter {
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
        client_config.read_timeout = Some(Duration::from_secs(10));
        client_config.write_timeout = Some(Duration::from_secs(10));
        tracing::info!(
            node = %config.node_name,
            api_server = %client_config.cluster_url,
            taint_events = ?config.taint_events.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
            cordon_events = ?config.cordon_events.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
            resync_interval = ?config.resync_interval,
            "writing scheduled events to the Kubernetes node"
        );
        let client = Client::try_from(client_config).context("cannot build a Kubernetes client")?;
        Ok(Self {
            node_name: config.node_name.clone(),
            client,
            nodes: kube::core::Request::new(Node::url_path(&(), None)),
            events: kube::core::Request::new(KubeEvent::url_path(&(), Some(EVENTS_NAMESPACE))),
            metrics,
            uid: None,
            logged: HashSet::new(),
        })
    }

    /// Until the output is dropped: brings the Node to the latest wanted state on every change
    /// and every `resync`, creates the queued Events, and backs off while requests fail. Events
    /// wait in the channel, whose bound is the queue's: only the one being sent is taken out.
    pub async fn run(
        mut self,
        mut wanted: watch::Receiver<Option<Wanted>>,
        mut notes: mpsc::Receiver<Note>,
        resync: Duration,
    ) {
        let mut head: Option<Note> = None;
        let mut dirty = false;
        let mut next_resync = Instant::now() + resync;
        let mut retry_at: Option<Instant> = None;
        let mut failures: u32 = 0;
        loop {
            let due = match retry_at {
                Some(at) => at,
                None if dirty || head.is_some() => Instant::now(),
                None => next_resync,
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
                note = notes.recv(), if head.is_none() => {
                    match note {
                        Some(note) => head = Some(note),
                        None => return,
                    }
                    continue;
                }
                () = tokio::time::sleep_until(due) => {}
            }
            // An Event alone does not read the Node: a change, a retry or the resync does.
            let mut result = Ok(());
            if dirty || retry_at.is_some() || Instant::now() >= next_resync {
                let current = wanted.borrow_and_update().clone();
                if let Some(current) = &current {
                    result = self.reconcile(current).await;
                }
                if result.is_ok() {
                    dirty = false;
                    next_resync = Instant::now() + resync;
                }
            }
            // Events go out even when the Node cannot be written (and the other way round).
            let events = self.create_events(&mut head, &mut notes).await;
            match result.and(events) {
                Ok(()) => {
                    if !self.logged.is_empty() {
                        tracing::info!(node = %self.node_name, "Kubernetes API requests succeed again");
                        self.logged.clear();
                    }
                    retry_at = None;
                    failures = 0;
                }
                Err(failure) => {
                    let backoff = backoff::delay(FIRST_BACKOFF, MAX_BACKOFF, failures, None);
                    failures = failures.saturating_add(1);
                    if self.logged.insert((failure.operation, failure.result)) {
                        tracing::warn!(
                            node = %self.node_name,
                            operation = failure.operation,
                            result = failure.result,
                            error = %failure.error,
                            retry_in = ?backoff,
                            "Kubernetes API request failed; retrying with backoff (logged once until requests succeed)"
                        );
                    }
                    retry_at = Some(Instant::now() + backoff);
                }
            }
        }
    }

    /// Reads the Node and patches it until it is as `wanted`; a conflict reads it again.
    async fn reconcile(&mut self, wanted: &Wanted) -> Result<(), Failure> {
        let name = self.node_name.clone();
        let params = PatchParams {
            field_manager: Some(MANAGER.into()),
            ..PatchParams::default()
        };
        let mut current = self.get_node(&name).await?;
        let mut conflicts = 0;
        // Each round sends one patch; two suffice unless someone else writes the Node meanwhile.
        for _ in 0..2 * (CONFLICT_RETRIES + 1) {
            let plan = node::plan(&current, wanted, Utc::now());
            let (operation, request) = if let Some(status) = plan.status {
                let patch = Patch::Strategic(status);
                (
                    "patch_node_status",
                    self.nodes
                        .patch_subresource("status", &name, &params, &patch),
                )
            } else if let Some(spec) = plan.spec {
                let patch = Patch::Strategic(spec);
                ("patch_node", self.nodes.patch(&name, &params, &patch))
            } else {
                return Ok(());
            };
            let sent = self.send(request).await;
            match self.count(operation, sent) {
                Ok(node) => current = node,
                Err(failure) if failure.result == "conflict" && conflicts < CONFLICT_RETRIES => {
                    conflicts += 1;
                    current = self.get_node(&name).await?;
                }
                Err(failure) => return Err(failure),
            }
        }
        Err(Failure {
            operation: "patch_node",
            result: "conflict",
            error: "the Node kept changing under every patch".into(),
        })
    }

    async fn get_node(&mut self, name: &str) -> Result<Node, Failure> {
        let node = self.send(self.nodes.get(name, &GetParams::default())).await;
        let node: Node = self.count("get_node", node)?;
        self.uid.clone_from(&node.metadata.uid);
        Ok(node)
    }

    /// Creates the queued Events in order, `head` first; one that exists already was created
    /// before. The Event that fails stays in `head`.
    async fn create_events(
        &mut self,
        head: &mut Option<Note>,
        notes: &mut mpsc::Receiver<Note>,
    ) -> Result<(), Failure> {
        while let Some(note) = head.take().or_else(|| notes.try_recv().ok()) {
            let body = serde_json::to_vec(&self.event(&note)).unwrap_or_default();
            let created: Result<KubeEvent, _> = self
                .send(self.events.create(&PostParams::default(), body))
                .await;
            let counted = match created {
                Err(RequestError::Status { code: 409, .. }) => {
                    self.metrics.record("create_event", "already_exists");
                    Ok(())
                }
                other => self.count("create_event", other).map(drop),
            };
            if let Err(failure) = counted {
                *head = Some(note);
                return Err(failure);
            }
        }
        Ok(())
    }

    fn event(&self, note: &Note) -> KubeEvent {
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
            action: Some("ScheduledEvent".into()),
            reason: Some(truncated(&note.reason, 128)),
            note: Some(truncated(&note.note, 1024)),
            type_: Some(if note.warning { "Warning" } else { "Normal" }.into()),
            regarding: Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(self.node_name.clone()),
                uid: self.uid.clone(),
                ..ObjectReference::default()
            }),
            reporting_controller: Some(MANAGER.into()),
            reporting_instance: Some(truncated(&format!("{MANAGER}-{}", self.node_name), 128)),
            ..KubeEvent::default()
        }
    }

    /// Sends a request and reads the object it answers; a failure is classified by the HTTP
    /// status alone, as the body may be anything a proxy sends (HTML, JSON of its own, bytes).
    async fn send<T: DeserializeOwned>(
        &self,
        request: Result<hyper::Request<Vec<u8>>, kube::core::request::Error>,
    ) -> Result<T, RequestError> {
        let transport = |e: &dyn std::fmt::Display| RequestError::Transport(e.to_string());
        let request = request.map_err(|e| transport(&e))?;
        let response = self
            .client
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
            let message = serde_json::from_slice::<kube::core::Status>(&body)
                .ok()
                .map(|status| status.message)
                .filter(|message| !message.is_empty())
                .unwrap_or_else(|| excerpt(&body));
            return Err(RequestError::Status {
                code: code.as_u16(),
                message,
            });
        }
        serde_json::from_slice(&body).map_err(|e| {
            RequestError::Transport(format!("HTTP {code}: not the object asked for: {e}"))
        })
    }

    /// Counts one request and classifies its failure.
    fn count<T>(
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
enum RequestError {
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
fn classify(error: &RequestError) -> &'static str {
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
