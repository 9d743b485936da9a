//! `check-config`, as `promtool check config` and `amtool check-config`: reads what the agent
//! reads at start (its flags and their variables, the `OTEL_*` variables, the approval policy,
//! the receivers file and the files it names, the web configuration and its certificates, the
//! kubeconfig or service account, the OTLP certificates, the state and boot id files) through the
//! same code as the agent's start, without starting anything: no request to IMDS or any receiver,
//! no listener, no file written. Every problem is one line; none is one line saying what would run.
//!
//! A problem is what would stop the agent (exit 64 at start). A warning is what the agent would
//! log and run on (a bad `OTEL_*` value, a state file it would set aside): printed, but the check
//! still passes, as the agent would start.

use std::fmt::Write as _;

use crate::config::environment::UnknownVariable;
use crate::config::lenient;
use crate::config::otlp::{EnvSource, Signal};
use crate::config::{AgentArgs, Config, DEFAULT_LOG_FORMAT};
use crate::output::notify::delivery;
use crate::output::state::store::StateStore;
use crate::output::telemetry;

/// What the check found.
#[derive(Debug, Default)]
pub struct Checked {
    /// Each would stop the agent.
    pub problems: Vec<String>,
    /// Each the agent would log and run on.
    pub warnings: Vec<String>,
    /// What would run, when there is no problem.
    pub summary: Option<String>,
}

impl Checked {
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks `args` with the environment `env` (`unknown`: the variables with the agent's prefix that
/// no flag reads). Must run on the async runtime: the OTLP exporter is built as at start.
pub fn check(args: AgentArgs, env: &impl EnvSource, unknown: &[UnknownVariable]) -> Checked {
    let mut checked = Checked {
        problems: unknown.iter().map(ToString::to_string).collect(),
        ..Checked::default()
    };
    let otlp = args.otlp.clone();
    let config = match args.check(DEFAULT_LOG_FORMAT) {
        Ok(config) => Some(config),
        Err(problems) => {
            checked
                .problems
                .extend(problems.iter().map(ToString::to_string));
            None
        }
    };
    // Where traces and log events would go.
    let mut endpoints: [Option<String>; 2] = [None, None];
    for (signal, endpoint) in [Signal::Traces, Signal::Logs]
        .into_iter()
        .zip(&mut endpoints)
    {
        let resolved = match lenient::resolve_signal(&otlp, signal, env) {
            Ok(resolved) => {
                for warning in resolved.warnings {
                    // A generic variable both signals read is said once.
                    let warning = format!("ignoring an OTEL_* setting: {warning}");
                    if !checked.warnings.contains(&warning) {
                        checked.warnings.push(warning);
                    }
                }
                resolved.config
            }
            // A bad flag is the same problem for both signals: said once.
            Err(problem) => {
                if signal == Signal::Traces {
                    checked.problems.push(problem.to_string());
                }
                None
            }
        };
        if let Some(resolved) = &resolved
            && let Err(error) = telemetry::check_exporter(signal, resolved)
        {
            let off = match signal {
                Signal::Traces => "traces would be off, metrics and logs go on",
                Signal::Logs => {
                    "log events over OTLP would be off, metrics, traces and log lines go on"
                }
            };
            checked.warnings.push(format!(
                "cannot set up OTLP export to {}: {error:#}; {off}",
                resolved.endpoint
            ));
        }
        *endpoint = resolved.map(|r| r.endpoint);
    }
    let Some(config) = config else {
        return checked;
    };
    for receiver in &config.notify.receivers {
        if let Err(error) = delivery::client(receiver) {
            checked.problems.push(format!(
                "cannot set up the notification receiver {:?}: {error}",
                receiver.name
            ));
        }
    }
    if let Some(path) = &config.state_file
        && let Some(what) = StateStore::inspect(path)
    {
        checked
            .warnings
            .push(format!("state file {}: {what}", path.display()));
    }
    if crate::shell::boot_id::read_boot_id(&config.boot_id_file).is_none() {
        checked.warnings.push(format!(
            "boot id file {}: unreadable or empty; the agent would not tell a reboot from a restart",
            config.boot_id_file.display()
        ));
    }
    if checked.passed() {
        let [traces, logs] = &endpoints;
        checked.summary = Some(summary(&config, traces.as_deref(), logs.as_deref()));
    }
    checked
}

/// One line: what the agent would do with this configuration.
fn summary(config: &Config, traces: Option<&str>, logs: Option<&str>) -> String {
    let mut line = format!(
        "configuration OK: polls {} every {}, serves {} on {}",
        config.imds_url,
        humantime::format_duration(config.poll_interval),
        config.telemetry_path,
        config.listen_address
    );
    let approval = config.approval.mode.as_str();
    let _ = write!(line, "; approval {approval}");
    let receivers = config.notify.receivers.len();
    let _ = write!(
        line,
        "; {receivers} notification receiver{}",
        if receivers == 1 { "" } else { "s" }
    );
    let _ = match traces {
        Some(endpoint) => write!(line, "; traces to {endpoint}"),
        None => write!(line, "; traces off"),
    };
    if let Some(endpoint) = logs {
        let _ = write!(line, "; log events to {endpoint}");
    }
    #[cfg(feature = "kubernetes")]
    if let Some(kubernetes) = &config.kubernetes {
        let _ = write!(line, "; Kubernetes node {}", kubernetes.node_name);
    }
    let _ = match &config.state_file {
        Some(path) => write!(line, "; state in {}", path.display()),
        None => write!(line, "; state in memory"),
    };
    line
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use clap::Parser as _;

    use super::*;
    use crate::config::{Cli, Command};

    fn check_args(args: &[&str], env: &[(&'static str, &'static str)]) -> Checked {
        let cli = Cli::try_parse_from(["x", "check-config"].iter().chain(args));
        let Ok(Cli {
            command: Some(Command::CheckConfig(args)),
            ..
        }) = cli
        else {
            panic!("{args:?} did not parse: {cli:?}");
        };
        let env: HashMap<&str, &str> = env.iter().copied().collect();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        match runtime {
            Ok(runtime) => runtime.block_on(async { check(args.agent, &env, &[]) }),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn a_valid_configuration_passes_with_one_line_saying_what_would_run() {
        let checked = check_args(&["--state.file=", "--approve"], &[]);
        assert!(checked.passed(), "{checked:?}");
        let summary = checked.summary.unwrap_or_default();
        assert!(
            summary.starts_with("configuration OK: polls http://169.254.169.254/ every 1s"),
            "{summary}"
        );
        assert!(summary.contains("approval on"), "{summary}");
        assert!(summary.contains("state in memory"), "{summary}");
    }

    #[test]
    fn every_independent_problem_is_reported_not_only_the_first() {
        let checked = check_args(
            &[
                "--state.file=",
                "--imds.url=ftp://imds",
                "--web.telemetry-path=/healthz",
                "--approve.policy-file=/nonexistent/policy.yaml",
                "--notify.webhook-url=not a url",
                "--web.max-connections=0",
                "--otlp.headers=novalue",
                "--otlp.endpoint=http://collector:4318",
            ],
            &[],
        );
        assert!(!checked.passed());
        for flag in [
            "--imds.url",
            "--web.telemetry-path",
            "--approve.policy-file",
            "--notify.webhook-url",
            "--web.max-connections",
            "--otlp.headers",
        ] {
            assert!(
                checked.problems.iter().any(|p| p.contains(flag)),
                "{flag} not among {:?}",
                checked.problems
            );
        }
        assert_eq!(checked.summary, None);
    }

    #[test]
    fn what_the_agent_would_run_on_is_a_warning_not_a_problem() {
        let checked = check_args(
            &["--state.file="],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"),
            ],
        );
        assert!(checked.passed(), "{checked:?}");
        assert!(
            checked
                .warnings
                .iter()
                .any(|w| w.contains("OTEL_EXPORTER_OTLP_TIMEOUT")),
            "{checked:?}"
        );
        let summary = checked.summary.unwrap_or_default();
        assert!(
            summary.contains("traces to http://collector:4318/v1/traces"),
            "{summary}"
        );
        assert!(!summary.contains("log events"), "{summary}");
    }

    #[test]
    fn log_events_asked_for_are_in_the_summary_and_a_shared_bad_value_is_said_once() {
        let checked = check_args(
            &["--state.file="],
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
                ("OTEL_LOGS_EXPORTER", "otlp"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s"),
            ],
        );
        assert!(checked.passed(), "{checked:?}");
        let timeouts = checked
            .warnings
            .iter()
            .filter(|w| w.contains("OTEL_EXPORTER_OTLP_TIMEOUT"))
            .count();
        assert_eq!(timeouts, 1, "{checked:?}");
        let summary = checked.summary.unwrap_or_default();
        assert!(
            summary.contains("; log events to http://collector:4318/v1/logs"),
            "{summary}"
        );
    }
}
