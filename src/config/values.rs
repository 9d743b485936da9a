//! The syntaxes settings share, each read by one function wherever it is written (a flag, its
//! environment variable, the approval policy file, the receivers file): booleans ([`boolean`] and
//! the style every boolean flag has, [`boolean_style`]), comma-separated lists ([`list`]) and sets
//! of event types ([`EventTypes`], [`ImpactEventTypes`]), when to approve ([`when`]), durations ([`duration`], each within its
//! maximum by [`bounded`]); and the error a setting's value gets, [`ConfigError`], named by its flag.
//!
//! clap calls these as value parsers, so a bad value is a clap error that names the flag (and its
//! possible values), and the reference (docs/configuration.md) and the chart's values schema tell
//! a setting's syntax by the type its parser produces.

use std::any::TypeId;
use std::time::Duration;

use azure_scheduled_events_core::approval::When;
use azure_scheduled_events_core::event::EventType;
use clap::builder::{PossibleValuesParser, TypedValueParser as _, ValueParser};
use clap::{Arg, ArgAction};

use super::nearest::nearest;

/// The values a boolean takes, on the command line and in a variable (any case).
pub const BOOLEAN_VALUES: [&str; 2] = ["true", "false"];

/// `true` or `false`, in any case.
pub fn boolean(text: &str) -> Result<bool, String> {
    match text.trim() {
        t if t.eq_ignore_ascii_case("true") => Ok(true),
        t if t.eq_ignore_ascii_case("false") => Ok(false),
        other => Err(format!("{other:?} is not true or false")),
    }
}

/// The value parser of every boolean flag: [`BOOLEAN_VALUES`], listed in clap's error.
pub fn boolean_parser() -> ValueParser {
    ValueParser::new(
        PossibleValuesParser::new(BOOLEAN_VALUES).map(|text| boolean(&text).unwrap_or_default()),
    )
}

/// The one style of every boolean flag, as node_exporter's `--flag=true|false`: `--flag` alone
/// means `--flag=true`, `--flag=false` turns it off (also a setting that is on by default), and the
/// variable takes `true` or `false`. As with every flag, the value may also follow as the next
/// word (`--approve.user-events false`, which users' command lines have written since that flag
/// took a value); a word that is neither is an error listing both.
///
/// Applied to every argument of a command (`#[command(mut_args = ...)]`): a `bool` field (clap's
/// `SetTrue`) gets the default `false`; an `Option<bool>` field (a setting whose default lies
/// elsewhere, such as the policy file) stays `None` unless given. Other arguments pass unchanged.
pub fn boolean_style(arg: Arg) -> Arg {
    let switch = matches!(arg.get_action(), ArgAction::SetTrue);
    let optional = matches!(arg.get_action(), ArgAction::Set)
        && arg.get_value_parser().type_id() == TypeId::of::<bool>();
    if !switch && !optional {
        return arg;
    }
    let arg = arg
        .action(ArgAction::Set)
        .num_args(0..=1)
        .default_missing_value("true")
        .ignore_case(true)
        .value_name("BOOL")
        .value_parser(boolean_parser());
    if switch {
        arg.default_value("false")
    } else {
        arg
    }
}

/// The items of a comma-separated list, trimmed, empty ones left out (`a, b,,` is `a` and `b`).
pub fn list(text: &str) -> impl Iterator<Item = &str> {
    text.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
}

/// A set of known event types, in the order first written, each once: a comma-separated list on
/// the command line (`Reboot,Redeploy`, any case), a list in a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventTypes(Vec<EventType>);

impl EventTypes {
    /// A comma-separated list, as a flag or variable gives it.
    pub fn parse(text: &str) -> Result<Self, String> {
        Self::from_names(list(text))
    }

    /// Names, as a file lists them.
    pub fn from_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<Self, String> {
        let mut types = Vec::new();
        for name in names {
            let known = EventType::parse_known(name).map_err(|error| {
                let names = EventType::KNOWN.iter().map(EventType::as_str);
                match nearest(name.trim(), names) {
                    Some(meant) => format!("{error} (did you mean {meant}?)"),
                    None => error,
                }
            })?;
            if !types.contains(&known) {
                types.push(known);
            }
        }
        Ok(Self(types))
    }

    pub fn as_slice(&self) -> &[EventType] {
        &self.0
    }

    pub fn into_vec(self) -> Vec<EventType> {
        self.0
    }
}

/// A set of event types that announce an impact ([`EventType::impacts`]): what drains a node or
/// takes it out of load balancers. An advisory announces none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImpactEventTypes(Vec<EventType>);

impl ImpactEventTypes {
    pub fn parse(text: &str) -> Result<Self, String> {
        let types = EventTypes::parse(text)?.into_vec();
        match types.iter().find(|t| t.is_advisory()) {
            Some(advisory) => Err(format!(
                "{advisory} is an advisory, which announces no impact (--kubernetes.advisory-taint acts on it)"
            )),
            None => Ok(Self(types)),
        }
    }

    pub fn into_vec(self) -> Vec<EventType> {
        self.0
    }
}

/// An invalid setting, named by its flag.
#[derive(Debug, thiserror::Error)]
#[error("invalid value for --{flag}: {reason}")]
pub struct ConfigError {
    pub flag: &'static str,
    pub reason: String,
}

pub(crate) fn invalid(flag: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        flag,
        reason: reason.into(),
    }
}

/// The longest any duration may be, flag or file; each setting has its own, shorter maximum
/// (docs/configuration.md). Beyond it a deadline computed from the value would overflow the clock.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// `1s`, `250ms`, `2m`, `1h30m`; at most [`MAX_DURATION`].
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    let value = humantime::parse_duration(text)
        .map_err(|e| format!("{e} (use a duration like 1s, 250ms or 2m)"))?;
    if value > MAX_DURATION {
        return Err(format!(
            "{:?} is longer than 7d, the longest any duration may be",
            text.trim()
        ));
    }
    Ok(value)
}

/// `value` if it is greater than zero and at most `max`, the setting's documented maximum.
pub(crate) fn bounded(
    flag: &'static str,
    value: Duration,
    max: Duration,
) -> Result<Duration, ConfigError> {
    if value.is_zero() {
        return Err(invalid(flag, "must be greater than zero"));
    }
    if value > max {
        return Err(invalid(
            flag,
            format!(
                "{} is longer than {}, its maximum",
                humantime::format_duration(value),
                humantime::format_duration(max)
            ),
        ));
    }
    Ok(value)
}

/// `text` on one line, runs of whitespace as one space: an error is the whole message of an exit
/// at startup.
pub(crate) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The value of `result`, or `None` with its error added to `problems`.
pub(crate) fn found<T>(
    problems: &mut Vec<ConfigError>,
    result: Result<T, ConfigError>,
) -> Option<T> {
    result.map_err(|e| problems.push(e)).ok()
}

/// When to approve: `immediately`, or a duration, as the flag and the policy file write it.
pub fn when(text: &str) -> Result<When, String> {
    match text.trim() {
        "immediately" => Ok(When::Immediately),
        lead => duration(lead)
            .map(When::BeforeNotBefore)
            .map_err(|e| format!("{lead:?}: use immediately or a duration: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_are_true_or_false_in_any_case() {
        assert_eq!(boolean("true"), Ok(true));
        assert_eq!(boolean("FALSE"), Ok(false));
        for refused in ["yes", "1", "", "on"] {
            assert!(boolean(refused).is_err(), "{refused:?}");
        }
    }

    #[test]
    fn lists_drop_blanks_and_trim() {
        assert_eq!(list(" a, b,,c ,").collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(list("").count(), 0);
    }

    #[test]
    fn event_type_sets_are_known_types_once_in_the_order_written() -> Result<(), String> {
        assert_eq!(
            EventTypes::parse("reboot, Redeploy,,Reboot")?.as_slice(),
            [EventType::Reboot, EventType::Redeploy]
        );
        assert_eq!(EventTypes::parse("")?.as_slice(), []);
        assert_eq!(
            EventTypes::from_names(["Preempt", "preempt"])?.as_slice(),
            [EventType::Preempt]
        );
        let error = EventTypes::parse("Reboot,Rebot").err().unwrap_or_default();
        assert!(error.contains("did you mean Reboot?"), "{error}");
        assert!(EventTypes::parse("Reboot,Hibernate").is_err());
        Ok(())
    }

    #[test]
    fn an_advisory_is_no_impact() -> Result<(), String> {
        assert!(ImpactEventTypes::parse("Preempt,SpotRebalanceRecommendation").is_err());
        assert_eq!(
            ImpactEventTypes::parse("Preempt")?.into_vec(),
            [EventType::Preempt]
        );
        Ok(())
    }
}
