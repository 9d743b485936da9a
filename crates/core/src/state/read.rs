//! Reading a state file leniently: every approval it names is kept, whatever else it met.
//!
//! The agent writes the file atomically and reads it back whole. What it may find otherwise (a
//! newer agent's status, a null, a byte order mark, a negative count, bytes after the document, a
//! file cut short or edited by hand) is read entry by entry: what is understood is kept, the rest
//! dropped and said. An EventId the file names under `approvals` counts as attempted whatever its
//! record says, so a restart never sends its approval again: at most once wins over at least once.

use std::collections::BTreeMap;
use std::fmt;

use chrono::{DateTime, Utc};
use serde::de::{
    self, Deserialize, DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess,
};
use serde_json::Value;

use super::{ApprovalRecord, ApprovalStatus, KnownEvent, State, VERSION, stored};

/// What was not understood is said at most this many times, then counted.
const MAX_DROPPED_SAID: usize = 16;

/// What was read of a state file.
#[derive(Debug)]
pub struct Read {
    /// What was understood; approvals it names but could not read count as sent.
    pub state: State,
    /// What was not understood, one phrase each (the first [`MAX_DROPPED_SAID`], then how many
    /// more), for the log; empty when the file was read whole.
    pub dropped: Vec<String>,
    /// The format, when a newer agent wrote the file: then only its approvals were read.
    pub newer: Option<u64>,
}

/// Reads a state file's `bytes`, found at `now` (the time of an approval whose own is unreadable).
///
/// A UTF-8 byte order mark is skipped. Bytes after the document (never written by the agent,
/// which replaces the file whole) are dropped, but the approvals they name are kept, as from a
/// file that is not JSON at all: the keys of its top-level `approvals` object, as far as they go.
pub fn read(bytes: &[u8], now: DateTime<Utc>) -> Read {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let mut reader = Reader {
        read: Read {
            state: State::new(),
            dropped: Vec::new(),
            newer: None,
        },
        unsaid: 0,
        now,
    };
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    match TopSeed(&mut reader).deserialize(&mut deserializer) {
        Ok(fields) => {
            // Where the document ended: what a stream would start the next one at.
            let end = deserializer.into_iter::<IgnoredAny>().byte_offset();
            let rest = bytes.get(end..).unwrap_or_default();
            reader.document(fields);
            if !rest.iter().all(u8::is_ascii_whitespace) {
                reader.drop(format!(
                    "{} bytes after the document (their approvals are kept)",
                    rest.len()
                ));
                reader.salvage(rest);
            }
        }
        Err(_) if bytes.iter().all(u8::is_ascii_whitespace) => reader.drop("empty".to_owned()),
        Err(error) => {
            // What was read as it went is not kept: a document that is not one is read for
            // the approvals it names alone, as it always was.
            reader.read = Read {
                state: State::new(),
                dropped: Vec::new(),
                newer: None,
            };
            reader.unsaid = 0;
            reader.drop(format!(
                "not a JSON object ({error}): only the approvals it names are kept"
            ));
            reader.salvage(bytes);
        }
    }
    if reader.unsaid > 0 {
        let more = format!("and {} more", reader.unsaid);
        reader.read.dropped.push(more);
    }
    reader.read
}

struct Reader {
    read: Read,
    /// Phrases past [`MAX_DROPPED_SAID`].
    unsaid: usize,
    now: DateTime<Utc>,
}

impl Reader {
    fn drop(&mut self, what: String) {
        if self.read.dropped.len() < MAX_DROPPED_SAID {
            self.read.dropped.push(what);
        } else {
            self.unsaid += 1;
        }
    }

    /// Reads the top-level fields the document held besides those read as they came
    /// (`approvals`, `events`, `notifications`, whose keys are among `fields` with a null).
    fn document(&mut self, fields: Vec<(String, Value)>) {
        let version = fields
            .iter()
            .rev()
            .find(|(key, _)| key == "version")
            .map(|(_, value)| value);
        match version.and_then(Value::as_u64) {
            Some(version) if version > u64::from(VERSION) => self.read.newer = Some(version),
            Some(version) if version == u64::from(VERSION) => {}
            _ => self.drop(format!(
                "version {} instead of {VERSION}",
                version.unwrap_or(&Value::Null)
            )),
        }
        if self.read.newer.is_some() {
            // A newer agent's file: only its approvals are read.
            let approvals = std::mem::take(&mut self.read.state.approvals);
            self.read.state = State::new();
            self.read.state.approvals = approvals;
            return;
        }
        let mut seen: Vec<String> = Vec::new();
        for (key, value) in fields {
            if key == "approvals" {
                continue;
            }
            if seen.contains(&key) {
                self.drop(format!("{key} given twice: the last is read"));
            } else {
                seen.push(key.clone());
            }
            match key.as_str() {
                "boot_id" => self.read.state.boot_id = self.field(&key, value),
                "document_incarnation" => {
                    self.read.state.document_incarnation = self.field(&key, value);
                }
                "expected_impact" => self.read.state.expected_impact = self.field(&key, value),
                "clean_stop" => self.read.state.clean_stop = self.field(&key, value),
                // Read as they came; the version is read above; a key of a newer agent's is
                // passed over, as older agents do.
                _ => {}
            }
        }
    }

    /// A field absent when null, dropped when of another shape.
    fn field<T: DeserializeOwned>(&mut self, key: &str, value: Value) -> Option<T> {
        if value.is_null() {
            return None;
        }
        serde_json::from_value(value)
            .map_err(|error| self.drop(format!("{key}: {error}")))
            .ok()
    }

    /// Keeps the approval of `id`; one named twice keeps the stronger record (the one that
    /// forbids another POST, the most attempts).
    fn keep(&mut self, id: &str, record: ApprovalRecord) {
        let approvals = &mut self.read.state.approvals;
        match approvals.get_mut(stored(id).as_ref()) {
            Some(kept) => {
                if !kept.status.is_final() {
                    kept.status = record.status;
                }
                kept.attempts = kept.attempts.max(record.attempts);
                kept.at = kept.at.max(record.at);
            }
            None => {
                approvals.insert(stored(id).into_owned(), record);
            }
        }
    }

    /// One approval's record: every field read on its own; an unknown or missing status is
    /// `sent`, never `failed` (which would send it again).
    fn approval(&mut self, id: &str, record: Object<Value>) -> ApprovalRecord {
        let mut kept = ApprovalRecord {
            event_type: String::new(),
            at: self.now,
            status: ApprovalStatus::Sent,
            attempts: 1,
        };
        let Some(fields) = record.0 else {
            self.drop(format!("approval {id}: not an object, counted as sent"));
            return kept;
        };
        let mut status: Option<ApprovalStatus> = None;
        for (key, value) in fields {
            match key.as_str() {
                "status" => {
                    let read = match value.as_str() {
                        Some("sending") => ApprovalStatus::Sending,
                        Some("sent") => ApprovalStatus::Sent,
                        Some("rejected") => ApprovalStatus::Rejected,
                        Some("failed") => ApprovalStatus::Failed,
                        _ => {
                            self.drop(format!(
                                "approval {id}: status {value} unknown, counted as sent"
                            ));
                            ApprovalStatus::Sent
                        }
                    };
                    status = Some(match status {
                        Some(earlier) if earlier.is_final() => earlier,
                        _ => read,
                    });
                }
                "attempts" => match value.as_u64().filter(|n| *n >= 1) {
                    Some(n) => {
                        let n = u32::try_from(n).unwrap_or(u32::MAX);
                        kept.attempts = kept.attempts.max(n);
                    }
                    None => self.drop(format!("approval {id}: attempts {value}, read as 1")),
                },
                "at" => match serde_json::from_value(value) {
                    Ok(at) => kept.at = at,
                    Err(error) => self.drop(format!("approval {id}: at: {error}")),
                },
                "event_type" => match value.as_str() {
                    Some(event_type) => kept.event_type = stored(event_type).into_owned(),
                    None => self.drop(format!("approval {id}: event_type {value}")),
                },
                _ => {}
            }
        }
        match status {
            Some(status) => kept.status = status,
            None => self.drop(format!("approval {id}: no status, counted as sent")),
        }
        kept
    }

    /// The `i`th entry of `events`.
    fn event(&mut self, i: usize, event: Value) {
        match serde_json::from_value::<KnownEvent>(event) {
            Ok(mut known) => {
                for held in [
                    &mut known.event_id,
                    &mut known.event_type,
                    &mut known.event_status,
                ] {
                    *held = stored(held).into_owned();
                }
                self.read.state.events.push(known);
            }
            Err(error) => self.drop(format!("event {i}: {error}")),
        }
    }

    /// The entry of `notifications` for EventId `id`.
    fn notification(&mut self, id: &str, by_receiver: Value) {
        match serde_json::from_value::<BTreeMap<String, Vec<String>>>(by_receiver) {
            Ok(by_receiver) => {
                self.read
                    .state
                    .notifications
                    .insert(stored(id).into_owned(), by_receiver);
            }
            Err(error) => self.drop(format!("notifications of {id}: {error}")),
        }
    }

    /// Keeps, counted as sent, the approvals `bytes` name though they are no JSON document.
    fn salvage(&mut self, bytes: &[u8]) {
        for id in approval_ids(bytes) {
            let record = ApprovalRecord {
                event_type: String::new(),
                at: self.now,
                status: ApprovalStatus::Sent,
                attempts: 1,
            };
            self.keep(&id, record);
        }
    }
}

/// The keys of the top-level `approvals` object in `bytes`, as far as the bytes go: JSON cut
/// short, or followed by more. A key cut in its middle is not one.
fn approval_ids(bytes: &[u8]) -> Vec<String> {
    let mut ids = Vec::new();
    // The open objects (`{`) and lists (`[`), outermost first.
    let mut open: Vec<u8> = Vec::new();
    let mut key_next = false;
    let mut approvals_next = false;
    let mut in_approvals = false;
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        match byte {
            b'{' | b'[' => {
                open.push(byte);
                in_approvals |= byte == b'{' && approvals_next && open.len() == 2;
                key_next = byte == b'{';
                approvals_next = false;
            }
            b'}' | b']' => {
                open.pop();
                in_approvals &= open.len() >= 2;
                key_next = false;
            }
            b',' => key_next = open.last() == Some(&b'{'),
            b'"' => {
                let start = i;
                i += 1;
                while let Some(&c) = bytes.get(i) {
                    match c {
                        b'"' => break,
                        b'\\' => i += 2,
                        _ => i += 1,
                    }
                }
                let Some(token) = bytes.get(start..=i) else {
                    break;
                };
                let text: Option<String> = serde_json::from_slice(token).ok();
                if key_next {
                    match open.len() {
                        1 => approvals_next = text.as_deref() == Some("approvals"),
                        2 if in_approvals => ids.extend(text),
                        _ => {}
                    }
                }
                key_next = false;
            }
            b':' => {}
            byte if byte.is_ascii_whitespace() => {}
            _ => approvals_next = false,
        }
        i += 1;
    }
    ids
}

/// A state file's top-level object, read as it comes so that no part of it is held whole: the
/// entries of `approvals`, `events` and `notifications` go into the [`Reader`] one by one (a file
/// of a million small values never becomes a million `Value`s), the other known keys come back
/// with their values (their keys, the streamed ones' too, in order, for what is given twice),
/// and unknown keys are skipped unread.
struct TopSeed<'r>(&'r mut Reader);

impl<'de> DeserializeSeed<'de> for TopSeed<'_> {
    type Value = Vec<(String, Value)>;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> de::Visitor<'de> for TopSeed<'_> {
    type Value = Vec<(String, Value)>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let reader = self.0;
        let mut fields = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "approvals" => map.next_value_seed(Entries {
                    reader: &mut *reader,
                    what: Part::Approvals,
                })?,
                "events" => {
                    // The last given is read.
                    reader.read.state.events.clear();
                    map.next_value_seed(Entries {
                        reader: &mut *reader,
                        what: Part::Events,
                    })?;
                }
                "notifications" => {
                    reader.read.state.notifications.clear();
                    map.next_value_seed(Entries {
                        reader: &mut *reader,
                        what: Part::Notifications,
                    })?;
                }
                "version"
                | "boot_id"
                | "document_incarnation"
                | "expected_impact"
                | "clean_stop" => {
                    let value = map.next_value()?;
                    fields.push((key, value));
                    continue;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            fields.push((key, Value::Null));
        }
        Ok(fields)
    }
}

/// Which top-level part [`Entries`] reads.
#[derive(Clone, Copy)]
enum Part {
    Approvals,
    Events,
    Notifications,
}

/// The entries of one top-level part, each handed to the [`Reader`] as it is read.
struct Entries<'r> {
    reader: &'r mut Reader,
    what: Part,
}

impl Entries<'_> {
    fn not_of_its_shape<E>(self, value: &str) -> Result<(), E> {
        match self.what {
            Part::Approvals => self.reader.drop("approvals: not an object".to_owned()),
            Part::Events => self.reader.drop(format!("events: {value} is not a list")),
            Part::Notifications => self
                .reader
                .drop(format!("notifications: {value} is not an object")),
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Entries<'_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> de::Visitor<'de> for Entries<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        match self.what {
            Part::Approvals => {
                while let Some(id) = map.next_key::<String>()? {
                    let record: Object<Value> = map.next_value()?;
                    let record = self.reader.approval(&id, record);
                    self.reader.keep(&id, record);
                }
            }
            Part::Notifications => {
                while let Some(id) = map.next_key::<String>()? {
                    let by_receiver: Value = map.next_value()?;
                    self.reader.notification(&id, by_receiver);
                }
            }
            Part::Events => {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                return self.not_of_its_shape("an object");
            }
        }
        Ok(())
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        match self.what {
            Part::Events => {
                let mut i = 0;
                while let Some(event) = seq.next_element::<Value>()? {
                    self.reader.event(i, event);
                    i += 1;
                }
                Ok(())
            }
            _ => {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                self.not_of_its_shape("a list")
            }
        }
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        match self.what {
            // null: none.
            Part::Events | Part::Notifications => Ok(()),
            Part::Approvals => self.not_of_its_shape("null"),
        }
    }
    fn visit_bool<E>(self, value: bool) -> Result<(), E> {
        self.not_of_its_shape(&value.to_string())
    }
    fn visit_i64<E>(self, value: i64) -> Result<(), E> {
        self.not_of_its_shape(&value.to_string())
    }
    fn visit_u64<E>(self, value: u64) -> Result<(), E> {
        self.not_of_its_shape(&value.to_string())
    }
    fn visit_f64<E>(self, value: f64) -> Result<(), E> {
        self.not_of_its_shape(&value.to_string())
    }
    fn visit_str<E>(self, value: &str) -> Result<(), E> {
        self.not_of_its_shape(&format!("{value:?}"))
    }
}

/// A JSON object's entries in order, a key given twice included (a map would keep only the
/// last); `None` for any other value.
struct Object<V>(Option<Vec<(String, V)>>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Object<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> de::Visitor<'de> for Visitor<V> {
            type Value = Object<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object<V>, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    entries.push((key, map.next_value()?));
                }
                Ok(Object(Some(entries)))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Object<V>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Object(None))
            }
            fn visit_bool<E>(self, _: bool) -> Result<Object<V>, E> {
                Ok(Object(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Object<V>, E> {
                Ok(Object(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Object<V>, E> {
                Ok(Object(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Object<V>, E> {
                Ok(Object(None))
            }
            fn visit_str<E>(self, _: &str) -> Result<Object<V>, E> {
                Ok(Object(None))
            }
            fn visit_unit<E>(self) -> Result<Object<V>, E> {
                Ok(Object(None))
            }
        }
        deserializer.deserialize_any(Visitor(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default()
    }

    #[test]
    fn the_keys_of_approvals_are_found_in_bytes_cut_short_and_nothing_else() {
        let bytes = br#"{"version":1,"events":[{"event_id":"E"}],"approvals":{"A":{"status":"sent","x":{"y":1}},"B":{"status":"se"#;
        assert_eq!(approval_ids(bytes), ["A", "B"]);
        assert_eq!(
            approval_ids(br#"{"approvals":{"A":{},"B"#),
            ["A"],
            "B is cut"
        );
        assert_eq!(
            approval_ids(br#"{"notifications":{"N":{}},"x":{"approvals":{"Z":{}}}}"#),
            Vec::<String>::new(),
            "only the top-level approvals"
        );
        assert_eq!(approval_ids(br#"{"approvals":{"A\"B":{}}"#), ["A\"B"]);
    }

    #[test]
    fn an_unknown_status_counts_as_sent_and_a_failed_one_stays_failed() {
        let read = read(
            br#"{"version":1,"approvals":{"A":{"status":"acknowledged","attempts":-1},"F":{"status":"failed","attempts":2,"at":"2026-11-22T11:13:38Z","event_type":"Freeze"}}}"#,
            now(),
        );
        let a = read.state.approvals.get("A");
        assert_eq!(
            a.map(|r| (r.status, r.attempts)),
            Some((ApprovalStatus::Sent, 1))
        );
        assert_eq!(a.map(|r| r.at), Some(now()));
        let f = read.state.approvals.get("F");
        assert_eq!(
            f.map(|r| (r.status, r.attempts)),
            Some((ApprovalStatus::Failed, 2))
        );
        assert_eq!(read.dropped.len(), 2, "{:?}", read.dropped);
    }

    #[test]
    fn what_was_dropped_is_said_up_to_a_bound() {
        let events: Vec<&str> = vec!["null"; 100];
        let bytes = format!(r#"{{"version":1,"events":[{}]}}"#, events.join(","));
        let read = read(bytes.as_bytes(), now());
        assert_eq!(read.dropped.len(), MAX_DROPPED_SAID + 1);
        assert_eq!(read.dropped.last().map(String::as_str), Some("and 84 more"));
    }
}
