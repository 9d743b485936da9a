//! Approving events: the shell around the pure [`policy`] and [`takeover`] rules.
//!
//! After each valid document the poll loop calls [`Approver::after_document`], which asks the
//! policy about every event, starts the approval hook ([`hook`]) where one is configured, POSTs
//! `StartRequests` for events that are ready, and returns every decision as one [`Decision`]
//! value: the loop turns each into one log line and its counters in one place. Nothing is POSTed
//! unless the mode is [`Mode::On`]; in [`Mode::DryRun`] the same decisions are made, logged and
//! counted, and neither the approval hook runs nor anything is sent.
//!
//! Safety rules, in the order they apply: the policy never approves an event of another VM, or
//! one that has started; once IMDS has accepted an EventId it is never POSTed again, also across
//! restarts, because each attempt is written to the state file before the request leaves (an
//! attempt in flight when the agent died counts as accepted); a POST that failed on the way
//! (timeout, connection, 5xx, 429, 410) is retried with backoff while the event is still Scheduled
//! and allowed (a timed-out one may have arrived: Azure answers 200 to a repeated approval); one
//! refused (other 4xx) is never sent again. Hooks run in their own tasks, so the loop keeps
//! polling while they do.

pub mod hook;
pub mod policy;
pub mod takeover;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use tokio::sync::mpsc;

use crate::event::{Affects, Event, EventId};
use crate::imds::{ImdsClient, ImdsError, Operation};
use crate::metrics::Metrics;
use crate::state::{ApprovalRecord, ApprovalStatus, State, StateStore};
use crate::trace_id::trace_id;
use crate::tracker::{Tracked, Transition};

pub use crate::config::approval::{ApprovalConfig, DEFAULT_HOOK_TIMEOUT, Mode};
pub use hook::{HookCommand, HookFailure, HookKind, HookRun};
pub use policy::{Policy, Rule, SkipReason, Verdict, WaitReason, When};

/// First wait before retrying a failed POST; it doubles per attempt up to [`RETRY_MAX`].
pub const RETRY_FIRST: Duration = Duration::from_secs(1);
/// Longest wait between two attempts of one POST.
pub const RETRY_MAX: Duration = Duration::from_secs(30);
/// Approval POSTs sent after one poll at most: with the poll's GET, this keeps the agent under
/// IMDS's limit of 5 requests per second at the default 1 s poll.
pub const MAX_POSTS_PER_POLL: usize = 3;

/// One decision about one event: the value that becomes a log line, counters and (with traces)
/// a span event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub event: Event,
    pub outcome: Outcome,
}

/// What was decided or what happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// IMDS accepted the approval.
    Approved {
        rule: Rule,
        attempts: u32,
    },
    /// Dry run: the event would have been approved now.
    DryRun {
        rule: Rule,
    },
    /// Allowed, but not yet.
    Waiting {
        rule: Rule,
        until: DateTime<Utc>,
        reason: WaitReason,
    },
    Skipped(SkipReason),
    /// A hook was started for the event.
    HookStarted(HookKind),
    /// A hook finished; for the approval hook a failure means the event is left for NotBefore.
    HookFinished(HookRun),
    /// The POST failed; `retry_at` is when it is tried again, `None` when it never is.
    PostFailed {
        reason: &'static str,
        error: String,
        retry_at: Option<DateTime<Utc>>,
    },
}

impl Outcome {
    /// The `decision` and `reason` labels of `..._approval_decisions_total`, for outcomes that
    /// are approval decisions (hook starts and prepare/recover hooks are not).
    pub fn decision(&self) -> Option<(&'static str, &'static str)> {
        Some(match self {
            Outcome::Approved { rule, .. } => ("approved", rule.as_str()),
            Outcome::DryRun { rule } => ("dry_run", rule.as_str()),
            Outcome::Waiting { reason, .. } => ("waiting", reason.as_str()),
            Outcome::Skipped(reason) => ("skipped", reason.as_str()),
            Outcome::HookFinished(HookRun {
                kind: HookKind::Approve,
                result: Err(failure),
                ..
            }) => ("hook_failed", failure.kind()),
            Outcome::PostFailed { reason, .. } => ("post_failed", reason),
            Outcome::HookStarted(_) | Outcome::HookFinished(_) => return None,
        })
    }

    /// The `reason` of `..._approval_failures_total`, for outcomes that are failures to approve.
    pub fn failure(&self) -> Option<&'static str> {
        match self {
            Outcome::HookFinished(HookRun {
                kind: HookKind::Approve,
                result: Err(failure),
                ..
            }) => Some(failure.kind()),
            Outcome::PostFailed { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// Every (decision, reason) pair, for pre-creating series.
    pub fn decision_labels() -> Vec<(&'static str, &'static str)> {
        let mut labels = Vec::new();
        for rule in Rule::ALL {
            labels.push(("approved", rule.as_str()));
            labels.push(("dry_run", rule.as_str()));
        }
        for reason in [
            WaitReason::BeforeNotBefore,
            WaitReason::Takeover { rank: 1 },
        ] {
            labels.push(("waiting", reason.as_str()));
        }
        for reason in SkipReason::ALL {
            labels.push(("skipped", reason.as_str()));
        }
        for reason in HookFailure::KINDS {
            labels.push(("hook_failed", reason));
        }
        for reason in ImdsError::KINDS {
            labels.push(("post_failed", reason));
        }
        labels
    }

    /// Every `reason` of `..._approval_failures_total`.
    pub fn failure_reasons() -> impl Iterator<Item = &'static str> {
        HookFailure::KINDS.into_iter().chain(ImdsError::KINDS)
    }
}

impl Decision {
    /// The decision's one log line. Skips of other VMs' events are at debug level: a scale set
    /// delivers every VM's events to every VM.
    pub fn log(&self, vm_name: Option<&str>) {
        let event = &self.event;
        let event_id = event.id.as_str();
        let trace_id = trace_id(event_id);
        let event_type = event.event_type.as_str();
        let event_status = event.status.as_str();
        let affects_this_vm = event.affects(vm_name).as_str();
        let not_before = event.not_before.raw();
        let (decision, reason) = self.outcome.decision().unwrap_or(("", ""));
        macro_rules! line {
            ($level:ident, $($rest:tt)*) => {
                tracing::$level!(
                    event_id, trace_id = %trace_id, event_type, event_status, not_before,
                    affects_this_vm, vm_name, decision, reason, $($rest)*
                )
            };
        }
        match &self.outcome {
            Outcome::Approved { attempts, .. } => {
                line!(info, attempts, "event approved")
            }
            Outcome::DryRun { .. } => line!(info, "dry run: event would be approved now"),
            Outcome::Waiting { until, .. } => {
                line!(info, until = %until.to_rfc3339(), "event allowed for approval, waiting")
            }
            Outcome::Skipped(SkipReason::NotThisVm) => {
                line!(debug, "event not approved: it does not name this VM")
            }
            Outcome::Skipped(skip) => line!(info, "event not approved: {}", skip.as_str()),
            Outcome::HookStarted(kind) => line!(info, hook = kind.as_str(), "hook started"),
            Outcome::HookFinished(run) => {
                let hook = run.kind.as_str();
                let elapsed_seconds = run.elapsed.as_secs_f64();
                let (stdout, stderr) = (run.stdout.as_str(), run.stderr.as_str());
                match &run.result {
                    Ok(()) => line!(
                        info,
                        hook,
                        elapsed_seconds,
                        stdout,
                        stderr,
                        "hook succeeded"
                    ),
                    Err(failure) if run.kind == HookKind::Approve => line!(
                        warn,
                        hook,
                        elapsed_seconds,
                        stdout,
                        stderr,
                        error = %failure,
                        "approval hook failed: event not approved, left for NotBefore"
                    ),
                    Err(failure) => line!(
                        warn,
                        hook,
                        elapsed_seconds,
                        stdout,
                        stderr,
                        error = %failure,
                        "hook failed"
                    ),
                }
            }
            Outcome::PostFailed {
                error, retry_at, ..
            } => match retry_at {
                Some(at) => line!(
                    warn,
                    error = error.as_str(),
                    retry_at = %at.to_rfc3339(),
                    "approval POST failed, retrying while the event is Scheduled"
                ),
                None => line!(
                    error,
                    error = error.as_str(),
                    "approval POST refused: not sent again"
                ),
            },
        }
    }
}

/// How far one event has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Asking the policy at each document; the last verdict reported.
    Deciding(Option<Verdict>),
    HookRunning,
    /// The approval hook succeeded: POST once the policy still says so.
    Ready,
    /// A POST failed on the way: try again at this time.
    Retry(DateTime<Utc>),
    /// Nothing more to do for this event.
    Done,
}

type Finished = (EventId, Event, HookRun);

/// The approval state of the running agent.
#[derive(Debug)]
pub struct Approver {
    config: ApprovalConfig,
    progress: HashMap<EventId, Progress>,
    /// Events whose approval hook is running, also after they left the document.
    hooks_running: HashSet<EventId>,
    finished_tx: mpsc::UnboundedSender<Finished>,
    finished_rx: mpsc::UnboundedReceiver<Finished>,
}

impl Approver {
    pub fn new(config: ApprovalConfig) -> Self {
        let (finished_tx, finished_rx) = mpsc::unbounded_channel();
        Self {
            config,
            progress: HashMap::new(),
            hooks_running: HashSet::new(),
            finished_tx,
            finished_rx,
        }
    }

    pub fn config(&self) -> &ApprovalConfig {
        &self.config
    }

    /// Hooks that finished since the last call.
    pub fn finished_hooks(&mut self) -> Vec<Decision> {
        let mut decisions = Vec::new();
        while let Ok((id, event, run)) = self.finished_rx.try_recv() {
            if run.kind == HookKind::Approve {
                self.hooks_running.remove(&id);
                if let Some(progress) = self.progress.get_mut(&id)
                    && *progress == Progress::HookRunning
                {
                    *progress = if run.result.is_ok() {
                        Progress::Ready
                    } else {
                        Progress::Done
                    };
                }
            }
            decisions.push(Decision {
                event,
                outcome: Outcome::HookFinished(run),
            });
        }
        decisions
    }

    /// Starts the prepare and recover hooks for a valid document: prepare for events of this VM
    /// that appeared, recover for those that completed or were cancelled. `previous` is the state
    /// before this document: an event it already knew (from before a restart) is not prepared
    /// again, and at the `first_document` after a start, its events of this VM that are gone
    /// were completed while the agent was away and are recovered.
    pub fn hooks_for_document<'a>(
        &mut self,
        transitions: impl IntoIterator<Item = &'a Transition>,
        events: &[Tracked],
        vm: Option<&str>,
        previous: &State,
        first_document: bool,
    ) -> Vec<Decision> {
        let mut decisions = Vec::new();
        if first_document && let Some(command) = &self.config.recover_hook {
            for known in previous
                .gone_from(events)
                .filter(|known| known.affects_this_vm)
            {
                let event = known.to_event(vm);
                self.spawn_hook(command, HookKind::Recover, &event, vm);
                decisions.push(Decision {
                    event,
                    outcome: Outcome::HookStarted(HookKind::Recover),
                });
            }
        }
        for transition in transitions {
            let event = transition.event();
            let (kind, command) = match transition {
                Transition::Appeared(_) if previous.known(event.id.as_str()).is_some() => {
                    continue;
                }
                Transition::Appeared(_) => (HookKind::Prepare, &self.config.prepare_hook),
                Transition::Completed { .. } | Transition::Cancelled(_) => {
                    (HookKind::Recover, &self.config.recover_hook)
                }
                Transition::Started(_) | Transition::Updated { .. } => continue,
            };
            if let Some(command) = command
                && event.affects(vm) == Affects::Yes
            {
                self.spawn_hook(command, kind, event, vm);
                decisions.push(Decision {
                    event: event.clone(),
                    outcome: Outcome::HookStarted(kind),
                });
            }
        }
        decisions
    }

    fn spawn_hook(&self, command: &HookCommand, kind: HookKind, event: &Event, vm: Option<&str>) {
        let (command, event, vm) = (command.clone(), event.clone(), vm.map(str::to_owned));
        let timeout = self.config.hook_timeout;
        let finished = self.finished_tx.clone();
        tokio::spawn(async move {
            let run = hook::run(&command, kind, &event, vm.as_deref(), timeout).await;
            // The receiver lives as long as the agent; after it stops nobody needs the result.
            let _ = finished.send((event.id.clone(), event, run));
        });
    }

    /// Decides about every event of a valid document read at `now`, POSTing approvals that are
    /// due. `store` holds the approvals sent, also those of previous runs.
    pub async fn after_document(
        &mut self,
        events: &[Tracked],
        vm: Option<&str>,
        now: DateTime<Utc>,
        imds: &Imds<'_>,
        store: &mut StateStore,
    ) -> Vec<Decision> {
        let mut decisions = Vec::new();
        if self.config.mode == Mode::Off {
            return decisions;
        }
        let present: HashSet<&EventId> = events.iter().map(|t| &t.event.id).collect();
        self.progress.retain(|id, _| present.contains(id));
        let remembered: HashMap<&str, DateTime<Utc>> = store
            .state()
            .events
            .iter()
            .map(|known| (known.event_id.as_str(), known.first_seen))
            .collect();
        let mut due = Vec::new();
        for tracked in events {
            let event = &tracked.event;
            if self.progress.get(&event.id) == Some(&Progress::Done) {
                continue;
            }
            let first_seen = remembered
                .get(event.id.as_str())
                .copied()
                .unwrap_or(tracked.first_seen);
            let verdict = self.config.policy.verdict(event, vm, first_seen, now);
            let progress = match self.progress.get(&event.id) {
                Some(progress) => *progress,
                None => match store.state().approvals.get(event.id.as_str()) {
                    Some(record) if record.status.is_final() => {
                        let reason = match record.status {
                            ApprovalStatus::Rejected => SkipReason::Rejected,
                            _ => SkipReason::AlreadyApproved,
                        };
                        decisions.push(Decision {
                            event: event.clone(),
                            outcome: Outcome::Skipped(reason),
                        });
                        Progress::Done
                    }
                    Some(_) => Progress::Retry(now),
                    None if self.hooks_running.contains(&event.id) => Progress::HookRunning,
                    None => Progress::Deciding(None),
                },
            };
            let next = match (progress, verdict) {
                (Progress::Done | Progress::HookRunning, _) => progress,
                (Progress::Deciding(_), Verdict::Approve(rule)) => match self.config.mode {
                    Mode::DryRun => {
                        decisions.push(Decision {
                            event: event.clone(),
                            outcome: Outcome::DryRun { rule },
                        });
                        Progress::Done
                    }
                    _ => match &self.config.hook {
                        Some(command) => {
                            self.spawn_hook(command, HookKind::Approve, event, vm);
                            self.hooks_running.insert(event.id.clone());
                            decisions.push(Decision {
                                event: event.clone(),
                                outcome: Outcome::HookStarted(HookKind::Approve),
                            });
                            Progress::HookRunning
                        }
                        None => {
                            due.push((event.clone(), rule));
                            progress
                        }
                    },
                },
                (Progress::Ready, Verdict::Approve(rule)) => {
                    due.push((event.clone(), rule));
                    progress
                }
                (Progress::Retry(at), Verdict::Approve(rule)) => {
                    if now >= at {
                        due.push((event.clone(), rule));
                    }
                    progress
                }
                (Progress::Deciding(last), other) => {
                    if last != Some(other) {
                        decisions.push(Decision {
                            event: event.clone(),
                            outcome: outcome_of(other),
                        });
                    }
                    if other == Verdict::Skip(SkipReason::Started) {
                        // An event never goes back from Started: nothing more to decide.
                        Progress::Done
                    } else {
                        Progress::Deciding(Some(other))
                    }
                }
                // Ready or retrying, and the policy no longer approves now.
                (Progress::Ready | Progress::Retry(_), Verdict::Wait { .. }) => progress,
                (Progress::Ready | Progress::Retry(_), Verdict::Skip(reason)) => {
                    decisions.push(Decision {
                        event: event.clone(),
                        outcome: Outcome::Skipped(reason),
                    });
                    Progress::Done
                }
            };
            match self.progress.get_mut(&event.id) {
                Some(progress) => *progress = next,
                None => {
                    self.progress.insert(event.id.clone(), next);
                }
            }
        }
        // Events left out keep their progress and are sent at a following poll.
        due.truncate(MAX_POSTS_PER_POLL);
        for (event, rule) in due {
            let decision = self.post(event, rule, now, imds, store).await;
            let timed_out = matches!(
                decision.outcome,
                Outcome::PostFailed {
                    reason: "timeout",
                    ..
                }
            );
            decisions.push(decision);
            if timed_out {
                // IMDS is not answering: do not hold the poll loop for every remaining POST.
                break;
            }
        }
        decisions
    }

    /// Sends one approval, writing the attempt to the state file first.
    async fn post(
        &mut self,
        event: Event,
        rule: Rule,
        now: DateTime<Utc>,
        imds: &Imds<'_>,
        store: &mut StateStore,
    ) -> Decision {
        let id = event.id.as_str().to_owned();
        let attempts = store
            .state()
            .approvals
            .get(&id)
            .map_or(0, |r| r.attempts)
            .saturating_add(1);
        store.state_mut().approvals.insert(
            id.clone(),
            ApprovalRecord {
                event_type: event.event_type.as_str().to_owned(),
                at: now,
                status: ApprovalStatus::Sending,
                attempts,
            },
        );
        store.flush();
        let started = tokio::time::Instant::now();
        let result = imds.client.approve(&event.id, imds.timeout).await;
        imds.metrics
            .record_request(Operation::Approve, started.elapsed(), result.as_ref().err());
        let (status, progress, outcome) = match result {
            Ok(()) => (
                ApprovalStatus::Sent,
                Progress::Done,
                Outcome::Approved { rule, attempts },
            ),
            Err(error) if is_refusal(&error) => (
                ApprovalStatus::Rejected,
                Progress::Done,
                Outcome::PostFailed {
                    reason: error.kind(),
                    error: error.to_string(),
                    retry_at: None,
                },
            ),
            Err(error) => {
                let at = now + policy::chrono_duration(retry_delay(attempts));
                (
                    ApprovalStatus::Failed,
                    Progress::Retry(at),
                    Outcome::PostFailed {
                        reason: error.kind(),
                        error: error.to_string(),
                        retry_at: Some(at),
                    },
                )
            }
        };
        if let Some(record) = store.state_mut().approvals.get_mut(&id) {
            record.status = status;
        }
        store.flush();
        self.progress.insert(event.id.clone(), progress);
        Decision { event, outcome }
    }
}

/// What the approver needs to POST: the client, its timeout, and the metrics for the request.
#[derive(Debug)]
pub struct Imds<'a> {
    pub client: &'a ImdsClient,
    pub timeout: Duration,
    pub metrics: &'a Metrics,
}

/// An event known only from the state file (it left the document while the agent was away),
/// with the fields the file keeps; `Resources` names only this VM.
fn outcome_of(verdict: Verdict) -> Outcome {
    match verdict {
        Verdict::Approve(rule) => Outcome::DryRun { rule },
        Verdict::Wait {
            rule,
            until,
            reason,
        } => Outcome::Waiting {
            rule,
            until,
            reason,
        },
        Verdict::Skip(reason) => Outcome::Skipped(reason),
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

/// Wait before attempt `attempts + 1`: 1 s, 2 s, 4 s, ... up to 30 s.
pub fn retry_delay(attempts: u32) -> Duration {
    let factor = 1u32
        .checked_shl(attempts.saturating_sub(1))
        .unwrap_or(u32::MAX);
    RETRY_FIRST.saturating_mul(factor).min(RETRY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_from_one_second_to_thirty() {
        let delays: Vec<u64> = (1..=7).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(retry_delay(u32::MAX), RETRY_MAX);
    }

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

    #[test]
    fn every_decision_has_a_pre_created_label_pair() {
        let labels = Outcome::decision_labels();
        let mut unique = labels.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), labels.len());
        for outcome in [
            Outcome::Skipped(SkipReason::Rejected),
            Outcome::Waiting {
                rule: Rule::UserEvent,
                until: DateTime::UNIX_EPOCH,
                reason: WaitReason::Takeover { rank: 7 },
            },
        ] {
            let pair = outcome.decision().unwrap_or(("", ""));
            assert!(labels.contains(&pair), "{pair:?}");
        }
    }
}
