//! The Node as the API server has it, kept current by a watch on this one Node (field selector
//! `metadata.name`) instead of reading it again and again: an idle node costs one read per
//! `--kubernetes.resync-interval` and one watch request per few minutes, and a change made by
//! someone else (a taint removed by hand) arrives at once. A watch that ends is resumed from the
//! last resourceVersion it delivered; a resourceVersion too old for the API server (410 Gone),
//! a failure, or the resync reads the Node in full again.
//!
//! A Node that is not there yet (the kubelet has not registered it) or not initialised yet (it
//! still has the taint `node.cloudprovider.kubernetes.io/uninitialized`: on a fresh node,
//! host-network pods start before the cloud controller has filled it in) is waited for, read
//! again with backoff, with one line when the wait begins and one when it ends; nothing is
//! written to it meanwhile, and polling goes on.

use std::time::Duration;

use http_body_util::BodyExt as _;
use k8s_openapi::api::core::v1::Node;
use kube::api::{WatchEvent, WatchParams};
use tokio::sync::watch;
use tokio::time::Instant;

use super::api::{
    Api, FIRST_BACKOFF, Failure, FailureLog, MAX_ANSWER_BYTES, MAX_BACKOFF, RequestError,
    status_error,
};
use crate::azure::backoff;

/// The taint the kubelet registers a Node with under an external cloud provider, until the cloud
/// controller has initialised it (set its providerID, addresses and zone).
const UNINITIALIZED_TAINT: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// The longest one watch request is asked to last: the client library's bound (under 295 s).
const WATCH_SECONDS: u64 = 290;
/// How much longer than asked a watch may stay open before it is given up as hung.
const WATCH_GRACE: Duration = Duration::from_secs(30);

/// How a watch ended.
enum Ended {
    /// The API server closed it (its timeout): resume from this resourceVersion.
    Closed(String),
    /// The resourceVersion is too old (410 Gone): read the Node again.
    Gone,
}

/// Until the output is dropped: reads the Node, then watches it, publishing every version seen
/// in `seen`; reads it again every `resync`.
pub async fn run(api: Api, resync: Duration, seen: watch::Sender<Option<Node>>) {
    let mut log = FailureLog::new(&api.node_name, "watching the Node");
    let mut failures: u32 = 0;
    let mut waiting: Option<Instant> = None;
    loop {
        let read = match api.get_node().await {
            Ok(node) if uninitialized(&node) => {
                wait_for_node(
                    &api,
                    &mut waiting,
                    "not initialised by the cloud controller yet (it has the taint node.cloudprovider.kubernetes.io/uninitialized)",
                );
                failures = pause(failures).await;
                continue;
            }
            Ok(node) => node,
            Err(failure) if failure.result == "not_found" => {
                wait_for_node(&api, &mut waiting, "not registered yet");
                failures = pause(failures).await;
                continue;
            }
            Err(failure) => {
                failures = retry(&mut log, &failure, failures).await;
                continue;
            }
        };
        if let Some(since) = waiting.take() {
            tracing::info!(
                node = %api.node_name,
                waited = ?since.elapsed(),
                "the Node is registered and initialised: writing scheduled events to it"
            );
            failures = 0;
        }
        let mut version = read.metadata.resource_version.clone().unwrap_or_default();
        seen.send_replace(Some(read));
        let resync_at = Instant::now() + resync;
        loop {
            let left = resync_at.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let seconds = left.as_secs().clamp(1, WATCH_SECONDS);
            let began = Instant::now();
            let ended = watch_node(&api, &version, seconds, &seen).await;
            // A watch that ends at once (a proxy that closes streams, a 410 after every read) is
            // not renewed in a tight loop.
            if began.elapsed() < FIRST_BACKOFF {
                tokio::time::sleep(FIRST_BACKOFF).await;
            }
            match ended {
                Ok(Ended::Closed(last)) => {
                    log.succeeded();
                    failures = 0;
                    version = last;
                }
                Ok(Ended::Gone) => break,
                Err(failure) => {
                    failures = retry(&mut log, &failure, failures).await;
                    break;
                }
            }
        }
    }
}

/// Whether `node` still waits for the cloud controller to initialise it.
fn uninitialized(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| taints.iter().any(|t| t.key == UNINITIALIZED_TAINT))
}

/// Says once, at info, that the agent waits for the Node and why; debug after that.
fn wait_for_node(api: &Api, waiting: &mut Option<Instant>, why: &str) {
    if waiting.is_none() {
        *waiting = Some(Instant::now());
        tracing::info!(
            node = %api.node_name,
            "waiting for the Node: {why}; reading it again with backoff (up to {MAX_BACKOFF:?}), writing nothing to it meanwhile"
        );
    } else {
        tracing::debug!(node = %api.node_name, "still waiting for the Node: {why}");
    }
}

/// Waits the backoff after `failures` reads, and gives the next count.
async fn pause(failures: u32) -> u32 {
    tokio::time::sleep(backoff::delay(FIRST_BACKOFF, MAX_BACKOFF, failures, None)).await;
    failures.saturating_add(1)
}

/// Logs `failure` (once per kind), waits the backoff, and gives the next failure count.
async fn retry(log: &mut FailureLog, failure: &Failure, failures: u32) -> u32 {
    let backoff = backoff::delay(FIRST_BACKOFF, MAX_BACKOFF, failures, None);
    log.failed(failure, backoff);
    tokio::time::sleep(backoff).await;
    failures.saturating_add(1)
}

/// One watch request from `version`, for at most `seconds`.
async fn watch_node(
    api: &Api,
    version: &str,
    seconds: u64,
    seen: &watch::Sender<Option<Node>>,
) -> Result<Ended, Failure> {
    let params = WatchParams::default()
        .fields(&format!("metadata.name={}", api.node_name))
        .timeout(u32::try_from(seconds).unwrap_or(u32::MAX));
    let limit = Duration::from_secs(seconds) + WATCH_GRACE;
    let transport = |e: &dyn std::fmt::Display| RequestError::Transport(e.to_string());
    let failed = |error: RequestError| {
        api.count::<()>("watch_node", Err(error))
            .map(|()| Ended::Gone)
    };
    let request = match api.nodes.watch(&params, version) {
        Ok(request) => request,
        Err(e) => return failed(transport(&e)),
    };
    let response = match tokio::time::timeout(
        limit,
        api.watch_client()
            .send(request.map(kube::client::Body::from)),
    )
    .await
    {
        Ok(Ok(response)) => response,
        Ok(Err(e)) => return failed(transport(&e)),
        Err(_) => return failed(transport(&"no answer to the watch")),
    };
    let code = response.status();
    let mut body = response.into_body();
    if code.is_client_error() || code.is_server_error() {
        let bytes = http_body_util::Limited::new(body, MAX_ANSWER_BYTES)
            .collect()
            .await
            .map(|collected| collected.to_bytes())
            .unwrap_or_default();
        if code.as_u16() == 410 {
            api.metrics.record("watch_node", "ok");
            return Ok(Ended::Gone);
        }
        return failed(status_error(code.as_u16(), &bytes));
    }
    api.metrics.record("watch_node", "ok");
    let mut version = version.to_owned();
    let mut line: Vec<u8> = Vec::new();
    let deadline = Instant::now() + limit;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            // Open past its own timeout: the connection is gone without a word.
            Err(_) => return Ok(Ended::Closed(version)),
            Ok(None) => return Ok(Ended::Closed(version)),
            Ok(Some(Err(e))) => {
                tracing::debug!(node = %api.node_name, error = %e, "the Node's watch broke off");
                return Ok(Ended::Closed(version));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        line.extend_from_slice(&data);
        while let Some(end) = line.iter().position(|b| *b == b'\n') {
            let event: Vec<u8> = line.drain(..=end).collect();
            if event.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<WatchEvent<Node>>(&event) {
                // The Node was deleted and registered again: wait for it from the start.
                Ok(WatchEvent::Added(node) | WatchEvent::Modified(node))
                    if uninitialized(&node) =>
                {
                    return Ok(Ended::Gone);
                }
                Ok(WatchEvent::Added(node) | WatchEvent::Modified(node)) => {
                    if let Some(v) = &node.metadata.resource_version {
                        v.clone_into(&mut version);
                    }
                    seen.send_replace(Some(node));
                }
                Ok(WatchEvent::Bookmark(bookmark)) => version = bookmark.metadata.resource_version,
                // The Node itself deleted: nothing to write until it is back.
                Ok(WatchEvent::Deleted(_)) => {}
                Ok(WatchEvent::Error(status)) if status.code == 410 => return Ok(Ended::Gone),
                Ok(WatchEvent::Error(status)) => {
                    tracing::debug!(node = %api.node_name, message = %status.message, "the Node's watch ended with an error");
                    return Ok(Ended::Gone);
                }
                Err(e) => {
                    tracing::debug!(node = %api.node_name, error = %e, "unreadable watch event");
                    return Ok(Ended::Gone);
                }
            }
        }
        if line.len() > MAX_ANSWER_BYTES {
            return Ok(Ended::Gone);
        }
    }
}
