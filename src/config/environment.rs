//! The environment as a source of settings. Every flag reads one variable, its name derived from
//! the flag's ([`variable_of`]: `--poll.interval` is `AZURE_SCHEDULED_EVENTS_POLL_INTERVAL`), and
//! a variable with the agent's prefix that no flag reads is an error naming the nearest one
//! ([`unknown_variables`]): `AZURE_SCHEDULED_EVENTS_APROVE=true` must not leave approval quietly
//! off. The names known are those of every argument of every subcommand (the simulator's
//! `AZURE_SCHEDULED_EVENTS_SIMULATOR_*` among them), read from clap's definitions, so one set of
//! variables may serve the agent and the tools next to it. The standard variables the agent also
//! reads (`OTEL_*`, `KUBECONFIG`, the proxy variables) have other names and are not checked here.
//!
//! The environment is passed in, so tests give a list and never touch the process's own.

use std::ffi::OsString;
use std::fmt;

use super::nearest;

/// The prefix of every variable that sets a flag.
pub const PREFIX: &str = "AZURE_SCHEDULED_EVENTS_";

/// The variable of the agent's flag `flag` (without the dashes): the prefix, then the flag in
/// upper case with dots and dashes as underscores.
pub fn variable_of(flag: &str) -> String {
    let name: String = flag
        .chars()
        .map(|c| match c {
            '.' | '-' => '_',
            other => other.to_ascii_uppercase(),
        })
        .collect();
    format!("{PREFIX}{name}")
}

/// A variable clap reads, with the flag that reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    pub variable: String,
    /// `--flag`, or `simulator --flag` for a subcommand's own flag.
    pub flag: String,
}

/// Every variable with [`PREFIX`] that an argument of `command` or of its subcommands reads,
/// hidden arguments included, each once.
pub fn known_variables(command: &clap::Command) -> Vec<Known> {
    let mut known = Vec::new();
    collect(command, "", &mut known);
    known
}

fn collect(command: &clap::Command, path: &str, known: &mut Vec<Known>) {
    for arg in command.get_arguments() {
        let (Some(variable), Some(long)) = (arg.get_env(), arg.get_long()) else {
            continue;
        };
        let variable = variable.to_string_lossy();
        if !variable.starts_with(PREFIX) || known.iter().any(|k| k.variable == variable) {
            continue;
        }
        known.push(Known {
            variable: variable.into_owned(),
            flag: format!("{path}--{long}"),
        });
    }
    for sub in command.get_subcommands() {
        collect(sub, &format!("{path}{} ", sub.get_name()), known);
    }
}

/// A variable with the agent's prefix that no flag reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVariable {
    pub name: String,
    /// The known variable nearest to it, and whether it is near enough to be a typo of it.
    pub nearest: Option<(Known, bool)>,
}

impl fmt::Display for UnknownVariable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown environment variable {}: no flag reads it",
            self.name
        )?;
        match &self.nearest {
            Some((known, true)) => write!(f, "; did you mean {} ({})?", known.variable, known.flag),
            Some((known, false)) => write!(
                f,
                "; the nearest is {} ({}), and --help lists them all",
                known.variable, known.flag
            ),
            None => Ok(()),
        }
    }
}

/// The variables of `env` that have [`PREFIX`] (in any case: a lower-case one is a typo too) but
/// that no argument of `command` reads, in the order given.
pub fn unknown_variables(
    command: &clap::Command,
    env: impl IntoIterator<Item = (OsString, OsString)>,
) -> Vec<UnknownVariable> {
    let known = known_variables(command);
    let mut unknown = Vec::new();
    for (name, _) in env {
        let name = name.to_string_lossy();
        let has_prefix = name
            .get(..PREFIX.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(PREFIX));
        // Windows reads variables whatever their case, as clap then does.
        let read = |k: &Known| {
            if cfg!(windows) {
                k.variable.eq_ignore_ascii_case(&name)
            } else {
                k.variable == name
            }
        };
        if !has_prefix || known.iter().any(read) {
            continue;
        }
        // Compared without the prefix they share: a third of the rest is a typo's distance.
        let rest = |variable: &'_ str| variable.get(PREFIX.len()..).unwrap_or_default().to_owned();
        let typed = rest(&name);
        let names: Vec<String> = known.iter().map(|k| rest(&k.variable)).collect();
        let nearest =
            nearest::closest(&typed, names.iter().map(String::as_str)).and_then(|(meant, _)| {
                let typo = nearest::nearest(&typed, [meant]).is_some();
                known
                    .iter()
                    .find(|k| rest(&k.variable) == meant)
                    .map(|k| (k.clone(), typo))
            });
        unknown.push(UnknownVariable {
            name: name.into_owned(),
            nearest,
        });
    }
    unknown
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    use super::*;
    use crate::config::Cli;

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(name, value)| (OsString::from(name), OsString::from(value)))
            .collect()
    }

    #[test]
    fn a_flags_variable_is_the_prefix_and_the_flag_in_upper_case() {
        assert_eq!(
            variable_of("poll.interval"),
            "AZURE_SCHEDULED_EVENTS_POLL_INTERVAL"
        );
        assert_eq!(
            variable_of("web.config.file"),
            "AZURE_SCHEDULED_EVENTS_WEB_CONFIG_FILE"
        );
    }

    #[test]
    fn a_mistyped_variable_is_refused_naming_the_one_meant() {
        let unknown = unknown_variables(
            &Cli::command(),
            env(&[
                ("AZURE_SCHEDULED_EVENTS_APROVE", "true"),
                ("AZURE_SCHEDULED_EVENTS_POLL_INTERVAL", "1s"),
                ("PATH", "/usr/bin"),
            ]),
        );
        assert_eq!(unknown.len(), 1, "{unknown:?}");
        assert_eq!(
            unknown[0].to_string(),
            "unknown environment variable AZURE_SCHEDULED_EVENTS_APROVE: no flag reads it; did you mean AZURE_SCHEDULED_EVENTS_APPROVE (--approve)?"
        );
    }

    #[test]
    fn variables_of_hidden_flags_and_of_subcommands_are_known() {
        let unknown = unknown_variables(
            &Cli::command(),
            env(&[
                ("AZURE_SCHEDULED_EVENTS_SIMULATOR_SCENARIO", "demo"),
                ("AZURE_SCHEDULED_EVENTS_KUBERNETES_NODE_NAME", "node-1"),
                ("KUBECONFIG", "/etc/kubeconfig"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ]),
        );
        assert_eq!(unknown, []);
    }

    #[test]
    fn a_variable_far_from_every_name_is_refused_too() {
        let unknown = unknown_variables(
            &Cli::command(),
            env(&[("azure_scheduled_events_something_else_entirely", "1")]),
        );
        assert_eq!(unknown.len(), 1);
        let line = unknown[0].to_string();
        assert!(
            line.contains("the nearest is AZURE_SCHEDULED_EVENTS_"),
            "{line}"
        );
    }
}
