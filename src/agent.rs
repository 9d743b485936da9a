//! The imperative shell: the one poll loop, the HTTP server, and the wiring between them.
//!
//! The loop keeps a single IMDS GET in flight: it reads instance metadata until it has it, polls
//! the scheduled-events document, takes in what the outputs reported since the last poll, and
//! lets the pure [`Observer`] turn all that into [`Occurrence`]s, which every output consumes in
//! the order wired below ([`crate::output`]). Outputs never wait on the network inside the loop,
//! so a slow hook, approval POST or collector never delays the next poll. Nothing is logged for
//! a poll that changed nothing.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use chrono::Utc;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::Instrument;

use crate::backoff;
use crate::boot;
use crate::config::Config;
use crate::config::approval::Mode;
use crate::health::Health;
use crate::imds::{ImdsClient, ImdsError, Operation};
use crate::metrics::{Families, Metrics};
use crate::observer::Observer;
use crate::occurrence::{Context, Occurrence, Report};
use crate::output::approval::Approval;
use crate::output::hooks::Hooks;
#[cfg(feature = "kubernetes")]
use crate::output::kubernetes::Kubernetes;
use crate::output::log::Log;
use crate::output::metrics::MetricsOutput;
use crate::output::notify::Notify;
use crate::output::notify::metrics::NotifyMetrics;
use crate::output::spans::Spans;
use crate::output::state::StateFile;
use crate::output::{Outputs, Reports};
use crate::server::Endpoints;
use crate::state::{Opened, StateStore};
use crate::systemd::Systemd;
use crate::telemetry::{Telemetry, Traces, VmIdentity};

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
        approval: policy.mode != Mode::Off,
        hooks: policy.runs_hooks(),
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
    metrics.set_approval_mode(config.approval.mode);
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
    );
    if config.approval.mode != Mode::Off {
        let approval = &config.approval;
        tracing::info!(
            mode = approval.mode.as_str(),
            policy = ?approval.policy,
            hook = approval.hook.as_ref().map(|h| h.argv().join(" ")),
            hook_timeout = ?approval.hook_timeout,
            "approval enabled"
        );
    }
    let (store, restart) = open_state(&config);
    let observer = Observer::new(config.approval.clone(), store.state());
    let (reports_tx, reports) = mpsc::unbounded_channel();
    let outputs = outputs(&config, &metrics, traces, store, &client, reports_tx).await?;

    let mut poller = Poller {
        vm_name: config.vm_name.as_deref().map(Arc::from),
        config,
        client,
        metrics,
        health: Arc::clone(&health),
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
    };
    poller.dispatch(Utc::now(), vec![Occurrence::Restarted(restart)]);

    let (stop, stopped) = watch::channel(false);
    let endpoints = Arc::new(Endpoints {
        metrics: Arc::clone(&poller.metrics),
        health,
        telemetry_path: poller.config.telemetry_path.clone(),
    });
    let server = tokio::spawn(crate::web::serve(
        listener,
        endpoints,
        poller.config.web.clone(),
        until_stopped(stopped.clone()),
    ));
    poller.systemd.ready();
    poller.systemd.start_watchdog(Arc::clone(&poller.health));
    let poller = tokio::spawn(poller.run(stopped));
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
    async fn run(mut self, stopped: watch::Receiver<bool>) {
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
        }
    }

    /// Hands one batch of occurrences to every output.
    fn dispatch(&mut self, at: chrono::DateTime<Utc>, occurrences: Vec<Occurrence>) {
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
            .scheduled_events(self.poll_timeout(), &mut self.last_document)
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
            Err(error) => self.observer.poll(Err(&error), vm, now),
        });
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
                self.next_instance_read = Instant::now() + INSTANCE_RETRY;
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

/// The outputs, each behind its own setting, in the order they see each batch of occurrences.
/// The state file comes before the approval POSTs, so that an attempt is on disk before it leaves.
async fn outputs(
    config: &Config,
    metrics: &Arc<Metrics>,
    traces: Option<Traces>,
    store: StateStore,
    client: &ImdsClient,
    reports: Reports,
) -> anyhow::Result<Outputs> {
    let approval = &config.approval;
    // Shared with the notification output, which records what it is about to send.
    let store = Arc::new(Mutex::new(store));
    let mut outputs = Outputs::new()
        .with(Log::new(config.vm_name.clone(), approval.mode))
        .with(MetricsOutput::new(Arc::clone(metrics)));
    if let Some(traces) = traces {
        outputs = outputs.with(Spans::new(traces));
    }
    outputs = outputs.with(StateFile::new(Arc::clone(&store), Arc::clone(metrics)));
    if approval.runs_hooks() {
        outputs = outputs.with(Hooks::new(
            approval.hook.clone(),
            approval.prepare_hook.clone(),
            approval.recover_hook.clone(),
            approval.hook_timeout,
            reports.clone(),
        ));
    }
    if approval.mode == Mode::On {
        outputs = outputs.with(Approval::start(
            client.clone(),
            config.imds_timeout,
            Arc::clone(metrics),
            reports,
        ));
    }
    if config.notify.is_enabled() {
        let receivers: Vec<&str> = config
            .notify
            .receivers
            .iter()
            .map(|r| r.name.as_str())
            .collect();
        for receiver in &config.notify.receivers {
            tracing::info!(
                receiver = receiver.name.as_str(),
                format = receiver.format.as_str(),
                endpoint = %receiver.endpoint(),
                transitions = receiver.filter.transitions.join(","),
                template = receiver.template.as_ref().map(|t| t.path.display().to_string()),
                "notifications enabled"
            );
        }
        let notify_metrics = NotifyMetrics::register(metrics.registry(), &receivers)?;
        outputs = outputs.with(
            Notify::start(&config.notify, store, notify_metrics)
                .context("cannot set up a notification receiver")?,
        );
    }
    #[cfg(feature = "kubernetes")]
    if let Some(kubernetes) = config.kubernetes.clone() {
        outputs = outputs.with(Kubernetes::start(kubernetes, metrics).await?);
    }
    Ok(outputs)
}

/// Opens the state file, classifies this start (reboot or not) against it, and records the
/// current boot. Never fails: an unusable file leaves state in memory.
fn open_state(config: &Config) -> (StateStore, boot::Restart) {
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
        Opened::Loaded => Some(store.state()),
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
    let restart = boot::classify(previous, boot_id.as_deref());
    if restart == boot::Restart::Unknown {
        tracing::info!(
            vm_name = config.vm_name.as_deref(),
            boot_id_file = %config.boot_id_file.display(),
            "cannot tell whether the machine rebooted: boot id unknown now or in the state file"
        );
    }
    store.state_mut().boot_id = boot_id;
    // Running again: until this run stops cleanly, a reboot is not a clean one. Written with the
    // first batch (the restart's), before anything else can happen.
    store.state_mut().clean_stop = None;
    (store, restart)
}
