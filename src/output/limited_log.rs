//! Warnings that a client or a failing neighbour can repeat at will (an invalid web configuration
//! met by every request, a receiver's queue full at every notification) are logged at most once
//! per interval, each line with the count of the like lines left out since the last one
//! (`suppressed`), so the log says how often without being flooded.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The once-a-minute of the agent's repeated warnings.
pub const EVERY: Duration = Duration::from_secs(60);

/// One kind of repeated warning.
#[derive(Debug)]
pub struct Limited {
    every: Duration,
    /// When the last line was logged, and how many were left out since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Limited {
    pub const fn new(every: Duration) -> Self {
        Self {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// Whether a line may be logged now: `Some(suppressed)`, the like lines left out since the
    /// last one logged; `None` (and one more left out) otherwise.
    pub fn admit(&self) -> Option<u64> {
        self.admit_at(Instant::now())
    }

    fn admit_at(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (last, suppressed) = &mut *state;
        match last {
            Some(at) if now.saturating_duration_since(*at) < self.every => {
                *suppressed += 1;
                None
            }
            _ => {
                *last = Some(now);
                Some(std::mem::take(suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_warning_is_logged_once_an_interval_with_the_count_left_out() {
        let limited = Limited::new(EVERY);
        let start = Instant::now();
        assert_eq!(limited.admit_at(start), Some(0), "the first is logged");
        for n in 1..=1000 {
            assert_eq!(limited.admit_at(start + Duration::from_millis(n)), None);
        }
        assert_eq!(
            limited.admit_at(start + EVERY),
            Some(1000),
            "the next line says how many were left out"
        );
        assert_eq!(limited.admit_at(start + EVERY * 3), Some(0));
    }
}
