//! Settings said in words, for the lines a person reads at start (`approval enabled`) and for
//! `check-imds`: the approval policy as its rules, not as a Rust value.

use std::time::Duration;

use azure_scheduled_events_core::approval::{Policy, When};

fn seconds(duration: Duration) -> String {
    humantime::format_duration(duration).to_string()
}

/// The approval policy in one sentence: what it approves, what it never approves, and when.
/// "approves events a user started (EventSource User) and Freezes shorter than 9s; never
/// Terminate; as soon as seen; a shared event by each next VM of its Resources 30s after the one
/// before".
pub fn policy(policy: &Policy) -> String {
    let mut allowed = Vec::new();
    if policy.user_events {
        allowed.push("events a user started (EventSource User)".to_owned());
    }
    if !policy.freeze_max_duration.is_zero() {
        allowed.push(format!(
            "Freezes shorter than {}",
            seconds(policy.freeze_max_duration)
        ));
    }
    if !policy.event_types.is_empty() {
        let types: Vec<&str> = policy.event_types.iter().map(|t| t.as_str()).collect();
        allowed.push(format!("every {}", types.join(", ")));
    }
    if policy.predicted_hardware_failure {
        allowed.push("a predicted hardware failure's Reboot or Redeploy at once".to_owned());
    }
    let mut text = if allowed.is_empty() {
        "approves nothing (no rule allows an event)".to_owned()
    } else {
        format!("approves {}", allowed.join(" and "))
    };
    if !policy.deny_event_types.is_empty() {
        let types: Vec<&str> = policy.deny_event_types.iter().map(|t| t.as_str()).collect();
        text.push_str(&format!("; never {}", types.join(", ")));
    }
    match policy.when {
        When::Immediately => text.push_str("; as soon as seen"),
        When::BeforeNotBefore(before) => {
            text.push_str(&format!(
                "; no earlier than {} before NotBefore",
                seconds(before)
            ));
        }
    }
    if policy.takeover_delay.is_zero() {
        text.push_str("; a shared event by every VM of its Resources at once");
    } else {
        text.push_str(&format!(
            "; a shared event by each next VM of its Resources {} after the one before",
            seconds(policy.takeover_delay)
        ));
    }
    text.push_str("; only events naming this VM, never once Started");
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use azure_scheduled_events_core::event::EventType;

    #[test]
    fn the_default_policy_reads_as_microsofts_sample() {
        assert_eq!(
            policy(&Policy::default()),
            "approves events a user started (EventSource User) and Freezes shorter than 9s; as soon as seen; a shared event by each next VM of its Resources 30s after the one before; only events naming this VM, never once Started"
        );
    }

    #[test]
    fn every_setting_of_the_policy_is_said() {
        let custom = Policy {
            user_events: false,
            predicted_hardware_failure: true,
            freeze_max_duration: Duration::ZERO,
            event_types: vec![EventType::Reboot, EventType::Redeploy],
            deny_event_types: vec![EventType::Terminate],
            when: When::BeforeNotBefore(Duration::from_secs(90)),
            takeover_delay: Duration::ZERO,
        };
        let text = policy(&custom);
        for said in [
            "every Reboot, Redeploy",
            "predicted hardware failure",
            "never Terminate",
            "no earlier than 1m 30s before NotBefore",
            "every VM of its Resources at once",
        ] {
            assert!(text.contains(said), "{said}: {text}");
        }
        assert!(
            !text.contains("EventSource User") && !text.contains("Freezes"),
            "{text}"
        );
        assert!(!text.contains("Policy {"), "{text}");
        let nothing = Policy {
            user_events: false,
            freeze_max_duration: Duration::ZERO,
            ..Policy::default()
        };
        assert!(policy(&nothing).starts_with("approves nothing"));
    }
}
