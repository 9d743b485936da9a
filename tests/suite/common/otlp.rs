//! A real OTLP receiver on 127.0.0.1:0, built on the official protobuf definitions
//! (`opentelemetry-proto`): the `TraceService` over gRPC, and `POST /v1/traces` with
//! `application/x-protobuf` bodies over HTTP. It keeps every span it receives, with its resource.
//! Self-contained, so the benchmarks use it too.

#![allow(dead_code, reason = "the benchmarks use only part of the receiver")]

// The suite's wait, included here too so that the receiver stays self-contained for the benchmarks.
#[allow(
    clippy::duplicate_mod,
    reason = "the suite loads wait.rs as common::wait too; the benchmarks only here"
)]
#[path = "wait.rs"]
mod wait;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use prost::Message;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How long [`Receiver::wait_for`] waits before it fails.
const PATIENCE: Duration = Duration::from_secs(20);

/// One received span, flattened with its resource.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
    pub attributes: BTreeMap<String, String>,
    pub resource: BTreeMap<String, String>,
    /// `grpc` or `http`.
    pub via: &'static str,
    /// Headers (gRPC metadata) of the export request that carried the span.
    pub headers: BTreeMap<String, String>,
}

impl ReceivedSpan {
    /// An attribute under `azure.scheduled_event.`, as text.
    pub fn event(&self, name: &str) -> Option<&str> {
        self.attributes
            .get(&format!("azure.scheduled_event.{name}"))
            .map(String::as_str)
    }

    pub fn is_lifecycle(&self) -> bool {
        self.event("outcome").is_some()
    }
}

type Spans = Arc<Mutex<Vec<ReceivedSpan>>>;

/// The receiver; stops when dropped.
pub struct Receiver {
    spans: Spans,
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Receiver {
    pub async fn start() -> std::io::Result<Self> {
        Self::start_with(None).await
    }

    /// As [`Receiver::start`], with OTLP/HTTP served over TLS as `tls` says (gRPC stays plain).
    pub async fn start_tls(tls: Arc<rustls::ServerConfig>) -> std::io::Result<Self> {
        Self::start_with(Some(tls)).await
    }

    async fn start_with(tls: Option<Arc<rustls::ServerConfig>>) -> std::io::Result<Self> {
        let spans = Spans::default();
        let grpc_listener = TcpListener::bind("127.0.0.1:0").await?;
        let grpc = grpc_listener.local_addr()?;
        let http_listener = TcpListener::bind("127.0.0.1:0").await?;
        let http = http_listener.local_addr()?;
        let service = TraceServiceServer::new(Grpc(Arc::clone(&spans)))
            .accept_compressed(tonic::codec::CompressionEncoding::Gzip);
        let grpc_task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(grpc_listener))
                .await;
        });
        let http_spans = Arc::clone(&spans);
        let http_task = tokio::spawn(async move {
            while let Ok((stream, _)) = http_listener.accept().await {
                let spans = Arc::clone(&http_spans);
                let tls = tls.clone();
                tokio::spawn(async move {
                    match tls {
                        None => serve_http(stream, spans).await,
                        Some(tls) => {
                            // A client the TLS configuration refuses never gets to HTTP.
                            if let Ok(stream) =
                                tokio_rustls::TlsAcceptor::from(tls).accept(stream).await
                            {
                                serve_http(stream, spans).await;
                            }
                        }
                    }
                });
            }
        });
        Ok(Self {
            spans,
            grpc,
            http,
            tasks: vec![grpc_task, http_task],
        })
    }

    pub fn grpc_url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    pub fn http_url(&self) -> String {
        format!("http://{}", self.http)
    }

    /// The HTTP address as an `https://` URL, for [`Receiver::start_tls`].
    pub fn https_url(&self) -> String {
        format!("https://{}", self.http)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The first span named `name`, once it has arrived.
    pub async fn span_named(&self, name: &str) -> Result<ReceivedSpan, String> {
        let spans = self
            .wait_for(name, |spans| spans.iter().any(|s| s.name == name))
            .await?;
        spans
            .into_iter()
            .find(|s| s.name == name)
            .ok_or_else(|| format!("no span {name}"))
    }

    /// Polls the received spans until `condition` holds; fails with what arrived.
    pub async fn wait_for(
        &self,
        what: &str,
        condition: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Result<Vec<ReceivedSpan>, String> {
        wait::wait(what)
            .until(async || {
                let spans = self.spans();
                condition(&spans).then_some(spans)
            })
            .await
            .map_err(|e| {
                let names: Vec<String> = self
                    .spans()
                    .iter()
                    .map(|s| {
                        format!(
                            "{} {} {:?}",
                            s.trace_id,
                            s.name,
                            s.attributes.get("azure.scheduled_event.vm_name")
                        )
                    })
                    .collect();
                format!("{e}; received: {names:#?}")
            })
    }
}

async fn serve_http<I>(io: I, spans: Spans)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| http_export(Arc::clone(&spans), request));
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(io), service)
        .await;
}

struct Grpc(Spans);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let headers = header_map(request.metadata().clone().into_headers());
        keep(&self.0, request.into_inner(), "grpc", headers);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

async fn http_export(
    spans: Spans,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let reply = |status: u16, body: Vec<u8>| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/x-protobuf"),
        );
        response
    };
    let content_type = request
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if request.uri().path() != "/v1/traces" || request.method() != hyper::Method::POST {
        return Ok(reply(404, Vec::new()));
    }
    if content_type != "application/x-protobuf" {
        return Ok(reply(415, Vec::new()));
    }
    let headers = header_map(request.headers().clone());
    let body = request.into_body().collect().await?.to_bytes();
    let body = if headers.get("content-encoding").map(String::as_str) == Some("gzip") {
        let mut plain = Vec::new();
        if std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&body[..]), &mut plain)
            .is_err()
        {
            return Ok(reply(400, Vec::new()));
        }
        Bytes::from(plain)
    } else {
        body
    };
    match ExportTraceServiceRequest::decode(body) {
        Ok(export) => {
            keep(&spans, export, "http", headers);
            Ok(reply(
                200,
                ExportTraceServiceResponse::default().encode_to_vec(),
            ))
        }
        Err(_) => Ok(reply(400, Vec::new())),
    }
}

fn header_map(headers: hyper::HeaderMap) -> BTreeMap<String, String> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                v.to_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn keep(
    spans: &Spans,
    export: ExportTraceServiceRequest,
    via: &'static str,
    headers: BTreeMap<String, String>,
) {
    let mut received = Vec::new();
    for resource_spans in export.resource_spans {
        let resource = attributes(
            resource_spans
                .resource
                .map(|r| r.attributes)
                .unwrap_or_default(),
        );
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                received.push(ReceivedSpan {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name,
                    start_unix_nano: span.start_time_unix_nano,
                    end_unix_nano: span.end_time_unix_nano,
                    attributes: attributes(span.attributes),
                    resource: resource.clone(),
                    via,
                    headers: headers.clone(),
                });
            }
        }
    }
    if let Ok(mut spans) = spans.lock() {
        spans.extend(received);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(kvs: Vec<KeyValue>) -> BTreeMap<String, String> {
    kvs.into_iter()
        .map(|kv| (kv.key, kv.value.map(text).unwrap_or_default()))
        .collect()
}

/// An attribute value as text; arrays joined with commas.
fn text(value: AnyValue) -> String {
    match value.value {
        Some(Value::StringValue(s)) => s,
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(Value::ArrayValue(array)) => array
            .values
            .into_iter()
            .map(text)
            .collect::<Vec<_>>()
            .join(","),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
