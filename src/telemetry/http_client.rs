//! OTLP/HTTP over the agent's own `reqwest` (rustls), so traces add no second HTTP or TLS stack.
//!
//! Unlike the IMDS client this one honours `HTTPS_PROXY`/`NO_PROXY`: a collector may well sit
//! behind a proxy, IMDS never does. The resolved headers are set last on every request, because
//! the exporter library also reads `OTEL_EXPORTER_OTLP_HEADERS` itself and would otherwise let
//! the variable override `--otlp.headers`.

use std::time::Duration;

use async_trait::async_trait;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// Largest collector answer read; an OTLP response is a few bytes (a partial-success message at most).
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

use reqwest::header::{HeaderName, HeaderValue};

#[derive(Debug, Clone)]
pub struct ReqwestClient {
    client: reqwest::Client,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl ReqwestClient {
    pub fn new(
        timeout: Duration,
        headers: Vec<(HeaderName, HeaderValue)>,
    ) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self { client, headers })
    }
}

#[async_trait]
impl HttpClient for ReqwestClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (mut parts, body) = request.into_parts();
        for (name, value) in &self.headers {
            parts.headers.insert(name.clone(), value.clone());
        }
        let mut response = self
            .client
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body)
            .send()
            .await?;
        let mut answer = Response::builder().status(response.status());
        if let Some(headers) = answer.headers_mut() {
            headers.extend(
                response
                    .headers()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
                return Err("the collector's answer is larger than 64 KiB".into());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(answer.body(Bytes::from(body))?)
    }
}
