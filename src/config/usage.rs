//! A usage error as the agent prints it: one line, as every invalid setting is (a supervisor's
//! log shows one line per attempt), that still says all clap would have said over several: the
//! error, the possible values (`[possible values: json, text]`) and the tip naming a similar
//! flag (`tip: a similar argument exists: '--poll.interval'`). Only the usage summary and the
//! pointer to `--help` are left out.

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
}
