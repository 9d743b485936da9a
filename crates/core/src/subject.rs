//! What a transition, a notification or a log line is about: the one spelling of each
//! transition's word.

/// What a notification can be about: the lifecycle transitions ([`Kind`](crate::tracker::Kind)), advisories, and
/// approvals. `advisory` is never sent unless listed: a receiver that does not list it gets
/// nothing about an advisory (a Spot rebalance recommendation, an unknown EventStatus), not even
/// its end.
///
/// Its words ([`Subject::as_str`]) are the only spelling of a transition: the `transition` label
/// and log field, notification bodies, receivers' `transitions` and the state file use them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Subject {
    Advisory,
    Scheduled,
    Started,
    Updated,
    Completed,
    Cancelled,
    Approved,
}

impl Subject {
    /// Every subject, in the order the documentation lists them.
    pub const ALL: [Subject; 7] = [
        Subject::Advisory,
        Subject::Scheduled,
        Subject::Started,
        Subject::Updated,
        Subject::Completed,
        Subject::Cancelled,
        Subject::Approved,
    ];

    /// The word for it, as every output writes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Subject::Advisory => "advisory",
            Subject::Scheduled => "scheduled",
            Subject::Started => "started",
            Subject::Updated => "updated",
            Subject::Completed => "completed",
            Subject::Cancelled => "cancelled",
            Subject::Approved => "approved",
        }
    }

    /// The subject `word` names, as [`Subject::as_str`] writes it.
    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == word)
    }

    /// Whether it ends the event's lifecycle (completed or cancelled).
    pub const fn is_end(self) -> bool {
        matches!(self, Subject::Completed | Subject::Cancelled)
    }
}

/// As its word, in a notification's body and template.
impl serde::Serialize for Subject {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subject_is_written_as_the_word_receivers_list_and_read_back_from_it() {
        let words: Vec<&str> = Subject::ALL.map(Subject::as_str).to_vec();
        assert_eq!(
            words,
            [
                "advisory",
                "scheduled",
                "started",
                "updated",
                "completed",
                "cancelled",
                "approved"
            ]
        );
        for subject in Subject::ALL {
            assert_eq!(Subject::parse(subject.as_str()), Some(subject));
            assert_eq!(subject.to_string(), subject.as_str());
        }
        assert_eq!(Subject::parse("removed"), None);
        // A transition's label value is its subject's word.
        assert_eq!(crate::tracker::Kind::Cancelled.as_str(), "cancelled");
    }
}
