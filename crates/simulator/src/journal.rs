//! What clients sent to `/metadata/scheduledevents`: one record per request, in arrival order,
//! so that a test can see how often a client polled, in what order it polled and approved, and
//! what its approval POSTs carried, without a proxy in front of the simulator.
//!
//! Pure data: the HTTP layer adds the records. The journal keeps the newest [`KEPT`] records;
//! every record carries its number, counted from 1 since the simulator started, so counting
//! requests after a given one stays exact when older records are gone.

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use serde::Serialize;

/// How many records the journal keeps; older ones are forgotten. At a 50 ms poll, that is more
/// than eight minutes of requests.
pub const KEPT: usize = 10_000;

/// One request to `/metadata/scheduledevents`, as it arrived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeenRequest {
    /// The request's number: 1 for the first one the simulator received.
    pub number: u64,
    /// `GET`, `POST`, or whatever method the client used.
    pub method: String,
    /// When it arrived (before any `delay` fault).
    pub at: DateTime<Utc>,
    /// Its `Metadata` header as sent, when it had one that is text.
    pub metadata: Option<String>,
    /// The kind of injected fault that answered it (`status`, `delay`, `garbage`, `truncated`,
    /// `drop`), if one did.
    pub fault: Option<String>,
    /// For a POST that got as far as being read (past any fault but `delay`, the header checks and
    /// the `api-version` check): its body, as text with invalid UTF-8 replaced.
    pub body: Option<String>,
}

impl SeenRequest {
    pub fn is_get(&self) -> bool {
        self.method == "GET"
    }

    pub fn is_post(&self) -> bool {
        self.method == "POST"
    }
}

/// The newest [`KEPT`] requests, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    records: VecDeque<SeenRequest>,
}

impl Journal {
    /// Adds a request, forgetting the oldest when [`KEPT`] are already kept.
    pub fn push(&mut self, record: SeenRequest) {
        if self.records.len() >= KEPT {
            self.records.pop_front();
        }
        self.records.push_back(record);
    }

    /// Sets the body of request `number`, if it is still kept.
    pub fn set_body(&mut self, number: u64, body: String) {
        if let Some(record) = self.records.iter_mut().rev().find(|r| r.number == number) {
            record.body = Some(body);
        }
    }

    /// The kept requests, oldest first.
    pub fn records(&self) -> Vec<SeenRequest> {
        self.records.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(number: u64, method: &str) -> SeenRequest {
        SeenRequest {
            number,
            method: method.to_owned(),
            at: DateTime::UNIX_EPOCH,
            metadata: Some("true".to_owned()),
            fault: None,
            body: None,
        }
    }

    #[test]
    fn the_journal_keeps_the_newest_requests_with_their_numbers() {
        let mut journal = Journal::default();
        for number in 1..=(KEPT as u64 + 5) {
            journal.push(seen(number, "GET"));
        }
        let records = journal.records();
        assert_eq!(records.len(), KEPT);
        assert_eq!(records.first().map(|r| r.number), Some(6));
        assert_eq!(records.last().map(|r| r.number), Some(KEPT as u64 + 5));
    }

    #[test]
    fn a_body_is_set_on_its_own_request_only() {
        let mut journal = Journal::default();
        journal.push(seen(1, "POST"));
        journal.push(seen(2, "GET"));
        journal.set_body(1, "{}".to_owned());
        journal.set_body(7, "lost".to_owned());
        let records = journal.records();
        assert_eq!(records[0].body.as_deref(), Some("{}"));
        assert_eq!(records[1].body, None);
        assert!(records[0].is_post() && records[1].is_get());
    }
}
