//! HTTP on hyper 1: the agent's `/metrics`, `/healthz`, `/readyz` and landing page (served by
//! [`crate::web`]), and the plain accept loop with graceful shutdown that the simulator serves
//! through.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};

use crate::health::Health;
use crate::metrics::Metrics;
use crate::response::respond;

/// How long in-flight requests may finish after shutdown begins.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

const TEXT: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");
const HTML: HeaderValue = HeaderValue::from_static("text/html; charset=utf-8");
pub(crate) const EXPOSITION: HeaderValue =
    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");

/// Accepts HTTP/1 connections on `listener` until `shutdown` completes, then lets in-flight
/// requests finish for a few seconds. `handle` answers each request; an `Err` from it closes the
/// connection without a response (the simulator's dropped-connection fault).
pub async fn serve<H, F, E>(
    listener: TcpListener,
    handle: H,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<Full<Bytes>>, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            stream = accept(&listener) => {
                let handle = handle.clone();
                // The timer lets hyper drop clients that never finish sending their headers.
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .serve_connection(TokioIo::new(stream), service_fn(handle));
                let connection = graceful.watch(connection);
                tokio::spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%error, "connection ended with an error");
                    }
                });
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    drain(graceful).await;
    Ok(())
}

/// The next connection on `listener`. A failed accept is logged and retried after a short pause:
/// running out of file descriptors is the usual cause, and spinning would not help.
pub(crate) async fn accept(listener: &TcpListener) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => return stream,
            Err(error) => {
                tracing::warn!(%error, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Lets in-flight requests finish for a few seconds once the listener is closed.
pub(crate) async fn drain(graceful: GracefulShutdown) {
    if tokio::time::timeout(DRAIN_TIMEOUT, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("in-flight requests did not finish before shutdown");
    }
}

/// What the agent's HTTP endpoints read.
#[derive(Debug)]
pub struct Endpoints {
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub telemetry_path: String,
}

impl Endpoints {
    /// Answers one request to the agent but a scrape: the listener ([`crate::web`]) answers GET
    /// and HEAD of the telemetry path from [`crate::exposition`], off the poll loop's thread.
    pub fn answer<B>(&self, request: &Request<B>) -> Response<Full<Bytes>> {
        if !matches!(*request.method(), Method::GET | Method::HEAD) {
            return respond(StatusCode::METHOD_NOT_ALLOWED, TEXT, "only GET and HEAD\n");
        }
        match request.uri().path() {
            "/healthz" if self.health.is_alive() => {
                respond(StatusCode::OK, TEXT, "ok: the poll loop is running\n")
            }
            "/healthz" => respond(
                StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                "the poll loop has stopped checking in\n",
            ),
            "/readyz" if self.health.is_ready() => {
                respond(StatusCode::OK, TEXT, "ok: IMDS has answered\n")
            }
            "/readyz" => respond(
                StatusCode::SERVICE_UNAVAILABLE,
                TEXT,
                "waiting for a first valid document from IMDS\n",
            ),
            "/" => respond(StatusCode::OK, HTML, self.landing_page()),
            _ => respond(StatusCode::NOT_FOUND, TEXT, "not found\n"),
        }
    }

    fn landing_page(&self) -> String {
        let path = &self.telemetry_path;
        format!(
            "<!DOCTYPE html>\n<html><head><title>Azure Scheduled Events Exporter</title></head><body>\n\
             <h1>Azure Scheduled Events Exporter</h1>\n<p>Version {version}</p>\n<ul>\n\
             <li><a href=\"{path}\">{path}</a>: Prometheus metrics</li>\n\
             <li><a href=\"/healthz\">/healthz</a>: the poll loop is alive</li>\n\
             <li><a href=\"/readyz\">/readyz</a>: IMDS has answered</li>\n</ul>\n</body></html>\n",
            version = env!("CARGO_PKG_VERSION"),
            path = html_escape(path),
        )
    }
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{EventSeries, Families};

    fn endpoints() -> Result<Endpoints, prometheus::Error> {
        Ok(Endpoints {
            metrics: Arc::new(Metrics::new(
                "2020-07-01",
                EventSeries::ThisVm,
                Families::DEFAULT,
            )?),
            health: Arc::new(Health::new()),
            telemetry_path: "/metrics".into(),
        })
    }

    fn get(endpoints: &Endpoints, path: &str) -> Response<Full<Bytes>> {
        endpoints.answer(&Request::get(path).body(()).unwrap_or_default())
    }

    #[test]
    fn routes_answer_as_documented() -> Result<(), prometheus::Error> {
        let e = endpoints()?;
        assert_eq!(get(&e, "/").status(), StatusCode::OK);
        assert_eq!(get(&e, "/nope").status(), StatusCode::NOT_FOUND);
        assert_eq!(get(&e, "/readyz").status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            get(&e, "/healthz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        e.health.set_ready();
        e.health.expect_back_within(Duration::from_secs(60));
        assert_eq!(get(&e, "/readyz").status(), StatusCode::OK);
        assert_eq!(get(&e, "/healthz").status(), StatusCode::OK);
        let post = e.answer(&Request::post("/metrics").body(()).unwrap_or_default());
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
        Ok(())
    }
}
