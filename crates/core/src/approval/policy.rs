//! The approval policy: which events this VM may approve, and from when. Pure.
//!
//! [`Policy::verdict`] is a function of the event, this VM's name, when the event was first seen,
//! the time, and the policy; it reads no clock and does no I/O, so every rule is unit-tested. The
//! safety rules come first and no setting can turn them off: an event is never approved unless this
//! VM's name is known and is in its `Resources`, and never once it is `Started`. Then the deny list,
//! then the allow rules (Microsoft's sample by default: user-initiated events, and Freezes shorter
//! than 9 s), then the timing: the policy's "when" and the takeover order of shared events.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::takeover::{self, chrono_duration};
use crate::event::{DurationInSeconds, Event, EventSource, EventStatus, EventType};

/// What may be approved. The default is Microsoft's sample policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Approve events whose `EventSource` is `User` (a restart or redeploy someone asked for).
    pub user_events: bool,
    /// Approve at once an event marked as a predicted hardware failure
    /// ([`crate::hardware_failure::predicted`]), whatever `when` says. Off by default.
    pub predicted_hardware_failure: bool,
    /// Approve Freezes whose `DurationInSeconds` is known and `0 <= d < freeze_max_duration`.
    /// Zero turns the rule off.
    pub freeze_max_duration: Duration,
    /// Approve every event of these types.
    pub event_types: Vec<EventType>,
    /// Never approve events of these types, whatever the other rules say.
    pub deny_event_types: Vec<EventType>,
    pub when: When,
    /// Shared events: the k-th VM in `Resources` (from 0) approves only k times this long after
    /// it first saw the event. Zero lets every VM approve at once.
    pub takeover_delay: Duration,
}

/// Microsoft's sample: user-initiated events are approved.
pub const DEFAULT_USER_EVENTS: bool = true;

/// A predicted hardware failure waits for `when` as any event does unless asked.
pub const DEFAULT_PREDICTED_HARDWARE_FAILURE: bool = false;

/// An allowed event is approved as soon as it is seen.
pub const DEFAULT_WHEN: When = When::Immediately;

/// Microsoft's sample: Freezes shorter than this many seconds are approved.
pub const DEFAULT_FREEZE_MAX_DURATION: Duration = Duration::from_secs(9);

/// Default delay between one VM's turn to approve a shared event and the next VM's.
pub const DEFAULT_TAKEOVER_DELAY: Duration = Duration::from_secs(30);

impl Default for Policy {
    fn default() -> Self {
        Self {
            user_events: DEFAULT_USER_EVENTS,
            predicted_hardware_failure: DEFAULT_PREDICTED_HARDWARE_FAILURE,
            freeze_max_duration: DEFAULT_FREEZE_MAX_DURATION,
            event_types: Vec::new(),
            deny_event_types: Vec::new(),
            when: DEFAULT_WHEN,
            takeover_delay: DEFAULT_TAKEOVER_DELAY,
        }
    }
}

/// When an allowed event is approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// As soon as it is seen (and this VM's takeover turn has come).
    Immediately,
    /// No earlier than this long before `NotBefore` (the case study drains 30 s before); `--approve.before-not-before`.
    BeforeNotBefore(Duration),
}

/// The allow rule that matched an approved event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    UserEvent,
    ShortFreeze,
    EventType,
    /// A Reboot or Redeploy announced days ahead: Azure predicts a hardware failure and
    /// recommends acting as soon as possible.
    PredictedHardwareFailure,
}

impl Rule {
    pub const ALL: [Rule; 4] = [
        Rule::UserEvent,
        Rule::ShortFreeze,
        Rule::EventType,
        Rule::PredictedHardwareFailure,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Rule::UserEvent => "user_event",
            Rule::ShortFreeze => "short_freeze",
            Rule::EventType => "event_type",
            Rule::PredictedHardwareFailure => "predicted_hardware_failure",
        }
    }
}

/// Why an event is not approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// This VM's name is not known (no `--vm.name`, no instance metadata yet).
    VmUnknown,
    /// `Resources` does not name this VM.
    NotThisVm,
    /// The event has started: there is nothing left to approve.
    Started,
    /// `EventStatus` is neither Scheduled nor Started nor Advisory.
    UnknownStatus,
    /// An advisory (a Spot rebalance recommendation, EventStatus `Advisory`): acknowledging it
    /// has no effect, and no setting approves it.
    Advisory,
    /// The type is on the deny list.
    DeniedType,
    /// A Freeze whose `DurationInSeconds` is at or above the threshold.
    FreezeTooLong,
    /// A Freeze whose `DurationInSeconds` is missing or `-1`.
    FreezeDurationUnknown,
    /// No allow rule matches.
    NotAllowed,
    /// The policy approves before `NotBefore`, and `NotBefore` is missing or not a date.
    NotBeforeUnknown,
    /// This agent already approved the event (possibly before a restart).
    AlreadyApproved,
    /// IMDS refused this agent's approval (4xx) before: it is not sent again.
    Rejected,
}

impl SkipReason {
    pub const ALL: [SkipReason; 12] = [
        SkipReason::VmUnknown,
        SkipReason::NotThisVm,
        SkipReason::Started,
        SkipReason::UnknownStatus,
        SkipReason::Advisory,
        SkipReason::DeniedType,
        SkipReason::FreezeTooLong,
        SkipReason::FreezeDurationUnknown,
        SkipReason::NotAllowed,
        SkipReason::NotBeforeUnknown,
        SkipReason::AlreadyApproved,
        SkipReason::Rejected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::VmUnknown => "vm_unknown",
            SkipReason::NotThisVm => "not_this_vm",
            SkipReason::Started => "started",
            SkipReason::UnknownStatus => "unknown_status",
            SkipReason::Advisory => "advisory",
            SkipReason::DeniedType => "denied_type",
            SkipReason::FreezeTooLong => "freeze_too_long",
            SkipReason::FreezeDurationUnknown => "freeze_duration_unknown",
            SkipReason::NotAllowed => "not_allowed",
            SkipReason::NotBeforeUnknown => "not_before_unknown",
            SkipReason::AlreadyApproved => "already_approved",
            SkipReason::Rejected => "rejected",
        }
    }
}

/// What holds back an allowed event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitReason {
    /// The policy approves only a set time before `NotBefore`.
    BeforeNotBefore,
    /// A VM earlier in `Resources` has the first turn.
    Takeover { rank: usize },
}

impl WaitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::BeforeNotBefore => "before_not_before",
            WaitReason::Takeover { .. } => "takeover",
        }
    }
}

/// The policy's answer for one event at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Approve now, by this rule.
    Approve(Rule),
    /// Allowed by `rule`, but not before `until`.
    Wait {
        rule: Rule,
        until: DateTime<Utc>,
        reason: WaitReason,
    },
    Skip(SkipReason),
}

impl Policy {
    /// The verdict for `event` at `now`, for the VM called `vm`, which first saw the event at
    /// `first_seen`.
    pub fn verdict(
        &self,
        event: &Event,
        vm: Option<&str>,
        first_seen: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Verdict {
        let watched = (now - first_seen).to_std().unwrap_or_default();
        self.verdict_watched(event, vm, first_seen, now, watched)
    }

    /// As [`Policy::verdict`], for a VM that has watched the event for `watched`, measured on a
    /// clock that never goes back ([`super::decide`]): the takeover turn counts that, not the
    /// wall clock, so a clock set back an hour does not hold an approval back an hour.
    pub fn verdict_watched(
        &self,
        event: &Event,
        vm: Option<&str>,
        first_seen: DateTime<Utc>,
        now: DateTime<Utc>,
        watched: Duration,
    ) -> Verdict {
        let Some(vm) = vm else {
            return Verdict::Skip(SkipReason::VmUnknown);
        };
        let Some(rank) = takeover::rank(&event.resources, vm) else {
            return Verdict::Skip(SkipReason::NotThisVm);
        };
        match event.status {
            EventStatus::Scheduled => {}
            EventStatus::Started => return Verdict::Skip(SkipReason::Started),
            EventStatus::Advisory => return Verdict::Skip(SkipReason::Advisory),
            EventStatus::Other(_) => return Verdict::Skip(SkipReason::UnknownStatus),
        }
        if event.event_type.is_advisory() {
            return Verdict::Skip(SkipReason::Advisory);
        }
        if self.deny_event_types.contains(&event.event_type) {
            return Verdict::Skip(SkipReason::DeniedType);
        }
        // Early: the hardware may fail before NotBefore, so the policy's "when" does not hold
        // it back (the takeover order of a shared event still does).
        let early = self.predicted_hardware_failure
            && crate::hardware_failure::predicted(event, Some(first_seen));
        let rule = match self.rule(event) {
            _ if early => Rule::PredictedHardwareFailure,
            Ok(rule) => rule,
            Err(reason) => return Verdict::Skip(reason),
        };
        let policy_at = match self.when {
            _ if early => None,
            When::Immediately => None,
            When::BeforeNotBefore(lead) => match event.not_before.at() {
                Some(at) => Some((at - chrono_duration(lead), WaitReason::BeforeNotBefore)),
                None => return Verdict::Skip(SkipReason::NotBeforeUnknown),
            },
        };
        let takeover_at = (rank > 0).then(|| {
            (
                takeover::turn(
                    now.checked_sub_signed(chrono_duration(watched))
                        .unwrap_or(DateTime::<Utc>::MIN_UTC),
                    rank,
                    self.takeover_delay,
                ),
                WaitReason::Takeover { rank },
            )
        });
        let latest = [policy_at, takeover_at]
            .into_iter()
            .flatten()
            .max_by_key(|(at, _)| *at);
        match latest {
            Some((until, reason)) if now < until => Verdict::Wait {
                rule,
                until,
                reason,
            },
            _ => Verdict::Approve(rule),
        }
    }

    /// The first allow rule that matches, or why none does (the most telling reason).
    fn rule(&self, event: &Event) -> Result<Rule, SkipReason> {
        if self.user_events && event.source == Some(EventSource::User) {
            return Ok(Rule::UserEvent);
        }
        if self.event_types.contains(&event.event_type) {
            return Ok(Rule::EventType);
        }
        if event.event_type == EventType::Freeze && !self.freeze_max_duration.is_zero() {
            return match event.duration {
                Some(DurationInSeconds(seconds)) if seconds >= 0 => {
                    if u64::try_from(seconds)
                        .is_ok_and(|s| Duration::from_secs(s) < self.freeze_max_duration)
                    {
                        Ok(Rule::ShortFreeze)
                    } else {
                        Err(SkipReason::FreezeTooLong)
                    }
                }
                _ => Err(SkipReason::FreezeDurationUnknown),
            };
        }
        Err(SkipReason::NotAllowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventId;
    use crate::not_before::NotBefore;
    use azure_scheduled_events_protocol::resources::Resources;

    const VM: &str = "vmss_1";

    fn t(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + seconds, 0).unwrap_or_default()
    }

    fn event(event_type: EventType, source: EventSource, duration: Option<i64>) -> Event {
        Event {
            id: EventId::new("E"),
            event_type,
            status: EventStatus::Scheduled,
            resource_type: "VirtualMachine".into(),
            resources: [VM].into_iter().collect(),
            not_before: NotBefore::parse(Some("Tue, 14 Nov 2023 22:28:20 GMT")),
            description: None,
            source: Some(source),
            duration: duration.map(DurationInSeconds),
        }
    }

    fn freeze(seconds: i64) -> Event {
        event(EventType::Freeze, EventSource::Platform, Some(seconds))
    }

    fn verdict(policy: &Policy, event: &Event) -> Verdict {
        policy.verdict(event, Some(VM), t(0), t(0))
    }

    #[test]
    fn the_default_policy_approves_user_events_of_any_type() {
        for event_type in EventType::impacts() {
            let e = event(event_type.clone(), EventSource::User, Some(-1));
            assert_eq!(
                verdict(&Policy::default(), &e),
                Verdict::Approve(Rule::UserEvent),
                "{event_type}"
            );
        }
    }

    #[test]
    fn the_default_policy_approves_freezes_from_0_to_under_9_seconds() {
        for seconds in 0..9 {
            assert_eq!(
                verdict(&Policy::default(), &freeze(seconds)),
                Verdict::Approve(Rule::ShortFreeze),
                "{seconds}"
            );
        }
        for seconds in [9, 10, 30, i64::MAX] {
            assert_eq!(
                verdict(&Policy::default(), &freeze(seconds)),
                Verdict::Skip(SkipReason::FreezeTooLong),
                "{seconds}"
            );
        }
    }

    #[test]
    fn a_freeze_of_unknown_duration_is_never_approved_as_short() {
        for duration in [Some(-1), Some(-5), Some(i64::MIN), None] {
            assert_eq!(
                verdict(
                    &Policy::default(),
                    &event(EventType::Freeze, EventSource::Platform, duration)
                ),
                Verdict::Skip(SkipReason::FreezeDurationUnknown),
                "{duration:?}"
            );
        }
    }

    #[test]
    fn the_default_policy_leaves_platform_reboots_redeploys_preempts_and_terminates_alone() {
        for event_type in [
            EventType::Reboot,
            EventType::Redeploy,
            EventType::Preempt,
            EventType::Terminate,
            EventType::Other("LiveMigrate".into()),
        ] {
            let e = event(event_type.clone(), EventSource::Platform, Some(0));
            assert_eq!(
                verdict(&Policy::default(), &e),
                Verdict::Skip(SkipReason::NotAllowed),
                "{event_type}"
            );
        }
        let no_source = Event {
            source: None,
            ..event(EventType::Reboot, EventSource::User, Some(-1))
        };
        assert_eq!(
            verdict(&Policy::default(), &no_source),
            Verdict::Skip(SkipReason::NotAllowed),
            "an event without EventSource (api-version before 2019-08-01) is not a user event"
        );
    }

    #[test]
    fn an_event_that_does_not_name_this_vm_is_never_approved_whatever_the_policy() {
        let everything = Policy {
            event_types: EventType::KNOWN.to_vec(),
            takeover_delay: Duration::ZERO,
            ..Policy::default()
        };
        let mut e = event(EventType::Reboot, EventSource::User, Some(0));
        e.resources = ["vmss_10", "vmss_11", "other"].into_iter().collect();
        assert_eq!(
            everything.verdict(&e, Some(VM), t(0), t(10_000)),
            Verdict::Skip(SkipReason::NotThisVm)
        );
        e.resources = Resources::new();
        assert_eq!(
            everything.verdict(&e, Some(VM), t(0), t(10_000)),
            Verdict::Skip(SkipReason::NotThisVm),
            "empty Resources names nobody"
        );
        assert_eq!(
            everything.verdict(&e, None, t(0), t(10_000)),
            Verdict::Skip(SkipReason::VmUnknown)
        );
        e.resources = [VM].into_iter().collect();
        assert_eq!(
            everything.verdict(&e, None, t(0), t(10_000)),
            Verdict::Skip(SkipReason::VmUnknown),
            "an unknown name never matches, even a listed one"
        );
    }

    #[test]
    fn this_vms_name_matches_resources_ignoring_case_only() {
        let mut e = event(EventType::Reboot, EventSource::User, None);
        e.resources = ["VMSS_1"].into_iter().collect();
        assert_eq!(
            verdict(&Policy::default(), &e),
            Verdict::Approve(Rule::UserEvent)
        );
        e.resources = ["vmss_1 ", "xvmss_1", "vmss_10"].into_iter().collect();
        assert_eq!(
            verdict(&Policy::default(), &e),
            Verdict::Skip(SkipReason::NotThisVm)
        );
    }

    #[test]
    fn a_started_event_is_never_approved_whatever_the_policy() {
        let everything = Policy {
            event_types: EventType::KNOWN.to_vec(),
            ..Policy::default()
        };
        let mut e = event(EventType::Reboot, EventSource::User, Some(0));
        e.status = EventStatus::Started;
        e.not_before = NotBefore::parse(Some(""));
        assert_eq!(
            everything.verdict(&e, Some(VM), t(0), t(0)),
            Verdict::Skip(SkipReason::Started)
        );
        e.status = EventStatus::Other("Completed".into());
        assert_eq!(
            everything.verdict(&e, Some(VM), t(0), t(0)),
            Verdict::Skip(SkipReason::UnknownStatus)
        );
    }

    #[test]
    fn an_advisory_is_never_approved_whatever_the_policy() {
        let everything = Policy {
            event_types: EventType::KNOWN.to_vec(),
            takeover_delay: Duration::ZERO,
            ..Policy::default()
        };
        let mut e = event(
            EventType::SpotRebalanceRecommendation,
            EventSource::User,
            Some(0),
        );
        e.status = EventStatus::Advisory;
        e.not_before = NotBefore::parse(Some(""));
        assert_eq!(
            everything.verdict(&e, Some(VM), t(0), t(10_000)),
            Verdict::Skip(SkipReason::Advisory)
        );
        e.status = EventStatus::Scheduled;
        assert_eq!(
            everything.verdict(&e, Some(VM), t(0), t(10_000)),
            Verdict::Skip(SkipReason::Advisory),
            "a rebalance recommendation is advisory whatever its status says"
        );
        let mut preempt = event(EventType::Preempt, EventSource::Platform, Some(-1));
        preempt.status = EventStatus::Advisory;
        assert_eq!(
            everything.verdict(&preempt, Some(VM), t(0), t(10_000)),
            Verdict::Skip(SkipReason::Advisory)
        );
    }

    /// A platform Redeploy three days ahead, first seen at `t(0)`.
    fn redeploy_days_ahead() -> Event {
        let mut e = event(EventType::Redeploy, EventSource::Platform, Some(-1));
        e.not_before = NotBefore::parse(Some(
            &(t(0) + chrono::TimeDelta::days(3))
                .format("%a, %d %b %Y %H:%M:%S GMT")
                .to_string(),
        ));
        e
    }

    #[test]
    fn a_predicted_hardware_failure_is_approved_early_only_when_asked() {
        let waiting = Policy {
            when: When::BeforeNotBefore(Duration::from_secs(600)),
            ..Policy::default()
        };
        let e = redeploy_days_ahead();
        assert_eq!(
            waiting.verdict(&e, Some(VM), t(0), t(5)),
            Verdict::Skip(SkipReason::NotAllowed),
            "off by default"
        );
        let early = Policy {
            predicted_hardware_failure: true,
            ..waiting.clone()
        };
        assert_eq!(
            early.verdict(&e, Some(VM), t(0), t(5)),
            Verdict::Approve(Rule::PredictedHardwareFailure),
            "at once, not 10 minutes before NotBefore"
        );
        assert_eq!(
            early.verdict(&e, Some(VM), t(0) + chrono::TimeDelta::days(2), t(5)),
            Verdict::Skip(SkipReason::NotAllowed),
            "first seen a day before NotBefore: routine notice, not a prediction"
        );
        let denied = Policy {
            deny_event_types: vec![EventType::Redeploy],
            ..early.clone()
        };
        assert_eq!(
            denied.verdict(&e, Some(VM), t(0), t(5)),
            Verdict::Skip(SkipReason::DeniedType)
        );
        let mut shared = e.clone();
        shared.resources = ["vmss_0", VM].into_iter().collect();
        assert!(
            matches!(
                early.verdict(&shared, Some(VM), t(0), t(5)),
                Verdict::Wait {
                    rule: Rule::PredictedHardwareFailure,
                    reason: WaitReason::Takeover { rank: 1 },
                    ..
                }
            ),
            "the takeover order of a shared event still holds"
        );
    }

    #[test]
    fn the_deny_list_wins_over_every_allow_rule() {
        let policy = Policy {
            event_types: vec![EventType::Freeze],
            deny_event_types: vec![EventType::Freeze],
            ..Policy::default()
        };
        let mut e = freeze(1);
        e.source = Some(EventSource::User);
        assert_eq!(verdict(&policy, &e), Verdict::Skip(SkipReason::DeniedType));
    }

    #[test]
    fn listed_event_types_are_approved_whatever_their_source_or_duration() {
        let policy = Policy {
            event_types: vec![EventType::Reboot, EventType::Other("Custom".into())],
            user_events: false,
            freeze_max_duration: Duration::ZERO,
            ..Policy::default()
        };
        let reboot = event(EventType::Reboot, EventSource::Platform, Some(-1));
        assert_eq!(verdict(&policy, &reboot), Verdict::Approve(Rule::EventType));
        let user_redeploy = event(EventType::Redeploy, EventSource::User, None);
        assert_eq!(
            verdict(&policy, &user_redeploy),
            Verdict::Skip(SkipReason::NotAllowed),
            "user events are off"
        );
        assert_eq!(
            verdict(&policy, &freeze(1)),
            Verdict::Skip(SkipReason::NotAllowed),
            "a zero threshold turns the freeze rule off"
        );
    }

    #[test]
    fn before_not_before_waits_until_the_lead_time_then_approves() {
        let mut e = freeze(2);
        e.not_before = NotBefore::parse(Some(&t(600).to_rfc2822().replace("+0000", "GMT")));
        let policy = Policy {
            when: When::BeforeNotBefore(Duration::from_secs(30)),
            ..Policy::default()
        };
        assert_eq!(
            policy.verdict(&e, Some(VM), t(0), t(0)),
            Verdict::Wait {
                rule: Rule::ShortFreeze,
                until: t(570),
                reason: WaitReason::BeforeNotBefore
            }
        );
        assert_eq!(
            policy.verdict(&e, Some(VM), t(0), t(569)),
            Verdict::Wait {
                rule: Rule::ShortFreeze,
                until: t(570),
                reason: WaitReason::BeforeNotBefore
            }
        );
        assert_eq!(
            policy.verdict(&e, Some(VM), t(0), t(570)),
            Verdict::Approve(Rule::ShortFreeze)
        );
        assert_eq!(
            policy.verdict(&e, Some(VM), t(0), t(700)),
            Verdict::Approve(Rule::ShortFreeze),
            "overdue but still Scheduled"
        );
    }

    #[test]
    fn before_not_before_never_approves_an_event_without_a_readable_not_before() {
        let policy = Policy {
            when: When::BeforeNotBefore(Duration::from_secs(30)),
            ..Policy::default()
        };
        for raw in [None, Some(""), Some("soon")] {
            let mut e = freeze(2);
            e.not_before = NotBefore::parse(raw);
            assert_eq!(
                policy.verdict(&e, Some(VM), t(0), t(10_000)),
                Verdict::Skip(SkipReason::NotBeforeUnknown),
                "{raw:?}"
            );
        }
        let mut e = freeze(2);
        e.not_before = NotBefore::parse(Some("soon"));
        assert_eq!(
            Policy::default().verdict(&e, Some(VM), t(0), t(0)),
            Verdict::Approve(Rule::ShortFreeze),
            "approving immediately needs no NotBefore"
        );
    }

    #[test]
    fn a_shared_event_waits_for_this_vms_takeover_turn() {
        let mut e = freeze(2);
        e.resources = ["vmss_0", VM, "vmss_2"].into_iter().collect();
        let policy = Policy::default();
        let wait = Verdict::Wait {
            rule: Rule::ShortFreeze,
            until: t(130),
            reason: WaitReason::Takeover { rank: 1 },
        };
        assert_eq!(policy.verdict(&e, Some(VM), t(100), t(100)), wait);
        assert_eq!(policy.verdict(&e, Some(VM), t(100), t(129)), wait);
        assert_eq!(
            policy.verdict(&e, Some(VM), t(100), t(130)),
            Verdict::Approve(Rule::ShortFreeze)
        );
        assert_eq!(
            policy.verdict(&e, Some("vmss_0"), t(100), t(100)),
            Verdict::Approve(Rule::ShortFreeze),
            "the first VM approves at once"
        );
        assert!(matches!(
            policy.verdict(&e, Some("vmss_2"), t(100), t(159)),
            Verdict::Wait { until, .. } if until == t(160)
        ));
    }

    #[test]
    fn the_later_of_the_lead_time_and_the_takeover_turn_applies() {
        let mut e = freeze(2);
        e.resources = ["vmss_0", VM].into_iter().collect();
        e.not_before = NotBefore::parse(Some(&t(100).to_rfc2822().replace("+0000", "GMT")));
        let policy = Policy {
            when: When::BeforeNotBefore(Duration::from_secs(30)),
            takeover_delay: Duration::from_secs(10),
            ..Policy::default()
        };
        assert!(matches!(
            policy.verdict(&e, Some(VM), t(0), t(0)),
            Verdict::Wait { until, reason: WaitReason::BeforeNotBefore, .. } if until == t(70)
        ));
        assert!(matches!(
            policy.verdict(&e, Some(VM), t(65), t(70)),
            Verdict::Wait { until, reason: WaitReason::Takeover { rank: 1 }, .. } if until == t(75)
        ));
        assert_eq!(
            policy.verdict(&e, Some(VM), t(65), t(75)),
            Verdict::Approve(Rule::ShortFreeze)
        );
    }
}
