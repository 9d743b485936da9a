//! Approving events: the settings, the pure [`policy`] and [`takeover`] rules, and the pure
//! decision machine ([`decide`]) that turns them into [`Decision`]s and commands.
//!
//! Nothing here does I/O: the agent's approval output sends the POSTs and its hooks output runs
//! the hooks, each off the poll loop. Nothing
//! is POSTed unless the mode is [`Mode::On`]; in [`Mode::DryRun`] the same decisions are made,
//! logged and counted, and neither the approval hook runs nor anything is sent.

pub mod decide;
pub mod policy;
pub mod takeover;

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::event::Event;

pub use policy::{Policy, Rule, SkipReason, Verdict, WaitReason, When};

/// Whether approval is off, deciding only, or sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Off,
    DryRun,
    On,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Off, Mode::DryRun, Mode::On];

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Off => "off",
            Mode::DryRun => "dry_run",
            Mode::On => "on",
        }
    }
}

/// What approval decides by: the mode, the policy, and which hooks exist (what they run is the
/// hooks output's business).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub mode: Mode,
    pub policy: Policy,
    pub hooks: Hooks,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            mode: Mode::Off,
            policy: Policy::default(),
            hooks: Hooks::default(),
        }
    }
}

/// Which hooks are configured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hooks {
    /// Must exit 0 before an event is approved.
    pub approve: bool,
    /// Runs when an event affecting this VM appears.
    pub prepare: bool,
    /// Runs when an event affecting this VM completes or is cancelled.
    pub recover: bool,
}

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
        reason: PostReason,
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
            Outcome::PostFailed { reason, .. } => ("post_failed", reason.as_str()),
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
            Outcome::PostFailed { reason, .. } => Some(reason.as_str()),
            Outcome::Approved { .. }
            | Outcome::DryRun { .. }
            | Outcome::Waiting { .. }
            | Outcome::Skipped(_)
            | Outcome::HookStarted(_)
            | Outcome::HookFinished(_) => None,
        }
    }

    /// Every failure to approve, as its (`decision`, `reason`) labels: the one list both
    /// `..._approval_decisions_total` and `..._approval_failures_total` are pre-created from.
    fn failure_labels(
        imds_kinds: &[ImdsKind],
    ) -> impl Iterator<Item = (&'static str, &'static str)> {
        HookFailure::KINDS
            .into_iter()
            .map(|kind| ("hook_failed", kind))
            .chain(PostReason::all(imds_kinds).map(|reason| ("post_failed", reason.as_str())))
    }

    /// Every (decision, reason) pair, for pre-creating series; `imds_kinds` as for
    /// [`PostReason::all`].
    pub fn decision_labels(imds_kinds: &[ImdsKind]) -> Vec<(&'static str, &'static str)> {
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
        labels.extend(Self::failure_labels(imds_kinds));
        labels
    }

    /// Every `reason` of `..._approval_failures_total`; `imds_kinds` as for [`PostReason::all`].
    pub fn failure_reasons(imds_kinds: &[ImdsKind]) -> impl Iterator<Item = &'static str> {
        Self::failure_labels(imds_kinds).map(|(_, reason)| reason)
    }
}

/// Why an approval POST failed, as the `reason` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostReason {
    /// IMDS answered with an error, or did not answer.
    Imds(ImdsKind),
    /// The approval output's queue was full: the POST never left.
    QueueFull,
    /// The attempt could not be written to the state file: the POST never left, and never does
    /// (the event waits for its NotBefore), since a restart could not tell it was attempted.
    StateUnwritable,
}

/// The IMDS client's bounded name of an error (its `kind`), one of those the agent's client
/// lists.
pub type ImdsKind = &'static str;

impl PostReason {
    pub fn as_str(self) -> &'static str {
        match self {
            PostReason::Imds(kind) => kind,
            PostReason::QueueFull => "queue_full",
            PostReason::StateUnwritable => "state_unwritable",
        }
    }

    /// Every reason, with `imds_kinds` every kind of error the IMDS client names.
    pub fn all(imds_kinds: &[ImdsKind]) -> impl Iterator<Item = PostReason> {
        imds_kinds
            .iter()
            .copied()
            .map(PostReason::Imds)
            .chain([PostReason::QueueFull, PostReason::StateUnwritable])
    }
}

/// Why an approval POST did not get IMDS's 200.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostFailure {
    /// Bounded, for metric labels: an IMDS error kind, or `queue_full` or `state_unwritable`
    /// when it was never sent.
    pub reason: PostReason,
    pub error: String,
    /// Sending the same request again cannot succeed (a 4xx other than 429 and 410).
    pub refused: bool,
}

/// Which hook ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookKind {
    /// Before approving an event (drain, fail over, checkpoint); must succeed for the approval.
    Approve,
    /// When an event affecting this VM appears.
    Prepare,
    /// When an event affecting this VM completes (or is cancelled).
    Recover,
}

impl HookKind {
    pub const ALL: [HookKind; 3] = [HookKind::Approve, HookKind::Prepare, HookKind::Recover];

    pub fn as_str(self) -> &'static str {
        match self {
            HookKind::Approve => "approve",
            HookKind::Prepare => "prepare",
            HookKind::Recover => "recover",
        }
    }
}

/// Why a hook did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookFailure {
    #[error("exited with {0}")]
    Exit(String),
    #[error("did not finish within {0:?} and was killed")]
    Timeout(Duration),
    #[error("could not run: {0}")]
    Spawn(String),
}

impl HookFailure {
    pub const KINDS: [&'static str; 3] = ["hook_failed", "hook_timeout", "hook_error"];

    /// Bounded name for metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            HookFailure::Exit(_) => "hook_failed",
            HookFailure::Timeout(_) => "hook_timeout",
            HookFailure::Spawn(_) => "hook_error",
        }
    }
}

/// What one run of a hook gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRun {
    pub kind: HookKind,
    pub result: Result<(), HookFailure>,
    pub elapsed: Duration,
    pub stdout: String,
    pub stderr: String,
}

/// Wait before attempt `attempts + 1`: 1 s, 2 s, 4 s, ... up to 30 s.
pub fn retry_delay(attempts: u32) -> Duration {
    let doubled = RETRY_FIRST.saturating_mul(
        1u32.checked_shl(attempts.saturating_sub(1))
            .unwrap_or(u32::MAX),
    );
    doubled.clamp(RETRY_FIRST, RETRY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A few of the IMDS client's kinds.
    const IMDS_KINDS: [ImdsKind; 2] = ["timeout", "http_5xx"];

    #[test]
    fn retries_back_off_from_one_second_to_thirty() {
        let delays: Vec<u64> = (1..=7).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(retry_delay(u32::MAX), RETRY_MAX);
    }

    #[test]
    fn every_decision_has_a_pre_created_label_pair() {
        let labels = Outcome::decision_labels(&IMDS_KINDS);
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

    #[test]
    fn an_approval_that_did_not_fit_the_queue_has_pre_created_series() {
        let queue_full = Outcome::PostFailed {
            reason: PostReason::QueueFull,
            error: String::new(),
            retry_at: None,
        };
        let pair = queue_full.decision().unwrap_or(("", ""));
        assert_eq!(pair, ("post_failed", "queue_full"));
        assert!(Outcome::decision_labels(&IMDS_KINDS).contains(&pair));
        assert!(Outcome::failure_reasons(&IMDS_KINDS).any(|reason| reason == "queue_full"));
        let mut reasons: Vec<&str> = Outcome::failure_reasons(&IMDS_KINDS).collect();
        reasons.sort_unstable();
        reasons.dedup();
        assert_eq!(reasons.len(), Outcome::failure_reasons(&IMDS_KINDS).count());
    }
}
