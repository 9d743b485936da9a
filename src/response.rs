//! Responses with a fixed body: the one constructor that the agent's `/metrics` and health
//! endpoints ([`crate::server`]) and the simulated IMDS ([`crate::simulator`]) both answer with.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};

/// A response with a fixed body.
pub fn respond(
    status: StatusCode,
    content_type: HeaderValue,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, content_type);
    response
}
