//! The agent's settings: the command line ([`flags`]) validated into one [`Config`], the
//! approval settings and the policy file ([`approval`]), the trace export settings ([`otlp`],
//! resolved with the `OTEL_*` variables by [`lenient`]),
//! the listener's limits and the exporter-toolkit web configuration file ([`web`]), the
//! notification receivers ([`notify`]) and the Kubernetes node output's settings ([`kubernetes`]).
//! Anything invalid is one line on stderr and exit code 64 (`EX_USAGE`): a usage error of clap's
//! as [`usage`] writes it, an unknown variable as [`environment`] finds it, a value as
//! [`AgentArgs::validate`] refuses it. The syntaxes settings share are [`values`]'.
//!
//! The clap definitions are the one source of every setting: `--help`, the environment names,
//! the reference in docs/configuration.md and the Helm chart's values schema derive from them
//! (the last two by a test, [`reference`]).
//!
//! Settings only: this folder imports the core's types, which it parses into, and none of the
//! modules that act on the settings.

pub mod approval;
pub mod environment;
pub mod file_input;
pub mod flags;
pub mod kubernetes;
pub mod label_selector;
pub mod lenient;
pub mod nearest;
pub mod notify;
pub mod otlp;
#[cfg(all(test, feature = "kubernetes", not(windows)))]
mod reference;
pub mod usage;
pub mod values;
pub mod web;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use reqwest::Url;

use approval::ApprovalConfig;
pub use flags::{
    AgentArgs, ApproveArgs, CheckConfigArgs, CheckImdsArgs, Cli, Command, DemoArgs, LogFormat,
    Owner, PrepareStateDirArgs, SimulatorArgs, StateArgs,
};
pub use flags::{
    DEFAULT_API_VERSION, DEFAULT_BOOT_ID_FILE, DEFAULT_LOG_FORMAT, DEFAULT_LOG_LEVEL,
    DEFAULT_STATE_DIR, DEFAULT_STATE_FILE, DEMO_LOG_FORMAT,
};
pub use values::ConfigError;
use values::{bounded, found, invalid};

/// Exit code for an invalid command line or configuration (sysexits.h `EX_USAGE`).
pub const EXIT_USAGE: i32 = 64;

/// The state file unless `--state.file` says otherwise: [`DEFAULT_STATE_FILE`] on Linux,
/// `%ProgramData%\azure-scheduled-events-exporter\state.json` on Windows (`C:\ProgramData` when
/// the variable is unset, as it never is under the service control manager).
#[cfg(not(windows))]
fn default_state_file() -> PathBuf {
    PathBuf::from(DEFAULT_STATE_FILE)
}

#[cfg(windows)]
fn default_state_file() -> PathBuf {
    default_data_dir().join("state.json")
}

/// `%ProgramData%\azure-scheduled-events-exporter`: the state file's and, under the service
/// control manager, the log file's directory.
#[cfg(windows)]
pub fn default_data_dir() -> PathBuf {
    std::env::var_os("ProgramData")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| PathBuf::from(r"C:\ProgramData"), PathBuf::from)
        .join("azure-scheduled-events-exporter")
}

pub use azure_scheduled_events_simulator::{DEMO_OTHER_VM, DEMO_VM};

/// Which events are reported: per-event series, and event log lines at info level
/// (`--report.neighbours`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventSeries {
    /// Events naming this VM, and every event while this VM's name is unknown.
    ThisVm,
    /// Every event in the document (small fleets; cardinality grows with the placement group).
    All,
}

/// The agent's validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub imds_url: Url,
    pub api_version: String,
    pub imds_timeout: Duration,
    pub imds_first_timeout: Duration,
    /// `--imds.connect-timeout`, at most half of the shorter request timeout.
    pub imds_connect_timeout: Duration,
    pub imds_max_backoff: Duration,
    pub poll_interval: Duration,
    pub listen_address: SocketAddr,
    pub telemetry_path: String,
    /// The `process_*` metrics; off with `--web.disable-exporter-metrics`.
    pub exporter_metrics: bool,
    /// `--web.config.file`, `--web.max-requests`, `--web.max-connections`.
    pub web: web::WebSettings,
    pub vm_name: Option<String>,
    pub event_series: EventSeries,
    pub log_format: LogFormat,
    pub log_level: String,
    /// The `--otlp.*` flags, resolved with the `OTEL_*` variables by [`otlp::OtlpArgs::resolve`].
    pub otlp: otlp::OtlpArgs,
    pub approval: ApprovalConfig,
    /// Receivers of notifications; none by default.
    pub notify: notify::NotifyConfig,
    /// `None` keeps state in memory.
    pub state_file: Option<PathBuf>,
    pub boot_id_file: PathBuf,
    /// `None` unless `--kubernetes.node-name` is set (always, in a build without the client).
    pub kubernetes: Option<kubernetes::KubernetesConfig>,
}

/// The levels `--log.level` takes, alone or after `target=` in a directive.
const LOG_LEVELS: &[&str] = &["off", "error", "warn", "info", "debug", "trace"];

/// A level, or comma-separated `target=level` directives with an optional default level. The
/// filter library takes a bare word as a target, so `warning` or `inf` would silence every line:
/// each level is checked against [`LOG_LEVELS`] first.
fn log_level(text: &str) -> Result<(), String> {
    let is_level = |word: &str| {
        LOG_LEVELS
            .iter()
            .any(|l| l.eq_ignore_ascii_case(word.trim()))
    };
    if text.trim().is_empty() {
        return Err(format!("empty: use one of {}", LOG_LEVELS.join(", ")));
    }
    for directive in text.split(',') {
        let level = directive
            .rsplit_once('=')
            .map_or(directive, |(_, level)| level);
        if !is_level(level) {
            return Err(format!(
                "{:?}: {:?} is not a level (use one of {}, or target=level directives)",
                text,
                level.trim(),
                LOG_LEVELS.join(", ")
            ));
        }
    }
    text.parse::<tracing_subscriber::filter::Targets>()
        .map(drop)
        .map_err(|e| format!("{text:?}: {e}"))
}

/// `--imds.url`: an http or https base URL. The URL is not repeated in errors: it may hold a
/// password.
fn imds_url(text: &str) -> Result<Url, ConfigError> {
    let imds_url = Url::parse(text).map_err(|e| invalid("imds.url", format!("not a URL: {e}")))?;
    if !matches!(imds_url.scheme(), "http" | "https") || imds_url.host().is_none() {
        return Err(invalid("imds.url", "not an http:// or https:// URL"));
    }
    if imds_url.query().is_some() || imds_url.fragment().is_some() {
        return Err(invalid(
            "imds.url",
            "give the base URL only, without query or fragment",
        ));
    }
    Ok(imds_url)
}

impl AgentArgs {
    /// Validates the flags; `default_log_format` applies when `--log.format` was not given. The
    /// first problem is the error: the agent exits with one line.
    pub fn validate(self, default_log_format: LogFormat) -> Result<Config, ConfigError> {
        self.check(default_log_format).map_err(|problems| {
            problems
                .into_iter()
                .next()
                .unwrap_or_else(|| invalid("", "invalid configuration"))
        })
    }

    /// As [`AgentArgs::validate`], with every problem found (never an empty list): each setting,
    /// and each group of settings read together (approval, web, notifications, Kubernetes), is
    /// checked whatever the others hold, so `check-config` can print them all at once.
    pub fn check(self, default_log_format: LogFormat) -> Result<Config, Vec<ConfigError>> {
        let mut problems = Vec::new();
        let imds_url = found(&mut problems, imds_url(&self.imds_url));
        if chrono::NaiveDate::parse_from_str(&self.imds_api_version, "%Y-%m-%d").is_err() {
            problems.push(invalid(
                "imds.api-version",
                format!("{:?} is not a date like 2020-07-01", self.imds_api_version),
            ));
        }
        const MINUTE: Duration = Duration::from_secs(60);
        for (flag, value, max) in [
            ("imds.timeout", self.imds_timeout, 5 * MINUTE),
            ("imds.first-timeout", self.imds_first_timeout, 10 * MINUTE),
            ("imds.connect-timeout", self.imds_connect_timeout, MINUTE),
            // A Retry-After is capped by it: one answer must not stop polling for long.
            ("imds.max-backoff", self.imds_max_backoff, 5 * MINUTE),
            ("poll.interval", self.poll_interval, 5 * MINUTE),
        ] {
            found(&mut problems, bounded(flag, value, max));
        }
        let path = &self.web_telemetry_path;
        if !path.starts_with('/') || matches!(path.as_str(), "/" | "/healthz" | "/readyz") {
            problems.push(invalid(
                "web.telemetry-path",
                format!("{path:?} must start with / and not be /, /healthz or /readyz"),
            ));
        }
        if self
            .vm_name
            .as_ref()
            .is_some_and(|name| name.trim().is_empty())
        {
            problems.push(invalid("vm.name", "must not be empty"));
        }
        let vm_name = self.vm_name;
        found(
            &mut problems,
            log_level(&self.log_level).map_err(|e| invalid("log.level", e)),
        );
        let state_file = match self.state.state_file.as_deref() {
            None => Some(default_state_file()),
            Some(path) if path.trim().is_empty() => None,
            Some(path) => Some(PathBuf::from(path)),
        };
        let boot_id_file = self.state.boot_id_file.clone();
        let approval = found(&mut problems, self.approve.validate());
        let web = found(&mut problems, self.web.validate());
        let notify = found(&mut problems, self.notify.validate());
        let kubernetes = found(&mut problems, self.kubernetes.validate());
        let (Some(imds_url), Some(approval), Some(web), Some(notify), Some(kubernetes)) =
            (imds_url, approval, web, notify, kubernetes)
        else {
            return Err(problems);
        };
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(Config {
            imds_url,
            api_version: self.imds_api_version,
            imds_timeout: self.imds_timeout,
            imds_first_timeout: self.imds_first_timeout,
            // Shorter than any request's timeout, so that a connect that never completes is
            // always told from a slow answer.
            imds_connect_timeout: self
                .imds_connect_timeout
                .min(self.imds_timeout.min(self.imds_first_timeout) / 2),
            imds_max_backoff: self.imds_max_backoff,
            poll_interval: self.poll_interval,
            listen_address: self.web_listen_address,
            telemetry_path: self.web_telemetry_path,
            exporter_metrics: !self.web_disable_exporter_metrics,
            web,
            vm_name,
            event_series: if self.report_neighbours || self.metrics_all_events {
                EventSeries::All
            } else {
                EventSeries::ThisVm
            },
            log_format: self.log_format.unwrap_or(default_log_format),
            log_level: self.log_level,
            otlp: self.otlp,
            approval,
            notify,
            state_file,
            boot_id_file,
            kubernetes,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::approval::HookCommand;
    use super::*;
    use azure_scheduled_events_core::approval::{Mode, Policy, When};
    use azure_scheduled_events_core::event::EventType;

    fn parse(args: &[&str]) -> Result<Config, String> {
        let cli = Cli::try_parse_from(
            std::iter::once("azure-scheduled-events-exporter").chain(args.iter().copied()),
        )
        .map_err(|e| e.to_string())?;
        cli.agent
            .validate(LogFormat::Json)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn zero_configuration_targets_azure_imds() -> Result<(), String> {
        let config = parse(&[])?;
        assert_eq!(config.imds_url.as_str(), "http://169.254.169.254/");
        assert_eq!(config.api_version, "2020-07-01");
        assert_eq!(config.poll_interval, Duration::from_secs(1));
        assert_eq!(
            config.listen_address,
            "0.0.0.0:10188".parse().map_err(|_| "addr")?
        );
        assert_eq!(config.telemetry_path, "/metrics");
        assert_eq!(config.vm_name, None);
        assert_eq!(config.event_series, EventSeries::ThisVm);
        assert_eq!(config.log_format, LogFormat::Json);
        assert_eq!(config.imds_first_timeout, Duration::from_secs(120));
        Ok(())
    }

    #[test]
    fn the_connect_timeout_is_one_second_and_never_more_than_half_a_request_timeout()
    -> Result<(), String> {
        assert_eq!(parse(&[])?.imds_connect_timeout, Duration::from_secs(1));
        let capped = parse(&["--imds.connect-timeout=10s", "--imds.timeout=3s"])?;
        assert_eq!(capped.imds_connect_timeout, Duration::from_millis(1500));
        let short = parse(&["--imds.connect-timeout=250ms"])?;
        assert_eq!(short.imds_connect_timeout, Duration::from_millis(250));
        let error = parse(&["--imds.connect-timeout=0s"])
            .err()
            .unwrap_or_default();
        assert!(error.contains("imds.connect-timeout"), "{error}");
        Ok(())
    }

    #[test]
    fn flags_set_every_value() -> Result<(), String> {
        let config = parse(&[
            "--imds.url=http://127.0.0.1:8080",
            "--imds.api-version=2019-08-01",
            "--poll.interval=250ms",
            "--imds.timeout=500ms",
            "--web.listen-address=127.0.0.1:0",
            "--web.telemetry-path=/m",
            "--vm.name=vmss_3",
            "--metrics.all-events",
            "--log.format=text",
        ])?;
        assert_eq!(config.imds_url.as_str(), "http://127.0.0.1:8080/");
        assert_eq!(config.api_version, "2019-08-01");
        assert_eq!(config.poll_interval, Duration::from_millis(250));
        assert_eq!(config.imds_timeout, Duration::from_millis(500));
        assert_eq!(config.telemetry_path, "/m");
        assert_eq!(config.vm_name.as_deref(), Some("vmss_3"));
        assert_eq!(config.event_series, EventSeries::All);
        assert_eq!(config.log_format, LogFormat::Text);
        Ok(())
    }

    #[test]
    fn invalid_values_name_their_flag() {
        for (args, flag) in [
            (&["--poll.interval=fast"][..], "--poll.interval"),
            (&["--poll.interval=0s"], "--poll.interval"),
            (&["--imds.url=169.254.169.254"], "--imds.url"),
            (&["--imds.url=ftp://169.254.169.254"], "--imds.url"),
            (&["--imds.api-version=latest"], "--imds.api-version"),
            (&["--web.listen-address=10188"], "--web.listen-address"),
            (&["--web.telemetry-path=metrics"], "--web.telemetry-path"),
            (&["--web.telemetry-path=/healthz"], "--web.telemetry-path"),
            (&["--vm.name="], "--vm.name"),
            (&["--log.format=xml"], "--log.format"),
            (&["--no.such-flag"], "--no.such-flag"),
        ] {
            match parse(args) {
                Ok(_) => panic!("{args:?} was accepted"),
                Err(e) => assert!(e.contains(flag), "{args:?}: {e}"),
            }
        }
    }

    #[test]
    fn approval_is_off_by_default_with_microsofts_sample_policy() -> Result<(), String> {
        let config = parse(&[])?;
        assert_eq!(config.approval.mode, Mode::Off);
        assert_eq!(config.approval.policy, Policy::default());
        assert_eq!(config.approval.hook, None);
        assert_eq!(
            config.state_file.as_deref(),
            Some(std::path::Path::new(DEFAULT_STATE_FILE))
        );
        assert_eq!(parse(&["--approve"])?.approval.mode, Mode::On);
        assert_eq!(
            parse(&["--approve", "--approve.dry-run"])?.approval.mode,
            Mode::DryRun,
            "dry run wins: it never POSTs"
        );
        assert_eq!(parse(&["--approve.dry-run"])?.approval.mode, Mode::DryRun);
        assert_eq!(parse(&["--state.file="])?.state_file, None);
        Ok(())
    }

    #[test]
    fn demo_keeps_state_in_memory_unless_a_state_file_is_given() -> Result<(), String> {
        let demo = |args: &[&str]| -> Result<Config, String> {
            let cli =
                Cli::try_parse_from(["x", "demo"].iter().chain(args)).map_err(|e| e.to_string())?;
            let Some(Command::Demo(demo)) = cli.command else {
                return Err("not the demo subcommand".into());
            };
            demo.into_agent()
                .validate(LogFormat::Text)
                .map_err(|e| e.to_string())
        };
        assert_eq!(demo(&[])?.state_file, None);
        assert_eq!(
            demo(&["--state.file=/tmp/demo-state.json"])?
                .state_file
                .as_deref(),
            Some(std::path::Path::new("/tmp/demo-state.json"))
        );
        Ok(())
    }

    #[test]
    fn policy_flags_set_every_rule() -> Result<(), String> {
        let config = parse(&[
            "--approve",
            "--approve.user-events=false",
            "--approve.predicted-hardware-failure",
            "--approve.freeze-max-duration=0s",
            "--approve.event-types=reboot, Redeploy",
            "--approve.deny-event-types=Preempt",
            "--approve.before-not-before=30s",
            "--approve.takeover-delay=1m",
            r#"--approve.hook=["sh","-c","drain && checkpoint"]"#,
            "--approve.recover-hook=/usr/local/bin/undrain --all",
            "--approve.hook-timeout=45s",
        ])?;
        let policy = &config.approval.policy;
        assert!(!policy.user_events);
        assert!(policy.predicted_hardware_failure);
        assert_eq!(policy.freeze_max_duration, Duration::ZERO);
        assert_eq!(policy.event_types, [EventType::Reboot, EventType::Redeploy]);
        assert_eq!(policy.deny_event_types, [EventType::Preempt]);
        assert_eq!(policy.when, When::BeforeNotBefore(Duration::from_secs(30)));
        assert_eq!(policy.takeover_delay, Duration::from_secs(60));
        let hook = config.approval.hook.as_ref().map(HookCommand::argv);
        assert_eq!(
            hook,
            Some(&["sh".to_owned(), "-c".into(), "drain && checkpoint".into()][..])
        );
        let recover = config.approval.recover_hook.as_ref().map(HookCommand::argv);
        assert_eq!(
            recover,
            Some(&["/usr/local/bin/undrain".to_owned(), "--all".into()][..])
        );
        assert_eq!(config.approval.hook_timeout, Duration::from_secs(45));
        assert_eq!(
            parse(&["--approve.before-not-before=immediately"])?
                .approval
                .policy
                .when,
            When::Immediately
        );
        Ok(())
    }

    #[test]
    fn the_example_policy_file_is_read_and_flags_win_over_it() -> Result<(), String> {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/approval-policy.yaml");
        let config = parse(&["--approve", &format!("--approve.policy-file={file}")])?;
        let policy = &config.approval.policy;
        assert_eq!(
            policy.deny_event_types,
            [EventType::Preempt, EventType::Terminate]
        );
        assert_eq!(policy.when, When::BeforeNotBefore(Duration::from_secs(30)));
        assert_eq!(policy.freeze_max_duration, Duration::from_secs(9));
        assert!(!policy.predicted_hardware_failure);
        let config = parse(&[
            &format!("--approve.policy-file={file}"),
            "--approve.before-not-before=immediately",
            "--approve.deny-event-types=Terminate",
        ])?;
        assert_eq!(config.approval.policy.when, When::Immediately);
        assert_eq!(
            config.approval.policy.deny_event_types,
            [EventType::Terminate]
        );
        Ok(())
    }

    #[test]
    fn a_typo_in_the_policy_file_is_an_error_not_a_silent_default() -> Result<(), String> {
        let dir = std::env::temp_dir().join(format!("policy-typo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let file = dir.join("policy.yaml");
        for (text, expected) in [
            ("user_event: false\n", "user_event"),
            ("deny_event_types: [Preemt]\n", "Preemt"),
            ("before_not_before: soon\n", "soon"),
            ("event_types: Reboot\n", "event_types"),
        ] {
            std::fs::write(&file, text).map_err(|e| e.to_string())?;
            match parse(&[&format!("--approve.policy-file={}", file.display())]) {
                Ok(_) => panic!("{text:?} was accepted"),
                Err(e) => assert!(e.contains(expected), "{text:?}: {e}"),
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    #[test]
    fn invalid_approval_settings_name_their_flag() {
        for (args, flag) in [
            (
                &["--approve.event-types=Reboot,Rebooot"][..],
                "--approve.event-types",
            ),
            (
                &["--approve.deny-event-types=Other"],
                "--approve.deny-event-types",
            ),
            (
                &["--approve.before-not-before=soon"],
                "--approve.before-not-before",
            ),
            (
                &["--approve.before-not-before=30d"],
                "--approve.before-not-before",
            ),
            (
                &["--approve.takeover-delay=-1s"],
                "--approve.takeover-delay",
            ),
            (
                &["--approve.freeze-max-duration=9"],
                "--approve.freeze-max-duration",
            ),
            (&["--approve.user-events=maybe"], "--approve.user-events"),
            (&["--approve.hook="], "--approve.hook"),
            (&["--approve.hook=[1]"], "--approve.hook"),
            (&["--approve.hook-timeout=0s"], "--approve.hook-timeout"),
            (
                &["--approve.policy-file=/nonexistent.yaml"],
                "--approve.policy-file",
            ),
        ] {
            match parse(args) {
                Ok(_) => panic!("{args:?} was accepted"),
                Err(e) => assert!(e.contains(flag), "{args:?}: {e}"),
            }
        }
    }

    #[test]
    fn a_repeated_flag_takes_the_last_value() -> Result<(), String> {
        let config = parse(&["--poll.interval=5s", "--poll.interval=2s"])?;
        assert_eq!(config.poll_interval, Duration::from_secs(2));
        Ok(())
    }

    #[test]
    fn subcommands_parse() -> Result<(), String> {
        let cli = Cli::try_parse_from([
            "x",
            "simulator",
            "--web.listen-address=127.0.0.1:9999",
            "--scenario=demo",
        ])
        .map_err(|e| e.to_string())?;
        assert!(
            matches!(cli.command, Some(Command::Simulator(ref s)) if s.flags.web_listen_address.port() == 9999)
        );
        let cli = Cli::try_parse_from(["x", "demo", "--web.listen-address=127.0.0.1:0"])
            .map_err(|e| e.to_string())?;
        assert!(matches!(cli.command, Some(Command::Demo(_))));
        let cli = Cli::try_parse_from(["x", "simulator"]).map_err(|e| e.to_string())?;
        assert!(
            matches!(cli.command, Some(Command::Simulator(ref s)) if s.flags.vm_name == azure_scheduled_events_simulator::DEMO_VM),
            "the simulator plays the demo scenario's VM unless told otherwise"
        );
        Ok(())
    }

    #[test]
    fn log_levels_are_checked_word_by_word() {
        for accepted in [
            "info",
            "WARN",
            "off",
            "info,azure_scheduled_events_exporter::http::web=debug",
            "hyper=trace",
        ] {
            assert!(log_level(accepted).is_ok(), "{accepted:?}");
        }
        for refused in ["warning", "inf", "", " ", "info,web=loud", "info,"] {
            assert!(log_level(refused).is_err(), "{refused:?}");
        }
    }
}
