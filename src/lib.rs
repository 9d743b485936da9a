//! azure-scheduled-events-exporter turns Azure Scheduled Events into Prometheus metrics, traces
//! and logs.
//!
//! How the pieces fit (docs/architecture.md draws it): [`imds`] fetches documents over HTTP and
//! [`wire`] mirrors their JSON; [`event`] and [`not_before`] turn that into domain types, [`cause`] reads what `Description` says and [`hardware_failure`] marks a predicted failure. The
//! functional core, `observer` with `monitor`, [`tracker`] (each event's lifecycle, resumed
//! after a restart), `view` (one view of each event, its lifecycle span id given once),
//! `approval` (policy, takeover order, the decision machine) and `notices` (who is notified of
//! what), turns each poll into a list of `occurrence`s. [`agent`] wires it all; `poll_loop` runs
//! the one poll loop and hands every list to the `output`s: log, [`metrics`], spans (exported by
//! [`telemetry`] over OTLP with the EventId as trace id, [`trace_id`]), the [`state`] file (its
//! only writer; [`state_file`] reads and writes it), hooks, approval POSTs, notifications
//! (webhooks, Slack, Teams, PagerDuty) and the Kubernetes Node, the last four off the loop. `server`
//! serves `/metrics` (encoded off the loop's thread by `exposition`) and health; [`config`] turns the command line, the approval policy file,
//! the receivers file and the `OTEL_*` variables into resolved settings;
//! [`simulator`] is a faithful local IMDS used by `demo`, by users' tests and by ours;
//! [`api_version`] knows what each scheduled-events api-version shows, for it and for the flags.
//! [`web`] is the agent's listener (TLS and basic auth from `config/web.rs`, gzip, limits).

pub mod agent;
pub mod api_version;
pub(crate) mod approval;
pub(crate) mod backoff;
pub(crate) mod boot;
pub mod cause;
pub mod commands;
pub mod config;
pub mod event;
pub(crate) mod exposition;
pub mod file_input;
pub mod hardware_failure;
pub(crate) mod health;
pub mod imds;
pub mod logging;
pub mod metrics;
pub(crate) mod monitor;
pub mod not_before;
pub(crate) mod notices;
pub(crate) mod observer;
pub(crate) mod occurrence;
pub(crate) mod output;
pub(crate) mod poll_loop;
/// The notification metrics, for tests that check the exposition with receivers configured.
pub use output::notify::metrics::NotifyMetrics;
/// The state output's `..._state_up`, for tests that check the exposition.
pub use output::state::up::StateUp;
pub mod resources;
pub(crate) mod response;
pub(crate) mod server;
#[cfg(windows)]
pub mod service;
pub mod simulator;
pub mod state;
/// Reading and writing the state file (the state output's store), for tests and tools.
pub use output::state::store as state_file;
pub(crate) mod systemd;
pub mod telemetry;
pub mod trace_id;
pub mod tracker;
pub(crate) mod view;
pub(crate) mod web;
pub mod wire;
