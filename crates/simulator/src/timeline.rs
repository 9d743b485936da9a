//! Playing a scenario out over time: which of its events are due to appear by a given instant,
//! and when exactly each one appeared, loop after loop.
//!
//! Pure: the caller passes `now`. Appearance times are computed from the timeline's start, never
//! from when the caller happened to ask, so a simulator that is polled late still runs every
//! event's lifecycle on schedule. Loops that ended entirely before `now` (nothing of them could
//! still be in the document) are skipped without creating their events.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::scenario::{InitialStatus, MIN_LOOP, ScenarioEvent};

/// `start + offset`, saturating instead of overflowing.
pub fn after(start: DateTime<Utc>, offset: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(offset)
        .ok()
        .and_then(|delta| start.checked_add_signed(delta))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// An event that is due, with the instant it appeared.
#[derive(Debug, Clone, PartialEq)]
pub struct Appearance {
    pub at: DateTime<Utc>,
    pub event: ScenarioEvent,
}

/// A scenario's events scheduled from `start`, once or every `period`.
#[derive(Debug, Clone)]
pub struct Timeline {
    events: Vec<ScenarioEvent>,
    start: DateTime<Utc>,
    period: Option<Duration>,
    cycle: u64,
    appeared: Vec<bool>,
    /// From a cycle's start to the latest moment any of its events can still be in the document.
    horizon: Duration,
}

impl Timeline {
    pub fn new(events: Vec<ScenarioEvent>, period: Option<Duration>, start: DateTime<Utc>) -> Self {
        let horizon = events.iter().map(lifetime_from_cycle_start).max();
        Timeline {
            appeared: vec![false; events.len()],
            horizon: horizon.unwrap_or_default(),
            events,
            start,
            period: period.map(|p| p.max(MIN_LOOP)),
            cycle: 0,
        }
    }

    /// The events that appeared after the last call and by `now`, oldest first.
    pub fn due(&mut self, now: DateTime<Utc>) -> Vec<Appearance> {
        self.skip_finished_cycles(now);
        let mut due = Vec::new();
        loop {
            let cycle_start = self.cycle_start(self.cycle);
            for (index, event) in self.events.iter().enumerate() {
                let at = after(cycle_start, event.at.0);
                if !self.appeared[index] && at <= now {
                    self.appeared[index] = true;
                    due.push(Appearance {
                        at,
                        event: event.clone(),
                    });
                }
            }
            match self.period {
                Some(period) if after(cycle_start, period) <= now => {
                    self.cycle = self.cycle.saturating_add(1);
                    self.appeared.fill(false);
                }
                _ => break,
            }
        }
        due.sort_by_key(|a| a.at);
        due
    }

    /// True when nothing more will ever appear.
    pub fn is_finished(&self) -> bool {
        self.period.is_none() && self.appeared.iter().all(|a| *a)
    }

    fn cycle_start(&self, cycle: u64) -> DateTime<Utc> {
        match self.period {
            Some(period) => {
                let nanos = period.as_nanos().saturating_mul(u128::from(cycle));
                let offset = u64::try_from(nanos).map(Duration::from_nanos);
                offset.map_or(DateTime::<Utc>::MAX_UTC, |o| after(self.start, o))
            }
            None => self.start,
        }
    }

    /// Jumps to the first cycle whose events may still be in the document at `now`.
    fn skip_finished_cycles(&mut self, now: DateTime<Utc>) {
        let Some(period) = self.period else { return };
        let Ok(elapsed) = (now - self.start).to_std() else {
            return;
        };
        let Some(ended_span) = elapsed.checked_sub(self.horizon) else {
            return;
        };
        // Cycle c is over once start + c*period + horizon < now, so the first live cycle is
        // floor((elapsed - horizon) / period), give or take one: being one early is harmless.
        let first_live = ended_span.as_nanos() / period.as_nanos().max(1);
        let first_live = u64::try_from(first_live).unwrap_or(u64::MAX);
        if first_live > self.cycle {
            self.cycle = first_live;
            self.appeared.fill(false);
        }
    }
}

/// How long after its cycle starts an event can still be in the document.
fn lifetime_from_cycle_start(event: &ScenarioEvent) -> Duration {
    let life = match (event.status, event.cancel_after) {
        (InitialStatus::Started | InitialStatus::Advisory, _) => event.runs_for(),
        (InitialStatus::Scheduled, Some(cancel_after)) => cancel_after.0,
        (InitialStatus::Scheduled, None) => event.notice().saturating_add(event.runs_for()),
    };
    event.at.0.saturating_add(life)
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;
    use crate::scenario::HumanDuration;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default()
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn event_at(s: u64) -> ScenarioEvent {
        ScenarioEvent {
            at: HumanDuration(secs(s)),
            notice: Some(HumanDuration(secs(5))),
            runs_for: Some(HumanDuration(secs(5))),
            ..ScenarioEvent::new("Freeze", &["vm_0"])
        }
    }

    #[test]
    fn events_appear_at_their_offset_exactly_once() -> TestResult {
        let mut timeline = Timeline::new(vec![event_at(0), event_at(10)], None, t0());
        assert_eq!(timeline.due(t0()).len(), 1);
        assert!(timeline.due(after(t0(), secs(9))).is_empty());
        let due = timeline.due(after(t0(), secs(30)));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].at, after(t0(), secs(10)));
        assert!(timeline.is_finished());
        assert!(timeline.due(after(t0(), secs(60))).is_empty());
        Ok(())
    }

    #[test]
    fn a_looping_timeline_replays_every_period() -> TestResult {
        let mut timeline = Timeline::new(vec![event_at(1)], Some(secs(20)), t0());
        assert!(timeline.due(t0()).is_empty());
        assert_eq!(timeline.due(after(t0(), secs(1))).len(), 1);
        assert!(timeline.due(after(t0(), secs(20))).is_empty());
        let due = timeline.due(after(t0(), secs(21)));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].at, after(t0(), secs(21)));
        assert!(!timeline.is_finished());
        Ok(())
    }

    #[test]
    fn late_polls_get_every_appearance_with_its_own_time() -> TestResult {
        let mut timeline = Timeline::new(vec![event_at(0), event_at(5)], Some(secs(10)), t0());
        let due = timeline.due(after(t0(), secs(16)));
        let times: Vec<_> = due.iter().map(|a| a.at).collect();
        assert_eq!(
            times,
            vec![
                t0(),
                after(t0(), secs(5)),
                after(t0(), secs(10)),
                after(t0(), secs(15))
            ]
        );
        Ok(())
    }

    #[test]
    fn cycles_long_over_are_skipped() -> TestResult {
        let mut timeline = Timeline::new(vec![event_at(0)], Some(secs(10)), t0());
        // The event lives 10 s from its cycle start; after a day only the last cycles matter.
        let due = timeline.due(after(t0(), secs(86_400)));
        assert!(due.len() <= 3, "{}", due.len());
        assert_eq!(due.last().map(|a| a.at), Some(after(t0(), secs(86_400))));
        Ok(())
    }
}
