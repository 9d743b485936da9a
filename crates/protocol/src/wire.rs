//! The JSON that IMDS sends and accepts, mirrored field for field.
//!
//! Nothing here interprets a value: these structs only give serde a place to put what Azure wrote
//! (and what the simulator writes back), with Azure's own field names and order. Making sense of
//! the values (enums, times, the incarnation as a number) happens in the agent (`azure::event`).

use serde::{Deserialize, Serialize};

use crate::resources::Resources;

/// Body of `GET /metadata/scheduledevents`.
///
/// Both keys are required: a JSON body without `Events` (an error object, say) must never be read
/// as "no events", because that would complete every known event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduledEventsDocument {
    #[serde(rename = "DocumentIncarnation")]
    pub document_incarnation: Incarnation,
    #[serde(rename = "Events")]
    pub events: Vec<ScheduledEvent>,
}

/// `DocumentIncarnation` as sent: a number, though some clients and fixtures write a string.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Incarnation {
    Number(serde_json::Number),
    Text(String),
}

/// One element of `Events`. Fields added after api-version 2017-08-01 are optional, and so is
/// everything a fixture has been seen to leave out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduledEvent {
    #[serde(rename = "EventId")]
    pub event_id: String,
    #[serde(rename = "EventStatus")]
    pub event_status: String,
    #[serde(rename = "EventType")]
    pub event_type: String,
    #[serde(
        rename = "ResourceType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub resource_type: Option<String>,
    #[serde(rename = "Resources", default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    #[serde(rename = "NotBefore", default, skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    #[serde(
        rename = "Description",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub description: Option<String>,
    #[serde(
        rename = "EventSource",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub event_source: Option<String>,
    #[serde(
        rename = "DurationInSeconds",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub duration_in_seconds: Option<i64>,
}

/// Body of the approval `POST`: `{"StartRequests":[{"EventId":"..."}]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartRequests {
    #[serde(rename = "StartRequests")]
    pub start_requests: Vec<StartRequest>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StartRequest {
    #[serde(rename = "EventId")]
    pub event_id: String,
}

/// Body of `GET /metadata/instance`: only the `compute` fields the agent reports. IMDS sends many
/// more; serde ignores them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InstanceMetadata {
    pub compute: Compute,
}

/// The `compute` section of instance metadata. Every field defaults to empty, as IMDS sends empty
/// strings for what does not apply (no zone, no scale set).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Compute {
    pub name: String,
    pub vm_id: String,
    pub location: String,
    pub zone: String,
    pub vm_scale_set_name: String,
    pub resource_group_name: String,
    pub subscription_id: String,
    pub platform_fault_domain: String,
    pub platform_update_domain: String,
    pub vm_size: String,
    /// `Regular`, `Spot` or, since Compute API 2026-04-01, `SpotPlus`.
    pub priority: String,
}
