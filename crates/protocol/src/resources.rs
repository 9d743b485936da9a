//! `Resources`: the names of the VMs an event affects, kept in one buffer.
//!
//! A document can name a hundred VMs in each of a thousand events. One `String` per name made
//! reading such a document cost about 20 ms, mostly in `malloc` and `free`. Here every name of an
//! event is appended, straight from the JSON, to one string with its end offset, so reading,
//! comparing and dropping an event's `Resources` takes two allocations however many VMs it names.
//! It reads and writes as the JSON array of strings Azure sends.

use std::fmt;

use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// VM names in `Resources` order.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Resources {
    text: String,
    /// Where each name ends in `text`.
    ends: Vec<usize>,
}

impl Resources {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, name: &str) {
        self.text.push_str(name);
        self.ends.push(self.text.len());
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The names, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.ends.len()).map(|i| {
            let start = i
                .checked_sub(1)
                .and_then(|previous| self.ends.get(previous))
                .copied()
                .unwrap_or(0);
            let end = self.ends.get(i).copied().unwrap_or(start);
            self.text.get(start..end).unwrap_or_default()
        })
    }

    /// Whether `name` is one of the names, ignoring ASCII case as Azure resource names do.
    pub fn contains_ignore_ascii_case(&self, name: &str) -> bool {
        self.iter().any(|r| r.eq_ignore_ascii_case(name))
    }
}

impl<S: AsRef<str>> FromIterator<S> for Resources {
    fn from_iter<I: IntoIterator<Item = S>>(names: I) -> Self {
        let mut resources = Self::new();
        for name in names {
            resources.push(name.as_ref());
        }
        resources
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The names separated by commas, as one log field.
impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(name)?;
        }
        Ok(())
    }
}

impl Serialize for Resources {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for Resources {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(ResourcesVisitor)
    }
}

struct ResourcesVisitor;

impl<'de> Visitor<'de> for ResourcesVisitor {
    type Value = Resources;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of VM names")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Resources, A::Error> {
        let mut resources = Resources::new();
        while seq.next_element_seed(Append(&mut resources))?.is_some() {}
        Ok(resources)
    }
}

/// Appends one name from the JSON to the buffer without allocating a `String` for it.
struct Append<'r>(&'r mut Resources);

impl<'de> DeserializeSeed<'de> for Append<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Append<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a VM name")
    }

    fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<(), E> {
        self.0.push(name);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_json_in_order() -> Result<(), serde_json::Error> {
        let json = r#"["WestNO_0","WestNO_1","","caf\u00e9_\"2\""]"#;
        let resources: Resources = serde_json::from_str(json)?;
        assert_eq!(
            resources.iter().collect::<Vec<_>>(),
            ["WestNO_0", "WestNO_1", "", "café_\"2\""]
        );
        assert_eq!(resources.len(), 4);
        assert_eq!(
            serde_json::to_string(&resources)?,
            r#"["WestNO_0","WestNO_1","","café_\"2\""]"#
        );
        Ok(())
    }

    #[test]
    fn an_empty_array_is_empty() -> Result<(), serde_json::Error> {
        let resources: Resources = serde_json::from_str("[]")?;
        assert!(resources.is_empty());
        assert_eq!(resources.iter().count(), 0);
        Ok(())
    }

    #[test]
    fn anything_but_an_array_of_strings_is_an_error() {
        for json in [r#""vm_0""#, "[1]", r#"["vm_0", null]"#, "{}"] {
            assert!(serde_json::from_str::<Resources>(json).is_err(), "{json}");
        }
    }

    #[test]
    fn equality_is_by_names_not_by_how_they_were_built() {
        let a = Resources::from_iter(["ab", "c"]);
        assert_eq!(a, Resources::from_iter(["ab", "c"]));
        assert_ne!(
            a,
            Resources::from_iter(["a", "bc"]),
            "same text, other names"
        );
        assert_ne!(a, Resources::from_iter(["ab"]));
    }

    #[test]
    fn membership_ignores_ascii_case_and_display_joins_with_commas() {
        let resources = Resources::from_iter(["WestNO_0", "WestNO_1"]);
        assert!(resources.contains_ignore_ascii_case("westno_1"));
        assert!(!resources.contains_ignore_ascii_case("WestNO"));
        assert_eq!(resources.to_string(), "WestNO_0,WestNO_1");
        assert_eq!(format!("{resources:?}"), r#"["WestNO_0", "WestNO_1"]"#);
    }
}
