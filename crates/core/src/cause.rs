//! The cause of an event, read from its `Description`: a bounded name that labels, spans, log
//! lines and notifications can carry, so that live migrations, host maintenance and user
//! restarts can be grouped and alerted on apart.
//!
//! `Description` is free text that Azure words as it likes; only the phrases of Microsoft's pages
//! are recognised, ignoring case, spacing and the final period, and everything else (an empty or
//! missing `Description` included) is `other`. The raw text is never replaced: it stays in the
//! log line, the span and the notification next to the cause.

use std::fmt;

use crate::event::Event;

/// What `Description` says caused the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cause {
    /// "Virtual machine is being paused because of a memory-preserving Live Migration operation."
    LiveMigration,
    /// "Host server is undergoing maintenance."
    HostMaintenance,
    /// "Host Server infrastructure is undergoing maintenance."
    HostInfrastructure,
    /// "Virtual machine is going to be restarted as requested by authorized user."
    UserRequest,
    /// "Host server is undergoing an emergency repair."
    EmergencyRepair,
    /// Any other text, an empty `Description`, or none (before api-version 2019-04-01).
    Other,
}

impl Cause {
    /// Every cause, for documentation and tests.
    pub const ALL: [Cause; 6] = [
        Cause::LiveMigration,
        Cause::HostMaintenance,
        Cause::HostInfrastructure,
        Cause::UserRequest,
        Cause::EmergencyRepair,
        Cause::Other,
    ];

    /// Reads a `Description`.
    pub fn of(description: Option<&str>) -> Self {
        let Some(description) = description else {
            return Cause::Other;
        };
        let text = description
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_ascii_lowercase();
        let text = text.trim_end_matches('.');
        // The most specific phrases first: "host server infrastructure ... maintenance" also
        // holds "maintenance".
        if text.contains("live migration") {
            Cause::LiveMigration
        } else if text.contains("emergency repair") {
            Cause::EmergencyRepair
        } else if text.contains("infrastructure is undergoing maintenance") {
            Cause::HostInfrastructure
        } else if text.contains("requested by authorized user") {
            Cause::UserRequest
        } else if text.contains("host server is undergoing maintenance") {
            Cause::HostMaintenance
        } else {
            Cause::Other
        }
    }

    /// The label value: `live_migration`, `host_maintenance`, `host_infrastructure`,
    /// `user_request`, `emergency_repair` or `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::LiveMigration => "live_migration",
            Cause::HostMaintenance => "host_maintenance",
            Cause::HostInfrastructure => "host_infrastructure",
            Cause::UserRequest => "user_request",
            Cause::EmergencyRepair => "emergency_repair",
            Cause::Other => "other",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Event {
    /// The cause its `Description` gives.
    pub fn cause(&self) -> Cause {
        Cause::of(self.description.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Document;

    fn fixture(file: &str) -> Result<Document, Box<dyn std::error::Error>> {
        let body = std::fs::read(format!(
            "{}/../../tests/fixtures/imds-documents/{file}",
            env!("CARGO_MANIFEST_DIR")
        ))?;
        Ok(Document::from_json(&body)?)
    }

    #[test]
    fn each_documented_phrase_has_its_cause_and_anything_else_is_other()
    -> Result<(), Box<dyn std::error::Error>> {
        let document = fixture("32-description-phrases-seven-events-di12.json")?;
        let causes: Vec<&str> = document.events.iter().map(|e| e.cause().as_str()).collect();
        assert_eq!(
            causes,
            [
                "live_migration",
                "host_maintenance",
                "host_infrastructure",
                "user_request",
                "emergency_repair",
                "other",
                "other",
            ]
        );
        assert_eq!(
            document.events[0].description.as_deref(),
            Some(
                "Virtual machine is being paused because of a memory-preserving Live Migration operation."
            ),
            "the raw text stays"
        );
        Ok(())
    }

    #[test]
    fn case_spacing_and_the_final_period_do_not_matter() {
        assert_eq!(
            Cause::of(Some("host server  is undergoing MAINTENANCE")),
            Cause::HostMaintenance
        );
        assert_eq!(
            Cause::of(Some("Host Server infrastructure is undergoing maintenance")),
            Cause::HostInfrastructure
        );
        assert_eq!(Cause::of(Some("")), Cause::Other);
        assert_eq!(Cause::of(None), Cause::Other);
        assert_eq!(Cause::of(Some("paused")), Cause::Other);
    }

    #[test]
    fn the_real_world_documents_give_known_causes() -> Result<(), Box<dyn std::error::Error>> {
        let live =
            fixture("15-docs-seq2-freeze-scheduled-livemigration-two-resources-di2-2022.json")?;
        assert_eq!(live.events[0].cause(), Cause::LiveMigration);
        let preempt = fixture("08-preempt-scheduled-duration-minus1-di1.json")?;
        assert_eq!(preempt.events[0].cause(), Cause::Other);
        Ok(())
    }
}
