//! The approval decision machine: pure, with the time passed in.
//!
//! [`Decider::decide`] looks at every event of a valid document and says what to do about it, as
//! occurrences: a decision to log and count, the approval hook to start, or an approval to send
//! ([`Occurrence::ApprovalSending`]). It sends nothing itself: the outputs carry the commands out
//! off the poll loop and their [`Report`]s come back through [`Decider::hook_finished`] and
//! [`Decider::posted`]. So every rule below is tested with a fake clock and no sleeps.
//!
//! Safety rules, in the order they apply: the policy never approves an event of another VM, or
//! one that has started; once IMDS has accepted an EventId it is never POSTed again, also across
//! restarts, because each attempt is recorded (the state file is written before the POST leaves;
//! an attempt in flight when the agent died counts as accepted); a POST that failed on the way
//! (timeout, connection, 5xx, 429, 410) is retried with backoff while the event is still Scheduled
//! and allowed (a timed-out one may have arrived: Azure answers 200 to a repeated approval); one
//! refused (other 4xx) is never sent again. One POST per event is in flight at most.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};

use super::{
    ApprovalConfig, Decision, HookKind, HookRun, MAX_POSTS_PER_POLL, Mode, Outcome, Rule,
    SkipReason, Verdict, policy, retry_delay,
};
use crate::event::{Event, EventId};
use crate::occurrence::{Occurrence, PostFailure};
use crate::state::{ApprovalRecord, ApprovalStatus};
use crate::tracker::Tracked;

/// How far one event has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Asking the policy at each document; the last verdict reported.
    Deciding(Option<Verdict>),
    HookRunning,
    /// The approval hook succeeded: POST once the policy still says so.
    Ready,
    /// A POST was handed to the sender; its report has not come back.
    Posting,
    /// A POST failed on the way: try again at this time.
    Retry(DateTime<Utc>),
    /// Nothing more to do for this event.
    Done,
}

/// The approval state of the running agent.
#[derive(Debug)]
pub struct Decider {
    config: ApprovalConfig,
    progress: HashMap<EventId, Progress>,
    /// Events whose approval hook is running, also after they left the document.
    hooks_running: HashSet<EventId>,
    /// Approvals sent, by EventId: status and attempts, also those of earlier runs.
    sent: HashMap<String, (ApprovalStatus, u32)>,
}

impl Decider {
    /// A machine that knows the approvals an earlier run recorded.
    pub fn new(config: ApprovalConfig, recorded: &BTreeMap<String, ApprovalRecord>) -> Self {
        Self {
            config,
            progress: HashMap::new(),
            hooks_running: HashSet::new(),
            sent: recorded
                .iter()
                .map(|(id, record)| (id.clone(), (record.status, record.attempts)))
                .collect(),
        }
    }

    /// Decides about every event of a valid document read at `now`, for the VM called `vm`.
    pub fn decide(
        &mut self,
        events: &[Tracked],
        vm: Option<&str>,
        now: DateTime<Utc>,
    ) -> Vec<Occurrence> {
        let mut occurrences = Vec::new();
        if self.config.mode == Mode::Off {
            return occurrences;
        }
        let present: HashSet<&EventId> = events.iter().map(|t| &t.event.id).collect();
        self.progress.retain(|id, _| present.contains(id));
        let decision = |event: &Event, outcome| {
            Occurrence::Decision(Decision {
                event: event.clone(),
                outcome,
            })
        };
        let mut due = Vec::new();
        for tracked in events {
            let event = &tracked.event;
            let verdict = || {
                self.config
                    .policy
                    .verdict(event, vm, tracked.first_seen, now)
            };
            let progress = match self.progress.get(&event.id) {
                Some(Progress::Done) => continue,
                Some(progress) => *progress,
                None => match self.sent.get(event.id.as_str()) {
                    Some((status, _)) if status.is_final() => {
                        let reason = match status {
                            ApprovalStatus::Rejected => SkipReason::Rejected,
                            _ => SkipReason::AlreadyApproved,
                        };
                        occurrences.push(decision(event, Outcome::Skipped(reason)));
                        self.progress.insert(event.id.clone(), Progress::Done);
                        continue;
                    }
                    Some(_) => Progress::Retry(now),
                    None if self.hooks_running.contains(&event.id) => Progress::HookRunning,
                    None => Progress::Deciding(None),
                },
            };
            let next = match (progress, verdict()) {
                (Progress::Done | Progress::HookRunning | Progress::Posting, _) => progress,
                (Progress::Deciding(_), Verdict::Approve(rule)) => {
                    if self.config.mode == Mode::DryRun {
                        occurrences.push(decision(event, Outcome::DryRun { rule }));
                        Progress::Done
                    } else if self.config.hook.is_some() {
                        self.hooks_running.insert(event.id.clone());
                        occurrences.push(decision(event, Outcome::HookStarted(HookKind::Approve)));
                        Progress::HookRunning
                    } else {
                        due.push((event, rule));
                        progress
                    }
                }
                (Progress::Ready, Verdict::Approve(rule)) => {
                    due.push((event, rule));
                    progress
                }
                (Progress::Retry(at), Verdict::Approve(rule)) => {
                    if now >= at {
                        due.push((event, rule));
                    }
                    progress
                }
                (Progress::Deciding(last), other) => {
                    if last != Some(other) {
                        occurrences.push(decision(event, outcome_of(other)));
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
                    occurrences.push(decision(event, Outcome::Skipped(reason)));
                    Progress::Done
                }
            };
            self.progress.insert(event.id.clone(), next);
        }
        // Events left out keep their progress and are sent after a following document: with the
        // poll's GET, this keeps the agent under IMDS's 5 requests per second.
        for (event, rule) in due.into_iter().take(MAX_POSTS_PER_POLL) {
            let attempts = self
                .sent
                .get(event.id.as_str())
                .map_or(0, |(_, attempts)| *attempts)
                .saturating_add(1);
            self.sent.insert(
                event.id.as_str().to_owned(),
                (ApprovalStatus::Sending, attempts),
            );
            self.progress.insert(event.id.clone(), Progress::Posting);
            occurrences.push(Occurrence::ApprovalSending {
                event: event.clone(),
                rule,
                attempts,
            });
        }
        occurrences
    }

    /// Takes in a hook run; an approval hook that succeeded makes its event ready to POST at the
    /// next document.
    pub fn hook_finished(&mut self, event: Event, run: HookRun) -> Occurrence {
        if run.kind == HookKind::Approve {
            self.hooks_running.remove(&event.id);
            if let Some(progress) = self.progress.get_mut(&event.id)
                && *progress == Progress::HookRunning
            {
                *progress = if run.result.is_ok() {
                    Progress::Ready
                } else {
                    Progress::Done
                };
            }
        }
        Occurrence::Decision(Decision {
            event,
            outcome: Outcome::HookFinished(run),
        })
    }

    /// Takes in the answer to an approval POST, reported at `now`.
    pub fn posted(
        &mut self,
        event: Event,
        rule: Rule,
        attempts: u32,
        result: Result<(), PostFailure>,
        now: DateTime<Utc>,
    ) -> Occurrence {
        let (status, progress, outcome) = match result {
            Ok(()) => (
                ApprovalStatus::Sent,
                Progress::Done,
                Outcome::Approved { rule, attempts },
            ),
            Err(failure) if failure.refused => (
                ApprovalStatus::Rejected,
                Progress::Done,
                Outcome::PostFailed {
                    reason: failure.reason,
                    error: failure.error,
                    retry_at: None,
                },
            ),
            Err(failure) => {
                let at = now + policy::chrono_duration(retry_delay(attempts));
                (
                    ApprovalStatus::Failed,
                    Progress::Retry(at),
                    Outcome::PostFailed {
                        reason: failure.reason,
                        error: failure.error,
                        retry_at: Some(at),
                    },
                )
            }
        };
        self.sent
            .insert(event.id.as_str().to_owned(), (status, attempts));
        if let Some(current) = self.progress.get_mut(&event.id) {
            *current = progress;
        }
        Occurrence::Decision(Decision { event, outcome })
    }
}

/// The decision that reports a verdict that is not (yet) an approval.
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
