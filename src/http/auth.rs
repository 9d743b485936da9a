//! What keeps authentication from being a lever against the agent: `rate_limit`'s token bucket,
//! and the budget of password checks. [`crate::http::web`] applies both to every request.
//!
//! bcrypt is slow by design (tens of milliseconds at cost 10, four times that at 12). Each check
//! runs on a blocking thread, so without a bound a client sending wrong passwords as fast as it
//! can (and hanging up at once) would start a thread per request and take the CPU from polling.
//! With the budget, at most half the CPUs' worth of checks run at once and at most
//! [`WAITING_CHECKS`] more wait; beyond it a request is refused at once. A request keeps its
//! place until its check ends, even when its client has gone, since the check runs on regardless.
//! Credentials once verified or refused are answered from [`crate::config::web`]'s caches without
//! entering the budget, so a scraper whose password is known is answered during a flood.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::Semaphore;

use crate::config::web::{Access, Check, Loaded, RateLimit};

/// How many password checks may wait for one of the running places.
pub(crate) const WAITING_CHECKS: usize = 8;

/// The bound on password checks.
#[derive(Debug)]
pub(crate) struct CheckBudget {
    /// Places for checks waiting or running.
    admitted: Arc<Semaphore>,
    /// Places for checks running.
    running: Arc<Semaphore>,
}

/// Why a request was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Missing, malformed, unknown user or wrong password: 401.
    Denied,
    /// Every place in the budget is taken: 503.
    Busy,
}

impl CheckBudget {
    /// Half the CPUs the agent may use (at least one) run checks: the other half stays for
    /// polling and scrapes whatever a client sends.
    pub(crate) fn for_this_machine() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        Self::new((cpus / 2).max(1))
    }

    pub(crate) fn new(running: usize) -> Self {
        Self {
            admitted: Arc::new(Semaphore::new(running + WAITING_CHECKS)),
            running: Arc::new(Semaphore::new(running)),
        }
    }

    /// Checks an `Authorization` header value against `loaded`.
    pub(crate) async fn authenticate(
        &self,
        loaded: Arc<Loaded>,
        authorization: Option<&[u8]>,
    ) -> Result<(), Refusal> {
        let credentials = match loaded.check(authorization) {
            Check::Decided(Access::Granted) => return Ok(()),
            Check::Decided(Access::Denied) => return Err(Refusal::Denied),
            Check::Verify(credentials) => credentials,
        };
        let admitted = Arc::clone(&self.admitted)
            .try_acquire_owned()
            .map_err(|_| Refusal::Busy)?;
        let running = Arc::clone(&self.running)
            .acquire_owned()
            .await
            .map_err(|_| Refusal::Busy)?;
        // The places go with the check, not with the request: a client that hangs up frees
        // them only when bcrypt has finished.
        let access = tokio::task::spawn_blocking(move || {
            let _places = (admitted, running);
            loaded.verify(credentials)
        })
        .await
        .unwrap_or(Access::Denied);
        match access {
            Access::Granted => Ok(()),
            Access::Denied => Err(Refusal::Denied),
        }
    }
}

/// `rate_limit`'s token bucket, kept while the setting is unchanged (a file read again for every
/// request must not refill it) and started full when it changes, as in the toolkit.
#[derive(Debug, Default)]
pub(crate) struct RateBucket {
    state: Mutex<Option<(RateLimit, f64, Instant)>>,
}

impl RateBucket {
    /// Whether a request may be answered now under `limit`, taking its token if so.
    pub(crate) fn take(&self, limit: Option<RateLimit>) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(limit) = limit else {
            *state = None;
            return true;
        };
        let now = Instant::now();
        let burst = f64::from(limit.burst);
        let (tokens, since) = match *state {
            Some((current, tokens, since)) if current == limit => (tokens, since),
            _ => (burst, now),
        };
        let gained = now.duration_since(since).as_secs_f64() / limit.interval.as_secs_f64();
        let tokens = (tokens + gained).min(burst);
        let allowed = tokens >= 1.0;
        let left = if allowed { tokens - 1.0 } else { tokens };
        *state = Some((limit, left, now));
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_bucket_lets_a_burst_through_then_refuses() {
        let bucket = RateBucket::default();
        let hour = RateLimit {
            interval: Duration::from_secs(3600),
            burst: 2,
        };
        assert!(bucket.take(Some(hour)));
        assert!(bucket.take(Some(hour)));
        assert!(!bucket.take(Some(hour)), "the burst is spent");
        assert!(bucket.take(None), "no limit, no refusal");
        assert!(bucket.take(Some(hour)), "a limit set again starts full");
        let other = RateLimit { burst: 1, ..hour };
        assert!(bucket.take(Some(other)), "a changed limit starts full");
        assert!(!bucket.take(Some(other)));
        let fast = RateLimit {
            interval: Duration::from_nanos(1),
            burst: 1,
        };
        assert!(bucket.take(Some(fast)));
    }

    #[test]
    fn checks_run_on_at_most_half_the_cpus() {
        let budget = CheckBudget::for_this_machine();
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        let running = (cpus / 2).max(1);
        assert_eq!(budget.running.available_permits(), running);
        assert_eq!(
            budget.admitted.available_permits(),
            running + WAITING_CHECKS
        );
    }
}
