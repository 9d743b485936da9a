//! The HTTP client for the Instance Metadata Service.
//!
//! Every request carries `Metadata: true` (IMDS answers 400 without it) and goes straight to the
//! configured address: no proxy is ever asked, whatever `HTTP_PROXY`/`ALL_PROXY` say, because a
//! proxy either cannot reach 169.254.169.254 or adds `X-Forwarded-For`, which IMDS rejects.
//! Redirects are not followed (the header exists to stop redirected requests). Bodies are read up
//! to a cap so a broken endpoint cannot exhaust memory. Errors carry a bounded [`ImdsError::kind`].
//!
//! It is hyper's client, not reqwest's: a poll is one GET to one address that is built once, and
//! reqwest's redirect and URL layers print the URL and parse it again twice per request. An
//! unchanged poll ran about 82,000 instructions on reqwest and 47,500 on hyper's client
//! (docs/performance.md).
//!
//! The client records every request it sends (the poll's GET, instance metadata, approval POSTs)
//! in one place, `ImdsClient::recorded`, through the [`RecordRequest`] it was given.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use reqwest::Url;

use azure_scheduled_events_core::event::{Document, DocumentError, EventId, Polled};
use azure_scheduled_events_core::limits::{self, Exceeded, MAX_BODY_BYTES};
use tracing::Instrument;

use crate::azure::wire;

/// Time a TCP connect to IMDS has by default. IMDS is link-local and accepts within a
/// millisecond; a connect still pending after a second is being dropped on the way.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The instance-metadata api-version: the oldest that has every `compute` field the agent reports.
pub const INSTANCE_API_VERSION: &str = "2021-02-01";

/// Which IMDS call a request was, for the `operation` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// `GET /metadata/scheduledevents`
    Events,
    /// `GET /metadata/instance`
    Instance,
    /// `POST /metadata/scheduledevents` (approval)
    Approve,
}

impl Operation {
    pub const ALL: [Operation; 3] = [Operation::Events, Operation::Instance, Operation::Approve];

    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Events => "events",
            Operation::Instance => "instance",
            Operation::Approve => "approve",
        }
    }

    /// Whether the request's duration is a histogram: polls and approvals, which recur. Instance
    /// metadata is read at start (and retried until it answers): a histogram of one read would
    /// cost every VM eight series for one sample.
    pub fn timed(self) -> bool {
        self != Operation::Instance
    }
}

/// Why an IMDS request did not yield a usable answer.
#[derive(Debug, thiserror::Error)]
pub enum ImdsError {
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// The TCP connect did not complete in time: something between this process and IMDS drops
    /// the traffic (not on the host network, AKS's IMDS restriction, a NetworkPolicy), as
    /// opposed to an IMDS that accepted and answers slowly ([`ImdsError::Timeout`]).
    #[error(
        "connect did not complete within {0:?}: IMDS is unreachable from here (a pod outside the host network, AKS's IMDS restriction, a NetworkPolicy or a pod-identity agent dropping the traffic)"
    )]
    ConnectTimeout(Duration),
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("connection failed during the exchange: {0}")]
    Transport(String),
    #[error("HTTP {status}: {body}")]
    Status {
        status: StatusCode,
        retry_after: Option<Duration>,
        /// The start of the body, for the log: IMDS error bodies vary (JSON, IIS HTML).
        body: String,
    },
    #[error("body larger than {MAX_BODY_BYTES} bytes")]
    TooLarge,
    /// A document past the limits of what the agent takes in.
    #[error(transparent)]
    Exceeded(#[from] Exceeded),
    #[error("{0}")]
    Decode(String),
}

impl ImdsError {
    /// Every value of [`ImdsError::kind`], for pre-creating series.
    pub const KINDS: [&'static str; 11] = [
        "timeout",
        "connect_timeout",
        "connect",
        "transport",
        "http_4xx",
        "http_410",
        "http_429",
        "http_5xx",
        "http_other",
        "too_large",
        "decode",
    ];

    /// A bounded name for the `reason` label and the log.
    pub fn kind(&self) -> &'static str {
        match self {
            ImdsError::Timeout(_) => "timeout",
            ImdsError::ConnectTimeout(_) => "connect_timeout",
            ImdsError::Connect(_) => "connect",
            ImdsError::Transport(_) => "transport",
            ImdsError::Status { status, .. } => match status.as_u16() {
                410 => "http_410",
                429 => "http_429",
                400..=499 => "http_4xx",
                500..=599 => "http_5xx",
                _ => "http_other",
            },
            ImdsError::TooLarge | ImdsError::Exceeded(_) => "too_large",
            ImdsError::Decode(_) => "decode",
        }
    }

    /// Whether IMDS asked the agent to slow down or come back later (429, 410, 5xx), as opposed
    /// to a failure that retrying at the normal pace is right for.
    pub fn wants_backoff(&self) -> bool {
        matches!(self, ImdsError::Status { status, .. }
            if *status == StatusCode::TOO_MANY_REQUESTS || *status == StatusCode::GONE || status.is_server_error())
    }

    /// The `Retry-After` IMDS sent, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ImdsError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// What hyper's client reported: a connect that failed (timed out, or refused, or a TLS
    /// handshake gone wrong) or an exchange cut short. The chain holds the useful part
    /// ("Connection refused", "connection closed before message completed").
    fn from_transport(
        error: &(dyn std::error::Error + 'static),
        connect: bool,
        connect_timeout: Duration,
    ) -> Self {
        let mut text = error.to_string();
        let mut timed_out = false;
        let mut source = error.source();
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            timed_out |= cause
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
            source = cause.source();
        }
        match (connect, timed_out) {
            (true, true) => ImdsError::ConnectTimeout(connect_timeout),
            (true, false) => ImdsError::Connect(text),
            (false, _) => ImdsError::Transport(text),
        }
    }
}

impl From<DocumentError> for ImdsError {
    fn from(error: DocumentError) -> Self {
        ImdsError::Decode(error.to_string())
    }
}

/// Where the client records each request it sent: its operation, how long it took, and how
/// it failed (the request metrics implement it).
pub trait RecordRequest: std::fmt::Debug + Send + Sync {
    fn record_request(&self, operation: Operation, elapsed: Duration, error: Option<&ImdsError>);
}

/// Why a client could not be made for an IMDS URL.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("not a URL a request can be sent to: {0}")]
    Uri(#[from] hyper::http::uri::InvalidUri),
    #[error("cannot set up TLS: {0}")]
    Tls(#[from] rustls::Error),
}

/// A client for one IMDS base URL.
#[derive(Debug, Clone)]
pub struct ImdsClient {
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    connect_timeout: Duration,
    events_uri: Uri,
    instance_uri: Uri,
    /// Sent with every request: `Metadata: true`, the user agent, and the URL's user and password
    /// as basic auth when it has them.
    headers: HeaderMap,
    /// The scheduled-events URL without the password or user a proxy in front of IMDS may need,
    /// for logs.
    shown_url: Url,
    recorder: Option<Arc<dyn RecordRequest>>,
}

impl ImdsClient {
    /// A client for `base` (`http://169.254.169.254` on Azure) asking for `api_version` of
    /// scheduled events.
    pub fn new(base: &Url, api_version: &str) -> Result<Self, ClientError> {
        Self::with_connect_timeout(base, api_version, DEFAULT_CONNECT_TIMEOUT)
    }

    /// As [`ImdsClient::new`], giving a TCP connect `connect_timeout` before it fails as
    /// [`ImdsError::ConnectTimeout`], whatever the request's own timeout: a blocked pod learns
    /// it in a second, not after the two minutes the first request may take.
    pub fn with_connect_timeout(
        base: &Url,
        api_version: &str,
        connect_timeout: Duration,
    ) -> Result<Self, ClientError> {
        let mut headers = HeaderMap::new();
        headers.insert("Metadata", HeaderValue::from_static("true"));
        headers.insert(
            header::USER_AGENT,
            HeaderValue::from_static(concat!(
                env!("CARGO_PKG_NAME"),
                "/",
                env!("CARGO_PKG_VERSION")
            )),
        );
        if let Some(credentials) = basic_auth(base) {
            headers.insert(header::AUTHORIZATION, credentials);
        }
        let http = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_max_idle_per_host(1)
            .build(connector(base, connect_timeout)?);
        let events_url = endpoint(base, "metadata/scheduledevents", api_version);
        let mut shown_url = events_url.clone();
        if !shown_url.username().is_empty() || shown_url.password().is_some() {
            let _ = shown_url.set_password(None);
            let _ = shown_url.set_username("redacted");
        }
        Ok(Self {
            http,
            connect_timeout,
            events_uri: request_uri(&events_url)?,
            instance_uri: request_uri(&endpoint(base, "metadata/instance", INSTANCE_API_VERSION))?,
            headers,
            shown_url,
            recorder: None,
        })
    }

    /// The same client, recording every request it sends in `recorder`.
    pub fn recording(mut self, recorder: Arc<dyn RecordRequest>) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// The scheduled-events URL the client polls, any user and password in it redacted.
    pub fn events_url(&self) -> &Url {
        &self.shown_url
    }

    /// Reads the scheduled-events document. `last` holds the body of the last valid document:
    /// the same bytes again (nearly every poll) are [`Polled::Unchanged`] and not parsed again.
    pub async fn scheduled_events(
        &self,
        timeout: Duration,
        last: &mut Vec<u8>,
    ) -> Result<Polled, ImdsError> {
        // Exported only at debug level: one trace per poll is noise, but useful when IMDS is slow.
        let span = tracing::debug_span!(
            "GET /metadata/scheduledevents",
            otel.kind = "client",
            http.request.method = "GET",
            http.response.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let read = async {
            let body = self.get(&self.events_uri, timeout).await?;
            if body == *last {
                return Ok(Polled::Unchanged);
            }
            let document = Document::from_json(&body)?;
            limits::check(&document)?;
            *last = body;
            Ok(Polled::Changed(document))
        };
        let result = self
            .recorded(Operation::Events, read)
            .instrument(span.clone())
            .await;
        if !span.is_disabled() {
            match &result {
                Ok(_) => span.record("http.response.status_code", 200),
                Err(error) => {
                    if let ImdsError::Status { status, .. } = error {
                        span.record("http.response.status_code", status.as_u16());
                    }
                    span.record("error.type", error.kind())
                }
            };
        }
        result
    }

    /// Reads the `compute` section of instance metadata.
    pub async fn instance(&self, timeout: Duration) -> Result<wire::Compute, ImdsError> {
        let read = async {
            let body = self.get(&self.instance_uri, timeout).await?;
            serde_json::from_slice::<wire::InstanceMetadata>(&body)
                .map(|metadata| metadata.compute)
                .map_err(|error| ImdsError::Decode(format!("not instance metadata: {error}")))
        };
        self.recorded(Operation::Instance, read).await
    }

    /// Approves one event: `POST {"StartRequests":[{"EventId":"..."}]}` with the id exactly as
    /// received. One event per request, so that an id IMDS refuses cannot hold back another.
    pub async fn approve(&self, event_id: &EventId, timeout: Duration) -> Result<(), ImdsError> {
        let post = async {
            let body = wire::StartRequests {
                start_requests: vec![wire::StartRequest {
                    event_id: event_id.as_str().to_owned(),
                }],
            };
            let body = serde_json::to_vec(&body).map_err(|e| ImdsError::Decode(e.to_string()))?;
            let mut request = self.request(Method::POST, &self.events_uri, Bytes::from(body));
            request.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            self.exchange(request, timeout).await.map(drop)
        };
        self.recorded(Operation::Approve, post).await
    }

    /// Runs one request as `operation`, answer read and decoded, and records it: the one place
    /// every request's figures are recorded.
    async fn recorded<T>(
        &self,
        operation: Operation,
        request: impl std::future::Future<Output = Result<T, ImdsError>>,
    ) -> Result<T, ImdsError> {
        let started = tokio::time::Instant::now();
        let result = request.await;
        if let Some(recorder) = &self.recorder {
            recorder.record_request(operation, started.elapsed(), result.as_ref().err());
        }
        result
    }

    /// `GET uri`, the answer's body read.
    async fn get(&self, uri: &Uri, timeout: Duration) -> Result<Vec<u8>, ImdsError> {
        self.exchange(self.request(Method::GET, uri, Bytes::new()), timeout)
            .await
    }

    /// A request to `uri` with the headers every request carries.
    fn request(&self, method: Method, uri: &Uri, body: Bytes) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(body));
        *request.method_mut() = method;
        *request.uri_mut() = uri.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }

    async fn exchange(
        &self,
        request: Request<Full<Bytes>>,
        timeout: Duration,
    ) -> Result<Vec<u8>, ImdsError> {
        let exchange = async {
            let response = self.http.request(request).await.map_err(|error| {
                ImdsError::from_transport(&error, error.is_connect(), self.connect_timeout)
            })?;
            let status = response.status();
            let retry_after = crate::azure::backoff::retry_after(response.headers());
            // The size the answer declares (its Content-Length), when it declares one.
            if hyper::body::Body::size_hint(response.body())
                .exact()
                .is_some_and(|length| length > MAX_BODY_BYTES as u64)
            {
                return Err(ImdsError::TooLarge);
            }
            let mut body = Vec::new();
            let mut incoming = response.into_body();
            while let Some(frame) = incoming.frame().await {
                let frame = frame.map_err(|error| {
                    ImdsError::from_transport(&error, false, self.connect_timeout)
                })?;
                if let Ok(chunk) = frame.into_data() {
                    if body.len() + chunk.len() > MAX_BODY_BYTES {
                        return Err(ImdsError::TooLarge);
                    }
                    body.extend_from_slice(&chunk);
                }
            }
            if status == StatusCode::OK {
                Ok(body)
            } else {
                Err(ImdsError::Status {
                    status,
                    retry_after,
                    body: excerpt(&body),
                })
            }
        };
        // One deadline for connect, headers and body: a server that trickles a body must not
        // hold the single request in flight past the poll timeout.
        tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or(Err(ImdsError::Timeout(timeout)))
    }
}

/// Straight to the address of `base`, over TLS when it is an `https://` URL: no proxy, whatever
/// the environment says.
fn connector(
    base: &Url,
    connect_timeout: Duration,
) -> Result<HttpsConnector<HttpConnector>, rustls::Error> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(connect_timeout));
    // IMDS is plain HTTP: the root certificates are loaded only for an https:// URL (a proxy in
    // front of it), or every VM would keep their pages and heap resident.
    let mut roots = rustls::RootCertStore::empty();
    if base.scheme() == "https" {
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp))
}

/// The URL's user and password, percent-decoded, as an `Authorization: Basic` value.
fn basic_auth(url: &Url) -> Option<HeaderValue> {
    use base64::Engine as _;

    if url.username().is_empty() && url.password().is_none() {
        return None;
    }
    let decode = |part: &str| percent_encoding::percent_decode_str(part).collect::<Vec<u8>>();
    let mut credentials = decode(url.username());
    credentials.push(b':');
    credentials.extend(decode(url.password().unwrap_or("")));
    let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
    let mut value = HeaderValue::from_str(&format!("Basic {encoded}")).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// What a request is sent to: the URL without its user and password (sent as basic auth).
fn request_uri(url: &Url) -> Result<Uri, hyper::http::uri::InvalidUri> {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.as_str().parse()
}

fn endpoint(base: &Url, path: &str, api_version: &str) -> Url {
    let mut url = base.clone();
    let prefix = url.path().trim_end_matches('/').to_owned();
    url.set_path(&format!("{prefix}/{path}"));
    url.query_pairs_mut()
        .clear()
        .append_pair("api-version", api_version);
    url
}

/// The first line of an error body, shortened, for one log line.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let line = text
        .split(['\r', '\n'])
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    line.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use azure_scheduled_events_core::limits::MAX_EVENTS;

    #[test]
    fn urls_are_built_from_the_base_with_the_api_version() -> Result<(), Box<dyn std::error::Error>>
    {
        let client = ImdsClient::new(&Url::parse("http://169.254.169.254")?, "2020-07-01")?;
        assert_eq!(
            client.events_url().as_str(),
            "http://169.254.169.254/metadata/scheduledevents?api-version=2020-07-01"
        );
        assert_eq!(
            client.instance_uri.to_string(),
            "http://169.254.169.254/metadata/instance?api-version=2021-02-01"
        );
        let prefixed = ImdsClient::new(&Url::parse("http://127.0.0.1:8080/imds/")?, "2019-08-01")?;
        assert_eq!(
            prefixed.events_url().as_str(),
            "http://127.0.0.1:8080/imds/metadata/scheduledevents?api-version=2019-08-01"
        );
        Ok(())
    }

    #[test]
    fn a_user_and_password_in_the_url_go_as_basic_auth_and_not_in_the_request_line()
    -> Result<(), Box<dyn std::error::Error>> {
        let client = ImdsClient::new(
            &Url::parse("https://agent:s3cret%40pw@imds-proxy.example:8443")?,
            "2020-07-01",
        )?;
        let request = client.request(Method::GET, &client.events_uri, Bytes::new());
        assert_eq!(
            request.uri().to_string(),
            "https://imds-proxy.example:8443/metadata/scheduledevents?api-version=2020-07-01"
        );
        // base64("agent:s3cret@pw")
        assert_eq!(
            request.headers()[header::AUTHORIZATION],
            "Basic YWdlbnQ6czNjcmV0QHB3"
        );
        assert!(request.headers()[header::AUTHORIZATION].is_sensitive());
        assert_eq!(request.headers()["Metadata"], "true");
        assert_eq!(
            client.events_url().as_str(),
            "https://redacted@imds-proxy.example:8443/metadata/scheduledevents?api-version=2020-07-01"
        );
        let plain = ImdsClient::new(&Url::parse("http://169.254.169.254")?, "2020-07-01")?;
        let request = plain.request(Method::GET, &plain.events_uri, Bytes::new());
        assert!(request.headers().get(header::AUTHORIZATION).is_none());
        Ok(())
    }

    /// An `https://` URL (a proxy in front of IMDS) is spoken to in TLS, and its certificate is
    /// checked against the built-in roots: one they do not sign fails the connect, naming why.
    #[tokio::test]
    async fn an_https_url_speaks_tls_and_refuses_a_certificate_no_root_signs()
    -> Result<(), Box<dyn std::error::Error>> {
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()])?;
        let key = rustls_pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der())?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![certified.cert.der().clone()], key)?;
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = Url::parse(&format!("https://{}", listener.local_addr()?))?;
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await?;
            let handshake = acceptor.accept(stream).await;
            std::io::Result::Ok(handshake.map(drop))
        });

        let client = ImdsClient::new(&url, "2020-07-01")?;
        let error = client
            .scheduled_events(Duration::from_secs(5), &mut Vec::new())
            .await
            .err()
            .ok_or("a certificate no root signs was accepted")?;
        assert_eq!(error.kind(), "connect", "{error}");
        assert!(error.to_string().contains("UnknownIssuer"), "{error}");
        // The server got a TLS handshake, which the client ended when it read the certificate.
        let handshake = server.await??;
        assert!(handshake.is_err());
        Ok(())
    }

    #[test]
    fn a_document_past_the_limits_is_too_large() {
        let error = ImdsError::from(Exceeded::TooManyEvents(MAX_EVENTS + 1));
        assert_eq!(error.kind(), "too_large");
        assert_eq!(
            error.to_string(),
            format!(
                "document with {} events, more than {MAX_EVENTS}",
                MAX_EVENTS + 1
            )
        );
    }

    #[test]
    fn status_codes_map_to_bounded_kinds_and_backoff() {
        let status = |code: u16| ImdsError::Status {
            status: StatusCode::from_u16(code).unwrap_or(StatusCode::IM_A_TEAPOT),
            retry_after: None,
            body: String::new(),
        };
        let table = [
            (400, "http_4xx", false),
            (404, "http_4xx", false),
            (405, "http_4xx", false),
            (410, "http_410", true),
            (429, "http_429", true),
            (500, "http_5xx", true),
            (503, "http_5xx", true),
            (302, "http_other", false),
        ];
        for (code, kind, backoff) in table {
            assert_eq!(
                (status(code).kind(), status(code).wants_backoff()),
                (kind, backoff),
                "{code}"
            );
            assert!(ImdsError::KINDS.contains(&kind));
        }
    }

    #[test]
    fn error_excerpts_are_one_short_line() {
        assert_eq!(
            excerpt(b"\r\n<html>\r\n<body>Service Unavailable</body>"),
            "<html>"
        );
        assert_eq!(excerpt(&[b'x'; 500]).len(), 200);
        assert_eq!(excerpt(b""), "");
    }
}
