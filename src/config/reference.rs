//! What the clap definitions say about every setting, written where users read it: the reference
//! tables of docs/configuration.md and the Helm chart's schema of its `flags:` map (with the
//! syntaxes the chart's `kubernetes:` block shares), in
//! deploy/helm/azure-scheduled-events-exporter/values.schema.json. Tests only: each test fails
//! when a committed file differs from what the definitions generate, so a flag cannot be added
//! without its reference row, its variable and its schema key. To regenerate both files:
//!
//! ```text
//! UPDATE_GENERATED=1 cargo test --lib config::reference
//! ```
//!
//! The files are those of the build the image ships, on Linux: a build without the Kubernetes
//! output hides the `--kubernetes.*` flags, and Windows has other defaults, so the module is
//! compiled for that build only.
//!
//! A setting's syntax comes from the type its value parser produces ([`super::values`]): a
//! duration, a boolean, a set of event types, a number, or one of clap's possible values.

use std::any::TypeId;
use std::path::{Path, PathBuf};
use std::time::Duration;

use azure_scheduled_events_core::event::EventType;
use clap::{Arg, ArgAction, CommandFactory as _};
use serde_json::{Map, Value, json};

use super::environment::variable_of;
use super::flags::Cli;
use super::values::{BOOLEAN_VALUES, EventTypes, ImpactEventTypes};

/// The file holding the reference, and the lines around its generated part.
const DOCS: &str = "docs/configuration.md";
const BEGIN: &str = "<!-- BEGIN GENERATED: the tables below are generated from the flags' definitions (src/config/reference.rs) -->";
const END: &str = "<!-- END GENERATED -->";

const SCHEMA: &str = "deploy/helm/azure-scheduled-events-exporter/values.schema.json";

/// humantime's units, as [`super::duration`] reads them.
const DURATION_UNITS: &[&str] = &[
    "nanos", "nsec", "ns", "usec", "us", "µs", "millis", "msec", "ms", "seconds", "second", "secs",
    "sec", "s", "minutes", "minute", "min", "mins", "m", "hours", "hour", "hr", "hrs", "h", "days",
    "day", "d", "weeks", "week", "wk", "wks", "w", "months", "month", "M", "years", "year", "yr",
    "yrs", "y",
];

/// The kind of value a setting takes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Syntax {
    Boolean,
    Duration,
    EventTypes,
    ImpactEventTypes,
    /// `immediately` or a duration.
    When,
    Count,
    OneOf(Vec<String>),
    Text,
}

impl Syntax {
    fn of(arg: &Arg) -> Self {
        let parser = arg.get_value_parser().type_id();
        if parser == TypeId::of::<bool>() {
            Syntax::Boolean
        } else if parser == TypeId::of::<Duration>() {
            Syntax::Duration
        } else if parser == TypeId::of::<EventTypes>() {
            Syntax::EventTypes
        } else if parser == TypeId::of::<ImpactEventTypes>() {
            Syntax::ImpactEventTypes
        } else if parser == TypeId::of::<azure_scheduled_events_core::approval::When>() {
            Syntax::When
        } else if parser == TypeId::of::<usize>() {
            Syntax::Count
        } else {
            let values: Vec<String> = arg
                .get_possible_values()
                .iter()
                .filter(|v| !v.is_hide_set())
                .map(|v| v.get_name().to_owned())
                .collect();
            if values.is_empty() {
                Syntax::Text
            } else {
                Syntax::OneOf(values)
            }
        }
    }

    /// The reference's words for it.
    fn describe(&self, arg: &Arg) -> String {
        match self {
            Syntax::Boolean => "`true`, `false`".to_owned(),
            Syntax::Duration => "duration".to_owned(),
            Syntax::EventTypes => "event types".to_owned(),
            Syntax::ImpactEventTypes => "event types but advisories".to_owned(),
            Syntax::When => "`immediately` or duration".to_owned(),
            Syntax::Count => "number".to_owned(),
            Syntax::OneOf(values) => values
                .iter()
                .map(|v| format!("`{v}`"))
                .collect::<Vec<_>>()
                .join(", "),
            Syntax::Text if matches!(arg.get_action(), ArgAction::Append) => {
                "list, repeatable".to_owned()
            }
            Syntax::Text if arg.get_value_parser().type_id() == TypeId::of::<PathBuf>() => {
                "file".to_owned()
            }
            Syntax::Text => "text".to_owned(),
        }
    }

    /// The schema of its value in the chart's `flags:` map.
    fn schema(&self) -> Value {
        match self {
            Syntax::Boolean => json!({"$ref": "#/definitions/boolean"}),
            Syntax::Duration => json!({"$ref": "#/definitions/duration"}),
            Syntax::EventTypes => json!({"$ref": "#/definitions/eventTypes"}),
            Syntax::ImpactEventTypes => json!({"$ref": "#/definitions/impactEventTypes"}),
            Syntax::When => {
                json!({"anyOf": [{"const": "immediately"}, {"$ref": "#/definitions/duration"}]})
            }
            Syntax::Count => json!({"$ref": "#/definitions/count"}),
            Syntax::OneOf(values) => json!({"enum": values}),
            Syntax::Text => json!({"type": ["string", "number"]}),
        }
    }
}

/// One setting as the reference shows it.
#[derive(Debug, Clone)]
struct Setting {
    flag: String,
    aliases: Vec<String>,
    variable: Option<String>,
    syntax: Syntax,
    value: String,
    default: Option<String>,
    meaning: String,
}

/// The settings of `command`'s own arguments, in the order of `--help`; hidden ones left out.
fn settings(command: &clap::Command) -> Vec<Setting> {
    let mut settings = Vec::new();
    for arg in command.get_arguments() {
        if arg.is_hide_set() {
            continue;
        }
        let Some(long) = arg.get_long() else {
            continue;
        };
        if matches!(arg.get_action(), ArgAction::Help | ArgAction::Version) {
            continue;
        }
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(ToString::to_string)
            .unwrap_or_default();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        // `[default: ...]` in the help of a setting whose default clap cannot hold (it depends
        // on the system, on another setting or on a file): at the end of the help or of its
        // first paragraph.
        let (meaning, written_default) = match written_default(&help) {
            Some((default, at, end)) => (
                format!("{}{}", help[..at].trim_end(), &help[end..]),
                Some(default.to_owned()),
            ),
            None => (help, None),
        };
        // clap drops the last full stop of a one-paragraph help, not of a longer one.
        let meaning = match meaning.strip_suffix('.') {
            Some(sentence) => format!("{sentence}."),
            None => format!("{meaning}."),
        };
        let clap_default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let default = if clap_default.is_empty() {
            written_default
        } else {
            Some(format!("`{}`", clap_default.join(",")))
        };
        let syntax = Syntax::of(arg);
        settings.push(Setting {
            flag: long.to_owned(),
            aliases: arg
                .get_all_aliases()
                .unwrap_or_default()
                .into_iter()
                .map(str::to_owned)
                .collect(),
            variable: arg.get_env().map(|v| v.to_string_lossy().into_owned()),
            value: syntax.describe(arg),
            syntax,
            default,
            meaning,
        });
    }
    settings
}

/// The `[default: ...]` written in `help`: its text, and where the bracket starts and ends.
fn written_default(help: &str) -> Option<(&str, usize, usize)> {
    const OPEN: &str = "[default: ";
    let at = help.find(OPEN)?;
    let end = at + help[at..].find(']')? + 1;
    Some((&help[at + OPEN.len()..end - 1], at, end))
}

fn subcommand(name: &str) -> clap::Command {
    Cli::command()
        .find_subcommand(name)
        .cloned()
        .unwrap_or_default()
}

fn table(settings: &[Setting]) -> String {
    let cell = |text: &str| text.replace('|', "\\|");
    let mut out = String::from(
        "| flag | environment variable | value | default | meaning |\n|---|---|---|---|---|\n",
    );
    for s in settings {
        let mut flag = format!("`--{}`", s.flag);
        for alias in &s.aliases {
            flag.push_str(&format!(" (or `--{alias}`)"));
        }
        out.push_str(&format!(
            "| {flag} | {} | {} | {} | {} |\n",
            s.variable
                .as_ref()
                .map_or_else(|| "none".to_owned(), |v| format!("`{v}`")),
            cell(&s.value),
            cell(s.default.as_deref().unwrap_or("none")),
            cell(&s.meaning),
        ));
    }
    out
}

/// The generated part of docs/configuration.md, between [`BEGIN`] and [`END`].
fn reference() -> String {
    let mut out = String::new();
    out.push_str(&format!("{BEGIN}\n\n"));
    out.push_str("### The agent's flags\n\nThe agent, `demo` and `check-config` take these.\n\n");
    out.push_str(&table(&settings(&Cli::command())));
    out.push_str("\n### `simulator`\n\n");
    out.push_str(&table(&settings(&subcommand("simulator"))));
    out.push_str("\n### `prepare-state-dir`\n\n");
    out.push_str(&table(&settings(&subcommand("prepare-state-dir"))));
    out.push_str(&format!("\n{END}"));
    out
}

/// A pattern for a comma-separated set of `types`, any case, blanks and empty items allowed.
fn event_types_pattern<'a>(types: impl Iterator<Item = &'a EventType>) -> String {
    let names: Vec<&str> = types.map(EventType::as_str).collect();
    format!("^[ ,]*(?:(?i:{}) *(?:,[ ,]*|$))*$", names.join("|"))
}

/// The schema's generated definitions: the syntaxes of [`super::values`].
fn definitions() -> Map<String, Value> {
    let mut units: Vec<&str> = DURATION_UNITS.to_vec();
    // Longest first: a unit is never read as a shorter one followed by garbage.
    units.sort_by_key(|u| std::cmp::Reverse(u.len()));
    let mut definitions = Map::new();
    definitions.insert(
        "boolean".into(),
        json!({
            "description": "A boolean setting: true or false (a YAML boolean, or the word).",
            "enum": [true, false, BOOLEAN_VALUES[0], BOOLEAN_VALUES[1]]
        }),
    );
    definitions.insert(
        "duration".into(),
        json!({
            "description": "A duration: a number and a unit, repeated (1s, 250ms, 2m, 1h30m).",
            "type": "string",
            "pattern": format!(
                "^ *(?:[0-9]+(?:\\.[0-9]+)? *(?:{}) *)+$",
                units.join("|")
            )
        }),
    );
    definitions.insert(
        "eventTypes".into(),
        json!({
            "description": "Comma-separated event types, any case (Reboot,Redeploy).",
            "type": "string",
            "pattern": event_types_pattern(EventType::KNOWN.iter())
        }),
    );
    definitions.insert(
        "impactEventTypes".into(),
        json!({
            "description": "Comma-separated event types that announce an impact (no advisory).",
            "type": "string",
            "pattern": event_types_pattern(EventType::impacts())
        }),
    );
    definitions.insert(
        "count".into(),
        json!({
            "description": "A whole number, 0 or more.",
            "type": ["integer", "string"],
            "minimum": 0,
            "pattern": "^[0-9]+$"
        }),
    );
    definitions
}

/// The schema of the chart's `flags:` map: every flag of the agent (and its aliases) with the
/// schema of its value, nothing else. An unknown key is refused; when its first part (`poll.` in
/// `poll.intervl`) is a group of flags, the error lists that group's flags only.
fn flags_schema() -> Value {
    let settings = settings(&Cli::command());
    let mut properties = Map::new();
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for s in &settings {
        for name in std::iter::once(&s.flag).chain(&s.aliases) {
            properties.insert(name.clone(), s.syntax.schema());
            let group = name.split('.').next().unwrap_or(name).to_owned();
            match groups.iter_mut().find(|(g, _)| *g == group) {
                Some((_, names)) => names.push(name.clone()),
                None => groups.push((group, vec![name.clone()])),
            }
        }
    }
    let all: Vec<&String> = properties.keys().collect();
    let mut checks: Vec<Value> = groups
        .iter()
        .map(|(group, names)| {
            json!({
                "if": {"pattern": format!("^{}(\\.|$)", group.replace('.', "\\."))},
                "then": {"enum": names}
            })
        })
        .collect();
    let group_names: Vec<&str> = groups.iter().map(|(g, _)| g.as_str()).collect();
    checks.push(json!({
        "if": {"not": {"pattern": format!("^({})(\\.|$)", group_names.join("|"))}},
        "then": {"enum": all}
    }));
    json!({
        "description": "The agent's flags, as --NAME=VALUE arguments (docs/configuration.md). Generated from the flags' definitions (src/config/reference.rs).",
        "type": "object",
        "properties": properties,
        "propertyNames": {"allOf": checks},
        "additionalProperties": false
    })
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn update() -> bool {
    std::env::var_os("UPDATE_GENERATED").is_some_and(|v| !v.is_empty())
}

/// `text` with the lines from `begin` to `end` replaced by `generated`, or `None` without them.
fn splice(text: &str, begin: &str, end: &str, generated: &str) -> Option<String> {
    let start = text.find(begin)?;
    let stop = start + text[start..].find(end)? + end.len();
    Some(format!("{}{generated}{}", &text[..start], &text[stop..]))
}

/// `schema` (pretty JSON, two spaces) with the object under `key` at `indent` spaces (a property
/// of the root's `properties` or `definitions`) replaced by `value`, written in the same layout.
fn splice_json(schema: &str, indent: usize, key: &str, value: &Value) -> Option<String> {
    let pad = " ".repeat(indent);
    let open = format!("\n{pad}\"{key}\": {{");
    let start = schema.find(&open)? + open.len() - 1;
    let close = format!("\n{pad}}}");
    let end = if schema[start..].starts_with("{}") {
        start + 2
    } else {
        start + schema[start..].find(&close)? + close.len()
    };
    let pretty = serde_json::to_string_pretty(value)
        .ok()?
        .replace('\n', &format!("\n{pad}"));
    Some(format!("{}{pretty}{}", &schema[..start], &schema[end..]))
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))
}

#[test]
fn the_reference_tables_are_generated_from_the_flags() -> Result<(), String> {
    let path = repo().join(DOCS);
    let text = read(&path)?;
    let generated = reference();
    let spliced = splice(&text, BEGIN, END, &generated)
        .ok_or_else(|| format!("{DOCS} has no lines {BEGIN} ... {END}"))?;
    if update() {
        std::fs::write(&path, &spliced).map_err(|e| e.to_string())?;
        return Ok(());
    }
    let first_difference = spliced
        .lines()
        .zip(text.lines())
        .find(|(generated, committed)| generated != committed);
    assert!(
        spliced == text,
        "{DOCS} differs from what the flags generate (first: {first_difference:#?}); regenerate it with UPDATE_GENERATED=1 cargo test --lib config::reference"
    );
    Ok(())
}

/// The defaults clap cannot hold (a policy file may still set the value, the command or a
/// standard variable decides, the flag is read by a later step), as `--help` must write them,
/// each made from the constant the agent applies.
fn written_defaults() -> Vec<(&'static str, String)> {
    use super::flags::{DEFAULT_LOG_FORMAT, DEFAULT_STATE_FILE, DEMO_LOG_FORMAT, LogFormat};
    use super::{kubernetes, otlp};
    use azure_scheduled_events_core::approval::{When, policy};
    use clap::ValueEnum as _;
    let duration = |d: Duration| humantime::format_duration(d).to_string();
    let format = |f: LogFormat| {
        f.to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    };
    let when = match policy::DEFAULT_WHEN {
        When::Immediately => "immediately".to_owned(),
        When::BeforeNotBefore(lead) => duration(lead),
    };
    vec![
        (
            "log.format",
            format!(
                "{}; {} for demo",
                format(DEFAULT_LOG_FORMAT),
                format(DEMO_LOG_FORMAT)
            ),
        ),
        (
            "otlp.protocol",
            format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL, else {}",
                otlp::DEFAULT_PROTOCOL.as_str()
            ),
        ),
        (
            "otlp.timeout",
            format!(
                "OTEL_EXPORTER_OTLP_TIMEOUT, else {}",
                duration(otlp::DEFAULT_TIMEOUT)
            ),
        ),
        (
            "approve.user-events",
            policy::DEFAULT_USER_EVENTS.to_string(),
        ),
        (
            "approve.predicted-hardware-failure",
            policy::DEFAULT_PREDICTED_HARDWARE_FAILURE.to_string(),
        ),
        (
            "approve.freeze-max-duration",
            duration(policy::DEFAULT_FREEZE_MAX_DURATION),
        ),
        ("approve.before-not-before", when),
        (
            "approve.takeover-delay",
            duration(policy::DEFAULT_TAKEOVER_DELAY),
        ),
        ("state.file", DEFAULT_STATE_FILE.to_owned()),
        (
            "kubernetes.drain-margin",
            duration(kubernetes::DEFAULT_DRAIN_MARGIN),
        ),
        (
            "kubernetes.drain-delay",
            format!("{}: at once", duration(kubernetes::DEFAULT_DRAIN_DELAY)),
        ),
        (
            "kubernetes.resync-interval",
            duration(kubernetes::DEFAULT_RESYNC_INTERVAL),
        ),
        (
            "kubernetes.imds-unknown-after",
            duration(kubernetes::DEFAULT_IMDS_UNKNOWN_AFTER),
        ),
    ]
}

#[test]
fn every_default_the_help_writes_is_the_constant_the_agent_applies() {
    let written = written_defaults();
    // Defaults that are a behaviour rather than a value: no constant to compare with.
    let described = ["vm.name", "kubernetes.kubeconfig"];
    let mut checked = Vec::new();
    for setting in settings(&Cli::command()) {
        let Some(default) = &setting.default else {
            continue;
        };
        if let Some((_, expected)) = written.iter().find(|(flag, _)| *flag == setting.flag) {
            assert_eq!(default, expected, "--{}'s help", setting.flag);
            checked.push(setting.flag);
        } else {
            // clap's own (from a constant in `default_value`), no value, or a behaviour.
            assert!(
                default.starts_with('`')
                    || default.starts_with("none")
                    || described.contains(&setting.flag.as_str()),
                "--{}'s help writes [default: {default}] but no constant is checked against it: add it to written_defaults()",
                setting.flag
            );
        }
    }
    let mut listed: Vec<&str> = written.iter().map(|(flag, _)| *flag).collect();
    listed.sort_unstable();
    checked.sort_unstable();
    assert_eq!(checked, listed, "flags whose written default was checked");
}

#[test]
fn the_charts_flags_schema_is_generated_from_the_flags() -> Result<(), String> {
    let path = repo().join(SCHEMA);
    let text = read(&path)?;
    let mut spliced = splice_json(&text, 4, "flags", &flags_schema())
        .ok_or("the schema has no properties.flags")?;
    for (name, definition) in definitions() {
        spliced = splice_json(&spliced, 4, &name, &definition)
            .ok_or_else(|| format!("the schema has no definitions.{name}"))?;
    }
    if update() {
        std::fs::write(&path, &spliced).map_err(|e| e.to_string())?;
        return Ok(());
    }
    let committed: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let expected: Value = serde_json::from_str(&spliced).map_err(|e| e.to_string())?;
    let flags = |schema: &Value| schema["properties"]["flags"]["properties"].clone();
    let (generated, written) = (flags(&expected), flags(&committed));
    let missing: Vec<&String> = generated
        .as_object()
        .into_iter()
        .flat_map(|generated| generated.keys())
        .filter(|k| written.get(k).is_none())
        .collect();
    assert!(
        committed == expected,
        "{SCHEMA} differs from what the flags generate (flags without a key: {missing:?}); regenerate it with UPDATE_GENERATED=1 cargo test --lib config::reference"
    );
    Ok(())
}

#[test]
fn every_flag_reads_the_variable_its_name_gives() {
    fn walk(command: &clap::Command, prefix: &str, checked: &mut usize) {
        for arg in command.get_arguments() {
            let (Some(long), Some(variable)) = (arg.get_long(), arg.get_env()) else {
                continue;
            };
            if arg.is_hide_set()
                && !variable
                    .to_string_lossy()
                    .starts_with(super::environment::PREFIX)
            {
                continue; // a standard variable such as KUBECONFIG
            }
            let expected = match prefix {
                "" => variable_of(long),
                _ => variable_of(long).replacen(
                    super::environment::PREFIX,
                    &format!("{}{prefix}", super::environment::PREFIX),
                    1,
                ),
            };
            // The simulator's listen address predates the rule; its variable stays.
            if expected.ends_with("SIMULATOR_WEB_LISTEN_ADDRESS") {
                continue;
            }
            assert_eq!(variable.to_string_lossy(), expected, "--{long}");
            *checked += 1;
        }
    }
    let mut checked = 0;
    let cli = Cli::command();
    walk(&cli, "", &mut checked);
    walk(&subcommand("simulator"), "SIMULATOR_", &mut checked);
    assert!(checked > 40, "{checked} flags checked");
    // Every visible flag of the agent has a variable at all.
    for setting in settings(&cli) {
        assert!(
            setting.variable.is_some(),
            "--{} reads no variable",
            setting.flag
        );
    }
}

#[test]
fn every_boolean_flag_takes_the_one_style() -> Result<(), clap::Error> {
    fn walk(command: &clap::Command, checked: &mut usize) {
        for arg in command.get_arguments() {
            let Some(long) = arg.get_long() else {
                continue;
            };
            if Syntax::of(arg) != Syntax::Boolean {
                continue;
            }
            assert_eq!(arg.get_num_args(), Some((0..=1).into()), "--{long}");
            *checked += 1;
        }
        for sub in command.get_subcommands() {
            walk(sub, checked);
        }
    }
    let mut command = Cli::command();
    command.build();
    let mut checked = 0;
    walk(&command, &mut checked);
    assert!(checked >= 7, "{checked} boolean flags");
    // As the agent reads them: alone it is true, `=false` is false, and a switch is off unless
    // given.
    for arg in command.get_arguments() {
        let (Some(long), Syntax::Boolean) = (arg.get_long(), Syntax::of(arg)) else {
            continue;
        };
        let id = arg.get_id().as_str();
        for (given, read) in [
            (vec![format!("--{long}")], Some(true)),
            (vec![format!("--{long}=false")], Some(false)),
            (vec![format!("--{long}=TRUE")], Some(true)),
            (vec![format!("--{long}"), "false".to_owned()], Some(false)),
            (
                vec![format!("--{long}"), "--imds.timeout=1s".to_owned()],
                Some(true),
            ),
        ] {
            let matches = Cli::command()
                .try_get_matches_from(std::iter::once("x".to_owned()).chain(given))?;
            assert_eq!(matches.get_one::<bool>(id).copied(), read, "--{long}");
        }
        if matches!(arg.get_default_values(), [value] if value == "false") {
            let matches = Cli::command().try_get_matches_from(["x"])?;
            assert_eq!(matches.get_one::<bool>(id), Some(&false), "--{long}");
        }
    }
    Ok(())
}

#[test]
fn the_duration_pattern_names_the_units_durations_take() {
    for unit in DURATION_UNITS {
        assert!(
            humantime::parse_duration(&format!("1{unit}")).is_ok(),
            "{unit}"
        );
    }
    assert!(humantime::parse_duration("1 parsec").is_err());
}
