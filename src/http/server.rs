//! The agent's `/metrics`, `/healthz`, `/readyz` and landing page, served by [`crate::http::web`].

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Response, StatusCode};

use crate::http::health::Health;
use crate::output::metrics::Metrics;
use azure_scheduled_events_protocol::http::respond;

const TEXT: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");
const HTML: HeaderValue = HeaderValue::from_static("text/html; charset=utf-8");
pub(crate) const EXPOSITION: HeaderValue =
    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8");

/// What the agent's HTTP endpoints read.
#[derive(Debug)]
pub struct Endpoints {
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub telemetry_path: String,
}

impl Endpoints {
    /// Answers one request to the agent but a scrape: the listener ([`crate::http::web`]) answers GET
    /// and HEAD of the telemetry path from [`crate::http::exposition`], off the poll loop's thread.
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
    use crate::output::metrics::{EventSeries, Families};

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
        e.health
            .expect_back_within(std::time::Duration::from_secs(60));
        assert_eq!(get(&e, "/readyz").status(), StatusCode::OK);
        assert_eq!(get(&e, "/healthz").status(), StatusCode::OK);
        let post = e.answer(&Request::post("/metrics").body(()).unwrap_or_default());
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
        Ok(())
    }
}
