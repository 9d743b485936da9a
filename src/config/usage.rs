//! A usage error as the agent prints it: one line, as every invalid setting is (a supervisor's
//! log shows one line per attempt), that still says all clap would have said over several: the
//! error, the possible values (`[possible values: json, text]`) and the tip naming a similar
//! flag (`tip: a similar argument exists: '--poll.interval'`). Only the usage summary and the
//! pointer to `--help` are left out.
//!
//! clap stops at the first error; [`parse_all`] goes on, for `check-config`, which reports them
//! all.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue};

/// `error` on one line, without the leading `error: `.
pub fn one_line(error: &clap::Error) -> String {
    let rendered = error.render().to_string();
    let mut line = String::new();
    for part in rendered.lines().map(str::trim) {
        if part.starts_with("Usage:") || part.starts_with("For more information") {
            break;
        }
        if part.is_empty() {
            continue;
        }
        if !line.is_empty() {
            line.push_str(if part.starts_with('[') { " " } else { "; " });
        }
        line.push_str(part);
    }
    let line = line.strip_prefix("error: ").unwrap_or(&line);
    if line.is_empty() {
        "invalid arguments".to_owned()
    } else {
        line.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

/// Parses `args` as `P`, collecting every usage error clap finds, one line each: after each error,
/// the argument it names is left out (its words on the command line, or its variable) and the rest
/// parsed again. Returns what the last parse made of the rest, unless an error named no argument
/// it could leave out (a subcommand missing, say).
pub fn parse_all<P: clap::Parser>(args: &[OsString]) -> (Option<P>, Vec<String>) {
    let mut command = P::command();
    let mut args = args.to_vec();
    let mut errors = Vec::new();
    // Each round leaves out at least one word or variable, so this ends; the bound is a guard.
    for _ in 0..64 {
        let error = match command.clone().try_get_matches_from(&args) {
            Ok(matches) => match P::from_arg_matches(&matches) {
                Ok(parsed) => return (Some(parsed), errors),
                Err(error) => error,
            },
            Err(error) => error,
        };
        errors.push(one_line(&error));
        let Some(ContextValue::String(named)) = error.get(ContextKind::InvalidArg) else {
            break;
        };
        // `--log.format <LOG_FORMAT>`, `--approve[=<BOOL>]`, `--poll.intervl`, or a stray word.
        let word = named
            .split([' ', '[', '='])
            .next()
            .unwrap_or_default()
            .trim_matches('\'')
            .to_owned();
        let before = args.len();
        let mut skip_value = false;
        args = std::iter::once(args[0].clone())
            .chain(
                args[1..]
                    .iter()
                    .filter(|arg| {
                        let arg = arg.to_string_lossy();
                        if std::mem::take(&mut skip_value) && !arg.starts_with('-') {
                            return false;
                        }
                        if arg == word {
                            skip_value = word.starts_with("--");
                            return false;
                        }
                        !(word.starts_with("--") && arg.starts_with(&format!("{word}=")))
                    })
                    .cloned(),
            )
            .collect();
        if args.len() == before {
            match word.strip_prefix("--") {
                Some(long) if has_variable(&command, long) => {
                    command = without_variable(command, long);
                }
                _ => break,
            }
        }
    }
    (None, errors)
}

fn has_variable(command: &clap::Command, long: &str) -> bool {
    command
        .get_arguments()
        .any(|a| a.get_long() == Some(long) && a.get_env().is_some())
        || command.get_subcommands().any(|sub| has_variable(sub, long))
}

/// `command` with the variable of the flag `--long` no longer read, in every subcommand.
fn without_variable(command: clap::Command, long: &str) -> clap::Command {
    let ids: Vec<clap::Id> = command
        .get_arguments()
        .filter(|a| a.get_long() == Some(long))
        .map(|a| a.get_id().clone())
        .collect();
    let mut command = command;
    for id in ids {
        command = command.mut_arg(id, |arg| arg.env(None::<&'static str>));
    }
    command.mut_subcommands(|sub| without_variable(sub, long))
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::config::Cli;

    fn error(args: &[&str]) -> String {
        match Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())) {
            Ok(_) => panic!("{args:?} was accepted"),
            Err(e) => one_line(&e),
        }
    }

    #[test]
    fn a_mistyped_flag_names_the_similar_one_on_one_line() {
        let line = error(&["--poll.intervl=1s"]);
        assert!(line.contains("'--poll.intervl'"), "{line}");
        assert!(
            line.contains("a similar argument exists: '--poll.interval'"),
            "{line}"
        );
        assert!(!line.contains('\n') && !line.starts_with("error"), "{line}");
    }

    #[test]
    fn a_value_outside_a_closed_set_lists_the_possible_values() {
        let line = error(&["--log.format=yaml"]);
        assert!(line.contains("--log.format"), "{line}");
        assert!(line.contains("[possible values: json, text]"), "{line}");
        let line = error(&["--approve=maybe"]);
        assert!(line.contains("[possible values: true, false]"), "{line}");
    }

    #[test]
    fn every_usage_error_is_collected_and_the_rest_parsed() {
        let args: Vec<OsString> = [
            "x",
            "check-config",
            "--poll.interval=fast",
            "--log.format",
            "yaml",
            "--imds.url=http://imds.example",
            "--poll.intervl=1s",
        ]
        .into_iter()
        .map(OsString::from)
        .collect();
        let (cli, errors) = parse_all::<Cli>(&args);
        assert_eq!(errors.len(), 3, "{errors:#?}");
        assert!(errors[0].contains("--poll.interval"), "{errors:#?}");
        assert!(
            errors[1].contains("[possible values: json, text]"),
            "{errors:#?}"
        );
        assert!(errors[2].contains("'--poll.interval'"), "{errors:#?}");
        let Some(Cli {
            command: Some(crate::config::Command::CheckConfig(check)),
            ..
        }) = cli
        else {
            panic!("the rest did not parse");
        };
        assert_eq!(check.agent.imds_url, "http://imds.example");
    }
}
