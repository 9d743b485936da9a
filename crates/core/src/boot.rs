//! Was the last stop of the agent a reboot of the machine, and was it expected?
//!
//! [`classify`] is pure: it compares the boot identity saved in the state file with the current
//! one, and looks at the impact the state says this VM was under. A reboot that follows an event of
//! this VM seen Started (Reboot, Redeploy, Freeze, Preempt; see [`crate::state::IMPACT_TYPES`]) is
//! expected; any other is unexpected. Either way, a reboot after the agent stopped cleanly (the
//! state says so: SIGTERM at shutdown, as `systemctl reboot`, kured or unattended upgrades do)
//! is clean; after a crash, a power cut or a kill it is not. The boot id is read by the agent's
//! shell and passed in: on Linux `/proc/sys/kernel/random/boot_id`, a random id the kernel draws
//! at each boot. Windows has no such id: its boot identity is the time it booted
//! ([`boot_time_id`]), and two readings within [`BOOT_TIME_TOLERANCE`] of each other are one
//! boot, so that a clock corrected by time sync or a VM paused for a while is not taken for a
//! reboot.

use crate::state::{Impact, State};

/// How this start of the agent relates to the previous one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restart {
    /// No state from a previous run: nothing to compare with.
    FirstStart,
    /// The boot identity is unreadable now or was not saved: cannot tell.
    Unknown,
    /// The agent restarted on the same boot.
    SameBoot,
    /// The machine booted since the state was written; `clean` when the agent had stopped
    /// cleanly before it.
    Reboot {
        expected_by: Option<Impact>,
        clean: bool,
    },
}

impl Restart {
    /// The `expected` label of `..._reboots_total`, for reboots.
    pub fn expected_label(&self) -> Option<&'static str> {
        match self {
            Restart::Reboot {
                expected_by: Some(_),
                ..
            } => Some("true"),
            Restart::Reboot {
                expected_by: None, ..
            } => Some("false"),
            _ => None,
        }
    }

    /// The `clean` label of `..._reboots_total`, for reboots.
    pub fn clean_label(&self) -> Option<&'static str> {
        match self {
            Restart::Reboot { clean: true, .. } => Some("true"),
            Restart::Reboot { clean: false, .. } => Some("false"),
            _ => None,
        }
    }
}

/// Classifies this start from the previous run's state (`None` when there was none) and the
/// current boot id.
pub fn classify(previous: Option<&State>, boot_id: Option<&str>) -> Restart {
    let Some(previous) = previous else {
        return Restart::FirstStart;
    };
    match (previous.boot_id.as_deref(), boot_id) {
        (Some(before), Some(now)) if same_boot(before, now) => Restart::SameBoot,
        (Some(_), Some(_)) => Restart::Reboot {
            expected_by: previous.expected_impact.clone(),
            clean: previous.clean_stop.is_some(),
        },
        _ => Restart::Unknown,
    }
}

/// Boot ids that are boot times (Windows) start with this, then Unix seconds.
const BOOT_TIME_PREFIX: &str = "boot-time:";

/// How far two readings of the boot time may differ and still be one boot: more than time sync
/// corrects a running VM's clock by, or a Freeze pauses it for; less than a Windows VM takes to
/// boot, start the agent, stop and boot again (minutes on Azure).
pub const BOOT_TIME_TOLERANCE: std::time::Duration = std::time::Duration::from_secs(60);

/// Two boot ids name one boot: equal, or boot times within [`BOOT_TIME_TOLERANCE`].
fn same_boot(before: &str, now: &str) -> bool {
    let boot_time = |id: &str| id.strip_prefix(BOOT_TIME_PREFIX)?.parse::<u64>().ok();
    match (boot_time(before), boot_time(now)) {
        (Some(before), Some(now)) => before.abs_diff(now) <= BOOT_TIME_TOLERANCE.as_secs(),
        _ => before == now,
    }
}

/// The boot id of a boot time given as time since the Unix epoch (Windows: now less the tick
/// count, in whole seconds).
pub fn boot_time_id(boot_time: std::time::Duration) -> String {
    format!("{BOOT_TIME_PREFIX}{}", boot_time.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;

    fn state(boot: Option<&str>, impact: Option<&str>) -> State {
        State {
            boot_id: boot.map(str::to_owned),
            expected_impact: impact.map(|t| Impact {
                event_id: "E".into(),
                event_type: t.into(),
                started_seen: DateTime::UNIX_EPOCH,
            }),
            ..State::new()
        }
    }

    #[test]
    fn a_new_boot_after_a_started_impact_is_an_expected_reboot() {
        let previous = state(Some("a"), Some("Reboot"));
        let restart = classify(Some(&previous), Some("b"));
        assert_eq!(restart.expected_label(), Some("true"));
        assert!(
            matches!(restart, Restart::Reboot { expected_by: Some(ref i), clean: false } if i.event_id == "E")
        );
    }

    #[test]
    fn a_new_boot_without_an_impact_is_unexpected() {
        let restart = classify(Some(&state(Some("a"), None)), Some("b"));
        assert_eq!(
            restart,
            Restart::Reboot {
                expected_by: None,
                clean: false
            }
        );
        assert_eq!(restart.expected_label(), Some("false"));
        assert_eq!(restart.clean_label(), Some("false"));
    }

    #[test]
    fn a_new_boot_after_a_clean_stop_is_a_clean_reboot_expected_or_not() {
        let mut previous = state(Some("a"), None);
        previous.clean_stop = Some(DateTime::UNIX_EPOCH);
        let restart = classify(Some(&previous), Some("b"));
        assert_eq!(restart.expected_label(), Some("false"));
        assert_eq!(restart.clean_label(), Some("true"));
        previous.expected_impact = state(Some("a"), Some("Reboot")).expected_impact;
        let restart = classify(Some(&previous), Some("b"));
        assert_eq!(restart.expected_label(), Some("true"));
        assert_eq!(restart.clean_label(), Some("true"));
        // A clean stop and a start on the same boot: no reboot at all.
        assert_eq!(classify(Some(&previous), Some("a")), Restart::SameBoot);
        assert_eq!(classify(Some(&previous), Some("a")).clean_label(), None);
    }

    #[test]
    fn the_same_boot_is_a_restart_of_the_agent_only_even_during_an_impact() {
        let restart = classify(Some(&state(Some("a"), Some("Reboot"))), Some("a"));
        assert_eq!(restart, Restart::SameBoot);
        assert_eq!(restart.expected_label(), None);
    }

    #[test]
    fn without_both_boot_ids_nothing_is_claimed() {
        assert_eq!(classify(None, Some("a")), Restart::FirstStart);
        assert_eq!(
            classify(Some(&state(None, Some("Reboot"))), Some("a")),
            Restart::Unknown
        );
        assert_eq!(
            classify(Some(&state(Some("a"), None)), None),
            Restart::Unknown
        );
    }

    #[test]
    fn boot_times_a_little_apart_are_one_boot_and_a_minute_more_is_a_reboot() {
        let at = |seconds| boot_time_id(std::time::Duration::from_secs(seconds));
        let previous = state(Some(&at(1_700_000_000)), Some("Reboot"));
        for drift in [1_699_999_940, 1_699_999_999, 1_700_000_000, 1_700_000_060] {
            assert_eq!(
                classify(Some(&previous), Some(&at(drift))),
                Restart::SameBoot,
                "{drift}"
            );
        }
        assert_eq!(
            classify(Some(&previous), Some(&at(1_700_000_061))).expected_label(),
            Some("true")
        );
        assert_eq!(
            classify(Some(&previous), Some(&at(1_699_999_939))).expected_label(),
            Some("true")
        );
        assert_eq!(
            classify(Some(&previous), Some("boot-time:not-a-number")).expected_label(),
            Some("true"),
            "anything else is compared as it is"
        );
    }
}
