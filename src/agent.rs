//! The imperative shell: the one poll loop, the HTTP server, and the wiring between them.
//!
//! The loop keeps a single IMDS request in flight: it reads instance metadata until it has it,
//! polls the scheduled-events document, folds the outcome into the [`Monitor`], and turns each
//! resulting [`Change`] into exactly one log line and its counters. Nothing is logged for a poll
//! that changed nothing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::Instrument;

use crate::approval::{self, Approver, Decision};
use crate::boot;
use crate::config::Config;
use crate::event_span::{EventSpans, Remembered, Seen};
use crate::health::Health;
use crate::imds::{ImdsClient, ImdsError, Operation};
use crate::metrics::{Families, Metrics};
use crate::monitor::{Change, Monitor};
use crate::server::Endpoints;
use crate::state::{Opened, StateStore};
use crate::telemetry::{Telemetry, Traces, VmIdentity};
use crate::trace_id::{lifecycle_span_id, trace_id};
use crate::tracker::{IncarnationChange, Transition};
use crate::wire;

/// How often instance metadata is asked for again while it cannot be read.
const INSTANCE_RETRY: Duration = Duration::from_secs(30);

/// Slack in the loop's liveness promise for scheduling delays on a busy VM.
const LIVENESS_GRACE: Duration = Duration::from_secs(5);

/// A running agent.
#[derive(Debug)]
pub struct RunningAgent {
    address: SocketAddr,
    stop: watch::Sender<bool>,
    server: JoinHandle<std::io::Result<()>>,
    poller: JoinHandle<()>,
}

/// Binds the HTTP listener and starts the poll loop and the server, without traces.
pub async fn start(config: Config) -> anyhow::Result<RunningAgent> {
    start_with(config, Telemetry::disabled()).await
}

/// As [`start`], exporting traces as `telemetry` says.
pub async fn start_with(config: Config, telemetry: Telemetry) -> anyhow::Result<RunningAgent> {
    let policy = &config.approval;
    let families = Families {
        approval: policy.mode != approval::Mode::Off,
        hooks: policy.hook.is_some()
            || policy.prepare_hook.is_some()
            || policy.recover_hook.is_some(),
        traces: telemetry.config().is_some(),
        process: true,
    };
    let metrics = Arc::new(Metrics::new(
        &config.api_version,
        config.event_series,
        families,
    )?);
    let health = Arc::new(Health::new());
    let client = ImdsClient::new(&config.imds_url, &config.api_version)?;
    let listener = TcpListener::bind(config.listen_address)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen_address))?;
    let address = listener.local_addr()?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        revision = env!("BUILD_REVISION"),
        imds_url = %client.events_url(),
        poll_interval = ?config.poll_interval,
        imds_timeout = ?config.imds_timeout,
        imds_first_timeout = ?config.imds_first_timeout,
        imds_max_backoff = ?config.imds_max_backoff,
        listen_address = %address,
        telemetry_path = %config.telemetry_path,
        vm_name = config.vm_name.as_deref().unwrap_or("(from instance metadata)"),
        event_series = ?config.event_series,
        "starting"
    );
    if config.poll_interval < Duration::from_millis(200) {
        tracing::warn!(poll_interval = ?config.poll_interval, "polling faster than 5 requests per second: Azure IMDS answers 429 beyond that");
    }
    metrics.set_vm(config.vm_name.as_deref(), None);
    if let Some(otlp) = telemetry.config() {
        tracing::info!(
            endpoint = %otlp.endpoint,
            protocol = otlp.protocol.as_str(),
            timeout = ?otlp.timeout,
            "exporting traces over OTLP"
        );
    }
    let traces = telemetry.start(
        metrics.otlp_counters(),
        VmIdentity {
            vm_name: config.vm_name.as_deref(),
            compute: None,
        },
    )?;
    metrics.set_approval_mode(config.approval.mode);
    let store = open_state(&config, &metrics);
    let approver = Approver::new(config.approval.clone());
    if config.approval.mode != approval::Mode::Off {
        let approval = &config.approval;
        tracing::info!(
            mode = approval.mode.as_str(),
            policy = ?approval.policy,
            hook = approval.hook.as_ref().map(|h| h.argv().join(" ")),
            hook_timeout = ?approval.hook_timeout,
            "approval enabled"
        );
    }

    let (stop, stopped) = watch::channel(false);
    let endpoints = Arc::new(Endpoints {
        metrics: Arc::clone(&metrics),
        health: Arc::clone(&health),
        telemetry_path: config.telemetry_path.clone(),
    });
    let server = tokio::spawn(crate::web::serve(
        listener,
        endpoints,
        config.web.clone(),
        until_stopped(stopped.clone()),
    ));
    let poller = tokio::spawn(
        Poller {
            vm_name: config.vm_name.clone(),
            config,
            client,
            metrics,
            health,
            monitor: Monitor::new(),
            published: None,
            compute: None,
            instance_failures: 0,
            next_instance_read: Instant::now(),
            backoff_exponent: 0,
            traces,
            spans: EventSpans::new(),
            read_a_document: false,
            approver,
            store,
        }
        .run(stopped),
    );
    Ok(RunningAgent {
        address,
        stop,
        server,
        poller,
    })
}

impl RunningAgent {
    /// The address the HTTP server listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Runs until `shutdown` completes, then stops gracefully. Returns an error if the server or
    /// the loop ends on its own.
    pub async fn run_until(
        mut self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> anyhow::Result<()> {
        tokio::select! {
            () = shutdown => {}
            result = &mut self.server => anyhow::bail!("the HTTP server stopped: {result:?}"),
            result = &mut self.poller => anyhow::bail!("the poll loop stopped: {result:?}"),
        }
        self.stop().await
    }

    /// Stops the loop and lets in-flight scrapes finish.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        self.poller.await.context("the poll loop failed")?;
        self.server.await.context("the HTTP server failed")??;
        tracing::info!("stopped");
        Ok(())
    }
}

async fn until_stopped(mut stopped: watch::Receiver<bool>) {
    // An error means the sender is gone, which is a stop as well.
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// The poll loop's state.
struct Poller {
    config: Config,
    client: ImdsClient,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    monitor: Monitor,
    /// Incarnation whose events the metrics show.
    published: Option<u64>,
    /// This VM's name in `Resources`: `--vm.name`, else `compute.name`.
    vm_name: Option<String>,
    compute: Option<wire::Compute>,
    instance_failures: u64,
    next_instance_read: Instant,
    backoff_exponent: u32,
    /// OTLP export, when configured, and this VM's open event spans.
    traces: Option<Traces>,
    spans: EventSpans,
    /// Whether a valid document has been read since the agent started.
    read_a_document: bool,
    approver: Approver,
    store: StateStore,
}

impl Poller {
    async fn run(mut self, stopped: watch::Receiver<bool>) {
        let mut ticks = tokio::time::interval(self.config.poll_interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tracing::info!(
            timeout = ?self.config.imds_first_timeout,
            "waiting for the first scheduled-events document: Azure enables the service on the first request and can take up to 2 minutes to answer it"
        );
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
                backoff = self.step() => if let Some(delay) = backoff {
                    ticks.reset_after(delay);
                }
            }
        }
        self.flush_traces().await;
    }

    /// Hands each transition's spans to the export queue (nothing at all when traces are off).
    fn trace(&mut self, changes: &[Change], first_document: bool, now: DateTime<Utc>) {
        let Some(traces) = &self.traces else { return };
        let seen = seen(&self.vm_name, &self.monitor, now);
        let state = self.store.state();
        if first_document {
            let events = self.monitor.tracker().events();
            for known in state.gone_from(events) {
                let event = known.to_event(seen.vm_name);
                if let Some(span) = self.spans.ended_while_down(&event, known.into(), seen) {
                    traces.submit(span);
                }
            }
        }
        for change in changes {
            if let Change::Transition(transition) = change {
                let id = transition.event().id.as_str();
                let remembered = state.known(id).map(Remembered::from);
                for span in self.spans.record(transition, seen, remembered) {
                    traces.submit(span);
                }
            }
        }
    }

    /// One child span of the event's lifecycle span per approval decision or hook run.
    fn trace_decisions(&mut self, decisions: &[Decision], now: DateTime<Utc>) {
        let Some(traces) = &self.traces else { return };
        let seen = seen(&self.vm_name, &self.monitor, now);
        for decision in decisions {
            traces.submit(self.spans.decision(decision, seen));
        }
    }

    /// Ends the open event spans and exports what is queued, before the process exits.
    async fn flush_traces(&mut self) {
        let Some(traces) = self.traces.take() else {
            return;
        };
        let seen = seen(&self.vm_name, &self.monitor, Utc::now());
        for span in self.spans.close_all(seen) {
            traces.submit(span);
        }
        traces.shutdown().await;
    }

    /// Tells the health endpoint the longest the next wait plus step can take.
    fn promise_liveness(&self) {
        let config = &self.config;
        let poll_timeout = self.poll_timeout();
        let instance_timeout = if self.compute.is_none() {
            config.imds_timeout
        } else {
            Duration::ZERO
        };
        let wait = config.poll_interval.max(config.imds_max_backoff);
        self.health
            .expect_back_within(wait + poll_timeout + instance_timeout + LIVENESS_GRACE);
    }

    /// The long first-request timeout until IMDS has given a document, the short one after.
    fn poll_timeout(&self) -> Duration {
        if self.monitor.last_success().is_none() {
            self.config.imds_first_timeout
        } else {
            self.config.imds_timeout
        }
    }

    /// One poll; returns a longer delay before the next one when IMDS asked to back off.
    async fn step(&mut self) -> Option<Duration> {
        if self.compute.is_none() && Instant::now() >= self.next_instance_read {
            self.read_instance().await;
        }
        let started = Instant::now();
        // Exported only at debug level: one trace per poll is noise, but useful when IMDS is slow.
        let span = tracing::debug_span!(
            "GET /metadata/scheduledevents",
            otel.kind = "client",
            http.request.method = "GET",
            http.response.status_code = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let result = self
            .client
            .scheduled_events(self.poll_timeout())
            .instrument(span.clone())
            .await;
        if !span.is_disabled() {
            match &result {
                Ok(_) => span.record("http.response.status_code", 200),
                Err(error) => {
                    if let ImdsError::Status { status, .. } = error {
                        span.record("http.response.status_code", status.as_u16());
                    }
                    span.record("error.type", error.kind())
                }
            };
        }
        self.metrics
            .record_request(Operation::Events, started.elapsed(), result.as_ref().err());
        let now = Utc::now();
        let (changes, backoff) = match result {
            Ok(document) => (self.monitor.observe(Ok(document), now), self.backoff(None)),
            Err(error) => (
                self.monitor.observe(Err(&error), now),
                self.backoff(Some(&error)),
            ),
        };
        for change in &changes {
            self.report(change);
        }
        // The first document after a start: what the state file knew and the document no longer
        // holds ended while the agent was down.
        let first_document =
            self.monitor.is_up() && !std::mem::replace(&mut self.read_a_document, true);
        self.trace(&changes, first_document, now);
        self.approve(&changes, first_document, now).await;
        self.metrics.record_poll(now, self.monitor.is_up());
        if self.monitor.is_up() {
            self.health.set_ready();
            self.publish(changes.iter().any(|c| matches!(c, Change::Transition(_))));
        }
        backoff
    }

    /// Runs hooks for the changes and, after a valid document, the approval decisions; then
    /// writes the state file if anything in it changed.
    async fn approve(&mut self, changes: &[Change], first_document: bool, now: DateTime<Utc>) {
        let mut decisions = self.approver.finished_hooks();
        if self.monitor.is_up() {
            let vm = self.vm_name.as_deref();
            let tracker = self.monitor.tracker();
            let transitions = changes.iter().filter_map(|change| match change {
                Change::Transition(transition) => Some(transition),
                _ => None,
            });
            decisions.extend(self.approver.hooks_for_document(
                transitions,
                tracker.events(),
                vm,
                self.store.state(),
                first_document,
            ));
            self.store.state_mut().observe(
                tracker.incarnation().map(|i| i.0),
                tracker.events(),
                vm,
                now,
            );
            let imds = approval::Imds {
                client: &self.client,
                timeout: self.config.imds_timeout,
                metrics: &self.metrics,
            };
            let decided = self
                .approver
                .after_document(tracker.events(), vm, now, &imds, &mut self.store)
                .await;
            decisions.extend(decided);
        }
        for decision in &decisions {
            self.decided(decision);
        }
        self.trace_decisions(&decisions, now);
        self.store.flush();
        self.metrics.set_state_up(self.store.is_healthy());
    }

    /// One log line, and its counters, for one approval decision.
    fn decided(&self, decision: &Decision) {
        self.metrics.record_decision(decision);
        decision.log(self.vm_name.as_deref());
    }

    /// Hands the tracker's events to the metrics when the document changed them.
    fn publish(&mut self, events_changed: bool) {
        let tracker = self.monitor.tracker();
        let incarnation = tracker.incarnation().map(|i| i.0);
        if events_changed || incarnation != self.published {
            self.published = incarnation;
            let events = tracker.events().iter().map(|t| t.event.clone()).collect();
            self.metrics
                .set_events(incarnation.unwrap_or_default(), events);
        }
    }

    /// The delay before the next poll when IMDS asked to back off, resetting once it stops asking.
    fn backoff(&mut self, error: Option<&ImdsError>) -> Option<Duration> {
        let Some(error) = error.filter(|e| e.wants_backoff()) else {
            self.backoff_exponent = 0;
            return None;
        };
        self.backoff_exponent = (self.backoff_exponent + 1).min(16);
        Some(backoff_delay(
            self.config.poll_interval,
            self.config.imds_max_backoff,
            self.backoff_exponent,
            error.retry_after(),
        ))
    }

    async fn read_instance(&mut self) {
        let started = Instant::now();
        let result = self.client.instance(self.config.imds_timeout).await;
        self.metrics.record_request(
            Operation::Instance,
            started.elapsed(),
            result.as_ref().err(),
        );
        match result {
            Ok(compute) => {
                if self.vm_name.is_none() && !compute.name.is_empty() {
                    self.vm_name = Some(compute.name.clone());
                }
                if let Some(name) = self.vm_name.as_deref()
                    && !compute.name.is_empty()
                    && !name.eq_ignore_ascii_case(&compute.name)
                {
                    // Approval acts for the VM this name designates: a wrong name approves
                    // another VM's events.
                    tracing::warn!(
                        vm_name = name,
                        compute_name = %compute.name,
                        approval = self.config.approval.mode.as_str(),
                        "--vm.name differs from compute.name in instance metadata: events are matched, and approved, as --vm.name"
                    );
                }
                self.metrics.set_vm(self.vm_name.as_deref(), Some(&compute));
                if let Some(traces) = &self.traces {
                    traces.set_vm(VmIdentity {
                        vm_name: self.vm_name.as_deref(),
                        compute: Some(&compute),
                    });
                }
                tracing::info!(
                    vm_name = self.vm_name.as_deref(),
                    compute_name = %compute.name,
                    vm_id = %compute.vm_id,
                    location = %compute.location,
                    zone = %compute.zone,
                    vm_scale_set_name = %compute.vm_scale_set_name,
                    resource_group = %compute.resource_group_name,
                    vm_size = %compute.vm_size,
                    failed_attempts = self.instance_failures,
                    "read instance metadata"
                );
                if self.vm_name.is_none() {
                    tracing::warn!(
                        "instance metadata has no compute.name and --vm.name is not set: affects_this_vm is unknown"
                    );
                }
                self.compute = Some(compute);
            }
            Err(error) => {
                self.instance_failures += 1;
                self.next_instance_read = Instant::now() + INSTANCE_RETRY;
                if self.instance_failures == 1 {
                    tracing::warn!(
                        reason = error.kind(),
                        %error,
                        retry_every = ?INSTANCE_RETRY,
                        "cannot read instance metadata; vm_info is missing until it can"
                    );
                }
            }
        }
    }

    /// One log line, and its counters, for one change.
    fn report(&self, change: &Change) {
        let vm_name = self.vm_name.as_deref();
        let incarnation = self.monitor.tracker().incarnation().map(|i| i.0);
        match change {
            Change::Transition(transition) => {
                self.metrics.record_transition(transition);
                log_transition(transition, vm_name, incarnation);
            }
            Change::Incarnation(IncarnationChange::Jumped { from, to }) => tracing::info!(
                vm_name,
                from = from.0,
                to = to.0,
                "document incarnation jumped: some documents were never seen by this agent"
            ),
            Change::Incarnation(IncarnationChange::Restarted { from, to }) => tracing::warn!(
                vm_name,
                from = from.0,
                to = to.0,
                "document incarnation went down: the service was reset or re-enabled"
            ),
            Change::Incarnation(_) => {}
            Change::DuplicateEventId(id) => tracing::warn!(
                vm_name,
                event_id = %id,
                trace_id = %trace_id(id.as_str()),
                "an EventId appears twice in the document; the first is kept"
            ),
            Change::Unreachable { reason, error } => tracing::warn!(
                vm_name,
                reason,
                error = %error,
                "IMDS unreachable: the last known events are kept until it answers again"
            ),
            Change::Reachable {
                failed_polls,
                since,
            } => tracing::info!(
                vm_name,
                failed_polls,
                unreachable_seconds =
                    since.map(|s| (Utc::now() - s).num_milliseconds() as f64 / 1000.0),
                document_incarnation = incarnation,
                "IMDS reachable"
            ),
        }
    }
}

/// Opens the state file, classifies this start (reboot or not) against it, and records the
/// current boot. Never fails: an unusable file leaves state in memory.
fn open_state(config: &Config, metrics: &Metrics) -> StateStore {
    let (mut store, opened) = StateStore::open(config.state_file.as_deref());
    let state_file = config
        .state_file
        .as_ref()
        .map_or_else(|| "(in memory)".to_owned(), |p| p.display().to_string());
    let previous = match &opened {
        Opened::Fresh if config.state_file.is_none() => {
            tracing::info!(
                "state kept in memory (--state.file is empty): approvals are once per EventId until the agent restarts"
            );
            None
        }
        Opened::Fresh => {
            tracing::info!(%state_file, "no state file yet: starting fresh");
            None
        }
        Opened::Loaded => Some(store.state().clone()),
        Opened::Replaced { error, aside } => {
            tracing::warn!(
                %state_file,
                %error,
                set_aside = aside.as_ref().map(|p| p.display().to_string()),
                "state file not usable: starting fresh"
            );
            None
        }
    };
    let boot_id = boot::read_boot_id(&config.boot_id_file);
    let restart = boot::classify(previous.as_ref(), boot_id.as_deref());
    let vm_name = config.vm_name.as_deref();
    match &restart {
        boot::Restart::FirstStart => {}
        boot::Restart::Unknown => tracing::info!(
            vm_name,
            boot_id_file = %config.boot_id_file.display(),
            "cannot tell whether the machine rebooted: boot id unknown now or in the state file"
        ),
        boot::Restart::SameBoot => {
            tracing::info!(vm_name, "agent restarted; the machine did not reboot")
        }
        boot::Restart::Reboot {
            expected_by: Some(impact),
        } => tracing::info!(
            vm_name,
            expected = true,
            event_id = %impact.event_id,
            trace_id = %crate::trace_id::trace_id(&impact.event_id),
            event_type = %impact.event_type,
            started_seen = %impact.started_seen.to_rfc3339(),
            "the machine rebooted, as expected after an event of this VM that started"
        ),
        boot::Restart::Reboot { expected_by: None } => tracing::warn!(
            vm_name,
            expected = false,
            "the machine rebooted unexpectedly: no event of this VM was seen Started before"
        ),
    }
    if let Some(expected) = restart.expected_label() {
        metrics.record_reboot(expected);
    }
    store.state_mut().boot_id = boot_id;
    store.flush();
    metrics.set_state_up(store.is_healthy());
    store
}

/// This VM and the current document, for the spans of what the poll at `at` saw. A function of
/// the fields it reads, not of the poller, so the span builder can be borrowed beside it.
fn seen<'a>(vm_name: &'a Option<String>, monitor: &Monitor, at: DateTime<Utc>) -> Seen<'a> {
    Seen {
        vm_name: vm_name.as_deref(),
        incarnation: monitor.tracker().incarnation().map(|i| i.0),
        at,
    }
}

/// Exponential backoff from the poll interval (doubling `exponent` times), at least IMDS's
/// `Retry-After`, capped at `max` so that a 30-second Spot notice is still seen, and never
/// shorter than the poll interval.
fn backoff_delay(
    interval: Duration,
    max: Duration,
    exponent: u32,
    retry_after: Option<Duration>,
) -> Duration {
    let exponential = interval.saturating_mul(1u32.checked_shl(exponent).unwrap_or(u32::MAX));
    exponential
        .max(retry_after.unwrap_or_default())
        .min(max)
        .max(interval)
}

fn log_transition(transition: &Transition, vm_name: Option<&str>, incarnation: Option<u64>) {
    let event = transition.event();
    let changed = match transition {
        Transition::Updated { changed, .. } => Some(
            changed
                .iter()
                .map(|f| f.as_str())
                .collect::<Vec<_>>()
                .join(","),
        ),
        _ => None,
    };
    let seen_started = match transition {
        Transition::Completed { seen_started, .. } => Some(*seen_started),
        _ => None,
    };
    tracing::info!(
        vm_name,
        transition = transition.kind(),
        event_id = %event.id,
        trace_id = %trace_id(event.id.as_str()),
        span_id = vm_name.map(|vm| format!("{:016x}", lifecycle_span_id(event.id.as_str(), vm))),
        event_type = %event.event_type,
        event_status = %event.status,
        event_source = event.source.as_ref().map(|s| s.as_str()),
        resource_type = %event.resource_type,
        resources = %event.resources,
        not_before = %event.not_before.raw(),
        duration_in_seconds = event.duration.map(|d| d.0),
        description = event.description.as_deref(),
        affects_this_vm = event.affects(vm_name).as_str(),
        document_incarnation = incarnation,
        changed,
        seen_started,
        "event {}",
        transition.kind()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn backoff_doubles_from_the_poll_interval_up_to_the_cap() {
        let delays: Vec<u64> = (1..=6)
            .map(|n| backoff_delay(SECOND, 10 * SECOND, n, None).as_secs())
            .collect();
        assert_eq!(delays, [2, 4, 8, 10, 10, 10]);
        assert_eq!(
            backoff_delay(SECOND, 10 * SECOND, 40, None),
            10 * SECOND,
            "no overflow"
        );
    }

    #[test]
    fn backoff_honours_retry_after_within_the_cap() {
        assert_eq!(
            backoff_delay(SECOND, 10 * SECOND, 1, Some(5 * SECOND)),
            5 * SECOND
        );
        assert_eq!(
            backoff_delay(SECOND, 10 * SECOND, 1, Some(70 * SECOND)),
            10 * SECOND
        );
    }

    #[test]
    fn backoff_is_never_shorter_than_the_poll_interval() {
        assert_eq!(backoff_delay(5 * SECOND, 2 * SECOND, 1, None), 5 * SECOND);
    }
}
