//! The Azure protocol: what the Instance Metadata Service sends and how it is asked.
//!
//! [`wire`], [`resources`] and [`api_version`] are the documents' JSON and what each api-version
//! shows, shared with the simulator (crate `azure-scheduled-events-protocol`). Here, [`event`] and
//! [`not_before`] turn a document into domain types, [`cause`] reads what `Description` says and
//! [`hardware_failure`] marks a predicted failure; [`imds`] is the client (GET, POST, instance
//! metadata, never through a proxy) with its retry schedule in [`backoff`]. Imports nothing else
//! of the agent: every other layer builds on this one.

pub use azure_scheduled_events_protocol::{api_version, resources, wire};

pub(crate) mod backoff;
pub mod cause;
pub mod event;
pub mod hardware_failure;
pub mod imds;
pub mod not_before;
