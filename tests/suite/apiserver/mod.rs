//! A stand-in Kubernetes API server on 127.0.0.1:0, faithful for the calls the agent makes: one
//! Node (`GET`, a watch on it with `fieldSelector=metadata.name=...` from a resourceVersion,
//! strategic-merge `PATCH` of the Node and of `nodes/status`), `events.k8s.io/v1` Events
//! (`POST`), pods listed by node (`fieldSelector=spec.nodeName=...`) and by label
//! (`labelSelector`, equality- and set-based requirements as the API server reads them) and
//! evicted through the `policy/v1` Eviction subresource. Bodies are read and written as
//! k8s-openapi types.
//!
//! A list with `resourceVersion=0` is served from the watch cache, which may be stale: a test can
//! freeze it ([`ApiServer::freeze_cache`]) to play a cache that lags; a list without a
//! resourceVersion is a quorum read of the current state. `resourceVersionMatch` without a
//! resourceVersion is refused (400), as the API server does. The Node may be absent at first
//! (404 to reads and patches, a watch that waits) until a test registers it.
//!
//! A watch streams one JSON `WatchEvent` a line: `MODIFIED` with the Node at every change after
//! the resourceVersion asked from (changes made while no one watched arrive as one event), until
//! its `timeoutSeconds` (or the limit a test sets); one whose resourceVersion a test expired gets an
//! `ERROR` event with a 410 Status. An eviction is answered 201 (the pod gets its `deletionTimestamp` and
//! stays listed, terminating, as the kubelet has not stopped it yet), 429 while a budget refuses
//! it (`refuse_evictions`), 404 for a pod that is not there, 409 when its `preconditions.uid` is
//! not the pod's.
//!
//! As the real server does: a patch carrying a `metadata.resourceVersion` other than the current
//! one is refused with 409; `status.conditions` merge by `type`, `spec.taints` is replaced whole,
//! `null` deletes a key; the status subresource changes only `status`, the Node only the rest;
//! taints must be unique by key and effect (422); an Event whose name exists is refused with 409.
//! Tests edit the Node as an operator would, forbid an operation (403), make the next patches
//! conflict (as if someone wrote the Node in between), or make every request hang.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::Eviction;
use serde_json::{Value, json};

#[derive(Debug, Default)]
struct State {
    node: Value,
    version: u64,
    events: BTreeMap<String, Event>,
    forbidden: Vec<&'static str>,
    conflicts_to_inject: u32,
    /// Answers a proxy in front gives instead of the API server: `(operation, count, code, body)`.
    proxy_answers: Vec<(&'static str, u32, u16, &'static [u8])>,
    hang: bool,
    /// Watches end after this many seconds whatever they asked for, as an API server's own
    /// request timeout or a load balancer in front ends them.
    watch_limit: Option<u64>,
    /// The next watch finds its resourceVersion compacted away: an `ERROR` event with a 410
    /// `Expired` Status, then the end of the stream, as the API server does.
    expire_next_watch: bool,
    /// `(operation, status)` of every request answered.
    log: Vec<(&'static str, u16)>,
    /// Node patches that carried no `metadata.resourceVersion`.
    unversioned_patches: usize,
    /// Pods by `namespace/name`.
    pods: BTreeMap<String, Value>,
    /// Pods (`namespace/name`) whose eviction a PodDisruptionBudget refuses.
    refusing: BTreeSet<String>,
    /// `(namespace/name, gracePeriodSeconds)` of every eviction accepted.
    evictions: Vec<(String, Option<i64>)>,
    /// When each label key first appeared on the Node.
    labelled_at: BTreeMap<String, std::time::Instant>,
    /// When each accepted eviction was answered, in order.
    evicted_at: Vec<std::time::Instant>,
    /// The Node is not registered yet: reads and patches answer 404.
    unregistered: bool,
    /// The watch cache's pods while frozen (stale); `None`: as current as the store.
    frozen_cache: Option<BTreeMap<String, Value>>,
    /// Every pod list: `(served from the cache, labelSelector)`.
    pod_lists: Vec<(bool, Option<String>)>,
}

/// An answer: whole, or a watch's stream of lines.
pub enum Body {
    Whole(Option<Bytes>),
    Stream(tokio::sync::mpsc::UnboundedReceiver<Bytes>),
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            Body::Whole(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream(lines) => lines
                .poll_recv(cx)
                .map(|line| line.map(|b| Ok(Frame::data(b)))),
        }
    }
}

/// A handle on the stand-in; clones share it.
#[derive(Debug, Clone)]
pub struct ApiServer {
    state: Arc<Mutex<State>>,
    /// The Node's resourceVersion, for watches to wait on.
    versions: Arc<tokio::sync::watch::Sender<u64>>,
    pub addr: SocketAddr,
}

impl ApiServer {
    /// Serves `node` (its `metadata.name` is the only Node there is).
    pub async fn start(node: Node) -> Result<Self, Box<dyn std::error::Error>> {
        let mut node = serde_json::to_value(node)?;
        node["metadata"]["resourceVersion"] = json!("1");
        node["metadata"]["uid"] = json!("5d2a4c8e-0000-4000-8000-000000000001");
        let state = Arc::new(Mutex::new(State {
            node,
            version: 1,
            ..State::default()
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = Self {
            state,
            versions: Arc::new(tokio::sync::watch::channel(1).0),
            addr,
        };
        let accepting = server.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let server = accepting.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let server = server.clone();
                        async move { server.answer(request).await }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(server)
    }

    /// Serves no Node until [`Self::register`]: the kubelet has not registered it yet.
    pub async fn start_unregistered(node: Node) -> Result<Self, Box<dyn std::error::Error>> {
        let server = Self::start(node).await?;
        server.lock().unregistered = true;
        Ok(server)
    }

    /// The kubelet registers the Node (a new resourceVersion, which a waiting watch delivers).
    pub fn register(&self) {
        let mut state = self.lock();
        state.unregistered = false;
        bump(&mut state);
        self.versions.send_replace(state.version);
    }

    /// The watch cache stops following the store: lists from it (`resourceVersion=0`) see the
    /// pods as they are now until [`Self::thaw_cache`].
    pub fn freeze_cache(&self) {
        let mut state = self.lock();
        state.frozen_cache = Some(state.pods.clone());
    }

    pub fn thaw_cache(&self) {
        self.lock().frozen_cache = None;
    }

    /// When the label `key` first appeared on the Node.
    pub fn labelled_at(&self, key: &str) -> Option<std::time::Instant> {
        self.lock().labelled_at.get(key).copied()
    }

    /// When the first eviction was accepted.
    pub fn first_eviction_at(&self) -> Option<std::time::Instant> {
        self.lock().evicted_at.first().copied()
    }

    /// Every pod list, in order: `(served from the cache, labelSelector)`.
    pub fn pod_lists(&self) -> Vec<(bool, Option<String>)> {
        self.lock().pod_lists.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A kubeconfig naming this server, as `KUBECONFIG` would.
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: stand-in\n  cluster:\n    server: http://{}\nusers:\n- name: agent\n  user:\n    token: stand-in-token\ncontexts:\n- name: stand-in\n  context:\n    cluster: stand-in\n    user: agent\ncurrent-context: stand-in\n",
            self.addr
        )
    }

    /// The Node as stored.
    pub fn node(&self) -> Node {
        serde_json::from_value(self.lock().node.clone()).unwrap_or_default()
    }

    pub fn resource_version(&self) -> u64 {
        self.lock().version
    }

    /// Changes the Node as an operator (kubectl) would: a new resourceVersion.
    pub fn edit(&self, change: impl FnOnce(&mut Node)) {
        let mut state = self.lock();
        let mut node: Node = serde_json::from_value(state.node.clone()).unwrap_or_default();
        change(&mut node);
        if let Ok(value) = serde_json::to_value(node) {
            state.node = value;
            bump(&mut state);
            self.versions.send_replace(state.version);
        }
    }

    /// Puts `pod` on the API server, as a controller or the kubelet (a mirror pod) would.
    pub fn add_pod(&self, pod: Pod) {
        let key = pod_key(&pod);
        if let Ok(value) = serde_json::to_value(pod) {
            self.lock().pods.insert(key, value);
        }
    }

    /// The pods as stored.
    pub fn pods(&self) -> Vec<Pod> {
        self.lock()
            .pods
            .values()
            .filter_map(|p| serde_json::from_value(p.clone()).ok())
            .collect()
    }

    /// A PodDisruptionBudget refuses to evict `pod` (`namespace/name`) until [`Self::allow_evictions`].
    pub fn refuse_evictions(&self, pod: &str) {
        self.lock().refusing.insert(pod.to_owned());
    }

    pub fn allow_evictions(&self, pod: &str) {
        self.lock().refusing.remove(pod);
    }

    /// `(namespace/name, gracePeriodSeconds)` of every eviction accepted, in order.
    pub fn evictions(&self) -> Vec<(String, Option<i64>)> {
        self.lock().evictions.clone()
    }

    /// Node patches sent without a `metadata.resourceVersion`.
    pub fn unversioned_patches(&self) -> usize {
        self.lock().unversioned_patches
    }

    /// Requests that read the Node: `GET`s and watches.
    pub fn node_reads(&self) -> usize {
        self.lock()
            .log
            .iter()
            .filter(|(o, _)| matches!(*o, "get_node" | "watch_node"))
            .count()
    }

    /// Every request answered, by operation.
    pub fn requests(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for (operation, _) in &self.lock().log {
            *counts.entry(*operation).or_default() += 1;
        }
        counts
    }

    pub fn events(&self) -> Vec<Event> {
        self.lock().events.values().cloned().collect()
    }

    /// Answers 403 to `operation` (`get_node`, `patch_node`, `patch_node_status`, `create_event`).
    pub fn forbid(&self, operation: &'static str) {
        self.lock().forbidden.push(operation);
    }

    pub fn allow_all(&self) {
        self.lock().forbidden.clear();
    }

    /// The next `n` patches find the Node changed since it was read.
    pub fn conflict_next_patches(&self, n: u32) {
        self.lock().conflicts_to_inject = n;
    }

    /// The next `count` requests of `operation` are answered `code` with `body` (not a Status:
    /// a proxy's error page) before they reach the API server.
    pub fn proxy_answers(
        &self,
        operation: &'static str,
        count: u32,
        code: u16,
        body: &'static [u8],
    ) {
        self.lock()
            .proxy_answers
            .push((operation, count, code, body));
    }

    /// Watches end after `seconds`, whatever timeout they asked for.
    pub fn limit_watches(&self, seconds: u64) {
        self.lock().watch_limit = Some(seconds);
    }

    /// The next watch finds the resourceVersion it asks from compacted away (410 Gone, in an
    /// `ERROR` event of a 200 answer; [`Self::answered`] counts it as 410).
    pub fn expire_next_watch(&self) {
        self.lock().expire_next_watch = true;
    }

    /// Every request from now on is read and never answered.
    pub fn hang(&self) {
        self.lock().hang = true;
    }

    /// How many requests of `operation` were answered with `status`.
    pub fn answered(&self, operation: &str, status: u16) -> usize {
        self.lock()
            .log
            .iter()
            .filter(|(o, s)| *o == operation && *s == status)
            .count()
    }

    async fn answer(&self, request: Request<Incoming>) -> Result<Response<Body>, Infallible> {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
        let query: BTreeMap<String, String> =
            form_urlencoded::parse(request.uri().query().unwrap_or("").as_bytes())
                .into_owned()
                .collect();
        let content_type = request
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let body = match request.into_body().collect().await {
            Ok(body) => body.to_bytes(),
            Err(_) => return Ok(status(400, "BadRequest", "unreadable body")),
        };
        if self.lock().hang {
            std::future::pending::<()>().await;
        }
        let name = self.node_name();
        let node_path = format!("/api/v1/nodes/{name}");
        let watch = query.get("watch").is_some_and(|w| w == "true" || w == "1");
        let eviction = path
            .strip_prefix("/api/v1/namespaces/")
            .and_then(|rest| rest.strip_suffix("/eviction"))
            .and_then(|rest| rest.split_once("/pods/"))
            .map(|(namespace, name)| format!("{namespace}/{name}"));
        let operation = match (&method, path.as_str()) {
            (&Method::GET, p) if p == node_path => "get_node",
            (&Method::GET, "/api/v1/nodes") if watch => "watch_node",
            (&Method::GET, "/api/v1/pods") if !watch => "list_pods",
            (&Method::POST, _) if eviction.is_some() => "evict_pod",
            (&Method::PATCH, p) if p == node_path => "patch_node",
            (&Method::PATCH, p) if p == format!("{node_path}/status") => "patch_node_status",
            (&Method::POST, "/apis/events.k8s.io/v1/namespaces/default/events") => "create_event",
            _ => return Ok(status(404, "NotFound", &format!("{method} {path}"))),
        };
        let mut state = self.lock();
        let proxied = state
            .proxy_answers
            .iter_mut()
            .find(|(o, left, ..)| *o == operation && *left > 0)
            .map(|(_, left, code, body)| {
                *left -= 1;
                (*code, *body)
            });
        let absent = state.unregistered
            && matches!(operation, "get_node" | "patch_node" | "patch_node_status");
        let response = if absent {
            status(404, "NotFound", &format!("nodes {name:?} not found"))
        } else if let Some((code, body)) = proxied {
            let mut response = respond(code, body.to_vec());
            response.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/html"),
            );
            response
        } else if state.forbidden.contains(&operation) {
            status(403, "Forbidden", &format!("{operation} is forbidden"))
        } else {
            match operation {
                "get_node" => ok(200, &state.node),
                "watch_node" => {
                    let selector = format!("metadata.name={name}");
                    if query.get("fieldSelector") != Some(&selector) {
                        status(
                            400,
                            "BadRequest",
                            "this stand-in watches one Node by its name",
                        )
                    } else {
                        let since = query
                            .get("resourceVersion")
                            .and_then(|v| v.parse::<u64>().ok())
                            .unwrap_or(0);
                        let asked = query
                            .get("timeoutSeconds")
                            .and_then(|v| v.parse::<u64>().ok())
                            .unwrap_or(1800);
                        let seconds = state.watch_limit.map_or(asked, |limit| asked.min(limit));
                        if std::mem::take(&mut state.expire_next_watch) {
                            state.log.push((operation, 410));
                            return Ok(expired());
                        }
                        state.log.push((operation, 200));
                        drop(state);
                        return Ok(self.watch(since, seconds));
                    }
                }
                "list_pods" => list_pods(&mut state, &query),
                "evict_pod" => evict(&mut state, eviction.as_deref().unwrap_or(""), &body),
                "create_event" => create_event(&mut state, &body),
                _ if content_type != "application/strategic-merge-patch+json" => {
                    status(415, "UnsupportedMediaType", &content_type)
                }
                _ => {
                    let answer = patch(&mut state, &body, operation == "patch_node_status");
                    self.versions.send_replace(state.version);
                    answer
                }
            }
        };
        state.log.push((operation, response.status().as_u16()));
        Ok(response)
    }

    /// A watch of the Node from resourceVersion `since`, for `seconds`.
    fn watch(&self, since: u64, seconds: u64) -> Response<Body> {
        let (lines, stream) = tokio::sync::mpsc::unbounded_channel();
        let server = self.clone();
        let mut versions = self.versions.subscribe();
        tokio::spawn(async move {
            let end = tokio::time::Instant::now() + std::time::Duration::from_secs(seconds);
            let mut sent = since;
            loop {
                let (version, node, unregistered) = {
                    let state = server.lock();
                    (state.version, state.node.clone(), state.unregistered)
                };
                if version > sent && !unregistered {
                    sent = version;
                    let mut line = serde_json::to_vec(&json!({"type": "MODIFIED", "object": node}))
                        .unwrap_or_default();
                    line.push(b'\n');
                    if lines.send(Bytes::from(line)).is_err() {
                        return;
                    }
                }
                tokio::select! {
                    changed = versions.changed() => if changed.is_err() { return },
                    () = tokio::time::sleep_until(end) => return,
                    () = lines.closed() => return,
                }
            }
        });
        let mut response = Response::new(Body::Stream(stream));
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        response
    }

    fn node_name(&self) -> String {
        self.lock().node["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

fn bump(state: &mut State) {
    state.version += 1;
    state.node["metadata"]["resourceVersion"] = json!(state.version.to_string());
}

fn patch(state: &mut State, body: &[u8], status_subresource: bool) -> Response<Body> {
    let Ok(patch) = serde_json::from_slice::<Value>(body) else {
        return status(400, "BadRequest", "the patch is not JSON");
    };
    if patch["metadata"]["resourceVersion"].as_str().is_none() {
        state.unversioned_patches += 1;
    }
    if state.conflicts_to_inject > 0 {
        state.conflicts_to_inject -= 1;
        bump(state);
    }
    if let Some(version) = patch["metadata"]["resourceVersion"].as_str()
        && version != state.version.to_string()
    {
        return status(
            409,
            "Conflict",
            "Operation cannot be fulfilled on nodes: the object has been modified; please apply your changes to the latest version and try again",
        );
    }
    let mut node = state.node.clone();
    let Some(fields) = patch.as_object() else {
        return status(400, "BadRequest", "the patch is not an object");
    };
    for (key, value) in fields {
        match (key.as_str(), status_subresource) {
            ("status", true) => merge(&mut node["status"], value),
            ("metadata", false) => {
                for part in ["annotations", "labels"] {
                    if let Some(v) = value.get(part) {
                        merge(&mut node["metadata"][part], v);
                    }
                }
            }
            ("spec", false) => merge(&mut node["spec"], value),
            _ => {}
        }
    }
    let typed: Node = match serde_json::from_value(node.clone()) {
        Ok(typed) => typed,
        Err(e) => return status(422, "Invalid", &e.to_string()),
    };
    let taints = typed.spec.and_then(|s| s.taints).unwrap_or_default();
    let mut keys: Vec<(&str, &str)> = taints
        .iter()
        .map(|t| (t.key.as_str(), t.effect.as_str()))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    if keys.len() != taints.len() {
        return status(
            422,
            "Invalid",
            "spec.taints: taints must be unique by key and effect",
        );
    }
    let now = std::time::Instant::now();
    for key in typed.metadata.labels.iter().flat_map(|l| l.keys()) {
        state.labelled_at.entry(key.clone()).or_insert(now);
    }
    state.node = node;
    bump(state);
    ok(200, &state.node)
}

/// Strategic merge as Kubernetes does it for the Node's fields used here: maps merge and `null`
/// deletes; lists named `conditions` merge by `type`; other lists are replaced.
fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = json!({});
            }
            for (key, value) in fields {
                let Some(map) = target.as_object_mut() else {
                    return;
                };
                if value.is_null() {
                    map.remove(key);
                } else if key == "conditions" && value.is_array() {
                    let list = map.entry(key.clone()).or_insert_with(|| json!([]));
                    merge_by_type(list, value);
                } else {
                    merge(map.entry(key.clone()).or_insert(Value::Null), value);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn merge_by_type(list: &mut Value, patch: &Value) {
    let (Some(items), Some(patches)) = (list.as_array_mut(), patch.as_array()) else {
        return;
    };
    for item in patches {
        match items
            .iter_mut()
            .find(|existing| existing["type"] == item["type"])
        {
            Some(existing) => merge(existing, item),
            None => items.push(item.clone()),
        }
    }
}

fn create_event(state: &mut State, body: &[u8]) -> Response<Body> {
    let event: Event = match serde_json::from_slice(body) {
        Ok(event) => event,
        Err(e) => return status(400, "BadRequest", &e.to_string()),
    };
    let Some(name) = event.metadata.name.clone() else {
        return status(422, "Invalid", "metadata.name: Required value");
    };
    // What events.k8s.io/v1 validation requires of a new Event.
    if event.event_time.is_none()
        || event.reporting_controller.is_none()
        || event.reporting_instance.is_none()
        || event.action.is_none()
        || event.reason.is_none()
        || !matches!(event.type_.as_deref(), Some("Normal" | "Warning"))
    {
        return status(
            422,
            "Invalid",
            "eventTime, reportingController, reportingInstance, action, reason and type are required",
        );
    }
    if state.events.contains_key(&name) {
        return status(
            409,
            "AlreadyExists",
            &format!("events {name:?} already exists"),
        );
    }
    let answer = ok(201, &event);
    state.events.insert(name, event);
    answer
}

/// A watch whose resourceVersion is too old: 200, one `ERROR` event, the end.
fn expired() -> Response<Body> {
    let mut line = serde_json::to_vec(&json!({"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version", "reason": "Expired", "code": 410,
    }}))
    .unwrap_or_default();
    line.push(b'\n');
    respond(200, line)
}

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// A `PodList` of the pods the field selector (`spec.nodeName=...`, the only one supported) and
/// the label selector select: from the watch cache with `resourceVersion=0`, else from the store.
fn list_pods(state: &mut State, query: &BTreeMap<String, String>) -> Response<Body> {
    let version = query.get("resourceVersion");
    if query.contains_key("resourceVersionMatch") && version.is_none_or(String::is_empty) {
        return status(
            400,
            "BadRequest",
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        );
    }
    let node = match query.get("fieldSelector").map(|s| s.split_once('=')) {
        None => None,
        Some(Some(("spec.nodeName", node))) => Some(node.to_owned()),
        Some(_) => return status(400, "BadRequest", "unsupported field selector"),
    };
    let labels = query.get("labelSelector").cloned();
    let requirements = match labels.as_deref().map(parse_selector) {
        None => Vec::new(),
        Some(Ok(requirements)) => requirements,
        Some(Err(e)) => {
            return status(
                400,
                "BadRequest",
                &format!("unable to parse requirement: {e}"),
            );
        }
    };
    let from_cache = version.is_some_and(|v| v == "0");
    state.pod_lists.push((from_cache, labels));
    let pods = match (&state.frozen_cache, from_cache) {
        (Some(cache), true) => cache,
        _ => &state.pods,
    };
    let items: Vec<&Value> = pods
        .values()
        .filter(|pod| {
            node.as_ref()
                .is_none_or(|node| pod["spec"]["nodeName"] == **node)
        })
        .filter(|pod| {
            requirements
                .iter()
                .all(|r| r.matches(&pod["metadata"]["labels"]))
        })
        .collect();
    ok(
        200,
        &json!({
            "kind": "PodList", "apiVersion": "v1",
            "metadata": {"resourceVersion": state.version.to_string()},
            "items": items,
        }),
    )
}

/// One requirement of a label selector.
enum Requirement {
    Exists(String),
    Absent(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

impl Requirement {
    /// As labels.Selector matches: `!=` and `notin` also match a pod without the label.
    fn matches(&self, labels: &Value) -> bool {
        let value = |key: &str| labels.get(key).and_then(Value::as_str);
        match self {
            Requirement::Exists(key) => value(key).is_some(),
            Requirement::Absent(key) => value(key).is_none(),
            Requirement::In(key, values) => {
                value(key).is_some_and(|v| values.iter().any(|w| w == v))
            }
            Requirement::NotIn(key, values) => {
                value(key).is_none_or(|v| values.iter().all(|w| w != v))
            }
        }
    }
}

/// A label selector's requirements, as the API server parses `labelSelector`.
fn parse_selector(text: &str) -> Result<Vec<Requirement>, String> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    let word = |w: &str| {
        let w = w.trim();
        if w.is_empty() || w.contains(char::is_whitespace) || w.contains(['(', ')', '!', '=']) {
            Err(format!("{w:?} is not a label key"))
        } else {
            Ok(w.to_owned())
        }
    };
    let values = |v: &str| -> Vec<String> { v.split(',').map(|v| v.trim().to_owned()).collect() };
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|part| {
            if let Some(key) = part.strip_prefix('!') {
                return Ok(Requirement::Absent(word(key)?));
            }
            if let Some((key, value)) = part.split_once("!=") {
                return Ok(Requirement::NotIn(
                    word(key)?,
                    vec![value.trim().to_owned()],
                ));
            }
            if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
                return Ok(Requirement::In(word(key)?, vec![value.trim().to_owned()]));
            }
            if let Some((key, rest)) = part.split_once(char::is_whitespace) {
                let rest = rest.trim();
                let set = |op: &str| {
                    rest.strip_prefix(op)
                        .map(str::trim)
                        .and_then(|r| r.strip_prefix('('))
                        .and_then(|r| r.strip_suffix(')'))
                };
                return match (set("notin"), set("in")) {
                    (Some(v), _) => Ok(Requirement::NotIn(word(key)?, values(v))),
                    (None, Some(v)) => Ok(Requirement::In(word(key)?, values(v))),
                    _ => Err(format!("{part:?}: expected in or notin")),
                };
            }
            Ok(Requirement::Exists(word(part)?))
        })
        .collect()
}

/// The Eviction subresource of `key` (`namespace/name`).
fn evict(state: &mut State, key: &str, body: &[u8]) -> Response<Body> {
    let eviction: Eviction = match serde_json::from_slice(body) {
        Ok(eviction) => eviction,
        Err(e) => return status(400, "BadRequest", &e.to_string()),
    };
    let named = format!(
        "{}/{}",
        eviction.metadata.namespace.as_deref().unwrap_or_default(),
        eviction.metadata.name.as_deref().unwrap_or_default()
    );
    if named != key {
        return status(
            400,
            "BadRequest",
            "name in the body does not match the path",
        );
    }
    let Some(pod) = state.pods.get_mut(key) else {
        return status(404, "NotFound", &format!("pods {key:?} not found"));
    };
    let options = eviction.delete_options.unwrap_or_default();
    if let Some(uid) = options.preconditions.as_ref().and_then(|p| p.uid.as_ref())
        && pod["metadata"]["uid"].as_str() != Some(uid)
    {
        return status(
            409,
            "Conflict",
            "Precondition failed: UID in precondition does not match the pod",
        );
    }
    if state.refusing.contains(key) {
        return status(
            429,
            "TooManyRequests",
            "Cannot evict pod as it would violate the pod's disruption budget.",
        );
    }
    let grace = options.grace_period_seconds;
    if pod["metadata"]["deletionTimestamp"].is_null() {
        pod["metadata"]["deletionTimestamp"] =
            json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        pod["metadata"]["deletionGracePeriodSeconds"] = json!(grace.unwrap_or(30));
    }
    state.evictions.push((key.to_owned(), grace));
    state.evicted_at.push(std::time::Instant::now());
    ok(
        201,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    )
}

fn ok(code: u16, body: &impl serde::Serialize) -> Response<Body> {
    let body = serde_json::to_vec(body).unwrap_or_default();
    respond(code, body)
}

/// A `Status` object, as the API server answers errors.
fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    respond(code, serde_json::to_vec(&body).unwrap_or_default())
}

fn respond(code: u16, body: Vec<u8>) -> Response<Body> {
    let mut response = Response::new(Body::Whole(Some(Bytes::from(body))));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
