//! azure-scheduled-events-exporter turns Azure Scheduled Events into Prometheus metrics, traces
//! and logs.
//!
//! How the pieces fit (docs/architecture.md draws it): [`imds`] fetches documents over HTTP and
//! [`wire`] mirrors their JSON; [`event`] and [`not_before`] turn that into domain types. The
//! functional core, `observer` with `monitor`, [`tracker`] (each event's lifecycle, resumed
//! after a restart) and `approval` (policy, takeover order, the decision machine), turns each
//! poll into a list of `occurrence`s. [`agent`] runs the one poll loop and hands every list to
//! the `output`s: log, [`metrics`], spans (`event_span`, exported by [`telemetry`] over OTLP
//! with the EventId as trace id, [`trace_id`]), the [`state`] file, hooks, approval POSTs and
//! notifications (webhooks, Slack, Teams, PagerDuty), the last three off the loop. `server`
//! serves `/metrics` and health; [`config`] turns the command line, the approval policy file,
//! the receivers file and the `OTEL_*` variables into resolved settings;
//! [`simulator`] is a faithful local IMDS used by `demo`, by users' tests and by ours.
//! [`web`] is the agent's listener (TLS and basic auth from `config/web.rs`, gzip, limits).

pub mod agent;
pub(crate) mod approval;
pub(crate) mod backoff;
pub(crate) mod boot;
pub mod commands;
pub mod config;
pub mod event;
pub(crate) mod event_span;
pub(crate) mod health;
pub mod imds;
pub mod logging;
pub mod metrics;
pub(crate) mod monitor;
pub mod not_before;
pub(crate) mod observer;
pub(crate) mod occurrence;
pub(crate) mod output;
/// The notification metrics, for tests that check the exposition with receivers configured.
pub use output::notify::metrics::NotifyMetrics;
pub mod resources;
pub(crate) mod response;
pub(crate) mod server;
#[cfg(windows)]
pub mod service;
pub mod simulator;
pub mod state;
pub(crate) mod systemd;
pub mod telemetry;
pub mod trace_id;
pub mod tracker;
pub(crate) mod web;
pub mod wire;
