//! The alert rules and dashboards against Prometheus itself, by the question each part asks:
//! - `rules`: are the rule files valid, unit-tested, named, labelled, described, with a runbook
//!   section, paging only for a scale set's capacity, and keeping the cluster in every grouping
//!   (promtool for the gated tests);
//! - `live`: does a real Prometheus scraping real agents of two clusters evaluate every rule and
//!   dashboard query we ship, keeping the clusters apart and paging only where it should;
//! - `loaded`: does every dashboard say whether the recording rules are loaded;
//! - `server`: what the last two share: a Prometheus on loopback, simulated IMDS sites, agents.

#[cfg(feature = "external-tools")]
mod live;
#[cfg(feature = "external-tools")]
mod loaded;
mod rules;
#[cfg(feature = "external-tools")]
mod server;
