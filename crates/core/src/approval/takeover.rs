//! Who approves a shared event, and when: the takeover order. Pure.
//!
//! Approving lets an event proceed for every VM in its `Resources`. So that one dead VM never
//! blocks an event and two live ones never race, the VMs take turns in `Resources` order: the
//! first VM (rank 0) may approve at once, the k-th only once the event is still Scheduled k times
//! the takeover delay after that VM first saw it. Every VM computes its own rank from the same
//! list, so no coordination is needed. `docs/approval.md` gives the worst cases.

use std::time::Duration;

use azure_scheduled_events_protocol::resources::Resources;
use chrono::{DateTime, Utc};

/// This VM's position in `Resources` (0 is the leader), comparing names as Azure does, ignoring
/// ASCII case; the first match counts if a name is listed twice. `None` if it is not listed.
pub fn rank(resources: &Resources, vm: &str) -> Option<usize> {
    resources
        .iter()
        .position(|name| name.eq_ignore_ascii_case(vm))
}

/// When the VM of `rank` may approve an event it first saw at `first_seen`.
pub fn turn(first_seen: DateTime<Utc>, rank: usize, delay: Duration) -> DateTime<Utc> {
    let wait = delay.saturating_mul(u32::try_from(rank).unwrap_or(u32::MAX));
    first_seen
        .checked_add_signed(chrono_duration(wait))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// A std duration as a chrono one, saturating (flag values are validated far below the limit).
/// Here, at the bottom of the approval rules, so the policy's lead time and the retry delays
/// use it too without a cycle.
pub(crate) fn chrono_duration(duration: Duration) -> chrono::TimeDelta {
    chrono::TimeDelta::from_std(duration).unwrap_or(chrono::TimeDelta::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resources(names: &[&str]) -> Resources {
        names.iter().collect()
    }

    fn t(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + seconds, 0).unwrap_or_default()
    }

    #[test]
    fn rank_is_the_position_in_resources_ignoring_case() {
        let list = resources(&["web_0", "WEB_1", "web_2"]);
        assert_eq!(rank(&list, "web_0"), Some(0));
        assert_eq!(rank(&list, "web_1"), Some(1));
        assert_eq!(rank(&list, "Web_2"), Some(2));
        assert_eq!(rank(&list, "web_3"), None);
        assert_eq!(rank(&list, "web_"), None, "no prefix matches");
        assert_eq!(rank(&resources(&[]), "web_0"), None);
    }

    #[test]
    fn a_name_listed_twice_takes_its_first_place() {
        assert_eq!(rank(&resources(&["a", "b", "a"]), "a"), Some(0));
        assert_eq!(rank(&resources(&["b", "a", "A"]), "a"), Some(1));
    }

    #[test]
    fn every_vm_gets_a_distinct_turn_in_resources_order() {
        let list = resources(&["v0", "v1", "v2", "v3"]);
        let delay = Duration::from_secs(30);
        let turns: Vec<DateTime<Utc>> = ["v0", "v1", "v2", "v3"]
            .iter()
            .filter_map(|vm| rank(&list, vm))
            .map(|r| turn(t(0), r, delay))
            .collect();
        assert_eq!(turns, [t(0), t(30), t(60), t(90)]);
    }

    #[test]
    fn huge_ranks_and_delays_saturate_instead_of_overflowing() {
        let far = turn(t(0), usize::MAX, Duration::MAX);
        assert!(far > t(1_000_000_000));
        assert_eq!(turn(t(5), 7, Duration::ZERO), t(5));
    }
}
