//! systemd's service notifications: ready, what the agent waits for, and the watchdog.
//!
//! Only under a unit with `Type=notify` (systemd sets `NOTIFY_SOCKET`): `READY=1` once the agent
//! serves `/metrics`, a `STATUS=` line whenever what it waits for changes (the first document, a
//! backoff), `STOPPING=1` on the way out, and, with `WatchdogSec=` (`WATCHDOG_USEC`), `WATCHDOG=1`
//! at half that period, sent only while the poll loop keeps the promise it makes to `/healthz`
//! ([`Health`]): a loop that is stuck stops the pings and systemd restarts the agent. Everywhere
//! else, and on systems without Unix sockets, every call does nothing.

use std::sync::Arc;
use std::time::Duration;

use crate::http::health::Health;

/// One notification.
#[derive(Debug, Clone, Copy)]
enum Notice<'a> {
    Ready,
    #[cfg_attr(
        not(unix),
        expect(dead_code, reason = "only systemd reads the status line, on Unix")
    )]
    Status(&'a str),
    Stopping,
    Watchdog,
}

/// What to tell systemd, if it is listening.
#[derive(Debug, Default)]
pub struct Systemd {
    listening: bool,
}

impl Systemd {
    /// Listens for systemd only when it set `NOTIFY_SOCKET`.
    pub fn from_env() -> Self {
        Self {
            listening: std::env::var_os("NOTIFY_SOCKET").is_some(),
        }
    }

    pub fn is_listening(&self) -> bool {
        self.listening
    }

    /// The agent serves `/metrics`.
    pub fn ready(&self) {
        self.send(Notice::Ready);
    }

    /// What the agent is doing or waiting for.
    pub fn status(&self, status: &str) {
        self.send(Notice::Status(status));
    }

    pub fn stopping(&self) {
        self.send(Notice::Stopping);
    }

    /// Starts the watchdog pings when the unit asked for them (`WATCHDOG_USEC`, for this
    /// process): every half period, while `health` says the poll loop keeps its promise.
    pub fn start_watchdog(&self, health: Arc<Health>) {
        let Some(period) = self.listening.then(watchdog_period).flatten() else {
            return;
        };
        let every = (period / 2).max(Duration::from_millis(1));
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            loop {
                ticks.tick().await;
                if health.is_alive() {
                    platform::notify(Notice::Watchdog);
                }
            }
        });
    }

    fn send(&self, notice: Notice<'_>) {
        if self.listening {
            platform::notify(notice);
        }
    }
}

fn watchdog_period() -> Option<Duration> {
    platform::watchdog_period().filter(|period| !period.is_zero())
}

#[cfg(unix)]
mod platform {
    use std::time::Duration;

    use sd_notify::NotifyState;

    use super::Notice;

    pub fn notify(notice: Notice<'_>) {
        let state = match notice {
            Notice::Ready => NotifyState::Ready,
            Notice::Status(status) => NotifyState::Status(status),
            Notice::Stopping => NotifyState::Stopping,
            Notice::Watchdog => NotifyState::Watchdog,
        };
        // A systemd that went away is nothing the agent can mend: metrics go on regardless.
        let _ = sd_notify::notify(&[state]);
    }

    pub fn watchdog_period() -> Option<Duration> {
        sd_notify::watchdog_enabled()
    }
}

#[cfg(not(unix))]
mod platform {
    use std::time::Duration;

    use super::Notice;

    pub fn notify(_notice: Notice<'_>) {}

    pub fn watchdog_period() -> Option<Duration> {
        None
    }
}
