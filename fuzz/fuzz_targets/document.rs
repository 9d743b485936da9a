//! The document parser and the event tracker on any bytes IMDS could send. The input is split
//! at NUL bytes into successive poll bodies; each is parsed and the valid ones are observed in
//! order, a second apart. Beyond not panicking, what must hold whatever the input:
//! - the tracker keeps exactly one entry per distinct EventId of the last document;
//! - a document observed again at once changes nothing: no transition, no incarnation change
//!   (one log line per change, never one per poll).

#![no_main]

use std::collections::HashSet;

use azure_scheduled_events_core::event::Document;
use azure_scheduled_events_core::tracker::{IncarnationChange, Tracker};
use chrono::{DateTime, TimeDelta, Utc};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut tracker = Tracker::new();
    let mut now = DateTime::<Utc>::from_timestamp(1_767_225_600, 0).unwrap_or_default();
    for body in data.split(|&b| b == 0) {
        let Ok(document) = Document::from_json(body) else {
            continue;
        };
        let distinct: HashSet<&str> = document.events.iter().map(|e| e.id.as_str()).collect();
        let distinct = distinct.len();
        tracker.observe(document.clone(), now);
        assert_eq!(tracker.events().len(), distinct, "one entry per EventId");
        let again = tracker.observe(document, now);
        assert!(again.transitions.is_empty(), "{again:?}");
        assert_eq!(again.incarnation, IncarnationChange::Unchanged);
        now += TimeDelta::seconds(1);
    }
});
