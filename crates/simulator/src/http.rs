//! The simulator's HTTP shell: the accept loop, routing, and IMDS's own endpoints
//! (`/metadata/scheduledevents`, `/metadata/instance`) with the checks real IMDS makes.
//!
//! This is where the clock is read and faults are performed. Injected faults come first, before
//! any check: they stand for the network or the service failing, which happens whatever the
//! request looked like. Nothing a client sends can panic the server: every bad input is a 4xx,
//! a poisoned state a 500.

use std::future::Future;

use bytes::Bytes;
use chrono::Utc;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde::Serialize;

use super::fault::{Endpoint, FaultAction};
use super::instance;
use super::journal::SeenRequest;
use super::reply::{Body, Refused, error, json, json_response, unavailable};
use super::request::{query_param, read_body};
use super::{SimulatorHandle, control};
use azure_scheduled_events_protocol::api_version::{self, ApiVersion, NEWEST_VERSIONS};
use azure_scheduled_events_protocol::http::respond;

/// What a handler produces: a response, or [`Dropped`] to close the connection unanswered.
pub(super) type Reply = Result<Response<Body>, Dropped>;

/// Returned by a handler to make hyper close the connection without writing a response.
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by an injected fault")]
pub(super) struct Dropped;

const GARBAGE: &[u8] = b"\x1f\x8b\x08\x00garbage: this body is not JSON\r\n<<<>>>";

/// Serves the simulator on `listener` until `shutdown` completes, then lets requests in flight
/// finish (for at most a few seconds).
pub async fn serve(
    listener: tokio::net::TcpListener,
    sim: SimulatorHandle,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    azure_scheduled_events_protocol::http::serve(
        listener,
        move |req| route(sim.clone(), req),
        shutdown,
    )
    .await
}

async fn route(sim: SimulatorHandle, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().to_owned();
    if path == "/metadata/scheduledevents" {
        scheduled_events(sim, req).await
    } else if let Some(section) = InstanceSection::from_path(&path) {
        instance_metadata(sim, req, section).await
    } else if let Some(rest) = path.strip_prefix("/control/") {
        Ok(control::handle(sim, req, rest).await)
    } else {
        Ok(error(StatusCode::NOT_FOUND, "Not found"))
    }
}

async fn scheduled_events(sim: SimulatorHandle, req: Request<Incoming>) -> Reply {
    let endpoint = if req.method() == Method::POST {
        Endpoint::Approval
    } else {
        Endpoint::ScheduledEvents
    };
    let (number, fault, newer) = match sim.lock() {
        Ok(mut shared) => {
            shared.requests = shared.requests.saturating_add(1);
            let fault = shared.faults.take(endpoint);
            let seen = SeenRequest {
                number: shared.requests,
                method: req.method().as_str().to_owned(),
                at: Utc::now(),
                metadata: req
                    .headers()
                    .get("metadata")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                fault: fault.as_ref().map(|f| f.kind().to_owned()),
                body: None,
            };
            shared.journal.push(seen);
            (shared.requests, fault, shared.newer_api_version)
        }
        Err(poisoned) => return Ok(unavailable(poisoned)),
    };
    let version =
        query_param(req.uri(), "api-version").and_then(|v| ApiVersion::parse_accepting(&v, newer));
    if let Some(fault) = fault {
        match fault {
            FaultAction::Delay(delay) => tokio::time::sleep(delay).await,
            other => return perform(other, req, || document_body(&sim, version)).await,
        }
    }

    if req.method() != Method::GET && req.method() != Method::POST {
        return Ok(method_not_allowed("GET, POST"));
    }
    if let Err(rejected) = check_headers(&req) {
        return Ok(*rejected);
    }
    let Some(version) = version else {
        return Ok(bad_version());
    };

    if req.method() == Method::GET {
        return Ok(match document_body(&sim, Some(version)) {
            Ok(body) => respond(StatusCode::OK, json(), body),
            Err(failed) => *failed,
        });
    }
    let body = match read_body(req.into_body()).await {
        Ok(body) => body,
        Err(rejected) => return Ok(*rejected),
    };
    let now = Utc::now();
    let approved = match sim.lock() {
        Ok(mut shared) => {
            let text = String::from_utf8_lossy(&body).into_owned();
            shared.journal.set_body(number, text);
            shared.sim.advance(now);
            shared.sim.approve(&body, now)
        }
        Err(poisoned) => return Ok(unavailable(poisoned)),
    };
    Ok(match approved {
        Ok(()) => respond(StatusCode::OK, json(), Bytes::new()),
        Err(refused) => error(StatusCode::BAD_REQUEST, &refused.to_string()),
    })
}

/// The scheduled-events body as of now, for `version` (the newest when the request gave none
/// that is valid, which only happens for a truncated fault).
fn document_body(sim: &SimulatorHandle, version: Option<ApiVersion>) -> Result<Bytes, Refused> {
    let mut shared = sim.lock().map_err(|p| Box::new(unavailable(p)))?;
    shared.sim.advance(Utc::now());
    shared
        .sim
        .body(version.unwrap_or(ApiVersion::LATEST))
        .map_err(|e| Box::new(error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())))
}

#[derive(Debug, Clone, Copy)]
enum InstanceSection {
    All,
    Compute,
    Network,
}

impl InstanceSection {
    fn from_path(path: &str) -> Option<Self> {
        match path.trim_end_matches('/') {
            "/metadata/instance" => Some(InstanceSection::All),
            "/metadata/instance/compute" => Some(InstanceSection::Compute),
            "/metadata/instance/network" => Some(InstanceSection::Network),
            _ => None,
        }
    }
}

async fn instance_metadata(
    sim: SimulatorHandle,
    req: Request<Incoming>,
    section: InstanceSection,
) -> Reply {
    let fault = match sim.lock() {
        Ok(mut shared) => shared.faults.take(Endpoint::Instance),
        Err(poisoned) => return Ok(unavailable(poisoned)),
    };
    if let Some(fault) = fault {
        match fault {
            FaultAction::Delay(delay) => tokio::time::sleep(delay).await,
            other => return perform(other, req, || instance_body(&sim, section)).await,
        }
    }
    if req.method() != Method::GET {
        return Ok(method_not_allowed("GET"));
    }
    if let Err(rejected) = check_headers(&req) {
        return Ok(*rejected);
    }
    if !query_param(req.uri(), "api-version").is_some_and(|v| api_version::is_instance_version(&v))
    {
        return Ok(bad_version());
    }
    Ok(match instance_body(&sim, section) {
        Ok(body) => respond(StatusCode::OK, json(), body),
        Err(failed) => *failed,
    })
}

fn instance_body(sim: &SimulatorHandle, section: InstanceSection) -> Result<Bytes, Refused> {
    let compute = sim
        .lock()
        .map_err(|p| Box::new(unavailable(p)))?
        .instance
        .clone();
    let value = match section {
        InstanceSection::All => instance::instance_document(&compute),
        InstanceSection::Compute => instance::compute_section(&compute),
        InstanceSection::Network => Ok(instance::network_section()),
    };
    value
        .and_then(|v| serde_json::to_vec(&v))
        .map(Bytes::from)
        .map_err(|e| Box::new(error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string())))
}

/// Answers with an injected fault instead of processing the request. `normal` produces the body
/// the request would have had, for a truncated answer.
async fn perform(
    fault: FaultAction,
    req: Request<Incoming>,
    normal: impl FnOnce() -> Result<Bytes, Refused>,
) -> Reply {
    match fault {
        FaultAction::Status {
            status,
            body,
            content_type,
            retry_after,
        } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = match body {
                Some(body) => {
                    let content_type = content_type
                        .and_then(|c| HeaderValue::from_str(&c).ok())
                        .unwrap_or_else(|| sniff_content_type(&body));
                    respond(status, content_type, Bytes::from(body))
                }
                None => error(status, status.canonical_reason().unwrap_or("Error")),
            };
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            Ok(response)
        }
        FaultAction::Garbage => Ok(respond(StatusCode::OK, json(), Bytes::from_static(GARBAGE))),
        FaultAction::Truncated => Ok(match normal() {
            Ok(body) => respond(StatusCode::OK, json(), body.slice(..body.len() / 2)),
            Err(failed) => *failed,
        }),
        FaultAction::Drop => {
            // Read the whole request first, so the client has sent everything and then sees the
            // connection close instead of a reset while writing.
            let _ = read_body(req.into_body()).await;
            Err(Dropped)
        }
        // Handled by the callers, which sleep and then answer normally.
        FaultAction::Delay(_) => Ok(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "delay fault reached the wrong place",
        )),
    }
}

fn sniff_content_type(body: &str) -> HeaderValue {
    match body.trim_start().chars().next() {
        Some('<') => HeaderValue::from_static("text/html; charset=utf-8"),
        Some('{' | '[') => json(),
        _ => HeaderValue::from_static("text/plain; charset=utf-8"),
    }
}

/// IMDS's header checks, in its order: a proxied request first, then the Metadata header.
fn check_headers(req: &Request<Incoming>) -> Result<(), Refused> {
    if req.headers().contains_key("x-forwarded-for") {
        return Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            "Bad request. Request contains X-Forwarded-For header",
        )));
    }
    let metadata = req.headers().get("metadata").and_then(|v| v.to_str().ok());
    if !metadata.is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            "Bad request. Required metadata header not specified",
        )));
    }
    Ok(())
}

fn bad_version() -> Response<Body> {
    #[derive(Serialize)]
    struct BadVersion {
        error: &'static str,
        #[serde(rename = "newest-versions")]
        newest_versions: [&'static str; 3],
    }
    json_response(
        StatusCode::BAD_REQUEST,
        &BadVersion {
            error: "Bad request. api-version was not specified or is invalid",
            newest_versions: NEWEST_VERSIONS,
        },
    )
}

fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut response = error(
        StatusCode::METHOD_NOT_ALLOWED,
        &format!("Method not allowed. Only {allow} requests are supported"),
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    response
}
