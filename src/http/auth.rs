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
//!
//! A password not verified yet (after a restart) must not be kept out by such a flood either. The
//! waiting checks are therefore served by rank, not in order of arrival: a check's rank is the
//! number of wrong passwords its client address sent in the last [`FAILURE_MEMORY`] (none once
//! one of its passwords is right) plus that address's checks in the budget when it arrives, and a
//! check from a better-ranked address takes the place of the worst waiting one when every place
//! is taken. A scraper or a probe from an address that sends no
//! wrong passwords waits for at most the checks running when it arrives, whatever others send.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use crate::config::web::{Access, Check, Loaded, RateLimit};

/// How many password checks may wait for one of the running places.
pub(crate) const WAITING_CHECKS: usize = 8;

/// How long an address's wrong passwords count against its checks.
pub(crate) const FAILURE_MEMORY: Duration = Duration::from_secs(600);

/// The most addresses whose wrong passwords are remembered (about 100 KiB).
const ADDRESSES: usize = 4096;

/// The bound on password checks.
#[derive(Debug)]
pub(crate) struct CheckBudget {
    /// How many checks may run at once.
    running: usize,
    queue: Arc<Mutex<Queue>>,
    failures: Arc<Mutex<Failures>>,
}

/// Checks running, and those waiting for a place.
#[derive(Debug, Default)]
struct Queue {
    running: usize,
    arrived: u64,
    waiting: Vec<Waiter>,
}

#[derive(Debug)]
struct Waiter {
    /// Its address's wrong passwords: lower goes first.
    rank: u32,
    arrived: u64,
    start: oneshot::Sender<Place>,
}

impl Queue {
    fn best(&self) -> Option<usize> {
        (0..self.waiting.len()).min_by_key(|&i| (self.waiting[i].rank, self.waiting[i].arrived))
    }

    fn worst(&self) -> Option<usize> {
        (0..self.waiting.len()).max_by_key(|&i| (self.waiting[i].rank, self.waiting[i].arrived))
    }
}

/// A running place: dropped when its check ends, it goes to the best waiting check.
#[derive(Debug)]
struct Place {
    queue: Arc<Mutex<Queue>>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let next = {
            let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
            match queue.best() {
                Some(best) => Some(queue.waiting.swap_remove(best)),
                None => {
                    queue.running = queue.running.saturating_sub(1);
                    None
                }
            }
        };
        // A waiter whose client has gone gives it back at once (dropping it hands it on).
        if let Some(waiter) = next {
            let _ = waiter.start.send(Place {
                queue: Arc::clone(&self.queue),
            });
        }
    }
}

/// Per client address (an IPv6 address by its /64, what one host holds): its recent wrong
/// passwords, and its checks waiting or running now.
#[derive(Debug, Default)]
struct Failures {
    by_address: HashMap<IpAddr, (u32, Instant)>,
    in_flight: HashMap<IpAddr, u32>,
}

fn client_key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
        v4 => v4,
    }
}

impl Failures {
    /// A new check's rank: the address's recent wrong passwords and its checks in the budget
    /// now, so that an address sending many at once ranks low before its first is refused.
    fn rank(&self, address: IpAddr, now: Instant) -> u32 {
        let key = client_key(address);
        let in_flight = self.in_flight.get(&key).copied().unwrap_or(0);
        self.wrong(key, now).saturating_add(in_flight)
    }

    fn wrong(&self, key: IpAddr, now: Instant) -> u32 {
        match self.by_address.get(&key) {
            Some((count, last)) if now.saturating_duration_since(*last) < FAILURE_MEMORY => *count,
            _ => 0,
        }
    }

    fn enter(&mut self, address: IpAddr) {
        *self.in_flight.entry(client_key(address)).or_default() += 1;
    }

    fn leave(&mut self, address: IpAddr) {
        let key = client_key(address);
        if let Some(count) = self.in_flight.get_mut(&key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.in_flight.remove(&key);
            }
        }
    }

    fn record(&mut self, address: IpAddr, access: Access, now: Instant) {
        let key = client_key(address);
        if access == Access::Granted {
            self.by_address.remove(&key);
            return;
        }
        if !self.by_address.contains_key(&key) && self.by_address.len() >= ADDRESSES {
            self.by_address
                .retain(|_, (_, last)| now.saturating_duration_since(*last) < FAILURE_MEMORY);
            if self.by_address.len() >= ADDRESSES {
                return;
            }
        }
        let wrong = self.wrong(key, now);
        self.by_address.insert(key, (wrong.saturating_add(1), now));
    }
}

/// A check of `client`'s counted in its address's rank until dropped (its request gone, or its
/// check done).
#[derive(Debug)]
struct InFlight {
    failures: Arc<Mutex<Failures>>,
    client: IpAddr,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .leave(self.client);
    }
}

/// Why a request was not let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Missing, malformed, unknown user or wrong password: 401.
    Denied,
    /// Every place in the budget is taken by checks ranked as well or better: 503.
    Busy,
}

/// A place in the budget: running now, or waiting for one.
enum Admission {
    Run(Place),
    Wait(oneshot::Receiver<Place>),
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
            running,
            queue: Arc::default(),
            failures: Arc::default(),
        }
    }

    /// A place for a check of rank `rank`, pushing out the worst waiting check if every place
    /// is taken and it ranks worse.
    fn admit(&self, rank: u32) -> Result<Admission, Refusal> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if queue.running < self.running {
            queue.running += 1;
            return Ok(Admission::Run(Place {
                queue: Arc::clone(&self.queue),
            }));
        }
        // Requests dropped while they waited leave no place taken.
        queue.waiting.retain(|w| !w.start.is_closed());
        if queue.waiting.len() >= WAITING_CHECKS {
            let worst = queue.worst().ok_or(Refusal::Busy)?;
            if queue.waiting[worst].rank <= rank {
                return Err(Refusal::Busy);
            }
            // Its sender dropped, the request pushed out is answered 503.
            queue.waiting.swap_remove(worst);
        }
        let (start, wait) = oneshot::channel();
        let arrived = queue.arrived;
        queue.arrived += 1;
        queue.waiting.push(Waiter {
            rank,
            arrived,
            start,
        });
        Ok(Admission::Wait(wait))
    }

    /// Checks an `Authorization` header value against `loaded`, for a request from `client`.
    pub(crate) async fn authenticate(
        &self,
        loaded: Arc<Loaded>,
        authorization: Option<&[u8]>,
        client: IpAddr,
    ) -> Result<(), Refusal> {
        let credentials = match loaded.check(authorization) {
            Check::Decided(Access::Granted) => return Ok(()),
            Check::Decided(Access::Denied) => return Err(Refusal::Denied),
            Check::Verify(credentials) => credentials,
        };
        let rank = {
            let mut failures = self.failures.lock().unwrap_or_else(PoisonError::into_inner);
            let rank = failures.rank(client, Instant::now());
            failures.enter(client);
            rank
        };
        let in_flight = InFlight {
            failures: Arc::clone(&self.failures),
            client,
        };
        let place = match self.admit(rank)? {
            Admission::Run(place) => place,
            Admission::Wait(wait) => wait.await.map_err(|_| Refusal::Busy)?,
        };
        // The place goes with the check, not with the request: a client that hangs up frees it
        // only when bcrypt has finished. The outcome counts for the address all the same.
        let failures = Arc::clone(&self.failures);
        let access = tokio::task::spawn_blocking(move || {
            let _counted = (place, in_flight);
            let access = loaded.verify(credentials);
            failures
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .record(client, access, Instant::now());
            access
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
        assert_eq!(budget.running, (cpus / 2).max(1));
    }

    fn ranks_waiting(budget: &CheckBudget) -> Vec<u32> {
        let queue = budget.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let mut ranks: Vec<u32> = queue.waiting.iter().map(|w| w.rank).collect();
        ranks.sort_unstable();
        ranks
    }

    #[test]
    fn a_check_from_a_clean_address_goes_before_a_flood_of_wrong_passwords() {
        let budget = CheckBudget::new(1);
        let Ok(Admission::Run(running)) = budget.admit(0) else {
            panic!("the first check runs at once");
        };
        // A flooding address, ranked by its wrong passwords, fills every waiting place.
        let mut flood = Vec::new();
        for _ in 0..WAITING_CHECKS {
            match budget.admit(50) {
                Ok(Admission::Wait(wait)) => flood.push(wait),
                _ => panic!("a waiting place"),
            }
        }
        assert!(matches!(budget.admit(50), Err(Refusal::Busy)), "no more");
        // The scraper's first check after a restart pushes out the worst of them.
        let Ok(Admission::Wait(mut scraper)) = budget.admit(0) else {
            panic!("the scraper waits, ahead of the flood");
        };
        assert_eq!(ranks_waiting(&budget), [0, 50, 50, 50, 50, 50, 50, 50]);
        let pushed_out = flood
            .iter_mut()
            .map(oneshot::Receiver::try_recv)
            .filter(|r| matches!(r, Err(oneshot::error::TryRecvError::Closed)))
            .count();
        assert_eq!(pushed_out, 1);
        drop(running);
        let place = scraper.try_recv();
        assert!(place.is_ok(), "the place goes to the scraper first");
        assert!(
            flood.iter_mut().all(|w| w.try_recv().is_err()),
            "and to none of the flood"
        );
        drop(place);
        assert!(
            flood.iter_mut().any(|w| w.try_recv().is_ok()),
            "then to the best of the flood"
        );
    }

    #[test]
    fn a_place_given_to_a_request_that_has_gone_goes_on_to_the_next() {
        let budget = CheckBudget::new(1);
        let Ok(Admission::Run(running)) = budget.admit(0) else {
            panic!("runs");
        };
        let Ok(Admission::Wait(gone)) = budget.admit(0) else {
            panic!("waits");
        };
        let Ok(Admission::Wait(mut next)) = budget.admit(1) else {
            panic!("waits");
        };
        drop(gone);
        drop(running);
        let place = next.try_recv();
        assert!(place.is_ok());
        drop(place);
        let queue = budget.queue.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(
            (queue.running, queue.waiting.len()),
            (0, 0),
            "nothing leaks"
        );
    }

    #[test]
    fn an_address_is_ranked_by_its_recent_wrong_passwords_until_one_is_right() {
        let mut failures = Failures::default();
        let now = Instant::now();
        let flood = IpAddr::from([10, 0, 0, 66]);
        let scraper = IpAddr::from([10, 0, 0, 9]);
        for _ in 0..3 {
            failures.record(flood, Access::Denied, now);
        }
        assert_eq!(failures.rank(flood, now), 3);
        assert_eq!(failures.rank(scraper, now), 0);
        assert_eq!(failures.rank(flood, now + FAILURE_MEMORY), 0, "forgotten");
        failures.record(flood, Access::Granted, now);
        assert_eq!(failures.rank(flood, now), 0);
        // Checks in the budget count too, from the first one, until they leave it.
        failures.enter(scraper);
        failures.enter(scraper);
        assert_eq!(failures.rank(scraper, now), 2);
        failures.leave(scraper);
        failures.leave(scraper);
        assert_eq!(failures.rank(scraper, now), 0);
        assert!(failures.in_flight.is_empty());
        // One host's IPv6 addresses count as one.
        let a = IpAddr::from([0xfd00, 0, 0, 0, 1, 2, 3, 4]);
        let b = IpAddr::from([0xfd00, 0, 0, 0, 5, 6, 7, 8]);
        failures.record(a, Access::Denied, now);
        assert_eq!(failures.rank(b, now), 1);
    }
}
