//! Predicted hardware failure: the mark on an event that Azure announced because it expects the
//! host to fail.
//!
//! Azure predicts some host failures from degraded hardware and schedules a migration, a Redeploy
//! (or a Reboot), "typically a few days in the future": it "tries to give seven days' advance
//! notice" and recommends acknowledging such an event "as soon as possible", before the hardware
//! fails. Routine maintenance comes with minutes of notice ("most events are sent immediately
//! before the minimum notice"). So a Reboot or Redeploy whose NotBefore was more than a day after
//! this agent first saw it is marked, as is any event whose Description says the hardware is
//! degraded or predicted to fail. An advisory is never marked. Pure: the first sight comes in as
//! an argument.

use chrono::{DateTime, TimeDelta, Utc};

use crate::event::{Event, EventType};

/// How far ahead of its first sight a Reboot or Redeploy must be announced to be marked: far
/// beyond any minimum notice (15 minutes), well within Azure's "few days".
pub const PREDICTED_NOTICE: TimeDelta = TimeDelta::days(1);

/// Whether `event`, first seen by this agent at `first_seen` (if known), is marked as a predicted
/// hardware failure. Without a first sight only the Description can mark it.
pub fn predicted(event: &Event, first_seen: Option<DateTime<Utc>>) -> bool {
    if event.is_advisory() {
        return false;
    }
    let announced_days_ahead = matches!(event.event_type, EventType::Reboot | EventType::Redeploy)
        && first_seen
            .zip(event.not_before.at())
            .is_some_and(|(seen, at)| at - seen > PREDICTED_NOTICE);
    announced_days_ahead || description_says_so(event.description.as_deref())
}

/// Whether a Description speaks of degraded hardware or a predicted failure ("Virtual machine is
/// running on degraded host hardware that is predicted to fail soon", as Microsoft's overview
/// words the case). Case is ignored.
fn description_says_so(description: Option<&str>) -> bool {
    description.is_some_and(|text| {
        let text = text.to_ascii_lowercase();
        text.contains("degraded") || text.contains("predicted to fail")
    })
}

/// The label value of a mark: `true` or `false`.
pub fn label(predicted: bool) -> &'static str {
    if predicted { "true" } else { "false" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Document;
    use chrono::TimeZone;

    fn redeploy_three_days_ahead() -> Result<Document, Box<dyn std::error::Error>> {
        let body = std::fs::read(format!(
            "{}/../../tests/fixtures/imds-documents/33-redeploy-three-days-ahead-di3.json",
            env!("CARGO_MANIFEST_DIR")
        ))?;
        Ok(Document::from_json(&body)?)
    }

    /// The fixture's document was read three days before its NotBefore (Fri 27 Nov 2026 19:40).
    fn read_at() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 24, 19, 40, 0)
            .single()
            .unwrap_or_default()
    }

    #[test]
    fn a_redeploy_announced_three_days_ahead_is_marked() -> Result<(), Box<dyn std::error::Error>> {
        let document = redeploy_three_days_ahead()?;
        let redeploy = &document.events[0];
        assert!(predicted(redeploy, Some(read_at())));
        assert!(
            !predicted(redeploy, None),
            "without a first sight only the Description can tell"
        );
        let mut reboot = redeploy.clone();
        reboot.event_type = EventType::Reboot;
        assert!(predicted(&reboot, Some(read_at())));
        Ok(())
    }

    #[test]
    fn routine_notice_and_other_types_are_not_marked() -> Result<(), Box<dyn std::error::Error>> {
        let document = redeploy_three_days_ahead()?;
        let redeploy = &document.events[0];
        let a_day_before = read_at() + TimeDelta::days(2);
        assert!(
            !predicted(redeploy, Some(a_day_before)),
            "exactly a day of notice is not more than a day"
        );
        let mut freeze = redeploy.clone();
        freeze.event_type = EventType::Freeze;
        assert!(!predicted(&freeze, Some(read_at())));
        let mut started = redeploy.clone();
        started.not_before = crate::not_before::NotBefore::parse(Some(""));
        assert!(!predicted(&started, Some(read_at())));
        Ok(())
    }

    #[test]
    fn a_description_of_degraded_hardware_marks_any_event_but_an_advisory()
    -> Result<(), Box<dyn std::error::Error>> {
        let document = redeploy_three_days_ahead()?;
        let mut event = document.events[0].clone();
        event.event_type = EventType::Freeze;
        event.description = Some(
            "Virtual machine is running on degraded host hardware that is predicted to fail soon."
                .into(),
        );
        assert!(predicted(&event, None));
        event.event_type = EventType::SpotRebalanceRecommendation;
        assert!(!predicted(&event, Some(read_at())));
        Ok(())
    }
}
