//! The syntaxes settings share, each read by one function wherever it is written (a flag, its
//! environment variable, the approval policy file, the receivers file): booleans ([`boolean`] and
//! the style every boolean flag has, [`boolean_style`]), comma-separated lists ([`list`]) and sets
//! of event types ([`EventTypes`], [`ImpactEventTypes`]). Durations are [`super::duration`]'s.
//!
//! clap calls these as value parsers, so a bad value is a clap error that names the flag (and its
//! possible values), and the reference (docs/configuration.md) and the chart's values schema tell
//! a setting's syntax by the type its parser produces.

use std::any::TypeId;

use clap::builder::{PossibleValuesParser, TypedValueParser as _, ValueParser};
use clap::{Arg, ArgAction};

use super::nearest::nearest;
use crate::azure::event::EventType;

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
