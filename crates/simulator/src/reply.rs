//! The simulator's replies: JSON bodies with IMDS's Content-Type, IMDS-style `{"error":"..."}`
//! answers and empty ones, built the same way by IMDS's endpoints ([`super::http`]) and the
//! control API ([`super::control`]).

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};
use serde::Serialize;

use super::Poisoned;
use azure_scheduled_events_protocol::http::respond;

pub(super) type Body = Full<Bytes>;

/// An error response, boxed so that `Result`s carrying one stay small.
pub(super) type Refused = Box<Response<Body>>;

/// The Content-Type IMDS sends with every JSON body.
pub(super) fn json() -> HeaderValue {
    HeaderValue::from_static("application/json; charset=utf-8")
}

/// A response without a body.
pub(super) fn no_content() -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::NO_CONTENT;
    response
}

pub(super) fn json_response(status: StatusCode, value: &impl Serialize) -> Response<Body> {
    match serde_json::to_vec(value) {
        Ok(body) => respond(status, json(), Bytes::from(body)),
        Err(e) => respond(
            StatusCode::INTERNAL_SERVER_ERROR,
            json(),
            Bytes::from(format!("{{\"error\":{:?}}}", e.to_string())),
        ),
    }
}

/// An IMDS-style error: `{"error":"..."}`.
pub(super) fn error(status: StatusCode, message: &str) -> Response<Body> {
    #[derive(Serialize)]
    struct Error<'a> {
        error: &'a str,
    }
    json_response(status, &Error { error: message })
}

pub(super) fn unavailable(poisoned: Poisoned) -> Response<Body> {
    error(StatusCode::INTERNAL_SERVER_ERROR, &poisoned.to_string())
}
