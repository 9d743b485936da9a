//! One receiver's sending task: takes notifications from its bounded queue in order, renders
//! them in the receiver's format and POSTs them, retrying what may succeed later.
//!
//! Timeouts, connection errors, 5xx and 429 are retried with exponential backoff (or after the
//! receiver's `Retry-After`); any other 4xx means the same request can never succeed, so it is
//! logged once with the receiver's answer and not sent again. One notification at a time per
//! receiver keeps its order: a PagerDuty resolve never overtakes its trigger. The client is the
//! receiver's own and, unlike the IMDS client, honours `HTTPS_PROXY`/`NO_PROXY`: receivers are
//! outside the VM.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, HeaderValue};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::azure::backoff;
use crate::config::notify::{Format, Receiver};

use super::body::{Notification, Template, body};
use super::metrics::NotifyMetrics;

/// Attempts per notification, the first included.
const ATTEMPTS: u32 = 6;

/// Wait before the first retry; doubled at each next one.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// Longest wait between attempts, `Retry-After` included.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Longest part of a receiver's answer put in a log line.
const MAX_ANSWER: usize = 512;

/// A notification waiting to be sent, with when its transition was seen.
#[derive(Debug)]
pub struct Job {
    pub notification: Notification,
    pub seen: Instant,
    /// This VM's scale set, from instance metadata once read (a label of Alertmanager alerts).
    pub vm_scale_set_name: Option<Arc<str>>,
}

/// Why an attempt failed.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("the template failed: {0}")]
    Template(String),
    #[error("{0}")]
    Transport(String),
    #[error("HTTP {status}: {answer}")]
    Status {
        status: StatusCode,
        answer: String,
        retry_after: Option<Duration>,
    },
}

impl Failure {
    /// Whether the same request may succeed later.
    fn retryable(&self) -> bool {
        match self {
            Failure::Template(_) => false,
            Failure::Transport(_) => true,
            Failure::Status { status, .. } => {
                status.is_server_error() || *status == StatusCode::TOO_MANY_REQUESTS
            }
        }
    }
}

/// The receiver's HTTP client: its timeout, no redirects (a webhook that redirects is
/// misconfigured), its extra certificate authority, and the proxy variables.
pub fn client(receiver: &Receiver) -> Result<reqwest::Client, reqwest::Error> {
    let mut builder = reqwest::Client::builder()
        .timeout(receiver.timeout)
        .redirect(reqwest::redirect::Policy::none());
    if let Some(pem) = &receiver.ca_pem {
        builder = builder.add_root_certificate(reqwest::Certificate::from_pem(pem)?);
    }
    builder.build()
}

/// Sends what `jobs` brings to `receiver` until the queue closes.
pub async fn run(
    receiver: Receiver,
    client: reqwest::Client,
    mut jobs: mpsc::Receiver<Job>,
    metrics: NotifyMetrics,
) {
    let template = receiver
        .template
        .as_ref()
        .and_then(|source| Template::new(&source.text));
    let name = receiver.name.as_str();
    while let Some(Job {
        notification, seen, ..
    }) = jobs.recv().await
    {
        let payload = render(&receiver, template.as_ref(), &notification).await;
        let mut attempt = 1;
        let outcome = loop {
            let result = match &payload {
                Ok(bytes) => post(&client, &receiver, bytes.clone()).await,
                Err(problem) => Err(Failure::Template(problem.clone())),
            };
            match result {
                Ok(()) => break Ok(()),
                Err(failure) if failure.retryable() && attempt < ATTEMPTS => {
                    let retry_after = match &failure {
                        Failure::Status { retry_after, .. } => *retry_after,
                        _ => None,
                    };
                    let delay =
                        backoff::delay(FIRST_BACKOFF, MAX_BACKOFF, attempt - 1, retry_after);
                    tracing::debug!(
                        receiver = name,
                        event_id = notification.event.event_id.as_str(),
                        transition = notification.transition.as_str(),
                        attempt,
                        error = %failure,
                        retry_in = ?delay,
                        "notification not delivered yet, retrying"
                    );
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(failure) => break Err(failure),
            }
        };
        let elapsed = seen.elapsed();
        let result = match &outcome {
            Ok(()) => "delivered",
            Err(failure) if failure.retryable() => "failed",
            Err(_) => "rejected",
        };
        metrics.record(name, result, elapsed);
        match outcome {
            Ok(()) => tracing::debug!(
                receiver = name,
                event_id = notification.event.event_id.as_str(),
                transition = notification.transition.as_str(),
                attempts = attempt,
                elapsed_seconds = elapsed.as_secs_f64(),
                "notification delivered"
            ),
            Err(failure) if failure.retryable() => tracing::warn!(
                receiver = name,
                format = receiver.format.as_str(),
                endpoint = %receiver.endpoint(),
                event_id = notification.event.event_id.as_str(),
                transition = notification.transition.as_str(),
                attempts = attempt,
                error = %failure,
                "notification not delivered: attempts exhausted"
            ),
            Err(Failure::Template(problem)) => tracing::error!(
                receiver = name,
                format = receiver.format.as_str(),
                event_id = notification.event.event_id.as_str(),
                transition = notification.transition.as_str(),
                error = problem.as_str(),
                "notification not sent: its template failed"
            ),
            Err(failure) => tracing::error!(
                receiver = name,
                format = receiver.format.as_str(),
                endpoint = %receiver.endpoint(),
                event_id = notification.event.event_id.as_str(),
                transition = notification.transition.as_str(),
                error = %failure,
                "notification refused by the receiver: not sent again"
            ),
        }
    }
}

/// The request body for `notification`.
async fn render(
    receiver: &Receiver,
    template: Option<&Template>,
    notification: &Notification,
) -> Result<Vec<u8>, String> {
    let text = match template {
        Some(template) => Some(template.render(&receiver.name, notification).await?),
        None => None,
    };
    match (receiver.format, text) {
        (Format::Json, Some(text)) => Ok(text.into_bytes()),
        (_, text) => {
            serde_json::to_vec(&body(receiver, notification, text)).map_err(|e| e.to_string())
        }
    }
}

/// One POST; a 2xx answer is a delivery.
async fn post(client: &reqwest::Client, receiver: &Receiver, body: Vec<u8>) -> Result<(), Failure> {
    let mut request = client
        .post(receiver.url.clone())
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in &receiver.headers {
        request = request.header(name, value);
    }
    let mut response = request
        .body(body)
        .send()
        .await
        // Without the URL: Slack's and Teams' URLs are secrets.
        .map_err(|e| Failure::Transport(e.without_url().to_string()))?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let retry_after = backoff::retry_after(response.headers());
    // Only what is logged is read: a receiver's error page can be of any size.
    let mut bytes = Vec::new();
    while bytes.len() < 4 * MAX_ANSWER {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    let answer: String = String::from_utf8_lossy(&bytes)
        .chars()
        .take(MAX_ANSWER)
        .collect();
    let answer = answer.split_whitespace().collect::<Vec<_>>().join(" ");
    Err(Failure::Status {
        status,
        answer,
        retry_after,
    })
}
