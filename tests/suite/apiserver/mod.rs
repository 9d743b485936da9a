//! A stand-in Kubernetes API server on 127.0.0.1:0, faithful for the calls the agent makes: one
//! Node (`GET`, strategic-merge `PATCH` of the Node and of `nodes/status`) and
//! `events.k8s.io/v1` Events (`POST`). Bodies are read and written as k8s-openapi types.
//!
//! As the real server does: a patch carrying a `metadata.resourceVersion` other than the current
//! one is refused with 409; `status.conditions` merge by `type`, `spec.taints` is replaced whole,
//! `null` deletes a key; the status subresource changes only `status`, the Node only the rest;
//! taints must be unique by key and effect (422); an Event whose name exists is refused with 409.
//! Tests edit the Node as an operator would, forbid an operation (403), make the next patches
//! conflict (as if someone wrote the Node in between), or make every request hang.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use serde_json::{Value, json};

#[derive(Debug, Default)]
struct State {
    node: Value,
    version: u64,
    events: BTreeMap<String, Event>,
    forbidden: Vec<&'static str>,
    conflicts_to_inject: u32,
    hang: bool,
    /// `(operation, status)` of every request answered.
    log: Vec<(&'static str, u16)>,
}

/// A handle on the stand-in; clones share it.
#[derive(Debug, Clone)]
pub struct ApiServer {
    state: Arc<Mutex<State>>,
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
        let server = Self { state, addr };
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
        }
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

    async fn answer(
        &self,
        request: Request<Incoming>,
    ) -> Result<Response<Full<Bytes>>, Infallible> {
        let method = request.method().clone();
        let path = request.uri().path().to_owned();
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
        let operation = match (&method, path.as_str()) {
            (&Method::GET, p) if p == node_path => "get_node",
            (&Method::PATCH, p) if p == node_path => "patch_node",
            (&Method::PATCH, p) if p == format!("{node_path}/status") => "patch_node_status",
            (&Method::POST, "/apis/events.k8s.io/v1/namespaces/default/events") => "create_event",
            _ => return Ok(status(404, "NotFound", &format!("{method} {path}"))),
        };
        let mut state = self.lock();
        let response = if state.forbidden.contains(&operation) {
            status(403, "Forbidden", &format!("{operation} is forbidden"))
        } else {
            match operation {
                "get_node" => ok(200, &state.node),
                "create_event" => create_event(&mut state, &body),
                _ if content_type != "application/strategic-merge-patch+json" => {
                    status(415, "UnsupportedMediaType", &content_type)
                }
                _ => patch(&mut state, &body, operation == "patch_node_status"),
            }
        };
        state.log.push((operation, response.status().as_u16()));
        Ok(response)
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

fn patch(state: &mut State, body: &[u8], status_subresource: bool) -> Response<Full<Bytes>> {
    let Ok(patch) = serde_json::from_slice::<Value>(body) else {
        return status(400, "BadRequest", "the patch is not JSON");
    };
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

fn create_event(state: &mut State, body: &[u8]) -> Response<Full<Bytes>> {
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

fn ok(code: u16, body: &impl serde::Serialize) -> Response<Full<Bytes>> {
    let body = serde_json::to_vec(body).unwrap_or_default();
    respond(code, body)
}

/// A `Status` object, as the API server answers errors.
fn status(code: u16, reason: &str, message: &str) -> Response<Full<Bytes>> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code,
    });
    respond(code, serde_json::to_vec(&body).unwrap_or_default())
}

fn respond(code: u16, body: Vec<u8>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() =
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    response
}
