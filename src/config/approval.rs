//! The approval settings: mode, policy and hook commands, and how the `--approve.*` flags and
//! the policy file (YAML or JSON, the flags' names without `approve.`) combine into them, a flag
//! given winning over the file.
//!
//! Settings only: deciding what to approve is the core's job
//! ([`azure_scheduled_events_core::approval`]), which is handed the [`approval::Settings`] of an
//! [`ApprovalConfig`] validated here: the mode, the policy, and which hooks exist.

use std::time::Duration;

use azure_scheduled_events_core::approval::{self, Hooks, Mode, Policy, When};

use super::flags::ApproveArgs;
use super::values::EventTypes;
use super::values::{ConfigError, duration, invalid};
use crate::config::file_input;

/// The approval settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalConfig {
    pub mode: Mode,
    pub policy: Policy,
    /// Must exit 0 before an event is approved.
    pub hook: Option<HookCommand>,
    /// Runs when an event affecting this VM appears.
    pub prepare_hook: Option<HookCommand>,
    /// Runs when an event affecting this VM completes or is cancelled.
    pub recover_hook: Option<HookCommand>,
    pub hook_timeout: Duration,
}

impl ApprovalConfig {
    /// What the core decides by: the mode, the policy and which hooks exist, never the commands.
    pub fn settings(&self) -> approval::Settings {
        approval::Settings {
            mode: self.mode,
            policy: self.policy.clone(),
            hooks: Hooks {
                approve: self.hook.is_some(),
                prepare: self.prepare_hook.is_some(),
                recover: self.recover_hook.is_some(),
            },
        }
    }

    /// Whether a hook can ever run: the approval hook (only with `--approve`; a dry run never
    /// runs it), the prepare hook or the recover hook.
    pub fn runs_hooks(&self) -> bool {
        (self.mode == Mode::On && self.hook.is_some())
            || self.prepare_hook.is_some()
            || self.recover_hook.is_some()
    }
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Off,
            policy: Policy::default(),
            hook: None,
            prepare_hook: None,
            recover_hook: None,
            hook_timeout: DEFAULT_HOOK_TIMEOUT,
        }
    }
}

/// Default time a hook has to exit.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(120);

/// A command to run: program and arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookCommand {
    argv: Vec<String>,
}

impl HookCommand {
    /// `["/path/prog","arg"]` (JSON, for arguments with spaces) or `/path/prog arg` (split on
    /// whitespace, no quoting).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let argv: Vec<String> = if text.starts_with('[') {
            serde_json::from_str(text).map_err(|e| format!("not a JSON array of strings: {e}"))?
        } else {
            text.split_whitespace().map(str::to_owned).collect()
        };
        match argv.first() {
            Some(program) if !program.is_empty() => Ok(Self { argv }),
            _ => Err("names no program".to_owned()),
        }
    }

    pub fn argv(&self) -> &[String] {
        &self.argv
    }
}

/// The policy file: the policy flags' names without `approve.` and with underscores.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
struct PolicyFile {
    user_events: Option<bool>,
    predicted_hardware_failure: Option<bool>,
    freeze_max_duration: Option<String>,
    event_types: Option<Vec<String>>,
    deny_event_types: Option<Vec<String>>,
    before_not_before: Option<String>,
    takeover_delay: Option<String>,
}

impl ApproveArgs {
    /// The approval settings.
    pub(super) fn validate(self) -> Result<ApprovalConfig, ConfigError> {
        let file = match &self.policy_file {
            None => PolicyFile::default(),
            Some(path) => {
                let text =
                    file_input::read_to_string(path, file_input::APPROVAL_POLICY).map_err(|e| {
                        invalid("approve.policy-file", format!("{}: {e}", path.display()))
                    })?;
                serde_norway::from_str(&text).map_err(|e| {
                    invalid("approve.policy-file", format!("{}: {e}", path.display()))
                })?
            }
        };
        let file_duration = |flag: &'static str, text: Option<String>| {
            text.map(|t| {
                duration(&t).map_err(|e| invalid(flag, format!("in the policy file: {e}")))
            })
            .transpose()
        };
        let defaults = Policy::default();
        // A flag given wins over the file's list; both are read by the one parser of event types.
        let event_types =
            |flag: &'static str, arg: Option<EventTypes>, listed: Option<Vec<String>>| match arg {
                Some(types) => Ok(types.into_vec()),
                None => EventTypes::from_names(listed.iter().flatten().map(String::as_str))
                    .map(EventTypes::into_vec)
                    .map_err(|e| invalid(flag, format!("in the policy file: {e}"))),
            };
        let when = match (self.before_not_before, file.before_not_before) {
            (Some(when), _) => when,
            (None, Some(text)) => super::values::when(&text).map_err(|e| {
                invalid(
                    "approve.before-not-before",
                    format!("in the policy file: {e}"),
                )
            })?,
            (None, None) => When::Immediately,
        };
        let policy = Policy {
            user_events: self
                .user_events
                .or(file.user_events)
                .unwrap_or(defaults.user_events),
            predicted_hardware_failure: self
                .predicted_hardware_failure
                .or(file.predicted_hardware_failure)
                .unwrap_or(defaults.predicted_hardware_failure),
            freeze_max_duration: match self.freeze_max_duration {
                Some(d) => d,
                None => file_duration("approve.freeze-max-duration", file.freeze_max_duration)?
                    .unwrap_or(defaults.freeze_max_duration),
            },
            event_types: event_types("approve.event-types", self.event_types, file.event_types)?,
            deny_event_types: event_types(
                "approve.deny-event-types",
                self.deny_event_types,
                file.deny_event_types,
            )?,
            when,
            takeover_delay: match self.takeover_delay {
                Some(d) => d,
                None => file_duration("approve.takeover-delay", file.takeover_delay)?
                    .unwrap_or(defaults.takeover_delay),
            },
        };
        for (flag, value) in [
            ("approve.freeze-max-duration", policy.freeze_max_duration),
            ("approve.takeover-delay", policy.takeover_delay),
        ] {
            if value > MAX_POLICY_DURATION {
                return Err(invalid(flag, "must be at most 7 days"));
            }
        }
        if let When::BeforeNotBefore(lead) = policy.when
            && lead > MAX_POLICY_DURATION
        {
            return Err(invalid(
                "approve.before-not-before",
                "must be at most 7 days",
            ));
        }
        super::values::bounded(
            "approve.hook-timeout",
            self.hook_timeout,
            Duration::from_secs(3600),
        )?;
        let hook = |flag: &'static str, text: Option<String>| {
            text.map(|t| HookCommand::parse(&t).map_err(|e| invalid(flag, format!("{t:?}: {e}"))))
                .transpose()
        };
        let approval = ApprovalConfig {
            mode: match (self.approve, self.dry_run) {
                (_, true) => Mode::DryRun,
                (true, false) => Mode::On,
                (false, false) => Mode::Off,
            },
            policy,
            hook: hook("approve.hook", self.hook)?,
            prepare_hook: hook("approve.prepare-hook", self.prepare_hook)?,
            recover_hook: hook("approve.recover-hook", self.recover_hook)?,
            hook_timeout: self.hook_timeout,
        };
        Ok(approval)
    }
}

/// Longest duration a policy setting may have: Azure announces events at most about 7 days ahead.
const MAX_POLICY_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_json_arrays_or_words() -> Result<(), String> {
        assert_eq!(
            HookCommand::parse("/usr/bin/drain --fast")?.argv(),
            ["/usr/bin/drain", "--fast"]
        );
        assert_eq!(
            HookCommand::parse(r#"["sh", "-c", "drain && checkpoint"]"#)?.argv(),
            ["sh", "-c", "drain && checkpoint"]
        );
        assert!(HookCommand::parse("").is_err());
        assert!(HookCommand::parse("  ").is_err());
        assert!(HookCommand::parse("[]").is_err());
        assert!(HookCommand::parse(r#"[""]"#).is_err());
        assert!(HookCommand::parse("[1, 2]").is_err());
        Ok(())
    }
}
