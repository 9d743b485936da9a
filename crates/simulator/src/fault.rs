//! Fault injection: what can go wrong between a client and IMDS, and the queue that decides which
//! request meets which fault.
//!
//! A [`Fault`] is read from the same JSON by the control API and built by Rust callers, e.g.
//! `{"kind":"status","status":503,"count":2}` or `Fault::status(503).times(2)`. Faults queue in
//! order of injection; each request takes the first fault aimed at its endpoint. The queue is pure
//! data: performing the fault (sleeping, dropping the connection) is the HTTP layer's job.

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::scenario::HumanDuration;

/// One injected fault: what happens, to which endpoint, for how many requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "FaultSpec", into = "FaultSpec")]
pub struct Fault {
    pub action: FaultAction,
    pub target: FaultTarget,
    pub count: FaultCount,
}

/// What the client sees instead of the normal answer.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultAction {
    /// Answer with this status. Without `body`, the body is IMDS-style JSON
    /// `{"error":"<reason phrase>"}`; `retry_after` (seconds) adds a `Retry-After` header.
    Status {
        status: u16,
        body: Option<String>,
        content_type: Option<String>,
        retry_after: Option<u64>,
    },
    /// Wait this long, then process the request and answer normally.
    Delay(Duration),
    /// 200 with a body that is not JSON.
    Garbage,
    /// 200 with the normal JSON cut in half (`Content-Length` matches the cut body).
    Truncated,
    /// Read the request, then close the connection without any response.
    Drop,
}

impl FaultAction {
    /// The fault's `kind`, as written in its JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            FaultAction::Status { .. } => "status",
            FaultAction::Delay(_) => "delay",
            FaultAction::Garbage => "garbage",
            FaultAction::Truncated => "truncated",
            FaultAction::Drop => "drop",
        }
    }
}

/// Which requests a fault applies to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultTarget {
    /// `/metadata/scheduledevents`, GET and POST.
    #[default]
    #[serde(alias = "scheduledevents")]
    ScheduledEvents,
    /// Only approvals: `POST /metadata/scheduledevents`. GETs of the document pass untouched.
    Approvals,
    /// `/metadata/instance` and below.
    Instance,
    /// Every IMDS request.
    All,
}

/// What a request is, as far as faults are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// Any request to `/metadata/scheduledevents` but a POST (a GET of the document, or a wrong
    /// method).
    ScheduledEvents,
    /// `POST /metadata/scheduledevents`: an approval.
    Approval,
    Instance,
}

impl FaultTarget {
    pub fn hits(self, endpoint: Endpoint) -> bool {
        match self {
            FaultTarget::All => true,
            FaultTarget::ScheduledEvents => {
                matches!(endpoint, Endpoint::ScheduledEvents | Endpoint::Approval)
            }
            FaultTarget::Approvals => endpoint == Endpoint::Approval,
            FaultTarget::Instance => endpoint == Endpoint::Instance,
        }
    }
}

/// How many requests a fault affects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultCount {
    /// This many more requests (at least 1).
    Requests(u32),
    /// Every request until the faults are cleared.
    UntilCleared,
}

impl Fault {
    fn new(action: FaultAction) -> Self {
        Fault {
            action,
            target: FaultTarget::ScheduledEvents,
            count: FaultCount::Requests(1),
        }
    }

    /// Answer with this HTTP status and an IMDS-style JSON error body.
    pub fn status(status: u16) -> Self {
        Self::new(FaultAction::Status {
            status,
            body: None,
            content_type: None,
            retry_after: None,
        })
    }

    /// Wait, then answer normally.
    pub fn delay(delay: Duration) -> Self {
        Self::new(FaultAction::Delay(delay))
    }

    /// 200 with a body that is not JSON.
    pub fn garbage() -> Self {
        Self::new(FaultAction::Garbage)
    }

    /// 200 with the JSON cut in half.
    pub fn truncated() -> Self {
        Self::new(FaultAction::Truncated)
    }

    /// Close the connection without answering.
    pub fn drop_connection() -> Self {
        Self::new(FaultAction::Drop)
    }

    /// Affect this many requests (0 is treated as 1).
    pub fn times(mut self, count: u32) -> Self {
        self.count = FaultCount::Requests(count.max(1));
        self
    }

    /// Affect every request until the faults are cleared.
    pub fn until_cleared(mut self) -> Self {
        self.count = FaultCount::UntilCleared;
        self
    }

    /// Aim the fault at another endpoint.
    pub fn on(mut self, target: FaultTarget) -> Self {
        self.target = target;
        self
    }

    /// For a status fault: answer with this body instead (an IIS HTML page, say).
    pub fn with_body(mut self, text: impl Into<String>) -> Self {
        if let FaultAction::Status { body, .. } = &mut self.action {
            *body = Some(text.into());
        }
        self
    }

    /// For a status fault: add `Retry-After: <seconds>`.
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        if let FaultAction::Status { retry_after, .. } = &mut self.action {
            *retry_after = Some(seconds);
        }
        self
    }
}

/// Faults waiting for requests, in order of injection.
#[derive(Debug, Clone, Default)]
pub struct FaultQueue {
    faults: VecDeque<Fault>,
}

impl FaultQueue {
    pub fn push(&mut self, fault: Fault) {
        self.faults.push_back(fault);
    }

    pub fn clear(&mut self) {
        self.faults.clear();
    }

    /// The faults still to come, with their remaining counts.
    pub fn pending(&self) -> Vec<Fault> {
        self.faults.iter().cloned().collect()
    }

    /// The fault that a request to `endpoint` meets, if any, using up one of its count. A fault
    /// that lasts until cleared stays first in line, so later faults for that endpoint wait.
    pub fn take(&mut self, endpoint: Endpoint) -> Option<FaultAction> {
        let index = self.faults.iter().position(|f| f.target.hits(endpoint))?;
        let fault = self.faults.get_mut(index)?;
        let action = fault.action.clone();
        match fault.count {
            FaultCount::UntilCleared => {}
            FaultCount::Requests(n) if n > 1 => fault.count = FaultCount::Requests(n - 1),
            FaultCount::Requests(_) => {
                self.faults.remove(index);
            }
        }
        Some(action)
    }
}

/// The JSON shape of a fault: flat, so that `{"kind":"status","status":503}` reads naturally,
/// and strict, so that a misspelt field is an error rather than a silently different fault.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FaultSpec {
    kind: FaultKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    retry_after: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delay: Option<HumanDuration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    count: Option<u32>,
    #[serde(default, skip_serializing_if = "is_false")]
    until_cleared: bool,
    #[serde(default)]
    target: FaultTarget,
}

fn is_false(value: &bool) -> bool {
    !*value
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum FaultKind {
    Status,
    Delay,
    Garbage,
    Truncated,
    Drop,
}

impl TryFrom<FaultSpec> for Fault {
    type Error = String;

    fn try_from(spec: FaultSpec) -> Result<Self, String> {
        let kind = spec.kind;
        let not_for = |field: &str, given: bool| {
            if given {
                Err(format!("`{field}` does not apply to a {kind:?} fault").to_lowercase())
            } else {
                Ok(())
            }
        };
        if kind != FaultKind::Status {
            not_for("status", spec.status.is_some())?;
            not_for("body", spec.body.is_some())?;
            not_for("content_type", spec.content_type.is_some())?;
            not_for("retry_after", spec.retry_after.is_some())?;
        }
        if kind != FaultKind::Delay {
            not_for("delay", spec.delay.is_some())?;
        }
        let action = match kind {
            FaultKind::Status => {
                let status = spec
                    .status
                    .ok_or("a status fault needs `status`, e.g. 503")?;
                if !(200..=999).contains(&status) {
                    return Err(format!("`status` must be from 200 to 999, not {status}"));
                }
                if let Some(content_type) = &spec.content_type
                    && !content_type.bytes().all(|b| (0x20..0x7f).contains(&b))
                {
                    return Err("`content_type` must be printable ASCII".into());
                }
                FaultAction::Status {
                    status,
                    body: spec.body,
                    content_type: spec.content_type,
                    retry_after: spec.retry_after,
                }
            }
            FaultKind::Delay => FaultAction::Delay(
                spec.delay
                    .ok_or("a delay fault needs `delay`, e.g. \"3s\"")?
                    .0,
            ),
            FaultKind::Garbage => FaultAction::Garbage,
            FaultKind::Truncated => FaultAction::Truncated,
            FaultKind::Drop => FaultAction::Drop,
        };
        let count = match (spec.count, spec.until_cleared) {
            (Some(_), true) => {
                return Err("give either `count` or `until_cleared`, not both".into());
            }
            (Some(0), false) => return Err("`count` must be at least 1".into()),
            (Some(n), false) => FaultCount::Requests(n),
            (None, false) => FaultCount::Requests(1),
            (None, true) => FaultCount::UntilCleared,
        };
        Ok(Fault {
            action,
            target: spec.target,
            count,
        })
    }
}

impl From<Fault> for FaultSpec {
    fn from(fault: Fault) -> Self {
        let mut spec = FaultSpec {
            kind: FaultKind::Status,
            status: None,
            body: None,
            content_type: None,
            retry_after: None,
            delay: None,
            count: None,
            until_cleared: false,
            target: fault.target,
        };
        match fault.count {
            FaultCount::Requests(n) => spec.count = Some(n),
            FaultCount::UntilCleared => spec.until_cleared = true,
        }
        match fault.action {
            FaultAction::Status {
                status,
                body,
                content_type,
                retry_after,
            } => {
                spec.status = Some(status);
                spec.body = body;
                spec.content_type = content_type;
                spec.retry_after = retry_after;
            }
            FaultAction::Delay(delay) => {
                spec.kind = FaultKind::Delay;
                spec.delay = Some(HumanDuration(delay));
            }
            FaultAction::Garbage => spec.kind = FaultKind::Garbage,
            FaultAction::Truncated => spec.kind = FaultKind::Truncated,
            FaultAction::Drop => spec.kind = FaultKind::Drop,
        }
        spec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn parse(json: &str) -> Result<Fault, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn a_status_fault_reads_from_json_with_defaults() -> TestResult {
        let fault = parse(r#"{"kind":"status","status":503,"count":2}"#)?;
        assert_eq!(fault, Fault::status(503).times(2));
        let fault = parse(r#"{"kind":"status","status":429,"retry_after":3}"#)?;
        assert_eq!(fault, Fault::status(429).with_retry_after(3));
        assert_eq!(fault.count, FaultCount::Requests(1));
        assert_eq!(fault.target, FaultTarget::ScheduledEvents);
        Ok(())
    }

    #[test]
    fn every_kind_reads_from_json() -> TestResult {
        assert_eq!(
            parse(r#"{"kind":"delay","delay":"3s"}"#)?,
            Fault::delay(Duration::from_secs(3))
        );
        assert_eq!(
            parse(r#"{"kind":"garbage","target":"all"}"#)?,
            Fault::garbage().on(FaultTarget::All)
        );
        assert_eq!(
            parse(r#"{"kind":"truncated","target":"instance"}"#)?,
            Fault::truncated().on(FaultTarget::Instance)
        );
        assert_eq!(
            parse(r#"{"kind":"drop","until_cleared":true}"#)?,
            Fault::drop_connection().until_cleared()
        );
        Ok(())
    }

    #[test]
    fn faults_with_missing_misspelt_or_misplaced_fields_are_rejected() -> TestResult {
        for bad in [
            r#"{"kind":"status"}"#,
            r#"{"kind":"status","status":99}"#,
            r#"{"kind":"status","status":503,"cuont":2}"#,
            r#"{"kind":"delay"}"#,
            r#"{"kind":"delay","delay":"soon"}"#,
            r#"{"kind":"garbage","status":500}"#,
            r#"{"kind":"drop","count":0}"#,
            r#"{"kind":"drop","count":2,"until_cleared":true}"#,
            r#"{"kind":"explode"}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad} was accepted");
        }
        Ok(())
    }

    #[test]
    fn faults_serialise_back_to_the_json_they_came_from() -> TestResult {
        let fault = Fault::status(500).with_body("<html/>").times(3);
        let json = serde_json::to_string(&fault)?;
        assert_eq!(parse(&json)?, fault);
        Ok(())
    }

    #[test]
    fn the_queue_serves_faults_in_order_and_uses_up_their_counts() -> TestResult {
        let mut queue = FaultQueue::default();
        queue.push(Fault::status(503).times(2));
        queue.push(Fault::garbage());
        let status = |q: &mut FaultQueue| q.take(Endpoint::ScheduledEvents);
        assert!(matches!(
            status(&mut queue),
            Some(FaultAction::Status { status: 503, .. })
        ));
        assert!(matches!(
            status(&mut queue),
            Some(FaultAction::Status { status: 503, .. })
        ));
        assert_eq!(status(&mut queue), Some(FaultAction::Garbage));
        assert_eq!(status(&mut queue), None);
        Ok(())
    }

    #[test]
    fn faults_only_hit_their_target() -> TestResult {
        let mut queue = FaultQueue::default();
        queue.push(Fault::drop_connection().on(FaultTarget::Instance));
        queue.push(Fault::garbage());
        assert_eq!(
            queue.take(Endpoint::ScheduledEvents),
            Some(FaultAction::Garbage)
        );
        assert_eq!(queue.take(Endpoint::ScheduledEvents), None);
        assert_eq!(queue.take(Endpoint::Instance), Some(FaultAction::Drop));
        queue.push(Fault::truncated().on(FaultTarget::All));
        assert_eq!(queue.take(Endpoint::Instance), Some(FaultAction::Truncated));
        Ok(())
    }

    #[test]
    fn an_approvals_fault_waits_for_a_post_and_lets_gets_pass() -> TestResult {
        let mut queue = FaultQueue::default();
        queue.push(Fault::status(500).times(2).on(FaultTarget::Approvals));
        queue.push(Fault::garbage());
        assert_eq!(
            queue.take(Endpoint::ScheduledEvents),
            Some(FaultAction::Garbage),
            "a GET skips the approvals fault and meets the next one"
        );
        assert_eq!(queue.take(Endpoint::ScheduledEvents), None);
        assert_eq!(queue.take(Endpoint::Instance), None);
        for _ in 0..2 {
            assert!(matches!(
                queue.take(Endpoint::Approval),
                Some(FaultAction::Status { status: 500, .. })
            ));
        }
        assert_eq!(queue.take(Endpoint::Approval), None);
        // A fault on the whole endpoint still hits approvals.
        queue.push(Fault::drop_connection());
        assert_eq!(queue.take(Endpoint::Approval), Some(FaultAction::Drop));
        assert_eq!(
            parse(r#"{"kind":"status","status":500,"target":"approvals"}"#)?,
            Fault::status(500).on(FaultTarget::Approvals)
        );
        Ok(())
    }

    #[test]
    fn a_fault_until_cleared_stays_until_cleared() -> TestResult {
        let mut queue = FaultQueue::default();
        queue.push(Fault::status(500).until_cleared());
        queue.push(Fault::garbage());
        for _ in 0..10 {
            assert!(matches!(
                queue.take(Endpoint::ScheduledEvents),
                Some(FaultAction::Status { status: 500, .. })
            ));
        }
        queue.clear();
        assert_eq!(queue.take(Endpoint::ScheduledEvents), None);
        Ok(())
    }
}
