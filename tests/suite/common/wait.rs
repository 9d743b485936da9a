//! Waiting for something to happen: a condition looked at again and again (a count of polls at the
//! simulator, a value on `/metrics`, a file, a request at a stand-in, a process gone) until it
//! holds, or a deadline passes and the wait fails, naming what it waited for. Every wait of the
//! suite that looks again and again goes through here (a log line or a datagram is received as it
//! comes, with the same deadline: `AgentProcess::lines_until`), and none is a fixed sleep: a test
//! goes on as soon as what it waits for has happened, and a slow machine makes it slower, never
//! red. A test that checks that something did *not* happen waits for what proves that enough
//! happened meanwhile (polls, flushes, requests), never for a length of time.
//!
//! ```ignore
//! wait("the Updated Event").until(async || cluster.event_reasons() == ["RebootUpdated"]).await?;
//! let status = wait("the exit").until_blocking(|| child.try_wait())?;
//! ```

use std::fmt::Display;
use std::time::{Duration, Instant};

use super::PATIENCE;

/// The first pause between two looks; each pause doubles, up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const LONGEST_PAUSE: Duration = Duration::from_millis(100);

/// What one look at a condition found.
pub trait Outcome {
    /// What the wait gives back once the condition holds.
    type Value;
    /// `Ok(Some(value))` when the condition holds, `Ok(None)` when not yet, `Err` when it never
    /// will: the wait ends at once with that error.
    fn outcome(self) -> Result<Option<Self::Value>, String>;
}

impl Outcome for bool {
    type Value = ();
    fn outcome(self) -> Result<Option<()>, String> {
        Ok(self.then_some(()))
    }
}

impl<T> Outcome for Option<T> {
    type Value = T;
    fn outcome(self) -> Result<Option<T>, String> {
        Ok(self)
    }
}

impl<O: Outcome, E: Display> Outcome for Result<O, E> {
    type Value = O::Value;
    fn outcome(self) -> Result<Option<O::Value>, String> {
        self.map_err(|e| e.to_string())?.outcome()
    }
}

/// A wait for `what`, given up after [`PATIENCE`] unless [`Wait::within`] says otherwise.
pub fn wait(what: &str) -> Wait<'_> {
    Wait {
        what,
        patience: PATIENCE,
        errors_are_not_yet: false,
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Wait<'a> {
    what: &'a str,
    patience: Duration,
    errors_are_not_yet: bool,
}

impl Wait<'_> {
    /// Given up after `patience` instead: for a wait whose deadline is what the test asserts
    /// ("ten polls within two seconds"), or for a slow host such as Wine.
    pub fn within(self, patience: Duration) -> Self {
        Self { patience, ..self }
    }

    /// A look that fails counts as "not yet": for a server that is still starting, or a query
    /// that has no answer until data arrives. The last failure is named if the wait fails.
    pub fn retrying_errors(self) -> Self {
        Self {
            errors_are_not_yet: true,
            ..self
        }
    }

    /// Looks with `look` until the condition holds; its value.
    pub async fn until<O: Outcome>(
        self,
        mut look: impl AsyncFnMut() -> O,
    ) -> Result<O::Value, String> {
        let mut deadline = Deadline::new(self);
        loop {
            if let Some(value) = deadline.saw(look().await.outcome())? {
                return Ok(value);
            }
            tokio::time::sleep(deadline.pause()?).await;
        }
    }

    /// As [`Wait::until`], for a test that runs off the async runtime (blocking reads of another
    /// process).
    pub fn until_blocking<O: Outcome>(
        self,
        mut look: impl FnMut() -> O,
    ) -> Result<O::Value, String> {
        let mut deadline = Deadline::new(self);
        loop {
            if let Some(value) = deadline.saw(look().outcome())? {
                return Ok(value);
            }
            std::thread::sleep(deadline.pause()?);
        }
    }
}

struct Deadline<'a> {
    wait: Wait<'a>,
    end: Instant,
    pause: Duration,
    last_error: Option<String>,
}

impl<'a> Deadline<'a> {
    fn new(wait: Wait<'a>) -> Self {
        Self {
            wait,
            end: Instant::now() + wait.patience,
            pause: FIRST_PAUSE,
            last_error: None,
        }
    }

    /// What a look found, with a failure kept as "not yet" when the wait retries errors.
    fn saw<T>(&mut self, outcome: Result<Option<T>, String>) -> Result<Option<T>, String> {
        match outcome {
            Err(error) if self.wait.errors_are_not_yet => {
                self.last_error = Some(error);
                Ok(None)
            }
            outcome => outcome,
        }
    }

    /// After a look that found the condition false: the pause before the next look (the last one
    /// at the deadline), or the failure once the deadline has passed.
    fn pause(&mut self) -> Result<Duration, String> {
        let left = self.end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let last = match &self.last_error {
                Some(error) => format!(" (the last look failed: {error})"),
                None => String::new(),
            };
            return Err(format!(
                "timed out after {:?} waiting for {}{last}",
                self.wait.patience, self.wait.what
            ));
        }
        let pause = self.pause.min(left);
        self.pause = (self.pause * 2).min(LONGEST_PAUSE);
        Ok(pause)
    }
}
