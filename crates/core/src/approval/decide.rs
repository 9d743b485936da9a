//! The approval decision machine: pure, with the time passed in.
//!
//! [`Decider::decide`] looks at every event of a valid document and says what to do about it
//! ([`Decided`]): a decision to log and count, the approval hook to start, or an approval to send. It sends nothing itself: the outputs carry the commands out
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
//!
//! Waits (the takeover turn, the backoff of a retry) are measured on a [`Steady`] clock built
//! from the times passed in: it follows the wall clock forward and never goes back, so a clock
//! set back an hour (an NTP step, a restored VM) delays no approval by an hour.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};

use super::takeover::chrono_duration;
use super::{
    Decision, HookKind, HookRun, MAX_POSTS_PER_POLL, Mode, Outcome, PostFailure, Rule, Settings,
    SkipReason, Verdict, retry_delay,
};
use crate::event::{Event, EventId};
use crate::state::{ApprovalRecord, ApprovalStatus, stored};
use crate::tracker::Tracked;

/// What the machine says about one event: a decision to report, or an approval to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    Decision(Decision),
    /// Record the attempt, then POST.
    Send {
        event: Event,
        rule: Rule,
        attempts: u32,
    },
}

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
    /// A POST failed on the way: try again at this time of the [`Steady`] clock.
    Retry(DateTime<Utc>),
    /// Nothing more to do for this event.
    Done,
}

/// A clock that follows the wall-clock times it is given forward and never goes back: a step
/// back of the wall clock is a pause of this one. Pure: it reads no clock itself.
#[derive(Debug, Default, Clone, Copy)]
struct Steady {
    /// The last wall-clock time given, and this clock's time then.
    last: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

impl Steady {
    /// This clock's time at wall-clock time `now`.
    fn at(&mut self, now: DateTime<Utc>) -> DateTime<Utc> {
        let steady = match self.last {
            None => now,
            Some((wall, steady)) if now > wall => steady
                .checked_add_signed(now - wall)
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
            Some((_, steady)) => steady,
        };
        self.last = Some((now, steady));
        steady
    }
}

/// The approval state of the running agent.
#[derive(Debug)]
pub struct Decider {
    config: Settings,
    clock: Steady,
    /// When each event of the document was first seen, on the [`Steady`] clock.
    first_seen: HashMap<EventId, DateTime<Utc>>,
    progress: HashMap<EventId, Progress>,
    /// Events whose approval hook is running, also after they left the document.
    hooks_running: HashSet<EventId>,
    /// Approvals sent, by EventId as the state file holds it ([`stored`]): status and attempts,
    /// also those of earlier runs.
    sent: HashMap<String, (ApprovalStatus, u32)>,
}

impl Decider {
    /// A machine that knows the approvals an earlier run recorded.
    pub fn new(config: Settings, recorded: &BTreeMap<String, ApprovalRecord>) -> Self {
        Self {
            config,
            clock: Steady::default(),
            first_seen: HashMap::new(),
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
    ) -> Vec<Decided> {
        let mut occurrences = Vec::new();
        if self.config.mode == Mode::Off {
            return occurrences;
        }
        let steady = self.clock.at(now);
        // A document holds a handful of events: a scan is cheaper than a set built every poll.
        // One of thousands (up to [`crate::limits::MAX_EVENTS`]) is looked up in a set instead.
        let large: Option<HashSet<&EventId>> =
            (events.len() > 64).then(|| events.iter().map(|t| &t.event.id).collect());
        let present = |id: &EventId| match &large {
            Some(ids) => ids.contains(id),
            None => events.iter().any(|t| t.event.id == *id),
        };
        self.progress.retain(|id, _| present(id));
        self.first_seen.retain(|id, _| present(id));
        for tracked in events {
            // Seen by an earlier run or before the clock went back: as long ago as the wall
            // clock says, never less than nothing.
            let ago = (now - tracked.first_seen).max(chrono::TimeDelta::zero());
            self.first_seen
                .entry(tracked.event.id.clone())
                .or_insert_with(|| {
                    steady
                        .checked_sub_signed(ago)
                        .unwrap_or(DateTime::<Utc>::MIN_UTC)
                });
        }
        let decision = |event: &Event, outcome| {
            Decided::Decision(Decision {
                event: event.clone(),
                outcome,
            })
        };
        let mut due = Vec::new();
        for tracked in events {
            let event = &tracked.event;
            let watched = self
                .first_seen
                .get(&event.id)
                .and_then(|first| (steady - *first).to_std().ok())
                .unwrap_or_default();
            let verdict = || {
                self.config
                    .policy
                    .verdict_watched(event, vm, tracked.first_seen, now, watched)
            };
            let progress = match self.progress.get(&event.id) {
                Some(Progress::Done) => continue,
                Some(progress) => *progress,
                None => match self.sent.get(stored(event.id.as_str()).as_ref()) {
                    Some((status, _)) if status.is_final() => {
                        let reason = match status {
                            ApprovalStatus::Rejected => SkipReason::Rejected,
                            _ => SkipReason::AlreadyApproved,
                        };
                        occurrences.push(decision(event, Outcome::Skipped(reason)));
                        self.progress.insert(event.id.clone(), Progress::Done);
                        continue;
                    }
                    Some(_) => Progress::Retry(steady),
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
                    } else if self.config.hooks.approve {
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
                    if steady >= at {
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
            match self.progress.get_mut(&event.id) {
                Some(slot) => *slot = next,
                None => {
                    self.progress.insert(event.id.clone(), next);
                }
            }
        }
        // At most a few POSTs under way: with the poll's GET, this keeps the agent under IMDS's 5
        // requests per second. Events left out keep their progress and are sent after a
        // following document.
        let under_way = self
            .progress
            .values()
            .filter(|p| **p == Progress::Posting)
            .count();
        for (event, rule) in due
            .into_iter()
            .take(MAX_POSTS_PER_POLL.saturating_sub(under_way))
        {
            let key = stored(event.id.as_str()).into_owned();
            let attempts = self
                .sent
                .get(&key)
                .map_or(0, |(_, attempts)| *attempts)
                .saturating_add(1);
            self.sent.insert(key, (ApprovalStatus::Sending, attempts));
            self.progress.insert(event.id.clone(), Progress::Posting);
            occurrences.push(Decided::Send {
                event: event.clone(),
                rule,
                attempts,
            });
        }
        occurrences
    }

    /// Takes in a hook run; an approval hook that succeeded makes its event ready to POST at the
    /// next document.
    pub fn hook_finished(&mut self, event: Event, run: HookRun) -> Decision {
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
        Decision {
            event,
            outcome: Outcome::HookFinished(run),
        }
    }

    /// Takes in the answer to an approval POST, reported at `now`.
    pub fn posted(
        &mut self,
        event: Event,
        rule: Rule,
        attempts: u32,
        result: Result<(), PostFailure>,
        now: DateTime<Utc>,
    ) -> Decision {
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
                let delay = chrono_duration(retry_delay(attempts));
                let steady = self.clock.at(now);
                (
                    ApprovalStatus::Failed,
                    Progress::Retry(steady + delay),
                    Outcome::PostFailed {
                        reason: failure.reason,
                        error: failure.error,
                        retry_at: Some(now + delay),
                    },
                )
            }
        };
        self.sent
            .insert(stored(event.id.as_str()).into_owned(), (status, attempts));
        if let Some(current) = self.progress.get_mut(&event.id) {
            *current = progress;
        }
        Decision { event, outcome }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approval::{HookFailure, PostReason, WaitReason};
    use crate::approval::{Hooks, Policy, When};
    use crate::event::{DurationInSeconds, EventSource, EventStatus, EventType};
    use crate::not_before::NotBefore;
    use azure_scheduled_events_protocol::resources::Resources;
    use chrono::TimeZone;
    use std::time::Duration;

    const VM: Option<&str> = Some("vm_0");

    fn t(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0)
            .single()
            .unwrap_or_default()
    }

    /// A user-initiated Reboot of `resources`, NotBefore ten minutes after t(0).
    fn reboot(id: &str, resources: &[&str]) -> Tracked {
        Tracked {
            event: Event {
                id: EventId::new(id),
                event_type: EventType::Reboot,
                status: EventStatus::Scheduled,
                resource_type: "VirtualMachine".into(),
                resources: Resources::from_iter(resources.iter().copied()),
                not_before: NotBefore::parse(Some("Tue, 14 Nov 2023 22:23:20 GMT")),
                description: None,
                source: Some(EventSource::User),
                duration: Some(DurationInSeconds(-1)),
            },
            first_seen: t(0),
            seen_started: false,
        }
    }

    fn config(mode: Mode) -> Settings {
        Settings {
            mode,
            ..Settings::default()
        }
    }

    fn with_hook(mode: Mode) -> Settings {
        Settings {
            hooks: Hooks {
                approve: true,
                ..Hooks::default()
            },
            ..config(mode)
        }
    }

    fn machine(config: Settings) -> Decider {
        Decider::new(config, &BTreeMap::new())
    }

    /// The decisions' (decision, reason) labels and the approvals to send, in order.
    fn said(occurrences: &[Decided]) -> Vec<String> {
        occurrences
            .iter()
            .map(|occurrence| match occurrence {
                Decided::Decision(Decision {
                    outcome: Outcome::HookStarted(kind),
                    event,
                }) => format!("hook {} {}", kind.as_str(), event.id),
                Decided::Decision(Decision { outcome, event }) => {
                    let (decision, reason) = outcome.decision().unwrap_or(("?", "?"));
                    format!("{decision} {reason} {}", event.id)
                }
                Decided::Send {
                    event, attempts, ..
                } => format!("send {} #{attempts}", event.id),
            })
            .collect()
    }

    /// The answer to attempt `attempts` of the POST for `event`, reported at `t(at)`.
    fn answer(
        decider: &mut Decider,
        event: &Tracked,
        attempts: u32,
        result: Result<(), PostFailure>,
        at: i64,
    ) -> Decision {
        decider.posted(
            event.event.clone(),
            Rule::UserEvent,
            attempts,
            result,
            t(at),
        )
    }

    fn failure(reason: &'static str, refused: bool) -> Result<(), PostFailure> {
        Err(PostFailure {
            reason: if reason == "queue_full" {
                PostReason::QueueFull
            } else {
                PostReason::Imds(reason)
            },
            error: reason.to_owned(),
            refused,
        })
    }

    fn hook_run(result: Result<(), HookFailure>) -> HookRun {
        HookRun {
            kind: HookKind::Approve,
            result,
            elapsed: Duration::from_secs(3),
            stdout: String::new(),
            stderr: String::new(),
        }
    }

    #[test]
    fn approval_off_decides_nothing() {
        let mut decider = machine(config(Mode::Off));
        assert!(
            decider
                .decide(&[reboot("A", &["vm_0"])], VM, t(1))
                .is_empty()
        );
    }

    #[test]
    fn dry_run_says_once_what_it_would_approve_and_sends_nothing() {
        let mut decider = machine(with_hook(Mode::DryRun));
        let events = [reboot("A", &["vm_0"])];
        assert_eq!(
            said(&decider.decide(&events, VM, t(1))),
            ["dry_run user_event A"]
        );
        assert!(decider.decide(&events, VM, t(2)).is_empty());
    }

    #[test]
    fn an_allowed_event_is_sent_once_and_approved_when_imds_accepts() {
        let mut decider = machine(config(Mode::On));
        let events = [reboot("A", &["vm_0"])];
        let first = decider.decide(&events, VM, t(1));
        assert_eq!(said(&first), ["send A #1"]);
        assert!(
            decider.decide(&events, VM, t(2)).is_empty(),
            "nothing more while the POST is under way"
        );
        let reply = answer(&mut decider, &events[0], 1, Ok(()), 2);
        assert_eq!(said(&[Decided::Decision(reply)]), ["approved user_event A"]);
        assert!(decider.decide(&events, VM, t(3)).is_empty());
    }

    #[test]
    fn at_most_three_approvals_are_under_way_at_once() {
        let mut decider = machine(config(Mode::On));
        let events: Vec<Tracked> = (1..=7)
            .map(|i| reboot(&format!("E{i}"), &["vm_0"]))
            .collect();
        let answer_all = |decider: &mut Decider, occurrences: Vec<Decided>, s: i64| {
            let mut sent = 0;
            for occurrence in occurrences {
                if let Decided::Send {
                    event,
                    rule,
                    attempts,
                } = occurrence
                {
                    sent += 1;
                    decider.posted(event, rule, attempts, Ok(()), t(s));
                }
            }
            sent
        };
        let first = decider.decide(&events, VM, t(1));
        assert!(
            decider.decide(&events, VM, t(2)).is_empty(),
            "none more while three are under way"
        );
        assert_eq!(answer_all(&mut decider, first, 2), 3);
        let second = decider.decide(&events, VM, t(3));
        assert_eq!(answer_all(&mut decider, second, 3), 3);
        let third = decider.decide(&events, VM, t(4));
        assert_eq!(answer_all(&mut decider, third, 4), 1);
        assert!(decider.decide(&events, VM, t(5)).is_empty());
    }

    #[test]
    fn a_post_that_failed_on_the_way_is_sent_again_after_its_backoff() {
        let mut decider = machine(config(Mode::On));
        let events = [reboot("A", &["vm_0"])];
        decider.decide(&events, VM, t(1));
        let reply = answer(&mut decider, &events[0], 1, failure("http_5xx", false), 2);
        assert!(matches!(
            reply,
            Decision { outcome: Outcome::PostFailed { retry_at: Some(at), .. }, .. } if at == t(3)
        ));
        assert!(
            decider.decide(&events, VM, t(2)).is_empty(),
            "not before 1 s"
        );
        assert_eq!(said(&decider.decide(&events, VM, t(3))), ["send A #2"]);
        let reply = answer(&mut decider, &events[0], 2, failure("timeout", false), 4);
        assert!(
            matches!(
                reply,
                Decision { outcome: Outcome::PostFailed { retry_at: Some(at), .. }, .. } if at == t(6)
            ),
            "the wait doubles"
        );
    }

    #[test]
    fn a_refused_post_is_never_sent_again() {
        let mut decider = machine(config(Mode::On));
        let events = [reboot("A", &["vm_0"])];
        decider.decide(&events, VM, t(1));
        let reply = answer(&mut decider, &events[0], 1, failure("http_4xx", true), 2);
        assert_eq!(
            said(&[Decided::Decision(reply)]),
            ["post_failed http_4xx A"]
        );
        for s in 3..100 {
            assert!(decider.decide(&events, VM, t(s)).is_empty());
        }
    }

    #[test]
    fn what_an_earlier_run_sent_is_not_sent_again_and_what_failed_is_retried() {
        let record = |status, attempts| ApprovalRecord {
            event_type: "Reboot".into(),
            at: t(-60),
            status,
            attempts,
        };
        let recorded = BTreeMap::from([
            ("SENT".to_owned(), record(ApprovalStatus::Sent, 1)),
            ("SENDING".to_owned(), record(ApprovalStatus::Sending, 1)),
            ("REFUSED".to_owned(), record(ApprovalStatus::Rejected, 1)),
            ("FAILED".to_owned(), record(ApprovalStatus::Failed, 2)),
        ]);
        let mut decider = Decider::new(config(Mode::On), &recorded);
        let events = ["SENT", "SENDING", "REFUSED", "FAILED"].map(|id| reboot(id, &["vm_0"]));
        assert_eq!(
            said(&decider.decide(&events, VM, t(1))),
            [
                "skipped already_approved SENT",
                "skipped already_approved SENDING",
                "skipped rejected REFUSED",
                "send FAILED #3",
            ]
        );
        assert!(decider.decide(&events, VM, t(2)).is_empty());
    }

    #[test]
    fn the_approval_hook_runs_first_and_its_success_lets_the_post_leave() {
        let mut decider = machine(with_hook(Mode::On));
        let events = [reboot("A", &["vm_0"])];
        assert_eq!(said(&decider.decide(&events, VM, t(1))), ["hook approve A"]);
        assert!(decider.decide(&events, VM, t(2)).is_empty(), "hook running");
        decider.hook_finished(events[0].event.clone(), hook_run(Ok(())));
        assert_eq!(said(&decider.decide(&events, VM, t(4))), ["send A #1"]);
    }

    #[test]
    fn a_failed_approval_hook_leaves_the_event_for_not_before() {
        let mut decider = machine(with_hook(Mode::On));
        let events = [reboot("A", &["vm_0"])];
        decider.decide(&events, VM, t(1));
        let finished = decider.hook_finished(
            events[0].event.clone(),
            hook_run(Err(HookFailure::Exit("exit status: 1".into()))),
        );
        assert_eq!(
            said(&[Decided::Decision(finished)]),
            ["hook_failed hook_failed A"]
        );
        for s in 2..50 {
            assert!(decider.decide(&events, VM, t(s)).is_empty());
        }
    }

    #[test]
    fn a_wait_is_said_once_and_the_approval_leaves_when_it_is_over() {
        let mut decider = machine(Settings {
            policy: Policy {
                when: When::BeforeNotBefore(Duration::from_secs(60)),
                ..Default::default()
            },
            ..config(Mode::On)
        });
        let events = [reboot("A", &["vm_0"])];
        let waiting = decider.decide(&events, VM, t(1));
        assert!(matches!(
            &waiting[..],
            [Decided::Decision(Decision { outcome: Outcome::Waiting { reason: WaitReason::BeforeNotBefore, until, .. }, .. })] if *until == t(540)
        ));
        for s in 2..540 {
            assert!(decider.decide(&events, VM, t(s)).is_empty(), "at {s}");
        }
        assert_eq!(said(&decider.decide(&events, VM, t(540))), ["send A #1"]);
    }

    #[test]
    fn another_vms_event_is_skipped_once_and_a_later_vm_waits_for_its_turn() {
        let mut decider = machine(config(Mode::On));
        let theirs = [reboot("THEIRS", &["vm_7"])];
        assert_eq!(
            said(&decider.decide(&theirs, VM, t(1))),
            ["skipped not_this_vm THEIRS"]
        );
        assert!(decider.decide(&theirs, VM, t(2)).is_empty());
        let shared = [reboot("SHARED", &["vm_3", "vm_0"])];
        assert_eq!(
            said(&decider.decide(&shared, VM, t(3))),
            ["waiting takeover SHARED"]
        );
        assert_eq!(
            said(&decider.decide(&shared, VM, t(30))),
            ["send SHARED #1"]
        );
    }

    #[test]
    fn a_full_queue_is_a_failure_on_the_way_retried_later() {
        let mut decider = machine(config(Mode::On));
        let events = [reboot("A", &["vm_0"])];
        decider.decide(&events, VM, t(1));
        let reply = answer(&mut decider, &events[0], 1, failure("queue_full", false), 1);
        assert_eq!(
            said(&[Decided::Decision(reply)]),
            ["post_failed queue_full A"]
        );
        assert_eq!(said(&decider.decide(&events, VM, t(2))), ["send A #2"]);
    }

    #[test]
    fn a_clock_set_back_an_hour_delays_no_takeover_turn_by_an_hour() {
        let mut decider = machine(config(Mode::On));
        // First seen at t(0) by the second VM of the list: its turn is 30 s of watching later.
        let shared = [reboot("SHARED", &["vm_3", "vm_0"])];
        assert_eq!(
            said(&decider.decide(&shared, VM, t(0))),
            ["waiting takeover SHARED"]
        );
        assert!(decider.decide(&shared, VM, t(10)).is_empty());
        // The wall clock steps back an hour, then goes on one poll a second. The second between
        // the polls on either side of the step is not counted: the clock pauses, never runs back.
        // The wait is said again once, with its end in the new wall-clock time.
        assert_eq!(
            said(&decider.decide(&shared, VM, t(11 - 3600))),
            ["waiting takeover SHARED"]
        );
        for second in 12..=30 {
            assert!(
                decider.decide(&shared, VM, t(second - 3600)).is_empty(),
                "still waiting after {second} s of watching"
            );
        }
        assert_eq!(
            said(&decider.decide(&shared, VM, t(31 - 3600))),
            ["send SHARED #1"],
            "30 s of watching, whatever the wall clock says"
        );
    }

    #[test]
    fn a_clock_set_back_an_hour_delays_no_retry_by_an_hour() {
        let mut decider = machine(config(Mode::On));
        let events = [reboot("A", &["vm_0"])];
        decider.decide(&events, VM, t(1));
        answer(&mut decider, &events[0], 1, failure("http_5xx", false), 2);
        assert!(decider.decide(&events, VM, t(2 - 3600)).is_empty());
        assert_eq!(
            said(&decider.decide(&events, VM, t(3 - 3600))),
            ["send A #2"],
            "the 1 s backoff, on the clock that never goes back"
        );
    }

    #[test]
    fn the_steady_clock_follows_the_wall_clock_forward_and_pauses_when_it_goes_back() {
        let mut clock = Steady::default();
        assert_eq!(clock.at(t(100)), t(100));
        assert_eq!(clock.at(t(105)), t(105));
        assert_eq!(clock.at(t(105 - 3600)), t(105), "set back: paused");
        assert_eq!(clock.at(t(107 - 3600)), t(107));
        assert_eq!(
            clock.at(t(200)),
            t(107 + 3600 + 93 - 3600 + 3600),
            "forward as the wall clock"
        );
    }

    #[test]
    fn events_that_left_a_large_document_are_forgotten_and_the_others_kept() {
        let mut decider = machine(config(Mode::DryRun));
        let ids: Vec<String> = (0..100).map(|i| format!("E{i:03}")).collect();
        let all: Vec<Tracked> = ids.iter().map(|id| reboot(id, &["vm_0"])).collect();
        assert_eq!(decider.decide(&all, VM, t(1)).len(), 100);
        assert!(decider.decide(&all[..50], VM, t(2)).is_empty());
        let again = said(&decider.decide(&all, VM, t(3)));
        assert_eq!(again.len(), 50, "{again:?}");
        assert!(
            again.iter().all(|line| line.starts_with("dry_run")),
            "{again:?}"
        );
        assert!(
            again.contains(&"dry_run user_event E050".to_owned()),
            "{again:?}"
        );
    }
}
