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
    /// `tls` adds a private CA to the public roots and a client certificate for mutual TLS.
    pub fn new(
        timeout: Duration,
        headers: Vec<(HeaderName, HeaderValue)>,
        tls: super::TlsPem,
    ) -> Result<Self, reqwest::Error> {
        let mut builder = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(ca) = &tls.ca {
            for certificate in reqwest::Certificate::from_pem_bundle(ca)? {
                builder = builder.add_root_certificate(certificate);
            }
        }
        if let Some((cert, key)) = &tls.identity {
            let mut pem = cert.clone();
            pem.push(b'\n');
            pem.extend_from_slice(key);
            builder = builder.identity(reqwest::Identity::from_pem(&pem)?);
        }
        let client = builder.build()?;
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
