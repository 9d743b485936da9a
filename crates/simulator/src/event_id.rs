//! New `EventId`s for simulated events: upper-case GUIDs, as real IMDS sends them, unique for
//! every appearance of an event.
//!
//! The core reads no randomness: ids come from a seed (chosen once by the shell) and a counter,
//! mixed through std's SipHash, so a test that fixes the seed gets the same ids every run.

use std::hash::{DefaultHasher, Hash, Hasher};

/// Hands out a fresh GUID on every call.
#[derive(Debug, Clone)]
pub struct EventIds {
    seed: u64,
    issued: u64,
}

impl EventIds {
    pub fn new(seed: u64) -> Self {
        Self { seed, issued: 0 }
    }

    /// The next id, formatted `XXXXXXXX-XXXX-4XXX-YXXX-XXXXXXXXXXXX` (a version-4 GUID layout).
    pub fn next_id(&mut self) -> String {
        self.issued = self.issued.wrapping_add(1);
        let high = mix(self.seed, self.issued, 0);
        let low = mix(self.seed, self.issued, 1);
        let bits = (u128::from(high) << 64) | u128::from(low);
        // Version 4 and the RFC 4122 variant, so the id looks like any GUID Azure hands out.
        let bits = (bits & !(0xF << 76)) | (0x4 << 76);
        let bits = (bits & !(0x3 << 62)) | (0x2 << 62);
        format_guid(bits)
    }
}

fn mix(seed: u64, counter: u64, half: u8) -> u64 {
    let mut hasher = DefaultHasher::new();
    (seed, counter, half).hash(&mut hasher);
    hasher.finish()
}

/// 128 bits as a GUID in Azure's EventId form (upper-case hex, 8-4-4-4-12).
pub(crate) fn format_guid(bits: u128) -> String {
    let hex = format!("{bits:032X}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;
    use std::collections::HashSet;

    fn is_upper_case_guid(id: &str) -> bool {
        let groups: Vec<&str> = id.split('-').collect();
        groups.iter().map(|g| g.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
            && groups.iter().all(|g| {
                g.chars()
                    .all(|c| c.is_ascii_digit() || ('A'..='F').contains(&c))
            })
    }

    #[test]
    fn ids_are_upper_case_guids() -> TestResult {
        let mut ids = EventIds::new(7);
        for _ in 0..100 {
            let id = ids.next_id();
            assert!(is_upper_case_guid(&id), "{id}");
            assert_eq!(&id[14..15], "4", "{id}");
        }
        Ok(())
    }

    #[test]
    fn ids_never_repeat_and_depend_on_the_seed() -> TestResult {
        let mut ids = EventIds::new(1);
        let seen: HashSet<String> = (0..10_000).map(|_| ids.next_id()).collect();
        assert_eq!(seen.len(), 10_000);
        assert_ne!(EventIds::new(1).next_id(), EventIds::new(2).next_id());
        assert_eq!(EventIds::new(3).next_id(), EventIds::new(3).next_id());
        Ok(())
    }
}
