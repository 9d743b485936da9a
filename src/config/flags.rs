//! The command line as clap parses it: the subcommands and every flag, with its environment
//! variable and default. Values come out typed (durations, addresses) but not yet checked against
//! each other; [`AgentArgs::validate`] makes a [`super::Config`] of them.
//!
//! Every flag also reads `AZURE_SCHEDULED_EVENTS_<FLAG>` (dots and dashes become underscores,
//! e.g. `AZURE_SCHEDULED_EVENTS_POLL_INTERVAL`). Parsing never touches the process environment
//! except through clap, so tests parse argument lists.
//!
//! Every default is one named constant (`DEFAULT_*`, here or next to the type it applies to),
//! which both the parsing and `--help` take: clap's `default_value` where clap can hold it;
//! otherwise the code applies the constant and the help writes `[default: ...]`, which a test
//! compares with it (`config::reference`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

use azure_scheduled_events_protocol::http;
use azure_scheduled_events_simulator::SimulatorFlags;

use super::values::duration;
use super::{notify, otlp};

/// The default scheduled-events api-version: the newest documented, the first with DurationInSeconds.
pub const DEFAULT_API_VERSION: &str = "2020-07-01";

/// Where Linux keeps the current boot's id: the default of `--state.boot-id-file`.
#[cfg(not(windows))]
pub const DEFAULT_BOOT_ID_FILE: &str = "/proc/sys/kernel/random/boot_id";
/// Windows has no boot id file: empty means the boot time Windows reports (see [`azure_scheduled_events_core::boot`]).
#[cfg(windows)]
pub const DEFAULT_BOOT_ID_FILE: &str = "";

/// Default of `--imds.url`: the link-local address at which every Azure VM reaches IMDS.
pub const DEFAULT_IMDS_URL: &str = "http://169.254.169.254";
/// Default of `--imds.timeout`.
pub const DEFAULT_IMDS_TIMEOUT: &str = "2s";
/// Default of `--imds.first-timeout`: the two minutes Azure may take to answer the first request.
pub const DEFAULT_IMDS_FIRST_TIMEOUT: &str = "2m";
/// Default of `--imds.connect-timeout`.
pub const DEFAULT_IMDS_CONNECT_TIMEOUT: &str = "1s";
/// Default of `--imds.max-backoff`: short enough that a 30 s Spot notice is still seen.
pub const DEFAULT_IMDS_MAX_BACKOFF: &str = "10s";
/// Default of `--poll.interval`: what Azure recommends.
pub const DEFAULT_POLL_INTERVAL: &str = "1s";
/// Default of `--web.listen-address`.
pub const DEFAULT_LISTEN_ADDRESS: &str = ":10188";
/// Default of `--web.telemetry-path`.
pub const DEFAULT_TELEMETRY_PATH: &str = "/metrics";
/// Default of `--log.level`.
pub const DEFAULT_LOG_LEVEL: &str = "info";
/// Default of `--log.format` for the agent, `check-config` and `check-imds`.
pub const DEFAULT_LOG_FORMAT: LogFormat = LogFormat::Json;
/// Default of `--log.format` for `demo`, which a person watches in a terminal.
pub const DEMO_LOG_FORMAT: LogFormat = LogFormat::Text;
/// Default of the simulator's `--log.format`.
pub const DEFAULT_SIMULATOR_LOG_FORMAT: &str = "text";
/// Default of `--approve.hook-timeout`.
pub const DEFAULT_HOOK_TIMEOUT: &str = "2m";

/// What `--version` says after the version: where the binary came from, for bug reports.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\n  revision: ",
    env!("BUILD_REVISION"),
    "\n  build date: ",
    env!("BUILD_DATE"),
    "\n  target: ",
    env!("BUILD_TARGET"),
    "\n  features: ",
    env!("BUILD_FEATURES"),
);

#[derive(Debug, Parser)]
#[command(
    name = "azure-scheduled-events-exporter",
    version,
    long_version = LONG_VERSION,
    about = "Exports Azure Scheduled Events as Prometheus metrics and structured logs.",
    args_conflicts_with_subcommands = true,
    args_override_self = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub agent: AgentArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent against a built-in simulator playing a scenario on a loop: see it work anywhere.
    Demo(DemoArgs),
    /// Serve the simulator alone, as a local IMDS for your own tests.
    Simulator(SimulatorArgs),
    /// Check a configuration without starting the agent: print every problem, exit 0 or 64.
    ///
    /// Reads the agent's flags, its environment and every file it reads at start (policy,
    /// receivers, web configuration, kubeconfig, certificates, state) as the agent would, and
    /// prints every problem, or one line saying what would run. Sends no request, opens no port,
    /// writes nothing (docs/configuration.md).
    CheckConfig(CheckConfigArgs),
    /// Read IMDS once and say what the agent would report: this VM, its events and how each would
    /// be treated, or what is wrong when IMDS does not answer. Exit 0, or 69 when IMDS did not
    /// answer.
    ///
    /// A first check on a new VM, before wiring Prometheus: the agent's flags and variables apply
    /// (--imds.url, --vm.name, --approve and its policy, --report.neighbours). Reads instance
    /// metadata and the scheduled-events document once each; sends no approval, opens no port,
    /// writes nothing.
    CheckImds(CheckImdsArgs),
    /// Create the state directory if missing (mode 0700) and, with --owner, give it to that user and
    /// exit: run as root with only CAP_CHOWN before the agent (the Helm chart's init container).
    PrepareStateDir(PrepareStateDirArgs),
    /// Run the agent as a Windows service (the service control manager starts this; from a
    /// console, run the agent without `service`). Accepts the agent's flags.
    #[cfg(windows)]
    Service(Box<ServiceArgs>),
}

/// The state directory to prepare, and for whom.
#[derive(Debug, Clone, Args)]
pub struct PrepareStateDirArgs {
    /// The directory (that of the default --state.file unless given).
    #[arg(default_value = DEFAULT_STATE_DIR)]
    pub dir: PathBuf,
    /// UID:GID to give the directory to (needs CAP_CHOWN); without it, it stays the caller's.
    #[arg(long = "owner", value_name = "UID:GID", value_parser = owner)]
    pub owner: Option<Owner>,
}

/// A numeric user and group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// `65532:65532`.
fn owner(text: &str) -> Result<Owner, String> {
    let (uid, gid) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?}: not UID:GID"))?;
    let id = |n: &str| {
        n.parse::<u32>()
            .map_err(|e| format!("{text:?}: {n:?}: {e}"))
    };
    Ok(Owner {
        uid: id(uid)?,
        gid: id(gid)?,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

/// The agent's flags (also accepted by `demo` and `check-config`). Every boolean among them
/// takes the one style of [`super::values::boolean_style`].
#[derive(Debug, Clone, Args)]
#[command(mut_args = super::values::boolean_style)]
pub struct AgentArgs {
    /// Base URL of the Instance Metadata Service.
    ///
    /// A user and password in it (for a proxy in front of IMDS) are sent as basic auth and never
    /// printed: the startup line shows `redacted@`, and an invalid URL is not repeated in the
    /// error.
    #[arg(
        long = "imds.url",
        env = "AZURE_SCHEDULED_EVENTS_IMDS_URL",
        default_value = DEFAULT_IMDS_URL
    )]
    pub imds_url: String,
    /// Scheduled-events api-version to request (YYYY-MM-DD). Never changed automatically.
    ///
    /// Older versions omit newer fields (Description, EventSource, DurationInSeconds) and event
    /// types. For Spot Plus rebalance recommendations set the newer, unpublished version Azure
    /// gives you: the agent reads documents of a newer version, ignoring fields it does not know,
    /// and shows advisories without counting them as pending (docs/simulator.md).
    #[arg(long = "imds.api-version", env = "AZURE_SCHEDULED_EVENTS_IMDS_API_VERSION", default_value = DEFAULT_API_VERSION)]
    pub imds_api_version: String,
    /// Timeout of each poll once IMDS has answered; at most 5m.
    #[arg(long = "imds.timeout", env = "AZURE_SCHEDULED_EVENTS_IMDS_TIMEOUT", default_value = DEFAULT_IMDS_TIMEOUT, value_parser = duration)]
    pub imds_timeout: Duration,
    /// Timeout of polls until the first valid document: Azure enables Scheduled Events on the first
    /// request and may take up to two minutes to answer it. At most 10m.
    #[arg(long = "imds.first-timeout", env = "AZURE_SCHEDULED_EVENTS_IMDS_FIRST_TIMEOUT", default_value = DEFAULT_IMDS_FIRST_TIMEOUT, value_parser = duration)]
    pub imds_first_timeout: Duration,
    /// Time a TCP connect to IMDS has before it counts as blocked (reason connect_timeout):
    /// IMDS is link-local, so a connect that takes longer never completes (a pod outside the
    /// host network, AKS's IMDS restriction, a NetworkPolicy). At most half of --imds.timeout.
    ///
    /// Such a connect fails at once instead of waiting for the first call's timeout. The fix, with
    /// the Helm chart, is its value hostNetwork=true.
    #[arg(long = "imds.connect-timeout", env = "AZURE_SCHEDULED_EVENTS_IMDS_CONNECT_TIMEOUT", default_value = DEFAULT_IMDS_CONNECT_TIMEOUT, value_parser = duration)]
    pub imds_connect_timeout: Duration,
    /// Longest wait between polls when IMDS answers 429, 410 or 5xx; at most 5m.
    ///
    /// The wait doubles from the poll interval and honours `Retry-After`, capped so that a 30 s
    /// Spot notice is still seen; a larger `Retry-After` is cut to it.
    #[arg(long = "imds.max-backoff", env = "AZURE_SCHEDULED_EVENTS_IMDS_MAX_BACKOFF", default_value = DEFAULT_IMDS_MAX_BACKOFF, value_parser = duration)]
    pub imds_max_backoff: Duration,
    /// Time between polls. Azure recommends 1s; Spot evictions can come with 30s notice.
    ///
    /// At most 5m. Sub-second values are accepted (benchmarks); below 200 ms the agent warns that
    /// IMDS allows 5 requests per second.
    #[arg(long = "poll.interval", env = "AZURE_SCHEDULED_EVENTS_POLL_INTERVAL", default_value = DEFAULT_POLL_INTERVAL, value_parser = duration)]
    pub poll_interval: Duration,
    /// Address for /metrics and health: `:PORT` (all IPv4 interfaces), `IP:PORT` or `[IPv6]:PORT`.
    #[arg(long = "web.listen-address", env = "AZURE_SCHEDULED_EVENTS_WEB_LISTEN_ADDRESS", default_value = DEFAULT_LISTEN_ADDRESS, value_parser = http::listen_address)]
    pub web_listen_address: SocketAddr,
    /// Path under which metrics are served.
    #[arg(
        long = "web.telemetry-path",
        env = "AZURE_SCHEDULED_EVENTS_WEB_TELEMETRY_PATH",
        default_value = DEFAULT_TELEMETRY_PATH
    )]
    pub web_telemetry_path: String,
    /// Leave out the metrics about the agent itself: the `process_*` family (CPU, memory, file
    /// descriptors, threads, start time), as node_exporter's flag of the same name does.
    ///
    /// `azure_scheduled_events_build_info` stays, as node_exporter keeps its own (docs/metrics.md).
    #[arg(
        long = "web.disable-exporter-metrics",
        env = "AZURE_SCHEDULED_EVENTS_WEB_DISABLE_EXPORTER_METRICS"
    )]
    pub web_disable_exporter_metrics: bool,
    /// Which name in an event's Resources means this VM [default: compute.name from instance metadata].
    #[arg(long = "vm.name", env = "AZURE_SCHEDULED_EVENTS_VM_NAME")]
    pub vm_name: Option<String>,
    /// Report every event in the document, not only those naming this VM: per-event series, and
    /// event log lines at info level (a neighbour's are at debug level otherwise).
    #[arg(
        long = "report.neighbours",
        env = "AZURE_SCHEDULED_EVENTS_REPORT_NEIGHBOURS"
    )]
    pub report_neighbours: bool,
    /// The former name of --report.neighbours, still read.
    #[arg(
        long = "metrics.all-events",
        env = "AZURE_SCHEDULED_EVENTS_METRICS_ALL_EVENTS",
        hide = true
    )]
    pub metrics_all_events: bool,
    /// Log format [default: json; text for demo].
    #[arg(long = "log.format", env = "AZURE_SCHEDULED_EVENTS_LOG_FORMAT")]
    pub log_format: Option<LogFormat>,
    /// Log filter: a level (off, error, warn, info, debug, trace), or comma-separated `target=level` directives with an optional default level.
    #[arg(
        long = "log.level",
        env = "AZURE_SCHEDULED_EVENTS_LOG_LEVEL",
        default_value = DEFAULT_LOG_LEVEL
    )]
    pub log_level: String,
    #[command(flatten)]
    pub web: super::web::WebArgs,
    #[command(flatten)]
    pub otlp: otlp::OtlpArgs,
    #[command(flatten)]
    pub approve: ApproveArgs,
    #[command(flatten)]
    pub state: StateArgs,
    #[command(flatten)]
    pub notify: notify::NotifyArgs,
    #[command(flatten)]
    pub kubernetes: super::kubernetes::KubernetesArgs,
}

/// Where the state lives on Linux, written once for the constants and `--help` below.
macro_rules! linux_state_dir {
    () => {
        "/var/lib/azure-scheduled-events-exporter"
    };
}

/// The state directory on Linux: the default of `prepare-state-dir`.
pub const DEFAULT_STATE_DIR: &str = linux_state_dir!();

/// Where the state lives on Linux unless `--state.file` says otherwise.
pub const DEFAULT_STATE_FILE: &str = concat!(linux_state_dir!(), "/state.json");

/// `--state.file`'s help, with the default of the system the agent was built for (the flag has no
/// clap default: `demo` keeps state in memory unless given).
#[cfg(not(windows))]
const STATE_FILE_HELP: &str = concat!(
    "State file (approvals sent, first-seen times, expected impact); empty keeps state in memory, as `demo` does unless given [default: ",
    linux_state_dir!(),
    "/state.json]"
);
#[cfg(windows)]
const STATE_FILE_HELP: &str = "State file (approvals sent, first-seen times, expected impact); empty keeps state in memory, as `demo` does unless given [default: %ProgramData%\\azure-scheduled-events-exporter\\state.json]";

/// The state file and the boot id it is compared with (docs/state.md).
#[derive(Debug, Clone, Args)]
pub struct StateArgs {
    /// State file (approvals sent, first-seen times, expected impact); empty keeps state in memory,
    /// as `demo` does unless given. Its default depends on the system: [`STATE_FILE_HELP`].
    #[arg(long = "state.file", env = "AZURE_SCHEDULED_EVENTS_STATE_FILE", help = STATE_FILE_HELP)]
    pub state_file: Option<String>,
    /// File holding the current boot's id, compared with the state file to classify reboots; on
    /// Windows empty by default: the boot time Windows reports.
    #[arg(long = "state.boot-id-file", env = "AZURE_SCHEDULED_EVENTS_STATE_BOOT_ID_FILE", default_value = DEFAULT_BOOT_ID_FILE, value_parser = any_path)]
    pub boot_id_file: PathBuf,
}

/// Approval and hooks (docs/approval.md).
#[derive(Debug, Clone, Args)]
pub struct ApproveArgs {
    /// Approve the events the policy allows (POST StartRequests to IMDS). Off by default.
    ///
    /// Nothing is ever POSTed without it (docs/approval.md).
    #[arg(long = "approve", env = "AZURE_SCHEDULED_EVENTS_APPROVE")]
    pub approve: bool,
    /// Decide, log and count approvals, but never run the approval hook nor POST; wins over
    /// --approve.
    #[arg(
        long = "approve.dry-run",
        env = "AZURE_SCHEDULED_EVENTS_APPROVE_DRY_RUN"
    )]
    pub dry_run: bool,
    /// Policy file (YAML or JSON) with the keys of the policy flags; a flag given wins over it.
    ///
    /// Its keys are the policy flags' names without `approve.` and with underscores
    /// (examples/approval-policy.yaml); an unknown key is an error.
    #[arg(
        long = "approve.policy-file",
        env = "AZURE_SCHEDULED_EVENTS_APPROVE_POLICY_FILE"
    )]
    pub policy_file: Option<PathBuf>,
    /// Approve user-initiated events (EventSource User) [default: true].
    #[arg(
        long = "approve.user-events",
        env = "AZURE_SCHEDULED_EVENTS_APPROVE_USER_EVENTS"
    )]
    pub user_events: Option<bool>,
    /// Approve at once, without waiting for --approve.before-not-before, a Reboot or Redeploy
    /// that Azure announced more than a day ahead (a predicted hardware failure, which Azure
    /// recommends acting on as soon as possible) [default: false].
    ///
    /// See docs/approval.md#predicted-hardware-failure.
    #[arg(
        long = "approve.predicted-hardware-failure",
        env = "AZURE_SCHEDULED_EVENTS_APPROVE_PREDICTED_HARDWARE_FAILURE"
    )]
    pub predicted_hardware_failure: Option<bool>,
    /// Approve Freezes with 0 <= DurationInSeconds < this; 0s turns the rule off; at most 7d
    /// [default: 9s].
    #[arg(long = "approve.freeze-max-duration", env = "AZURE_SCHEDULED_EVENTS_APPROVE_FREEZE_MAX_DURATION", value_parser = duration)]
    pub freeze_max_duration: Option<Duration>,
    /// Approve every event of these types (comma-separated, e.g. Reboot,Redeploy) [default: none].
    #[arg(
        long = "approve.event-types",
        env = "AZURE_SCHEDULED_EVENTS_APPROVE_EVENT_TYPES",
        value_name = "EVENT_TYPES",
        value_parser = super::values::EventTypes::parse
    )]
    pub event_types: Option<super::values::EventTypes>,
    /// Never approve events of these types (comma-separated); wins over every other rule.
    #[arg(
        long = "approve.deny-event-types",
        env = "AZURE_SCHEDULED_EVENTS_APPROVE_DENY_EVENT_TYPES",
        value_name = "EVENT_TYPES",
        value_parser = super::values::EventTypes::parse
    )]
    pub deny_event_types: Option<super::values::EventTypes>,
    /// When to approve: `immediately`, or a duration such as 30s: no earlier than this long before
    /// NotBefore; at most 7d [default: immediately].
    #[arg(
        long = "approve.before-not-before",
        env = "AZURE_SCHEDULED_EVENTS_APPROVE_BEFORE_NOT_BEFORE",
        value_name = "WHEN",
        value_parser = super::values::when
    )]
    pub before_not_before: Option<azure_scheduled_events_core::approval::When>,
    /// Shared events: the k-th VM in Resources approves only if the event is still Scheduled k
    /// times this delay after it first saw it; at most 7d [default: 30s].
    #[arg(long = "approve.takeover-delay", env = "AZURE_SCHEDULED_EVENTS_APPROVE_TAKEOVER_DELAY", value_parser = duration)]
    pub takeover_delay: Option<Duration>,
    /// Command that must exit 0 before an event is approved: a JSON array or words (no shell).
    #[arg(long = "approve.hook", env = "AZURE_SCHEDULED_EVENTS_APPROVE_HOOK")]
    pub hook: Option<String>,
    /// Command run when an event affecting this VM appears.
    #[arg(
        long = "approve.prepare-hook",
        env = "AZURE_SCHEDULED_EVENTS_APPROVE_PREPARE_HOOK"
    )]
    pub prepare_hook: Option<String>,
    /// Command run when an event affecting this VM completes or is cancelled.
    #[arg(
        long = "approve.recover-hook",
        env = "AZURE_SCHEDULED_EVENTS_APPROVE_RECOVER_HOOK"
    )]
    pub recover_hook: Option<String>,
    /// Time a hook has to exit before it is killed and counted as failed, with every process it
    /// started (its process group; on Windows its Job object); at most 1h.
    #[arg(long = "approve.hook-timeout", env = "AZURE_SCHEDULED_EVENTS_APPROVE_HOOK_TIMEOUT", default_value = DEFAULT_HOOK_TIMEOUT, value_parser = duration)]
    pub hook_timeout: Duration,
}

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
}

impl DemoArgs {
    /// The agent's flags for the demo: state stays in memory unless `--state.file` is given, so
    /// the simulator's events never reach the state file of a real agent on the same machine.
    pub fn into_agent(mut self) -> AgentArgs {
        self.agent.state.state_file.get_or_insert_with(String::new);
        self.agent
    }
}

/// The agent's flags, for one read of IMDS.
#[derive(Debug, Clone, Args)]
pub struct CheckImdsArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// The agent's flags, to check.
#[derive(Debug, Clone, Args)]
pub struct CheckConfigArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
}

#[cfg(windows)]
#[derive(Debug, Clone, Args)]
pub struct ServiceArgs {
    #[command(flatten)]
    pub agent: AgentArgs,
}

/// The simulator's flags, and the format of its log.
#[derive(Debug, Clone, Args)]
pub struct SimulatorArgs {
    #[command(flatten)]
    pub flags: SimulatorFlags,
    /// Log format.
    #[arg(
        long = "log.format",
        env = "AZURE_SCHEDULED_EVENTS_SIMULATOR_LOG_FORMAT",
        default_value = DEFAULT_SIMULATOR_LOG_FORMAT
    )]
    pub log_format: LogFormat,
}

/// A path, empty allowed (clap's own parser refuses it): the Windows default of
/// `--state.boot-id-file`.
fn any_path(text: &str) -> Result<PathBuf, String> {
    Ok(PathBuf::from(text))
}
