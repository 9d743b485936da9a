//! The trace id of an event: the EventId itself, so every VM's view of one platform event joins
//! the same trace and a log search for one EventId finds every VM.
//!
//! A GUID is 128 bits, exactly a trace id: `C7061BAC-AFDC-4513-B24B-AA5F13A16123` becomes
//! `c7061bacafdc4513b24baa5f13a16123` (dashes dropped, lower case, so the upper-case ids of real
//! IMDS and the lower-case ones of the docs agree). Any other id (fixtures use `123`), and the
//! all-zero GUID that is not a valid trace id, is hashed with 128-bit FNV-1a over its UTF-8 bytes:
//! stable across versions, platforms and VMs.
//!
//! Each VM's lifecycle span of an event has a span id worked out the same way on every start:
//! 64-bit FNV-1a over the trace id's 32 hex digits, `/`, and this VM's name in lower case (Azure
//! names are case-insensitive). A restarted agent therefore ends the same span it began, and
//! child spans exported before the restart keep their parent.

/// 32 lower-case hex digits.
pub fn trace_id(event_id: &str) -> String {
    format!("{:032x}", trace_id_u128(event_id))
}

/// The trace id as a number, for the OpenTelemetry `TraceId`.
pub fn trace_id_u128(event_id: &str) -> u128 {
    guid(event_id)
        .filter(|&id| id != 0)
        .unwrap_or_else(|| fnv1a_128(event_id.as_bytes()))
}

/// A GUID in its usual 8-4-4-4-12 form, with or without braces.
fn guid(text: &str) -> Option<u128> {
    let text = text.trim().trim_start_matches('{').trim_end_matches('}');
    let groups: Vec<&str> = text.split('-').collect();
    let lengths: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lengths != [8, 4, 4, 4, 12]
        || !groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        return None;
    }
    u128::from_str_radix(&groups.concat(), 16).ok()
}

/// The span id of `vm_name`'s lifecycle span of `event_id` (never 0, which is not a valid span id).
pub fn lifecycle_span_id(event_id: &str, vm_name: &str) -> u64 {
    let key = format!("{}/{}", trace_id(event_id), vm_name.to_lowercase());
    match fnv1a_64(key.as_bytes()) {
        0 => 1,
        id => id,
    }
}

fn fnv1a_64(bytes: &[u8]) -> u64 {
    const OFFSET_BASIS: u64 = 0xcbf29ce484222325;
    const PRIME: u64 = 0x100000001b3;
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(PRIME)
    })
}

fn fnv1a_128(bytes: &[u8]) -> u128 {
    const OFFSET_BASIS: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    bytes.iter().fold(OFFSET_BASIS, |hash, &byte| {
        (hash ^ u128::from(byte)).wrapping_mul(PRIME)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guid_is_its_own_trace_id_in_any_case() {
        assert_eq!(
            trace_id("C7061BAC-AFDC-4513-B24B-AA5F13A16123"),
            "c7061bacafdc4513b24baa5f13a16123"
        );
        assert_eq!(
            trace_id("c7061bac-afdc-4513-b24b-aa5f13a16123"),
            "c7061bacafdc4513b24baa5f13a16123"
        );
        assert_eq!(
            trace_id("{c7061bac-afdc-4513-b24b-aa5f13a16123}"),
            "c7061bacafdc4513b24baa5f13a16123"
        );
    }

    #[test]
    fn a_lifecycle_span_id_depends_on_the_event_and_the_vm_only() {
        let id = lifecycle_span_id("C7061BAC-AFDC-4513-B24B-AA5F13A16123", "WestNO_0");
        assert_eq!(
            id,
            lifecycle_span_id("c7061bac-afdc-4513-b24b-aa5f13a16123", "westno_0"),
            "case of the id and of the name does not matter"
        );
        assert_ne!(
            id,
            lifecycle_span_id("C7061BAC-AFDC-4513-B24B-AA5F13A16123", "WestNO_1")
        );
        assert_ne!(
            id,
            lifecycle_span_id("C7061BAC-AFDC-4513-B24B-AA5F13A16124", "WestNO_0")
        );
        // FNV-1a 64 of "a" is the published test vector.
        assert_eq!(fnv1a_64(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(
            id,
            fnv1a_64(b"c7061bacafdc4513b24baa5f13a16123/westno_0"),
            "the documented recipe"
        );
    }

    #[test]
    fn other_ids_are_hashed_stably() {
        // FNV-1a 128 of the empty input is the offset basis; of "a", the published test vector.
        assert_eq!(trace_id(""), "6c62272e07bb014262b821756295c58d");
        assert_eq!(trace_id("a"), "d228cb696f1a8caf78912b704e4a8964");
        assert_ne!(trace_id("123"), trace_id("124"));
        assert_eq!(trace_id("123").len(), 32);
        assert_ne!(
            trace_id("00000000-0000-0000-0000-000000000000"),
            "0".repeat(32)
        );
        assert_ne!(
            trace_id("C7061BAC-AFDC-4513-B24B-AA5F13A1612G"),
            "c7061bacafdc4513b24baa5f13a1612g"
        );
    }
}
