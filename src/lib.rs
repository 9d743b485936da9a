//! azure-scheduled-events-exporter turns Azure Scheduled Events into Prometheus metrics, traces
//! and logs.
//!
//! How the pieces fit: [`imds`] fetches documents over HTTP and [`wire`] mirrors their JSON;
//! [`event`] and [`not_before`] turn that into domain types; [`tracker`] is the pure state machine
//! that works out each event's lifecycle; [`agent`] runs the one poll loop and hands every change
//! to the log and to [`metrics`]; [`server`] serves `/metrics` and health; [`config`] turns the
//! command line, the approval policy file and the `OTEL_*` variables into resolved settings
//! (`config/approval.rs`, `config/otlp.rs`) that the other modules receive ready to use;
//! [`simulator`] is a faithful local IMDS used by `demo`, by users' tests and by ours.
//! [`event_span`] turns transitions into OpenTelemetry spans keyed by EventId ([`trace_id`]),
//! which [`telemetry`] exports over OTLP.
//! [`approval`] decides (pure policy and takeover order) and POSTs approvals when enabled, running
//! hooks; [`state`] is the file that survives restarts, and [`boot`] tells reboots from restarts.
//! [`web`] is the agent's listener (TLS and basic auth from `config/web.rs`, gzip, limits).

pub mod agent;
pub mod approval;
pub mod boot;
pub mod commands;
pub mod config;
pub mod event;
pub mod event_span;
pub mod health;
pub mod imds;
pub mod logging;
pub mod metrics;
pub mod monitor;
pub mod not_before;
pub mod observer;
pub mod occurrence;
pub mod output;
pub mod resources;
pub(crate) mod response;
pub mod server;
pub mod simulator;
pub mod state;
pub mod telemetry;
pub mod trace_id;
pub mod tracker;
pub mod web;
pub mod wire;
