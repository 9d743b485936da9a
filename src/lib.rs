//! azure-scheduled-events-exporter turns Azure Scheduled Events into Prometheus metrics, traces
//! and logs.
//!
//! The rules are a crate of their own, `azure-scheduled-events-core`: the event model and the
//! pure functional core that turns each poll into a list of occurrences, with no I/O crate among
//! its dependencies. Here the folders are the layers around it, each importing only from those
//! listed before it: [`azure`] asks the Instance Metadata Service (the client); [`config`] turns
//! flags, environment and files into the core's types and the edges' settings; [`output`] hands
//! each poll's occurrences to each consumer (log, metrics, spans exported over OTLP, state, hooks,
//! approval, notifications, Kubernetes); [`http`] serves `/metrics` and health; [`shell`] reads
//! the boot id, wires it all, runs the one poll loop and the subcommands. The simulated IMDS that
//! `demo` and `simulator` run is its own crate, `azure-scheduled-events-simulator`.

pub mod azure;
pub mod config;
pub mod http;
pub mod output;
pub mod shell;

/// The notification metrics, for tests that check the exposition with receivers configured.
pub use output::notify::metrics::NotifyMetrics;
/// Reading and writing the state file (the state output's store), for tests and tools.
pub use output::state::store as state_file;
/// The state output's `..._state_up`, for tests that check the exposition.
pub use output::state::up::StateUp;
