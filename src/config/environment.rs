//! The environment as a source of settings. Every flag reads one variable, its name derived from
//! the flag's ([`variable_of`]: `--poll.interval` is `AZURE_SCHEDULED_EVENTS_POLL_INTERVAL`), and
//! a variable with the agent's prefix that no flag reads is an error naming the nearest one
//! ([`unknown_variables`]): `AZURE_SCHEDULED_EVENTS_APROVE=true` must not leave approval quietly
//! off. The names known are those of every argument of every subcommand (the simulator's
//! `AZURE_SCHEDULED_EVENTS_SIMULATOR_*` among them), read from clap's definitions, so one set of
//! variables may serve the agent and the tools next to it. The standard variables the agent also
//! reads (`OTEL_*`, `KUBECONFIG`, the proxy variables) have other names and are not checked here.
//!
//! Kubernetes gives every pod variables for each Service of its namespace (service links, unless
//! the pod sets `enableServiceLinks: false`): a Service named `azure-scheduled-events-exporter`
//! gives `AZURE_SCHEDULED_EVENTS_EXPORTER_SERVICE_HOST` and the rest, with the agent's prefix. A
//! variable with both the name and the value of one of those ([`is_service_link`]) is not the
//! agent's and is left alone; a name of that shape with any other value is refused as before.
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
    for (name, value) in env {
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
        if !has_prefix || known.iter().any(read) || is_service_link(&name, &value.to_string_lossy())
        {
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

/// Whether `name=value` is one of the variables the kubelet gives a pod for a Service of its
/// namespace, as it writes them (`pkg/kubelet/envvars`): for a Service `my-svc` with cluster IP
/// `10.0.0.11` and a first port 80/TCP,
/// `MY_SVC_SERVICE_HOST=10.0.0.11`, `MY_SVC_SERVICE_PORT=80`, `MY_SVC_SERVICE_PORT_<NAME>=80` for
/// each named port, `MY_SVC_PORT=tcp://10.0.0.11:80`, and for each port
/// `MY_SVC_PORT_80_TCP=tcp://10.0.0.11:80` with its `_PROTO=tcp`, `_PORT=80` and
/// `_ADDR=10.0.0.11`. Both the name and the value must have that shape, so a mistyped setting
/// whose name happens to end in `_PORT` is still refused.
pub fn is_service_link(name: &str, value: &str) -> bool {
    if let Some(service) = name.strip_suffix("_SERVICE_HOST") {
        return is_service_name(service) && is_address(value);
    }
    if let Some(service) = name.strip_suffix("_SERVICE_PORT") {
        return is_service_name(service) && port(value).is_some();
    }
    if let Some(service) = name.strip_suffix("_PORT")
        && is_service_name(service)
        && link(value).is_some()
    {
        return true;
    }
    // The split between the Service's name and the rest may fall at any `_SERVICE_PORT_` or
    // `_PORT_`; the value decides.
    splits(name, "_SERVICE_PORT_").any(|(service, port_name)| {
        is_service_name(service) && is_port_name(port_name) && port(value).is_some()
    }) || splits(name, "_PORT_")
        .any(|(service, rest)| is_service_name(service) && port_variable(rest, value))
}

/// Every `(before, after)` around an occurrence of `marker` in `name`.
fn splits<'a>(name: &'a str, marker: &'a str) -> impl Iterator<Item = (&'a str, &'a str)> + 'a {
    name.match_indices(marker)
        .map(move |(at, _)| (&name[..at], &name[at + marker.len()..]))
}

/// `<port>_<PROTO>` and its `_PROTO`, `_PORT` and `_ADDR`, with the value each has.
fn port_variable(rest: &str, value: &str) -> bool {
    let mut parts = rest.splitn(3, '_');
    let (Some(number), Some(protocol)) = (parts.next(), parts.next()) else {
        return false;
    };
    let Some(number) = port(number) else {
        return false;
    };
    if !matches!(protocol, "TCP" | "UDP" | "SCTP") {
        return false;
    }
    let lower = protocol.to_ascii_lowercase();
    match parts.next() {
        None => link(value).is_some_and(|(p, n)| p == lower && n == number),
        Some("PROTO") => value == lower,
        Some("PORT") => port(value) == Some(number),
        Some("ADDR") => is_address(value),
        Some(_) => false,
    }
}

/// A Service's name as the kubelet writes it: a DNS label in upper case, `-` as `_`.
fn is_service_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_uppercase())
        && !name.ends_with('_')
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// A port's name the same way (an IANA service name: letters, digits and `-`).
fn is_port_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('_')
        && !name.ends_with('_')
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

fn is_address(value: &str) -> bool {
    value.parse::<std::net::IpAddr>().is_ok()
}

fn port(value: &str) -> Option<u16> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok().filter(|&port| port != 0)
}

/// `tcp://10.0.0.11:80` (or `[fd00::11]:80`): the protocol and the port.
fn link(value: &str) -> Option<(&str, u16)> {
    let (protocol, address) = value.split_once("://")?;
    if !matches!(protocol, "tcp" | "udp" | "sctp") {
        return None;
    }
    let address: std::net::SocketAddr = address.parse().ok()?;
    (address.port() != 0).then_some((protocol, address.port()))
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

    #[test]
    fn a_services_link_variables_are_not_the_agents_and_are_left_alone() {
        // What the kubelet gives a pod for `kubectl expose` of the agent (a Service named
        // azure-scheduled-events-exporter, cluster IP 10.0.0.11, port 10188/TCP named metrics)
        // and for a dual-port Service on IPv6.
        let unknown = unknown_variables(
            &Cli::command(),
            env(&[
                ("AZURE_SCHEDULED_EVENTS_EXPORTER_SERVICE_HOST", "10.0.0.11"),
                ("AZURE_SCHEDULED_EVENTS_EXPORTER_SERVICE_PORT", "10188"),
                (
                    "AZURE_SCHEDULED_EVENTS_EXPORTER_SERVICE_PORT_METRICS",
                    "10188",
                ),
                (
                    "AZURE_SCHEDULED_EVENTS_EXPORTER_PORT",
                    "tcp://10.0.0.11:10188",
                ),
                (
                    "AZURE_SCHEDULED_EVENTS_EXPORTER_PORT_10188_TCP",
                    "tcp://10.0.0.11:10188",
                ),
                (
                    "AZURE_SCHEDULED_EVENTS_EXPORTER_PORT_10188_TCP_PROTO",
                    "tcp",
                ),
                (
                    "AZURE_SCHEDULED_EVENTS_EXPORTER_PORT_10188_TCP_PORT",
                    "10188",
                ),
                (
                    "AZURE_SCHEDULED_EVENTS_EXPORTER_PORT_10188_TCP_ADDR",
                    "10.0.0.11",
                ),
                ("AZURE_SCHEDULED_EVENTS_SERVICE_HOST", "fd00::b"),
                ("AZURE_SCHEDULED_EVENTS_PORT", "udp://[fd00::b]:53"),
                ("AZURE_SCHEDULED_EVENTS_PORT_53_UDP", "udp://[fd00::b]:53"),
                ("AZURE_SCHEDULED_EVENTS_PORT_9_SCTP_PROTO", "sctp"),
            ]),
        );
        assert_eq!(unknown, []);
    }

    #[test]
    fn a_typo_shaped_like_a_service_link_but_without_its_value_is_still_refused() {
        let names = |pairs: &[(&str, &str)]| -> Vec<String> {
            unknown_variables(&Cli::command(), env(pairs))
                .into_iter()
                .map(|u| u.name)
                .collect()
        };
        let typos = [
            ("AZURE_SCHEDULED_EVENTS_WEB_LISTEN_PORT", "10188"),
            (
                "AZURE_SCHEDULED_EVENTS_EXPORTER_SERVICE_HOST",
                "exporter.local",
            ),
            ("AZURE_SCHEDULED_EVENTS_EXPORTER_SERVICE_PORT", "metrics"),
            ("AZURE_SCHEDULED_EVENTS_EXPORTER_PORT", "10188"),
            (
                "AZURE_SCHEDULED_EVENTS_EXPORTER_PORT_10188_TCP",
                "tcp://10.0.0.11:80",
            ),
            (
                "AZURE_SCHEDULED_EVENTS_EXPORTER_PORT_10188_TCP_PROTO",
                "udp",
            ),
            (
                "AZURE_SCHEDULED_EVENTS_EXPORTER_PORT_10188_HTTP_PORT",
                "10188",
            ),
            (
                "AZURE_SCHEDULED_EVENTS_EXPORTER_PORT_10188_TCP_HOST",
                "10.0.0.11",
            ),
            ("AZURE_SCHEDULED_EVENTS__SERVICE_HOST", "10.0.0.11"),
        ];
        assert_eq!(
            names(&typos),
            typos
                .iter()
                .map(|(n, _)| (*n).to_owned())
                .collect::<Vec<_>>()
        );
    }
}
