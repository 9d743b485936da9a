//! Liveness and readiness, as the HTTP server reports them.
//!
//! Liveness means the poll loop is alive: before every step the loop promises when it will be
//! back, and `/healthz` fails once that promise is broken. A slow IMDS (two minutes on the first
//! request) is part of the promise, so it never looks like a hung agent and never causes a restart
//! loop. Readiness means IMDS has given at least one valid document.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Health {
    origin: Instant,
    /// Milliseconds after `origin` by which the loop will have checked in again.
    deadline_ms: AtomicU64,
    ready: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            deadline_ms: AtomicU64::new(0),
            ready: AtomicBool::new(false),
        }
    }

    /// The loop checks in and says how long its next step can take at most.
    pub fn expect_back_within(&self, within: Duration) {
        let deadline = self.origin.elapsed().saturating_add(within);
        self.deadline_ms.store(
            u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Whether the loop has kept its last promise.
    pub fn is_alive(&self) -> bool {
        let now = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        now < self.deadline_ms.load(Ordering::Relaxed)
    }

    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_is_alive_while_it_keeps_its_promise() {
        let health = Health::new();
        assert!(
            !health.is_alive(),
            "not alive before the loop first checks in"
        );
        health.expect_back_within(Duration::from_secs(120));
        assert!(health.is_alive());
        health.expect_back_within(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(5));
        assert!(!health.is_alive());
    }

    #[test]
    fn ready_once_set() {
        let health = Health::new();
        assert!(!health.is_ready());
        health.set_ready();
        assert!(health.is_ready());
    }
}
