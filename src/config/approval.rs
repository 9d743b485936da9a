//! The approval settings: mode, policy and hook commands, as the `--approve.*` flags and the
//! policy file give them.
//!
//! Settings only: deciding what to approve is [`crate::approval`]'s job, which receives an
//! [`ApprovalConfig`] already validated here.

use std::time::Duration;

use crate::event::EventType;

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

/// When an allowed event is approved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// As soon as it is seen (and this VM's takeover turn has come).
    Immediately,
    /// No earlier than this long before `NotBefore` (the case study drains 30 s before).
    BeforeNotBefore(Duration),
}

/// What may be approved. The default is Microsoft's sample policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Approve events whose `EventSource` is `User` (a restart or redeploy someone asked for).
    pub user_events: bool,
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

/// Microsoft's sample: Freezes shorter than this many seconds are approved.
pub const DEFAULT_FREEZE_MAX_DURATION: Duration = Duration::from_secs(9);

/// Default delay between one VM's turn to approve a shared event and the next VM's.
pub const DEFAULT_TAKEOVER_DELAY: Duration = Duration::from_secs(30);

impl Default for Policy {
    fn default() -> Self {
        Self {
            user_events: true,
            freeze_max_duration: DEFAULT_FREEZE_MAX_DURATION,
            event_types: Vec::new(),
            deny_event_types: Vec::new(),
            when: When::Immediately,
            takeover_delay: DEFAULT_TAKEOVER_DELAY,
        }
    }
}

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
