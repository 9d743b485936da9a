//! The largest document the agent takes in: its body's size ([`MAX_BODY_BYTES`], which the IMDS
//! client enforces as it reads), its number of events and the length of the strings that become
//! label values ([`check`]). Azure never sends a document near them; they bound what one odd
//! answer can cost in memory and at every scrape.

use crate::event::Document;

/// Largest body the agent reads. Real documents are a few kilobytes; the cap leaves room for
/// hundreds of events naming hundreds of VMs.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Most events a document may hold. A placement group or availability set has at most a few
/// hundred VMs, each with a few events; every event naming this VM costs about 11 kB of
/// resident memory (its series, and their encoding at each scrape), so this bound, with
/// [`MAX_LABEL_BYTES`] on what each series repeats, not the body's size, is what keeps the worst
/// case (5,000 such events, every label value at its cap: under 80 MiB) within the shipped memory
/// limits of 128 MiB (docs/performance.md).
pub const MAX_EVENTS: usize = 5_000;

/// Longest `EventId`, `EventType`, `EventStatus`, `EventSource` and `ResourceType` accepted, in
/// bytes. Azure's EventIds are GUIDs (36 characters) and the others single words (27 at most); each is a label
/// value of the per-event series, repeated in every series of the event and copied at every
/// scrape, so their length, not only the number of events, sets the exposition's size and the
/// agent's memory. With this bound the largest document accepted ([`MAX_EVENTS`] events, every
/// such field at the bound) stays within the shipped memory limits (docs/performance.md). A
/// document with a longer one is refused whole (`too_large`), as Azure never sends one.
pub const MAX_LABEL_BYTES: usize = 64;

/// Why a document is past the limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Exceeded {
    #[error("document with {0} events, more than {MAX_EVENTS}")]
    TooManyEvents(usize),
    #[error(
        "an event's {field} is {bytes} bytes long, more than {MAX_LABEL_BYTES}: not a value Azure sends"
    )]
    FieldTooLong { field: &'static str, bytes: usize },
}

/// Whether a document is one the agent takes in: at most [`MAX_EVENTS`] events, each with label
/// values of at most [`MAX_LABEL_BYTES`].
pub fn check(document: &Document) -> Result<(), Exceeded> {
    if document.events.len() > MAX_EVENTS {
        return Err(Exceeded::TooManyEvents(document.events.len()));
    }
    for event in &document.events {
        let fields = [
            ("EventId", event.id.as_str()),
            ("EventType", event.event_type.as_str()),
            ("EventStatus", event.status.as_str()),
            (
                "EventSource",
                event.source.as_ref().map_or("", |s| s.as_str()),
            ),
            ("ResourceType", event.resource_type.as_str()),
        ];
        if let Some((field, value)) = fields.iter().find(|(_, v)| v.len() > MAX_LABEL_BYTES) {
            return Err(Exceeded::FieldTooLong {
                field,
                bytes: value.len(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_value_longer_than_azure_sends_refuses_the_document()
    -> Result<(), Box<dyn std::error::Error>> {
        let document = |field: &str, value: &str| {
            let mut event = serde_json::json!({
                "EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123",
                "EventType": "Reboot",
                "EventStatus": "Scheduled",
                "EventSource": "Platform",
                "ResourceType": "VirtualMachine",
                "Resources": ["vm_0"],
                "NotBefore": "",
            });
            event[field] = value.into();
            let body = serde_json::json!({"DocumentIncarnation": 1, "Events": [event]});
            let body = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
            Document::from_json(&body).map_err(|e| e.to_string())
        };
        for field in [
            "EventId",
            "EventType",
            "EventStatus",
            "EventSource",
            "ResourceType",
        ] {
            check(&document(field, &"x".repeat(MAX_LABEL_BYTES))?)?;
            let refused = check(&document(field, &"x".repeat(MAX_LABEL_BYTES + 1))?);
            let Err(error) = refused else {
                return Err(format!("{field} of {} bytes accepted", MAX_LABEL_BYTES + 1).into());
            };
            assert_eq!(
                error.to_string(),
                format!(
                    "an event's {field} is 65 bytes long, more than 64: not a value Azure sends"
                )
            );
        }
        Ok(())
    }
}
