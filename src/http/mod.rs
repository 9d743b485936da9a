//! The HTTP side: the agent's listener and what it serves.
//!
//! [`web`] listens (TLS and basic auth from `config::web`, gzip, limits, with [`auth`]'s bound on
//! password checks and `rate_limit`), [`server`] answers
//! `/metrics`, `/healthz`, `/readyz` and the landing page, [`exposition`] encodes the metrics off
//! the poll loop's thread, and [`health`] holds liveness (the loop is alive) apart from
//! readiness (IMDS answers). Imports the metrics registry of [`crate::output`]; nothing above.

pub(crate) mod auth;
pub(crate) mod exposition;
pub(crate) mod health;
pub(crate) mod server;
pub(crate) mod web;
