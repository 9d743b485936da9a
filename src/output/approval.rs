//! The approval output: sends the approvals the core decided (`POST StartRequests`).
//!
//! POSTs leave from a task of their own, one at a time, so an IMDS that takes seconds to answer
//! one never delays the next GET. The queue is bounded; an approval that does not fit is not
//! sent and is reported back as failed (`queue_full`), so the core retries it with backoff. An
//! approval whose attempt the state output could not write is not sent either, ever: it is
//! reported back as refused (`state_unwritable`), and the event waits for its NotBefore. Each
//! answer is reported back ([`Report::Posted`]); the IMDS client records the request's figures,
//! as it does for every request it sends.

use std::time::Duration;

use azure_scheduled_events_core::approval::{PostFailure, PostReason, Rule};
use azure_scheduled_events_core::event::Event;
use azure_scheduled_events_core::occurrence::{Context, Occurrence, Report};
use reqwest::StatusCode;
use tokio::sync::mpsc;

use crate::azure::imds::{ImdsClient, ImdsError};

use super::state::Persisted;
use super::{Output, Reports};

/// Approvals waiting to be sent at most. The core has at most one POST per event under way, and
/// a document holds a handful of events.
const QUEUE: usize = 64;

#[derive(Debug)]
struct Post {
    event: Event,
    rule: Rule,
    attempts: u32,
}

#[derive(Debug)]
pub struct Approval {
    posts: mpsc::Sender<Post>,
    persisted: Persisted,
    reports: Reports,
}

impl Approval {
    /// Starts the sending task on the current runtime; it sends only what `persisted` says is on
    /// disk.
    pub fn start(
        client: ImdsClient,
        timeout: Duration,
        persisted: Persisted,
        reports: Reports,
    ) -> Self {
        let (posts, mut queue) = mpsc::channel::<Post>(QUEUE);
        let answers = reports.clone();
        tokio::spawn(async move {
            while let Some(Post {
                event,
                rule,
                attempts,
            }) = queue.recv().await
            {
                let result = client.approve(&event.id, timeout).await;
                let report = Report::Posted {
                    event,
                    rule,
                    attempts,
                    result: result.map_err(|error| PostFailure {
                        reason: PostReason::Imds(error.kind()),
                        refused: is_refusal(&error),
                        error: error.to_string(),
                    }),
                };
                if answers.send(report).is_err() {
                    break;
                }
            }
        });
        Self {
            posts,
            persisted,
            reports,
        }
    }
}

impl Output for Approval {
    fn consume(&mut self, _context: &Context, occurrences: &[Occurrence]) {
        for occurrence in occurrences {
            if let Occurrence::ApprovalSending {
                event,
                rule,
                attempts,
            } = occurrence
            {
                if let Some(error) = self.persisted.borrow().as_deref() {
                    let _ = self.reports.send(Report::Posted {
                        event: event.clone(),
                        rule: *rule,
                        attempts: *attempts,
                        result: Err(PostFailure {
                            reason: PostReason::StateUnwritable,
                            error: format!(
                                "the attempt cannot be written to the state file: {error}"
                            ),
                            refused: true,
                        }),
                    });
                    continue;
                }
                let post = Post {
                    event: event.clone(),
                    rule: *rule,
                    attempts: *attempts,
                };
                if let Err(error) = self.posts.try_send(post) {
                    let Post {
                        event,
                        rule,
                        attempts,
                    } = error.into_inner();
                    let _ = self.reports.send(Report::Posted {
                        event,
                        rule,
                        attempts,
                        result: Err(PostFailure {
                            reason: PostReason::QueueFull,
                            error: format!("{QUEUE} approvals already waiting to be sent"),
                            refused: false,
                        }),
                    });
                }
            }
        }
    }
}

/// A 4xx other than 429 (slow down) and 410 (come back later), or a redirect: sending the same
/// request again cannot succeed.
fn is_refusal(error: &ImdsError) -> bool {
    matches!(error, ImdsError::Status { status, .. }
        if *status != StatusCode::TOO_MANY_REQUESTS
            && *status != StatusCode::GONE
            && (status.is_client_error() || status.is_redirection()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_refusals_stop_retries() {
        let status = |code: u16| ImdsError::Status {
            status: StatusCode::from_u16(code).unwrap_or(StatusCode::IM_A_TEAPOT),
            retry_after: None,
            body: String::new(),
        };
        for code in [400, 403, 404, 405, 302] {
            assert!(is_refusal(&status(code)), "{code}");
        }
        for code in [410, 429, 500, 503] {
            assert!(!is_refusal(&status(code)), "{code}");
        }
        assert!(!is_refusal(&ImdsError::Timeout(Duration::from_secs(1))));
        assert!(!is_refusal(&ImdsError::Connect("refused".into())));
    }
}
