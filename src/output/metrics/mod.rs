//! The metrics output's families: names, HELP, labels and buckets of the IMDS, event, approval,
//! reboot and build series, counted from the stream of occurrences ([`output`]) and by
//! the IMDS client. Outputs that do work of their own count it in families they define and
//! register in their own rooms: OTLP export (`telemetry/export.rs`), the state file
//! (`output/state/up.rs`), notifications
//! (`output/notify/metrics.rs`), Kubernetes (`output/kubernetes/`).
//!
//! Counters and health gauges are updated by the poll loop. Everything derived from the current
//! document (`pending` and the per-event series) is computed at scrape time from the last
//! document's events, so `..._event_seconds_until_not_before` is exact when Prometheus reads it
//! and a per-event series disappears the moment its event leaves the document.

mod output;
pub use output::MetricsOutput;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use azure_scheduled_events_core::approval::Mode;
use azure_scheduled_events_core::approval::{Decision, HookFailure, HookKind, Outcome};
use azure_scheduled_events_core::event::{Affects, Event, EventStatus, EventType};
use azure_scheduled_events_core::hardware_failure;
use azure_scheduled_events_core::tracker::Transition;
use chrono::{DateTime, Utc};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, Gauge, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

use crate::azure::imds::{ImdsError, Operation, RecordRequest};
use crate::azure::wire;
pub use crate::config::EventSeries;

/// The prefix of every metric name.
pub const NAMESPACE: &str = "azure_scheduled_events";

/// Buckets of `..._imds_request_duration_seconds`. IMDS is link-local and answers within a few
/// milliseconds, so 5 ms and 25 ms split healthy from sluggish; 100 ms and 500 ms show a busy
/// host; 2.5 s is just past the default `--imds.timeout`, so what `+Inf` holds beyond it is the
/// first request after Scheduled Events is enabled, which can take two minutes. Five buckets
/// (eight series per operation) where a default latency histogram would cost fourteen: every VM
/// of a fleet pays for each one.
const DURATION_BUCKETS: &[f64] = &[0.005, 0.025, 0.1, 0.5, 2.5];

/// Buckets of `..._event_notice_seconds`. Each notice Azure gives sits in the middle of a bucket
/// of its own: under 15 s (what evictions have been seen to give), 30 s (Spot's, and maintenance's
/// "in rare cases") in (15, 45], 2 minutes in (45, 180], 5 minutes in (180, 420], 10 minutes in
/// (420, 720], 15 minutes (Reboot, Redeploy and Freeze) in (720, 1080], more (a predicted hardware
/// failure, days ahead) in `+Inf`. The margins absorb what the agent adds or takes away: up to a
/// poll interval before the event is seen, NotBefore's whole seconds, and a VM clock some seconds
/// off Azure's. `0` holds the events seen with no notice left: at or after their NotBefore, or
/// already Started.
pub const NOTICE_BUCKETS: &[f64] = &[0.0, 15.0, 45.0, 180.0, 420.0, 720.0, 1080.0];

/// Which optional families of metrics exist. A fleet pays for every series on every VM, so the
/// families of a feature that is off are not exported at all; what is on is pre-created at zero
/// where the alerts need it (an `increase()` cannot see a counter's first step when the series
/// is born at 1). A feature added later (notifications, Kubernetes) gets its own field here and
/// registers its families only when it is enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Families {
    /// `--approve` or `--approve.dry-run`: approvals, approval failures and decisions, and the
    /// `approve` operation of the IMDS request families.
    pub approval: bool,
    /// Any hook configured (approve, prepare or recover): `..._hook_runs_total`.
    pub hooks: bool,
    /// The exporter's metrics about itself: the standard `process_*` metrics (CPU, memory, file
    /// descriptors, start time) from `/proc/self`, on Linux. Off with
    /// `--web.disable-exporter-metrics`, and where values must not vary, as in the golden files.
    pub process: bool,
}

impl Families {
    /// What the agent exports with approval, hooks and traces off.
    pub const DEFAULT: Families = Families {
        approval: false,
        hooks: false,
        process: true,
    };

    /// Every optional family.
    pub const ALL: Families = Families {
        approval: true,
        hooks: true,
        process: true,
    };
}

impl Default for Families {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The metrics registry and handles to every metric in it.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    up: IntGauge,
    last_success: Gauge,
    last_poll: Gauge,
    incarnation: IntGauge,
    requests: IntCounterVec,
    failures: IntCounterVec,
    durations: HistogramVec,
    transitions: IntCounterVec,
    vm_info: IntGaugeVec,
    notice: HistogramVec,
    events: Arc<EventsCollector>,
    approval: ApprovalMetrics,
}

/// The approval, hook and reboot metrics.
#[derive(Debug)]
struct ApprovalMetrics {
    approvals: IntCounterVec,
    failures: IntCounterVec,
    decisions: IntCounterVec,
    hook_runs: IntCounterVec,
    mode: IntGaugeVec,
    reboots: IntCounterVec,
}

impl ApprovalMetrics {
    /// Creates every approval metric; registers those of the enabled families. The others stay
    /// unregistered, so recording into them costs nothing and is never exported.
    fn new(registry: &Registry, families: Families) -> Result<Self, prometheus::Error> {
        let approvals = IntCounterVec::new(
            opts(
                "approvals_total",
                "Events this agent approved (POST StartRequests answered 200), by event type.",
            ),
            &["event_type"],
        )?;
        let failures = IntCounterVec::new(
            opts(
                "approval_failures_total",
                "Approvals that failed, by event type and reason: the approval hook failed, timed out or could not run, or the POST failed (IMDS failure reasons).",
            ),
            &["event_type", "reason"],
        )?;
        let decisions = IntCounterVec::new(
            opts(
                "approval_decisions_total",
                "Approval decisions, each also one log line: approved, dry_run, waiting, skipped, hook_failed, post_failed, with the rule or reason.",
            ),
            &["decision", "reason"],
        )?;
        let hook_runs = IntCounterVec::new(
            opts(
                "hook_runs_total",
                "Hook commands that finished, by hook (approve, prepare, recover) and result.",
            ),
            &["hook", "result"],
        )?;
        let mode = IntGaugeVec::new(
            opts(
                "approval_mode",
                "Always 1, for the approval mode set by --approve and --approve.dry-run: off, dry_run or on (one series, the mode in force).",
            ),
            &["mode"],
        )?;
        let reboots = IntCounterVec::new(
            opts(
                "reboots_total",
                "Reboots of the machine found at start by comparing its boot id with the state file: expected after an event of this VM seen Started, else unexpected; clean when the agent had stopped cleanly (SIGTERM) before it.",
            ),
            &["expected", "clean"],
        )?;
        if families.approval {
            // AzureScheduledEventApprovalsFailing takes increase() of both counters per type.
            // Advisories are never approved.
            for event_type in EventType::impacts() {
                approvals.with_label_values(&[event_type.as_str()]);
                for reason in Outcome::failure_reasons(&ImdsError::KINDS) {
                    failures.with_label_values(&[event_type.as_str(), reason]);
                }
            }
            for (decision, reason) in Outcome::decision_labels(&ImdsError::KINDS) {
                decisions.with_label_values(&[decision, reason]);
            }
            registry.register(Box::new(approvals.clone()))?;
            registry.register(Box::new(failures.clone()))?;
            registry.register(Box::new(decisions.clone()))?;
        }
        if families.hooks {
            for hook in HookKind::ALL {
                for result in std::iter::once("ok").chain(HookFailure::KINDS) {
                    hook_runs.with_label_values(&[hook.as_str(), result]);
                }
            }
            registry.register(Box::new(hook_runs.clone()))?;
        }
        // AzureVMRebootedUnexpectedly takes increase() of the unexpected, unclean reboots, and a
        // panel may count the clean ones: the two unexpected series exist from the start (as many
        // series as before the clean label). An expected reboot's series appears with it.
        for clean in ["true", "false"] {
            reboots.with_label_values(&["false", clean]);
        }
        registry.register(Box::new(mode.clone()))?;
        registry.register(Box::new(reboots.clone()))?;
        Ok(Self {
            approvals,
            failures,
            decisions,
            hook_runs,
            mode,
            reboots,
        })
    }
}

/// The IMDS client records each request it sends here.
impl RecordRequest for Metrics {
    fn record_request(&self, operation: Operation, elapsed: Duration, error: Option<&ImdsError>) {
        Metrics::record_request(self, operation, elapsed, error);
    }
}

impl Metrics {
    /// Registers the metrics of the enabled `families`. `api_version` goes into
    /// `..._build_info`.
    pub fn new(
        api_version: &str,
        series: EventSeries,
        families: Families,
    ) -> Result<Self, prometheus::Error> {
        Self::with_clock(api_version, series, families, Utc::now)
    }

    /// As [`Metrics::new`], reading scrape time from `clock` (tests pin it).
    pub fn with_clock(
        api_version: &str,
        series: EventSeries,
        families: Families,
        clock: fn() -> DateTime<Utc>,
    ) -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let up = IntGauge::with_opts(opts(
            "up",
            "1 if the last poll of the scheduled-events endpoint returned a valid document, else 0.",
        ))?;
        let last_success = Gauge::with_opts(opts(
            "last_success_timestamp_seconds",
            "Unix time of the last valid scheduled-events document.",
        ))?;
        let last_poll = Gauge::with_opts(opts(
            "last_poll_timestamp_seconds",
            "Unix time at which the last poll of the scheduled-events endpoint ended, successful or not.",
        ))?;
        let incarnation = IntGauge::with_opts(opts(
            "document_incarnation",
            "DocumentIncarnation of the last valid document (0 before the first).",
        ))?;
        let requests = IntCounterVec::new(
            opts(
                "imds_requests_total",
                "Requests sent to IMDS, by operation.",
            ),
            &["operation"],
        )?;
        let failures = IntCounterVec::new(
            opts(
                "imds_request_failures_total",
                "IMDS requests that gave no usable answer, by operation and reason.",
            ),
            &["operation", "reason"],
        )?;
        let durations = HistogramVec::new(
            HistogramOpts::new(
                "imds_request_duration_seconds",
                "Time from sending an IMDS request to reading its whole answer, by operation.",
            )
            .namespace(NAMESPACE)
            .buckets(DURATION_BUCKETS.to_vec()),
            &["operation"],
        )?;
        let transitions = IntCounterVec::new(
            opts(
                "transitions_total",
                "Event lifecycle transitions seen in the scheduled-events document, by event type.",
            ),
            &["event_type", "transition"],
        )?;
        let build_info = IntGaugeVec::new(
            opts(
                "build_info",
                "Always 1: the agent's version, source revision and scheduled-events api-version.",
            ),
            &["version", "revision", "api_version"],
        )?;
        let vm_info = IntGaugeVec::new(
            opts(
                "vm_info",
                "Always 1: this VM as described by instance metadata (compute section).",
            ),
            &[
                "vm_name",
                "vm_id",
                "location",
                "zone",
                "vm_scale_set_name",
                "resource_group",
                "platform_fault_domain",
                "platform_update_domain",
                "vm_size",
                "priority",
            ],
        )?;
        let notice = HistogramVec::new(
            HistogramOpts::new(
                "event_notice_seconds",
                "Notice each event of this VM gave: NotBefore minus the time this agent first saw it, 0 when seen at or after NotBefore or already Started; by event type and this VM's priority.",
            )
            .namespace(NAMESPACE)
            .buckets(NOTICE_BUCKETS.to_vec()),
            &["event_type", "priority"],
        )?;
        let events = Arc::new(EventsCollector::new(series, clock)?);

        for op in Operation::ALL {
            if op == Operation::Approve && !families.approval {
                continue;
            }
            requests.with_label_values(&[op.as_str()]);
            if op.timed() {
                durations.with_label_values(&[op.as_str()]);
            }
        }
        // Failures come in runs (one a poll while IMDS is unreachable), so an increase() sees
        // them from the second on: their series appear with the first failure of each reason.
        // A fleet's rarest step, an event's, is counted from zero.
        for event_type in EventType::impacts() {
            for transition in Transition::LIFECYCLE {
                transitions.with_label_values(&[event_type.as_str(), transition]);
            }
        }
        build_info
            .with_label_values(&[
                env!("CARGO_PKG_VERSION"),
                env!("BUILD_REVISION"),
                api_version,
            ])
            .set(1);

        registry.register(Box::new(up.clone()))?;
        registry.register(Box::new(last_success.clone()))?;
        registry.register(Box::new(last_poll.clone()))?;
        registry.register(Box::new(incarnation.clone()))?;
        registry.register(Box::new(requests.clone()))?;
        registry.register(Box::new(failures.clone()))?;
        registry.register(Box::new(durations.clone()))?;
        registry.register(Box::new(transitions.clone()))?;
        registry.register(Box::new(build_info))?;
        registry.register(Box::new(vm_info.clone()))?;
        // No series until this VM's first event: the idle exposition pays nothing for it.
        registry.register(Box::new(notice.clone()))?;
        registry.register(Box::new(SharedCollector(Arc::clone(&events))))?;
        let approval = ApprovalMetrics::new(&registry, families)?;
        if families.process {
            register_process_metrics(&registry)?;
        }

        Ok(Self {
            registry,
            up,
            last_success,
            last_poll,
            incarnation,
            requests,
            failures,
            durations,
            transitions,
            vm_info,
            notice,
            events,
            approval,
        })
    }

    /// Counts one approval decision or hook run.
    pub fn record_decision(&self, decision: &Decision) {
        let m = &self.approval;
        let event_type = decision.event.event_type.as_str();
        if let Some((name, reason)) = decision.outcome.decision() {
            m.decisions.with_label_values(&[name, reason]).inc();
        }
        if let Some(reason) = decision.outcome.failure() {
            m.failures.with_label_values(&[event_type, reason]).inc();
        }
        match &decision.outcome {
            Outcome::Approved { .. } => m.approvals.with_label_values(&[event_type]).inc(),
            Outcome::HookFinished(run) => {
                let result = run.result.as_ref().err().map_or("ok", HookFailure::kind);
                m.hook_runs
                    .with_label_values(&[run.kind.as_str(), result])
                    .inc();
            }
            Outcome::DryRun { .. }
            | Outcome::Waiting { .. }
            | Outcome::Skipped(_)
            | Outcome::HookStarted(_)
            | Outcome::PostFailed { .. } => {}
        }
    }

    /// Sets `..._approval_mode`: one series, the mode in force.
    pub fn set_approval_mode(&self, mode: Mode) {
        self.approval.mode.reset();
        self.approval
            .mode
            .with_label_values(&[mode.as_str()])
            .set(1);
    }

    /// Counts a reboot found at start; `expected` and `clean` are `"true"` or `"false"`.
    pub fn record_reboot(&self, expected: &str, clean: &str) {
        self.approval
            .reboots
            .with_label_values(&[expected, clean])
            .inc();
    }

    /// Counts one IMDS request and, when it failed, why.
    pub fn record_request(
        &self,
        operation: Operation,
        elapsed: Duration,
        error: Option<&ImdsError>,
    ) {
        let op = operation.as_str();
        self.requests.with_label_values(&[op]).inc();
        if operation.timed() {
            self.durations
                .with_label_values(&[op])
                .observe(elapsed.as_secs_f64());
        }
        if let Some(error) = error {
            self.failures.with_label_values(&[op, error.kind()]).inc();
        }
    }

    /// Records the outcome of a scheduled-events poll that ended at `at`.
    pub fn record_poll(&self, at: DateTime<Utc>, success: bool) {
        let seconds = at.timestamp_millis() as f64 / 1000.0;
        self.up.set(i64::from(success));
        self.last_poll.set(seconds);
        if success {
            self.last_success.set(seconds);
        }
    }

    pub fn record_transition(&self, transition: &Transition) {
        // Counted by the earlier run: a restart does not count it twice in `increase()`.
        if transition.already_announced() {
            return;
        }
        // Azure may invent types: one `other` series for all of them, or the counter would keep
        // a series per type ever seen.
        self.transitions
            .with_label_values(&[
                event_type_label(&transition.event().event_type),
                transition.kind().as_str(),
            ])
            .inc();
    }

    /// Observes the notice `event` gave, first seen at `first_seen` on a VM of `priority`
    /// (instance metadata's `compute.priority`), if it is one the histogram counts ([`notice`]).
    /// The caller observes each event once, at its first sight by any run of the agent.
    pub fn record_notice(&self, event: &Event, first_seen: DateTime<Utc>, priority: &str) {
        let Some(seconds) = notice(event, first_seen) else {
            return;
        };
        self.notice
            .with_label_values(&[
                event_type_label(&event.event_type),
                self::priority(priority),
            ])
            .observe(seconds);
    }

    /// Replaces the events the per-event series describe: each with whether it affects this VM
    /// (as the batch's event view says) and when it was first seen, when known (with no first
    /// sight, only a Description marks a predicted hardware failure).
    pub fn set_events(
        &self,
        incarnation: u64,
        events: impl IntoIterator<Item = (Event, Affects, Option<DateTime<Utc>>)>,
    ) {
        self.incarnation
            .set(i64::try_from(incarnation).unwrap_or(i64::MAX));
        self.events.view().events = events.into_iter().collect();
    }

    /// Sets `..._vm_info` from instance metadata, and this VM's name, scale set and priority on
    /// the per-event `..._event_info`; `vm_name` is this VM's name in `Resources`.
    pub fn set_vm(&self, vm_name: Option<&str>, c: &wire::Compute) {
        let vm = VmLabels {
            vm_name: vm_name.unwrap_or(&c.name).to_owned(),
            vm_scale_set_name: c.vm_scale_set_name.clone(),
            priority: priority(&c.priority).to_owned(),
        };
        self.vm_info.reset();
        self.vm_info
            .with_label_values(&[
                &vm.vm_name,
                &c.vm_id,
                &c.location,
                &c.zone,
                &vm.vm_scale_set_name,
                &c.resource_group_name,
                &c.platform_fault_domain,
                &c.platform_update_domain,
                &c.vm_size,
                &vm.priority,
            ])
            .set(1);
        self.events.view().vm = vm;
    }

    /// The registry, for outputs that register families of their own only when enabled.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The text exposition format, as served on the telemetry path.
    pub fn encode(&self) -> Result<String, prometheus::Error> {
        let mut buffer = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut buffer)?;
        String::from_utf8(buffer).map_err(|e| prometheus::Error::Msg(e.to_string()))
    }

    /// Name and HELP of every registered metric family, sorted by name.
    pub fn families(&self) -> Vec<(String, String)> {
        let mut descs: Vec<(String, String)> = self
            .registry
            .gather()
            .iter()
            .map(|f| (f.name().to_owned(), f.help().to_owned()))
            .collect();
        // Families with no series yet (vm_info before instance metadata, the per-event ones
        // with no events) are not gathered; their descriptors still name them.
        let descs_of_empty = self.vm_info.desc().into_iter().chain(self.notice.desc());
        for desc in descs_of_empty.chain(self.events.descs()) {
            if !descs.iter().any(|(name, _)| *name == desc.fq_name) {
                descs.push((desc.fq_name.clone(), desc.help.clone()));
            }
        }
        descs.sort();
        descs
    }
}

/// The standard `process_*` metrics (as every Go exporter has them): CPU seconds, resident and
/// virtual memory, open and maximum file descriptors, threads and start time, read from
/// `/proc/self` at each scrape. Linux only, like the agent.
#[cfg(target_os = "linux")]
fn register_process_metrics(registry: &Registry) -> Result<(), prometheus::Error> {
    registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))
}

#[cfg(not(target_os = "linux"))]
fn register_process_metrics(_registry: &Registry) -> Result<(), prometheus::Error> {
    Ok(())
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace(NAMESPACE)
}

/// What the per-event series are computed from.
#[derive(Debug, Default)]
struct EventsView {
    /// Each event with whether it names this VM (the batch's event view, not worked out again
    /// at every scrape) and the time this agent first saw it, when known.
    events: Vec<(Event, Affects, Option<DateTime<Utc>>)>,
    /// This VM, as `..._event_info` names it; empty until instance metadata has been read.
    vm: VmLabels,
}

/// This VM's name, scale set and priority, which `..._event_info` carries so that fleet rules
/// tell VMs apart by their event series alone, with no join with every VM's `vm_info`.
#[derive(Debug, Default)]
struct VmLabels {
    vm_name: String,
    vm_scale_set_name: String,
    priority: String,
}

/// Builds `pending` and the per-event series from the current events at each scrape.
#[derive(Debug)]
struct EventsCollector {
    series: EventSeries,
    clock: fn() -> DateTime<Utc>,
    view: Mutex<EventsView>,
    pending: IntGaugeVec,
    advisories: IntGaugeVec,
    info: IntGaugeVec,
    not_before: GaugeVec,
    until_not_before: GaugeVec,
    duration: GaugeVec,
    resources: IntGaugeVec,
}

impl EventsCollector {
    fn new(series: EventSeries, clock: fn() -> DateTime<Utc>) -> Result<Self, prometheus::Error> {
        Ok(Self {
            series,
            clock,
            view: Mutex::default(),
            pending: IntGaugeVec::new(
                opts(
                    "pending",
                    "Events in the current scheduled-events document that announce an impact (EventStatus Scheduled or Started), by EventType, EventStatus and whether Resources names this VM.",
                ),
                &["event_type", "event_status", "affects_this_vm"],
            )?,
            advisories: IntGaugeVec::new(
                opts(
                    "advisories",
                    "Events in the current scheduled-events document that announce no impact (a Spot rebalance recommendation, EventStatus Advisory, or an EventStatus this agent does not know), by EventType, EventStatus and whether Resources names this VM; never counted in pending.",
                ),
                &["event_type", "event_status", "affects_this_vm"],
            )?,
            info: IntGaugeVec::new(
                opts(
                    "event_info",
                    "Always 1 while the event is in the scheduled-events document; its fields as labels, the cause its Description gives, whether Azure predicts a hardware failure (a Reboot or Redeploy announced more than a day ahead), and this VM's name, scale set and priority as in vm_info (empty until instance metadata is read).",
                ),
                &[
                    "event_id",
                    "event_type",
                    "event_status",
                    "event_source",
                    "resource_type",
                    "affects_this_vm",
                    "cause",
                    "hardware_failure_predicted",
                    "vm_name",
                    "vm_scale_set_name",
                    "priority",
                ],
            )?,
            not_before: GaugeVec::new(
                opts(
                    "event_not_before_timestamp_seconds",
                    "NotBefore of the event as a Unix time; absent when NotBefore is empty or not a date.",
                ),
                &["event_id"],
            )?,
            until_not_before: GaugeVec::new(
                opts(
                    "event_seconds_until_not_before",
                    "NotBefore minus the time of the scrape; negative when overdue, absent when NotBefore is unknown.",
                ),
                &["event_id"],
            )?,
            duration: GaugeVec::new(
                opts(
                    "event_duration_seconds",
                    "DurationInSeconds of the event as given: 0 no interruption, -1 unknown; absent before api-version 2020-07-01.",
                ),
                &["event_id"],
            )?,
            resources: IntGaugeVec::new(
                opts(
                    "event_resources",
                    "Number of VMs named in the event's Resources.",
                ),
                &["event_id"],
            )?,
        })
    }

    fn view(&self) -> std::sync::MutexGuard<'_, EventsView> {
        // The view is replaced whole, so a writer that panicked cannot leave it half-written.
        self.view.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn vecs(&self) -> [&dyn Collector; 7] {
        [
            &self.pending,
            &self.advisories,
            &self.info,
            &self.not_before,
            &self.until_not_before,
            &self.duration,
            &self.resources,
        ]
    }

    fn descs(&self) -> Vec<&Desc> {
        self.vecs().into_iter().flat_map(|c| c.desc()).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        // Holding the view for the whole refill keeps concurrent scrapes from seeing each
        // other's half-filled vectors.
        let view = self.view();
        let now = (self.clock)();
        for vec in [&self.pending, &self.advisories, &self.info, &self.resources] {
            vec.reset();
        }
        for vec in [&self.not_before, &self.until_not_before, &self.duration] {
            vec.reset();
        }
        // This VM's pending counts exist at 0; other VMs' counts, and advisories (a Spot VM's
        // rare recommendation), exist while one of their events is present.
        for event_type in EventType::impacts() {
            for status in &EventStatus::IMPACTS {
                self.pending.with_label_values(&[
                    event_type.as_str(),
                    status.as_str(),
                    Affects::Yes.as_str(),
                ]);
            }
        }
        for (event, affects, first_seen) in &view.events {
            let affects = *affects;
            let count = if event.is_advisory() {
                &self.advisories
            } else {
                &self.pending
            };
            count
                .with_label_values(&[
                    event.event_type.as_str(),
                    event.status.as_str(),
                    affects.as_str(),
                ])
                .inc();
            if self.series == EventSeries::ThisVm && affects == Affects::No {
                continue;
            }
            let id = [event.id.as_str()];
            self.info
                .with_label_values(&[
                    event.id.as_str(),
                    event.event_type.as_str(),
                    event.status.as_str(),
                    event.source.as_ref().map_or("", |s| s.as_str()),
                    &event.resource_type,
                    affects.as_str(),
                    event.cause().as_str(),
                    hardware_failure::label(hardware_failure::predicted(event, *first_seen)),
                    &view.vm.vm_name,
                    &view.vm.vm_scale_set_name,
                    &view.vm.priority,
                ])
                .set(1);
            if let Some(at) = event.not_before.at() {
                self.not_before
                    .with_label_values(&id)
                    .set(at.timestamp() as f64);
            }
            if let Some(seconds) = event.not_before.seconds_from(now) {
                self.until_not_before.with_label_values(&id).set(seconds);
            }
            if let Some(duration) = event.duration {
                self.duration.with_label_values(&id).set(duration.0 as f64);
            }
            self.resources
                .with_label_values(&id)
                .set(i64::try_from(event.resources.len()).unwrap_or(i64::MAX));
        }
        self.vecs().into_iter().flat_map(|c| c.collect()).collect()
    }
}

/// Lets the registry own a handle to the collector that [`Metrics`] also updates.
#[derive(Debug)]
struct SharedCollector(Arc<EventsCollector>);

impl Collector for SharedCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.0.descs()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.0.collect()
    }
}

/// The `event_type` label of the counters and the histogram: Azure may invent types, so one
/// `other` series stands for all of them, or a series per type ever seen would stay.
fn event_type_label(event_type: &EventType) -> &str {
    match event_type {
        EventType::Other(_) => "other",
        known => known.as_str(),
    }
}

/// The notice `event` gave when first seen at `first_seen`, in seconds, for
/// `..._event_notice_seconds`: NotBefore minus first sight, 0 when that is not positive or the
/// event was already Started (it gave none). `None` for what the histogram does not count: an
/// advisory (it announces no impact), and an event Scheduled with no NotBefore the agent can read
/// (how much notice it gives is not known).
pub fn notice(event: &Event, first_seen: DateTime<Utc>) -> Option<f64> {
    if event.is_advisory() {
        return None;
    }
    if event.status == EventStatus::Started {
        return Some(0.0);
    }
    event
        .not_before
        .seconds_from(first_seen)
        .map(|seconds| seconds.max(0.0))
}

/// The `priority` label: instance metadata's `compute.priority` when it is one Azure documents
/// (`Regular`, `Spot`, `SpotPlus`, and `Low`, the scale sets' former name of Spot), empty when
/// absent, `other` for anything else, so the label stays bounded.
fn priority(given: &str) -> &str {
    match given {
        "" | "Regular" | "Spot" | "SpotPlus" | "Low" => given,
        _ => "other",
    }
}

/// Most bytes of the text exposition with the largest document the agent accepts
/// ([`azure_scheduled_events_core::limits::MAX_EVENTS`] events, each label value at
/// [`azure_scheduled_events_core::limits::MAX_LABEL_BYTES`], every event reported, on a VM whose
/// name and scale set are as long, each repeated in every `event_info`): what bounds the agent's
/// memory under many scrapers (docs/performance.md).
pub const MAX_EXPOSITION_BYTES: usize = 7_000_000;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EventSeries;
    use azure_scheduled_events_core::event::Document;
    use azure_scheduled_events_core::limits::{self, MAX_BODY_BYTES, MAX_EVENTS, MAX_LABEL_BYTES};

    /// `text` made unique by `n` and padded to exactly [`MAX_LABEL_BYTES`].
    fn at_the_cap(text: &str, n: usize) -> String {
        let unique = format!("{text}{n:06}");
        format!("{unique:x<width$}", width = MAX_LABEL_BYTES)
    }

    #[test]
    fn the_largest_accepted_document_makes_an_exposition_within_its_bound()
    -> Result<(), Box<dyn std::error::Error>> {
        // Every label value unique and at the cap: an unknown type and source, so that even the
        // per-type counts get a series per event.
        let events: Vec<serde_json::Value> = (0..MAX_EVENTS)
            .map(|n| {
                serde_json::json!({
                    "EventId": at_the_cap("E", n),
                    "EventType": at_the_cap("T", n),
                    "EventStatus": "Scheduled",
                    "EventSource": at_the_cap("S", n),
                    "ResourceType": at_the_cap("R", n),
                    "Resources": ["vm_0"],
                    "NotBefore": "Mon, 11 Apr 2050 22:26:58 GMT",
                    "Description": "",
                    "DurationInSeconds": 9,
                })
            })
            .collect();
        let body = serde_json::to_vec(&serde_json::json!({
            "DocumentIncarnation": 1,
            "Events": events,
        }))?;
        assert!(body.len() <= MAX_BODY_BYTES, "{} bytes", body.len());
        let document = Document::from_json(&body)?;
        limits::check(&document)?;

        let metrics = Metrics::new("2020-07-01", EventSeries::All, Families::DEFAULT)?;
        // This VM's name and scale set, which every event_info repeats, as long as Azure allows
        // (64 characters).
        metrics.set_vm(
            None,
            &wire::Compute {
                name: at_the_cap("N", 0),
                vm_scale_set_name: at_the_cap("V", 0),
                priority: "SpotPlus".into(),
                ..wire::Compute::default()
            },
        );
        let now = Utc::now();
        metrics.set_events(
            1,
            document
                .events
                .into_iter()
                .map(|event| (event, Affects::Yes, Some(now))),
        );
        let text = metrics.encode()?;
        assert!(text.contains(&at_the_cap("E", MAX_EVENTS - 1)));
        assert!(text.contains(&format!("vm_scale_set_name=\"{}\"", at_the_cap("V", 0))));
        assert!(
            text.len() <= MAX_EXPOSITION_BYTES,
            "{} bytes, more than {MAX_EXPOSITION_BYTES}",
            text.len()
        );
        Ok(())
    }

    fn event(status: &str, not_before: Option<&str>) -> Result<Event, Box<dyn std::error::Error>> {
        let body = serde_json::to_vec(&serde_json::json!({
            "DocumentIncarnation": 1,
            "Events": [{
                "EventId": "E",
                "EventType": "Reboot",
                "EventStatus": status,
                "ResourceType": "VirtualMachine",
                "Resources": ["vm_0"],
                "NotBefore": not_before,
            }],
        }))?;
        Document::from_json(&body)?
            .events
            .into_iter()
            .next()
            .ok_or_else(|| "no event".into())
    }

    #[test]
    fn the_notice_is_not_before_minus_first_sight_and_zero_when_none_was_left()
    -> Result<(), Box<dyn std::error::Error>> {
        let seen = DateTime::parse_from_rfc3339("2026-04-29T17:50:00Z")?.with_timezone(&Utc);
        let at = Some("Wed, 29 Apr 2026 18:00:00 GMT");
        assert_eq!(notice(&event("Scheduled", at)?, seen), Some(600.0));
        let late = seen + chrono::Duration::hours(1);
        assert_eq!(notice(&event("Scheduled", at)?, late), Some(0.0));
        assert_eq!(notice(&event("Started", Some(""))?, seen), Some(0.0));
        assert_eq!(notice(&event("Started", at)?, seen), Some(0.0));
        assert_eq!(notice(&event("Scheduled", Some(""))?, seen), None);
        assert_eq!(notice(&event("Scheduled", Some("soon"))?, seen), None);
        assert_eq!(notice(&event("Advisory", at)?, seen), None);
        Ok(())
    }

    #[test]
    fn event_info_names_this_vm_once_instance_metadata_is_read()
    -> Result<(), Box<dyn std::error::Error>> {
        let metrics = Metrics::new("2020-07-01", EventSeries::All, Families::DEFAULT)?;
        let info = |text: &str| {
            text.lines()
                .find(|l| l.starts_with("azure_scheduled_events_event_info{"))
                .map(str::to_owned)
        };
        let at = Some("Wed, 29 Apr 2026 18:00:00 GMT");
        metrics.set_events(1, [(event("Scheduled", at)?, Affects::Yes, None)]);
        let before = info(&metrics.encode()?).ok_or("no event_info")?;
        for empty in [r#"priority="""#, r#"vm_name="""#, r#"vm_scale_set_name="""#] {
            assert!(before.contains(empty), "{before}");
        }
        metrics.set_vm(
            Some("web_3"),
            &wire::Compute {
                name: "web000003".into(),
                vm_scale_set_name: "web".into(),
                priority: "Spot".into(),
                ..wire::Compute::default()
            },
        );
        let after = info(&metrics.encode()?).ok_or("no event_info")?;
        for named in [
            r#"priority="Spot""#,
            r#"vm_name="web_3""#,
            r#"vm_scale_set_name="web""#,
        ] {
            assert!(after.contains(named), "{after}");
        }
        Ok(())
    }

    #[test]
    fn the_priority_label_is_what_azure_documents_or_other() {
        for known in ["", "Regular", "Spot", "SpotPlus", "Low"] {
            assert_eq!(priority(known), known);
        }
        assert_eq!(priority("spot"), "other");
        assert_eq!(priority(&"x".repeat(1000)), "other");
    }
}
