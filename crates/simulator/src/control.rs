//! The control API under `/control/`: what users and tests call to look inside the simulator
//! and steer it (state, the requests received, verbatim documents, scenarios, events, faults).
//! JSON in and out, no Metadata header; documented with curl examples in `docs/simulator.md`.

use bytes::Bytes;
use chrono::Utc;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::fault::Fault;
use super::reply::{Body, Refused, error, json_response, no_content, unavailable};
use super::request::{percent_decode, read_body};
use super::scenario::{Scenario, ScenarioEvent, from_json_or_yaml};
use super::state::{AddEventError, Approval};
use super::{Shared, SimulatorHandle};
use azure_scheduled_events_protocol::api_version::ApiVersion;
use azure_scheduled_events_protocol::wire::ScheduledEventsDocument;

/// Body of `GET /control/state`.
#[derive(Debug, Serialize)]
struct State {
    scenario: Option<String>,
    /// The simulated document as served for the newest api-version.
    document: ScheduledEventsDocument,
    /// What GETs currently receive instead, when a document was set with `PUT /control/document`
    /// (shown as text, invalid UTF-8 replaced).
    verbatim_document: Option<String>,
    approvals: Vec<Approval>,
    faults: Vec<Fault>,
    requests: u64,
}

/// `path` is what follows `/control/`.
pub(super) async fn handle(
    sim: SimulatorHandle,
    req: Request<Incoming>,
    path: &str,
) -> Response<Body> {
    let method = req.method().clone();
    let route = path
        .split_once('/')
        .map_or((path, None), |(head, rest)| (head, Some(rest)));
    match (route, &method) {
        (("state", None), &Method::GET) => with_state(&sim, state),
        (("state", None), _) => not_allowed("GET"),

        (("requests", None), &Method::GET) => with_state(&sim, |shared| {
            json_response(StatusCode::OK, &shared.journal.records())
        }),
        (("requests", None), _) => not_allowed("GET"),

        (("document", None), &Method::PUT) => match read_body(req.into_body()).await {
            Ok(body) => with_state(&sim, |shared| {
                shared.sim.set_document(body);
                no_content()
            }),
            Err(rejected) => *rejected,
        },
        (("document", None), &Method::DELETE) => with_state(&sim, |shared| {
            shared.sim.clear_document();
            no_content()
        }),
        (("document", None), _) => not_allowed("PUT, DELETE"),

        (("scenario", None), &Method::POST) => {
            let text = match read_text(req).await {
                Ok(text) => text,
                Err(rejected) => return *rejected,
            };
            match Scenario::parse(&text) {
                Ok(scenario) => with_state(&sim, |shared| {
                    #[derive(Serialize)]
                    struct Loaded {
                        name: Option<String>,
                        events: usize,
                    }
                    let loaded = Loaded {
                        name: scenario.name.clone(),
                        events: scenario.events.len(),
                    };
                    shared.sim.load_scenario(scenario, Utc::now());
                    json_response(StatusCode::OK, &loaded)
                }),
                Err(invalid) => error(StatusCode::BAD_REQUEST, &invalid.to_string()),
            }
        }
        (("scenario", None), _) => not_allowed("POST"),

        (("events", None), &Method::POST) => {
            let event: ScenarioEvent = match read_json_or_yaml(req).await {
                Ok(event) => event,
                Err(rejected) => return *rejected,
            };
            with_state(&sim, |shared| {
                match shared.sim.add_event(event, Utc::now()) {
                    Ok(id) => {
                        #[derive(Serialize)]
                        struct Added {
                            #[serde(rename = "EventId")]
                            event_id: String,
                        }
                        json_response(StatusCode::CREATED, &Added { event_id: id })
                    }
                    Err(e @ AddEventError::Invalid(_)) => {
                        error(StatusCode::BAD_REQUEST, &e.to_string())
                    }
                    Err(e @ AddEventError::DuplicateId(_)) => {
                        error(StatusCode::CONFLICT, &e.to_string())
                    }
                }
            })
        }
        (("events", None), _) => not_allowed("POST"),
        (("events", Some(id)), &Method::DELETE) if !id.is_empty() && !id.contains('/') => {
            let id = percent_decode(id);
            with_state(&sim, |shared| {
                if shared.sim.remove_event(&id, Utc::now()) {
                    no_content()
                } else {
                    error(
                        StatusCode::NOT_FOUND,
                        &format!("no event with EventId {id:?} in the document"),
                    )
                }
            })
        }
        (("events", Some(id)), _) if !id.is_empty() && !id.contains('/') => not_allowed("DELETE"),

        (("faults", None), &Method::POST) => {
            let fault: Fault = match read_json_or_yaml(req).await {
                Ok(fault) => fault,
                Err(rejected) => return *rejected,
            };
            with_state(&sim, |shared| {
                shared.faults.push(fault);
                no_content()
            })
        }
        (("faults", None), &Method::DELETE) => with_state(&sim, |shared| {
            shared.faults.clear();
            no_content()
        }),
        (("faults", None), _) => not_allowed("POST, DELETE"),

        _ => error(StatusCode::NOT_FOUND, "Not found"),
    }
}

fn state(shared: &mut Shared) -> Response<Body> {
    shared.sim.advance(Utc::now());
    let state = State {
        scenario: shared.sim.scenario_name().map(str::to_owned),
        document: shared.sim.document(ApiVersion::LATEST),
        verbatim_document: shared
            .sim
            .verbatim()
            .map(|body| String::from_utf8_lossy(body).into_owned()),
        approvals: shared.sim.approvals().to_vec(),
        faults: shared.faults.pending(),
        requests: shared.requests,
    };
    json_response(StatusCode::OK, &state)
}

fn with_state(
    sim: &SimulatorHandle,
    f: impl FnOnce(&mut Shared) -> Response<Body>,
) -> Response<Body> {
    match sim.lock() {
        Ok(mut shared) => f(&mut shared),
        Err(poisoned) => unavailable(poisoned),
    }
}

fn not_allowed(allow: &'static str) -> Response<Body> {
    let mut response = error(
        StatusCode::METHOD_NOT_ALLOWED,
        &format!("Method not allowed here; use {allow}"),
    );
    if let Ok(value) = hyper::header::HeaderValue::from_str(allow) {
        response.headers_mut().insert(hyper::header::ALLOW, value);
    }
    response
}

async fn read_text(req: Request<Incoming>) -> Result<String, Refused> {
    let body: Bytes = read_body(req.into_body()).await?;
    String::from_utf8(body.to_vec())
        .map_err(|_| Box::new(error(StatusCode::BAD_REQUEST, "the body is not UTF-8 text")))
}

/// Reads a body as JSON or YAML, like scenario files.
async fn read_json_or_yaml<T: DeserializeOwned>(req: Request<Incoming>) -> Result<T, Refused> {
    let text = read_text(req).await?;
    from_json_or_yaml(&text).map_err(|e| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            &format!("invalid body: {e}"),
        ))
    })
}
