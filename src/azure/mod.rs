//! The Azure protocol as the agent speaks it: how the Instance Metadata Service is asked.
//!
//! [`wire`], [`resources`] and [`api_version`] are the documents' JSON and what each api-version
//! shows, shared with the simulator (crate `azure-scheduled-events-protocol`); the event model
//! that turns a document into domain types is the core's (crate `azure-scheduled-events-core`).
//! Here, [`imds`] is the client (GET, POST, instance metadata, never through a proxy) with its
//! retry schedule in [`backoff`]. Imports nothing else of the agent: every other layer builds on
//! this one.

pub use azure_scheduled_events_protocol::{api_version, resources, wire};

pub(crate) mod backoff;
pub mod imds;
