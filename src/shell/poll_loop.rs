//! The one poll loop: a single IMDS request in flight, and every batch of occurrences handed
//! to the outputs.
//!
//! Each step reads instance metadata until it has it (retried after one poll interval, then
//! less often), polls the scheduled-events document, takes in what the outputs reported since
//! the last poll, and lets the pure [`Observer`] turn all that into [`Occurrence`]s, which every
//! output consumes in the order [`crate::shell::agent`] wired them. Outputs never wait on the network
//! inside the loop, so a slow hook, approval POST or collector never delays the next poll.
//! Nothing is logged for a poll that changed nothing. The loop also keeps the health endpoint's
//! liveness promise and tells systemd what it is doing.

use std::sync::Arc;
use std::time::Duration;

use azure_scheduled_events_core::monitor::PollFailure;
use azure_scheduled_events_core::observer::Observer;
use azure_scheduled_events_core::occurrence::{Context, Occurrence, Report};
use chrono::Utc;
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, MissedTickBehavior};

use crate::azure::backoff;
use crate::azure::imds::{ImdsClient, ImdsError};
use crate::config::Config;
use crate::http::health::Health;
use crate::output::Outputs;
use crate::output::metrics::Metrics;
use crate::shell::systemd::Systemd;

/// How often, at most, instance metadata is asked for again while it cannot be read: the first
/// retry comes after one poll interval, each next one twice as late, up to this.
const INSTANCE_RETRY: Duration = Duration::from_secs(30);

/// Slack in the loop's liveness promise for scheduling delays on a busy VM.
const LIVENESS_GRACE: Duration = Duration::from_secs(5);

pub(crate) async fn until_stopped(mut stopped: watch::Receiver<bool>) {
    // An error means the sender is gone, which is a stop as well.
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// The poll loop's state.
pub(crate) struct Poller {
    config: Config,
    client: ImdsClient,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    observer: Observer,
    outputs: Outputs,
    /// What outputs that act (hooks, approval POSTs) report back.
    reports: mpsc::UnboundedReceiver<Report>,
    /// This VM's name in `Resources`: `--vm.name`, else `compute.name`.
    vm_name: Option<Arc<str>>,
    /// The body of the last valid document, to tell an unchanged one without parsing it.
    last_document: Vec<u8>,
    compute_read: bool,
    instance_failures: u64,
    next_instance_read: Instant,
    backoff_exponent: u32,
    systemd: Systemd,
    /// What systemd was last told.
    told: Option<LoopStatus>,
}

impl Poller {
    /// The loop for this configuration, before its first poll; `vm_name` is `--vm.name`.
    pub(crate) fn new(
        config: Config,
        client: ImdsClient,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
        observer: Observer,
        outputs: Outputs,
        reports: mpsc::UnboundedReceiver<Report>,
    ) -> Self {
        Self {
            vm_name: config.vm_name.as_deref().map(Arc::from),
            config,
            client,
            metrics,
            health,
            observer,
            outputs,
            reports,
            last_document: Vec::new(),
            compute_read: false,
            instance_failures: 0,
            next_instance_read: Instant::now(),
            backoff_exponent: 0,
            systemd: Systemd::from_env(),
            told: None,
        }
    }

    /// Tells systemd the agent is ready, and starts pinging its watchdog while the loop keeps
    /// its promise to be back in time.
    pub(crate) fn tell_systemd_ready(&mut self) {
        self.systemd.ready();
        self.systemd.start_watchdog(Arc::clone(&self.health));
    }

    /// Runs until `stopped` says stop, then stops the outputs.
    pub(crate) async fn run(mut self, stopped: watch::Receiver<bool>) {
        let mut ticks = tokio::time::interval(self.config.poll_interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tracing::info!(
            timeout = ?self.config.imds_first_timeout,
            "waiting for the first scheduled-events document: Azure enables the service on the first request and can take up to 2 minutes to answer it"
        );
        self.tell_systemd(None);
        let stop = until_stopped(stopped);
        tokio::pin!(stop);
        loop {
            self.promise_liveness();
            tokio::select! {
                () = &mut stop => break,
                _ = ticks.tick() => {}
            }
            tokio::select! {
                () = &mut stop => break,
                backoff = self.step() => {
                    if let Some(delay) = backoff {
                        ticks.reset_after(delay);
                    }
                    self.tell_systemd(backoff);
                }
            }
        }
        self.systemd.stopping();
        let context = self.context(Utc::now());
        self.outputs.stop(&context).await;
    }

    /// This VM and the current document, at `at`.
    fn context(&self, at: chrono::DateTime<Utc>) -> Context {
        Context {
            vm_name: self.vm_name.clone(),
            incarnation: self.observer.monitor().tracker().incarnation().map(|i| i.0),
            at,
            span_ids: Arc::clone(self.observer.span_ids()),
        }
    }

    /// Hands one batch of occurrences to every output.
    pub(crate) fn dispatch(&mut self, at: chrono::DateTime<Utc>, occurrences: Vec<Occurrence>) {
        let context = self.context(at);
        self.outputs.consume(&context, &occurrences);
    }

    /// Tells systemd, when it listens, what the loop is doing or waiting for, when that changed.
    fn tell_systemd(&mut self, backoff: Option<Duration>) {
        if !self.systemd.is_listening() {
            return;
        }
        let monitor = self.observer.monitor();
        let status = match (monitor.is_up(), monitor.last_success()) {
            (true, _) => LoopStatus::Polling {
                events: monitor.tracker().events().len(),
            },
            (false, None) => LoopStatus::FirstDocument { backoff },
            (false, Some(last_document)) => LoopStatus::Unreachable {
                last_document,
                backoff,
            },
        };
        if self.told != Some(status) {
            self.systemd.status(&status.line(self.config.poll_interval));
            self.told = Some(status);
        }
    }

    /// Tells the health endpoint the longest the next wait plus step can take.
    fn promise_liveness(&self) {
        let config = &self.config;
        let poll_timeout = self.poll_timeout();
        let instance_timeout = if self.compute_read {
            Duration::ZERO
        } else {
            config.imds_timeout
        };
        let wait = config.poll_interval.max(config.imds_max_backoff);
        self.health
            .expect_back_within(wait + poll_timeout + instance_timeout + LIVENESS_GRACE);
    }

    /// The long first-request timeout until IMDS has given a document, the short one after.
    fn poll_timeout(&self) -> Duration {
        if self.observer.monitor().last_success().is_none() {
            self.config.imds_first_timeout
        } else {
            self.config.imds_timeout
        }
    }

    /// One poll; returns a longer delay before the next one when IMDS asked to back off.
    async fn step(&mut self) -> Option<Duration> {
        let mut occurrences = Vec::new();
        if !self.compute_read && Instant::now() >= self.next_instance_read {
            occurrences.extend(self.read_instance().await);
        }
        let result = self
            .client
            .scheduled_events(self.poll_timeout(), &mut self.last_document)
            .await;
        let now = Utc::now();
        // What hooks and approvals reported since the last poll, before this document is
        // decided on: an approval hook that succeeded is POSTed after this very document.
        while let Ok(report) = self.reports.try_recv() {
            occurrences.push(self.observer.report(report, now));
        }
        let backoff = self.backoff(result.as_ref().err());
        let vm_name = self.vm_name.clone();
        let vm = vm_name.as_deref();
        occurrences.extend(match result {
            Ok(document) => self.observer.poll(Ok(document), vm, now),
            Err(error) => {
                let failure = PollFailure {
                    kind: error.kind(),
                    error: &error,
                };
                self.observer.poll(Err(failure), vm, now)
            }
        });
        let notices = self.observer.notices(&occurrences, vm);
        occurrences.extend(notices);
        let up = self.observer.monitor().is_up();
        self.metrics.record_poll(now, up);
        self.dispatch(now, occurrences);
        if up {
            self.health.set_ready();
        }
        backoff
    }

    /// The delay before the next poll when IMDS asked to back off, resetting once it stops asking.
    fn backoff(&mut self, error: Option<&ImdsError>) -> Option<Duration> {
        let Some(error) = error.filter(|e| e.wants_backoff()) else {
            self.backoff_exponent = 0;
            return None;
        };
        self.backoff_exponent = (self.backoff_exponent + 1).min(16);
        // Capped at --imds.max-backoff so that a 30-second Spot notice is still seen.
        Some(backoff::delay(
            self.config.poll_interval,
            self.config.imds_max_backoff,
            self.backoff_exponent,
            error.retry_after(),
        ))
    }

    /// Reads instance metadata; learns this VM's name from it unless `--vm.name` gave one.
    async fn read_instance(&mut self) -> Option<Occurrence> {
        let result = self.client.instance(self.config.imds_timeout).await;
        match result {
            Ok(compute) => {
                if self.vm_name.is_none() && !compute.name.is_empty() {
                    self.vm_name = Some(Arc::from(compute.name.as_str()));
                }
                self.compute_read = true;
                Some(Occurrence::VmIdentified {
                    compute: Arc::new(compute),
                    failed_attempts: self.instance_failures,
                })
            }
            Err(error) => {
                self.instance_failures += 1;
                // Soon after a first failure (the VM may just be booting), then less often.
                self.next_instance_read = Instant::now()
                    + backoff::delay(
                        self.config.poll_interval,
                        INSTANCE_RETRY,
                        u32::try_from(self.instance_failures - 1).unwrap_or(u32::MAX),
                        None,
                    );
                (self.instance_failures == 1).then(|| Occurrence::VmUnidentified {
                    reason: error.kind(),
                    error: error.to_string(),
                    retry_every: INSTANCE_RETRY,
                })
            }
        }
    }
}

/// What the poll loop is doing or waiting for, as far as systemd's `STATUS=` line says it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum LoopStatus {
    Polling {
        events: usize,
    },
    FirstDocument {
        backoff: Option<Duration>,
    },
    Unreachable {
        last_document: chrono::DateTime<Utc>,
        backoff: Option<Duration>,
    },
}

impl LoopStatus {
    fn line(self, poll_interval: Duration) -> String {
        let next = |backoff: Option<Duration>| {
            backoff.map_or_else(String::new, |delay| {
                format!("; IMDS asked to slow down, next poll in {delay:?}")
            })
        };
        match self {
            LoopStatus::Polling { events } => {
                format!("polling every {poll_interval:?}: {events} events in the document")
            }
            LoopStatus::FirstDocument { backoff } => format!(
                "waiting for the first scheduled-events document (Azure can take 2 minutes to enable the service){}",
                next(backoff)
            ),
            LoopStatus::Unreachable {
                last_document,
                backoff,
            } => format!(
                "IMDS unreachable, last document at {}: events kept as they were{}",
                last_document.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                next(backoff)
            ),
        }
    }
}
