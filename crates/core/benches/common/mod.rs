//! Scheduled-events documents shaped like Azure's, shared by the benchmarks: this crate's
//! parse_track and the agent's benches/agent.rs.
//!
//! Every field of api-version 2020-07-01 is present, EventIds are upper-case GUIDs as real IMDS
//! sends them, resources are named like scale-set VMs, and `NotBefore` is RFC 1123 with `GMT`, so
//! parsing costs what it costs on Azure (string lengths, date parsing) rather than on a toy body.

use azure_scheduled_events_protocol::wire::{Incarnation, ScheduledEvent, ScheduledEventsDocument};
use chrono::{DateTime, Duration, Utc};

/// The scale set every generated resource belongs to; `vmss_0` is "this VM".
pub const SCALE_SET: &str = "aks-nodepool1-12345678-vmss";

/// The JSON body of a document with `events` events, each naming `resources` VMs.
///
/// Events cycle through the five types and both sources; their `NotBefore` lies in the future
/// (2099), so a tracker never finds them overdue whatever the clock says.
pub fn document(events: usize, resources: usize) -> Result<Vec<u8>, serde_json::Error> {
    let base = DateTime::<Utc>::from_timestamp(4_070_908_800, 0).unwrap_or_default(); // 2099-01-01
    let kinds = [
        (
            "Freeze",
            "Virtual machine is being paused because of a memory-preserving Live Migration operation.",
            5,
        ),
        (
            "Reboot",
            "Virtual machine is going to be restarted as requested by authorized user.",
            -1,
        ),
        (
            "Redeploy",
            "Virtual machine is going to be redeployed to a new host because of a hardware fault.",
            -1,
        ),
        (
            "Preempt",
            "Virtual machine is going to be evicted because of capacity constraints.",
            0,
        ),
        (
            "Terminate",
            "Virtual machine is going to be deleted as requested by authorized user.",
            -1,
        ),
    ];
    let document = ScheduledEventsDocument {
        document_incarnation: Incarnation::Number(7.into()),
        events: (0..events)
            .map(|i| {
                let (event_type, description, duration) = kinds[i % kinds.len()];
                let not_before = base + Duration::minutes(15 * i as i64);
                ScheduledEvent {
                    event_id: guid(i as u64),
                    event_status: "Scheduled".to_owned(),
                    event_type: event_type.to_owned(),
                    resource_type: Some("VirtualMachine".to_owned()),
                    resources: Some(
                        (0..resources)
                            .map(|r| format!("{SCALE_SET}_{}", (i + r) % resources.max(1)))
                            .collect(),
                    ),
                    not_before: Some(not_before.format("%a, %d %b %Y %H:%M:%S GMT").to_string()),
                    description: Some(description.to_owned()),
                    event_source: Some(if i % 3 == 1 { "User" } else { "Platform" }.to_owned()),
                    duration_in_seconds: Some(duration),
                }
            })
            .collect(),
    };
    serde_json::to_vec(&document)
}

/// A version-4 GUID in upper case, fixed by `n`.
fn guid(n: u64) -> String {
    // SplitMix64, so neighbouring events do not share prefixes (hash maps see realistic keys).
    let mix = |x: u64| {
        let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let (a, b) = (mix(n), mix(n ^ 0xA5A5_A5A5));
    format!(
        "{:08X}-{:04X}-4{:03X}-{:04X}-{:012X}",
        a >> 32,
        (a >> 16) & 0xFFFF,
        a & 0xFFF,
        0x8000 | (b >> 48) & 0x3FFF,
        b & 0xFFFF_FFFF_FFFF
    )
}
