//! The bounded queue between the poll loop and the collector, and the task that empties it.
//!
//! One pipeline per signal: spans, and log records when log events are on. The poll loop only
//! ever does a non-blocking `try_send` of a finished span or record: when the queue is full (the
//! collector is down or slow and the queue has filled, in items or, for log records, in bytes),
//! the item is dropped and counted, so memory stays bounded and the loop never waits. One task on
//! the agent's runtime batches the queue (up to `max_export_batch_size` items, or what arrived
//! within `schedule_delay`), exports with the exporter's retries inside one timeout, and counts
//! what was exported and what failed. Before the first export it waits for the VM's resource
//! (instance metadata), at most [`RESOURCE_WAIT`]; the resource is updated in the exporter
//! whenever it changes.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::{Context, InstrumentationScope};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{LogBatch, LogExporter, SdkLogRecord};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::config::otlp::Signal;
use crate::output::metrics::NAMESPACE;

/// Longest time spans wait for instance metadata before they are exported without it.
pub const RESOURCE_WAIT: Duration = Duration::from_secs(60);

/// Slack on top of the export timeout before the task gives up on an export itself.
const TIMEOUT_SLACK: Duration = Duration::from_secs(1);

/// What one signal's pipeline exports: spans or log records.
pub trait Exporter: Send + 'static {
    type Item: Send + 'static;

    fn export(&self, batch: Vec<Self::Item>) -> impl Future<Output = OTelSdkResult> + Send;

    fn set_resource(&mut self, resource: &Resource);
}

/// A span exporter as a pipeline's exporter.
#[derive(Debug)]
pub struct Spans<E>(pub E);

impl<E: SpanExporter + 'static> Exporter for Spans<E> {
    type Item = SpanData;

    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        self.0.export(batch)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.0.set_resource(resource);
    }
}

/// A log exporter as a pipeline's exporter: every record of this agent has one scope.
#[derive(Debug)]
pub struct LogRecords<E> {
    pub exporter: E,
    pub scope: InstrumentationScope,
}

impl<E: LogExporter + 'static> Exporter for LogRecords<E> {
    type Item = SdkLogRecord;

    async fn export(&self, batch: Vec<SdkLogRecord>) -> OTelSdkResult {
        let records: Vec<(&SdkLogRecord, &InstrumentationScope)> =
            batch.iter().map(|record| (record, &self.scope)).collect();
        self.exporter.export(LogBatch::new(&records)).await
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.exporter.set_resource(resource);
    }
}

/// Counters of `..._otlp_spans_*_total` (or `..._otlp_log_records_*_total`), shared with the
/// metrics registry.
#[derive(Debug, Clone)]
pub struct ExportCounters {
    pub exported: IntCounter,
    pub dropped_queue_full: IntCounter,
    pub dropped_export_failed: IntCounter,
    /// `spans` or `log records`, and the dropped family's full name, for the outage's warning.
    what: &'static str,
    dropped_family: &'static str,
}

impl ExportCounters {
    /// Registers `signal`'s OTLP export families in `registry`, every series at 0. Only when
    /// the signal is on: a fleet pays for every series.
    pub fn register(registry: &Registry, signal: Signal) -> Result<Self, prometheus::Error> {
        let (what, exported_name, dropped_name, dropped_family, queue) = match signal {
            Signal::Traces => (
                "spans",
                "otlp_spans_exported_total",
                "otlp_spans_dropped_total",
                "azure_scheduled_events_otlp_spans_dropped_total",
                "the bounded export queue was full",
            ),
            Signal::Logs => (
                "log records",
                "otlp_log_records_exported_total",
                "otlp_log_records_dropped_total",
                "azure_scheduled_events_otlp_log_records_dropped_total",
                "the bounded export queue was full, in records or in bytes",
            ),
        };
        let title = match signal {
            Signal::Traces => "Spans",
            Signal::Logs => "Log records (log-based events)",
        };
        let exported = IntCounter::with_opts(
            Opts::new(
                exported_name,
                format!("{title} the OTLP collector accepted."),
            )
            .namespace(NAMESPACE),
        )?;
        let dropped = IntCounterVec::new(
            Opts::new(
                dropped_name,
                format!("{title} never exported, by reason: queue_full ({queue}), export_failed (the collector refused or did not answer, retries included)."),
            )
            .namespace(NAMESPACE),
            &["reason"],
        )?;
        let counters = Self {
            exported: exported.clone(),
            dropped_queue_full: dropped.with_label_values(&["queue_full"]),
            dropped_export_failed: dropped.with_label_values(&["export_failed"]),
            what,
            dropped_family,
        };
        registry.register(Box::new(exported))?;
        registry.register(Box::new(dropped))?;
        Ok(counters)
    }
}

/// The sending side: cheap to clone, never blocks.
#[derive(Debug, Clone)]
pub struct Queue<T> {
    sender: mpsc::Sender<(T, usize)>,
    counters: ExportCounters,
    /// Bytes of the items in the queue, and their bound.
    bytes: Arc<AtomicUsize>,
    max_bytes: usize,
}

/// The queue of spans.
pub type SpanQueue = Queue<SpanData>;

impl<T> Queue<T> {
    /// Queues a finished span, or drops and counts it when the queue is full.
    pub fn submit(&self, item: T) {
        self.submit_sized(item, 0);
    }

    /// Queues an item of about `bytes` bytes, or drops and counts it when the queue is full in
    /// items or in bytes.
    pub fn submit_sized(&self, item: T, bytes: usize) {
        let queued = self.bytes.fetch_add(bytes, Ordering::Relaxed);
        if queued.saturating_add(bytes) > self.max_bytes
            || self.sender.try_send((item, bytes)).is_err()
        {
            // Full, or closed after shutdown: either way the item will not be exported.
            self.bytes.fetch_sub(bytes, Ordering::Relaxed);
            self.counters.dropped_queue_full.inc();
        }
    }
}

/// What the export task needs to know about the resource.
#[derive(Debug, Clone)]
pub struct ResourceState {
    pub resource: Resource,
    /// Whether instance metadata has been read into it.
    pub complete: bool,
}

/// Batching and limits.
#[derive(Debug, Clone, Copy)]
pub struct Batching {
    pub max_queue_size: usize,
    /// Bound of the queue in bytes ([`Queue::submit_sized`]); `usize::MAX` for none.
    pub max_queue_bytes: usize,
    pub max_export_batch_size: usize,
    pub schedule_delay: Duration,
    pub timeout: Duration,
}

/// A queue and the task that exports from it.
#[derive(Debug)]
pub struct Pipeline<E: Exporter> {
    pub queue: Queue<E::Item>,
    pub task: ExportTask<E>,
}

/// Creates the queue and its (not yet spawned) task.
pub fn pipeline<E: Exporter>(
    exporter: E,
    batching: Batching,
    counters: ExportCounters,
    resource: watch::Receiver<ResourceState>,
    stop: watch::Receiver<bool>,
) -> Pipeline<E> {
    let (sender, receiver) = mpsc::channel(batching.max_queue_size.max(1));
    let bytes = Arc::new(AtomicUsize::new(0));
    Pipeline {
        queue: Queue {
            sender,
            counters: counters.clone(),
            bytes: Arc::clone(&bytes),
            max_bytes: batching.max_queue_bytes,
        },
        task: ExportTask {
            exporter,
            receiver,
            bytes,
            batching,
            counters,
            resource,
            stop,
            failing: false,
        },
    }
}

/// Owns the exporter; run it with [`ExportTask::run`].
#[derive(Debug)]
pub struct ExportTask<E: Exporter> {
    exporter: E,
    receiver: mpsc::Receiver<(E::Item, usize)>,
    bytes: Arc<AtomicUsize>,
    batching: Batching,
    counters: ExportCounters,
    resource: watch::Receiver<ResourceState>,
    stop: watch::Receiver<bool>,
    failing: bool,
}

impl<E: Exporter> ExportTask<E> {
    /// Exports until told to stop, then exports what is still queued and returns.
    pub async fn run(mut self) {
        let started = Instant::now();
        let mut resource_applied = false;
        loop {
            let first = tokio::select! {
                item = self.receiver.recv() => item,
                _ = self.stop.wait_for(|s| *s) => None,
            };
            let Some(first) = first else { break };
            let mut batch = vec![taken(&self.bytes, first)];
            let deadline = Instant::now() + self.batching.schedule_delay;
            while batch.len() < self.batching.max_export_batch_size {
                tokio::select! {
                    item = self.receiver.recv() => match item {
                        Some(item) => batch.push(taken(&self.bytes, item)),
                        None => break,
                    },
                    () = tokio::time::sleep_until(deadline) => break,
                    _ = self.stop.wait_for(|s| *s) => break,
                }
            }
            self.await_resource(started).await;
            resource_applied |= self.apply_resource(resource_applied);
            self.export(batch).await;
        }
        // Shutting down: whatever is queued goes out now, without waiting any longer.
        self.receiver.close();
        self.apply_resource(resource_applied);
        let mut batch = Vec::new();
        while let Ok(item) = self.receiver.try_recv() {
            batch.push(taken(&self.bytes, item));
            if batch.len() == self.batching.max_export_batch_size {
                self.export(std::mem::take(&mut batch)).await;
            }
        }
        if !batch.is_empty() {
            self.export(batch).await;
        }
    }

    /// Waits for instance metadata, at most until [`RESOURCE_WAIT`] after start or a stop.
    async fn await_resource(&mut self, started: Instant) {
        if self.resource.borrow().complete || *self.stop.borrow() {
            return;
        }
        let mut stop = self.stop.clone();
        tokio::select! {
            _ = self.resource.wait_for(|r| r.complete) => {}
            () = tokio::time::sleep_until(started + RESOURCE_WAIT) => {}
            _ = stop.wait_for(|s| *s) => {}
        }
    }

    /// Hands the exporter the current resource when it changed; returns whether it did.
    fn apply_resource(&mut self, applied: bool) -> bool {
        if applied && !self.resource.has_changed().unwrap_or(false) {
            return false;
        }
        let state = self.resource.borrow_and_update().clone();
        self.exporter.set_resource(&state.resource);
        true
    }

    async fn export(&mut self, batch: Vec<E::Item>) {
        let count = batch.len() as u64;
        let limit = self.batching.timeout + TIMEOUT_SLACK;
        let result = match tokio::time::timeout(limit, self.exporter.export(batch)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err(format!("no answer within {limit:?}")),
        };
        match result {
            Ok(()) => {
                self.counters.exported.inc_by(count);
                if std::mem::take(&mut self.failing) {
                    tracing::info!(what = self.counters.what, "OTLP export works again");
                }
            }
            Err(error) => {
                self.counters.dropped_export_failed.inc_by(count);
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(
                        %error,
                        what = self.counters.what,
                        count,
                        "OTLP export failed after retries; {} are dropped (counted in {}) until the collector answers",
                        self.counters.what,
                        self.counters.dropped_family,
                    );
                }
            }
        }
    }
}

/// An item out of the queue: its bytes no longer count against the queue's bound.
fn taken<T>(queued: &AtomicUsize, (item, bytes): (T, usize)) -> T {
    queued.fetch_sub(bytes, Ordering::Relaxed);
    item
}

/// The SDK's span processor for spans made through `tracing` (the debug-level IMDS request
/// spans): it feeds the same queue once the agent has started it, and drops spans before that.
#[derive(Debug, Clone, Default)]
pub struct QueueProcessor(pub Arc<OnceLock<SpanQueue>>);

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if let Some(queue) = self.0.get() {
            queue.submit(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn set_resource(&mut self, _resource: &Resource) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{
        SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
    };
    use opentelemetry_sdk::error::OTelSdkError;
    use std::sync::Mutex;

    /// Each export's spans with the `service.name` of the resource it was sent with.
    type Batches = Arc<Mutex<Vec<(Vec<SpanData>, Option<String>)>>>;

    /// Records exports; fails while `fail` is set.
    #[derive(Debug, Clone, Default)]
    struct Recorder {
        batches: Batches,
        fail: Arc<std::sync::atomic::AtomicBool>,
        service: Arc<Mutex<Option<String>>>,
    }

    impl SpanExporter for Recorder {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(OTelSdkError::InternalFailure("refused".into()));
            }
            let service = self.service.lock().map(|s| s.clone()).unwrap_or_default();
            if let Ok(mut batches) = self.batches.lock() {
                batches.push((batch, service));
            }
            Ok(())
        }

        fn set_resource(&mut self, resource: &Resource) {
            if let Ok(mut service) = self.service.lock() {
                *service = resource
                    .get(&opentelemetry::Key::from_static_str("service.name"))
                    .map(|v| v.as_str().into_owned());
            }
        }
    }

    fn span(n: u8) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from_bytes([n; 16]),
                SpanId::from_bytes([n; 8]),
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "test".into(),
            start_time: std::time::SystemTime::UNIX_EPOCH,
            end_time: std::time::SystemTime::UNIX_EPOCH,
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: Default::default(),
        }
    }

    fn counters() -> ExportCounters {
        let counter = |name: &str| IntCounter::new(name, "test").unwrap_or_else(|e| panic!("{e}"));
        ExportCounters {
            exported: counter("exported"),
            dropped_queue_full: counter("queue_full"),
            dropped_export_failed: counter("export_failed"),
            what: "spans",
            dropped_family: "dropped",
        }
    }

    fn resource(name: &'static str, complete: bool) -> ResourceState {
        ResourceState {
            resource: Resource::builder_empty().with_service_name(name).build(),
            complete,
        }
    }

    fn batching(queue: usize) -> Batching {
        Batching {
            max_queue_size: queue,
            max_queue_bytes: usize::MAX,
            max_export_batch_size: 512,
            schedule_delay: Duration::from_millis(10),
            timeout: Duration::from_secs(1),
        }
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let recorder = Recorder::default();
        let counters = counters();
        let (_resource, resource_rx) = watch::channel(resource("svc", true));
        let (stop, stop_rx) = watch::channel(false);
        let pipeline = pipeline(
            Spans(recorder.clone()),
            batching(2),
            counters.clone(),
            resource_rx,
            stop_rx,
        );
        for n in 1..=5 {
            pipeline.queue.submit(span(n));
        }
        assert_eq!(counters.dropped_queue_full.get(), 3);
        let _ = stop.send(true);
        pipeline.task.run().await;
        assert_eq!(counters.exported.get(), 2, "what fitted is flushed at stop");
    }

    #[tokio::test]
    async fn a_queue_bounded_in_bytes_drops_and_counts_what_does_not_fit_and_frees_what_it_sends() {
        let recorder = Recorder::default();
        let counters = counters();
        let (_resource, resource_rx) = watch::channel(resource("svc", true));
        let (stop, stop_rx) = watch::channel(false);
        let pipeline = pipeline(
            Spans(recorder.clone()),
            Batching {
                max_queue_bytes: 1000,
                ..batching(100)
            },
            counters.clone(),
            resource_rx,
            stop_rx,
        );
        let queue = pipeline.queue.clone();
        for n in 1..=4 {
            queue.submit_sized(span(n), 400);
        }
        assert_eq!(
            counters.dropped_queue_full.get(),
            2,
            "two of 400 bytes fit in 1000"
        );
        let task = tokio::spawn(pipeline.task.run());
        while counters.exported.get() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        queue.submit_sized(span(5), 900);
        assert_eq!(
            counters.dropped_queue_full.get(),
            2,
            "the bytes sent no longer count"
        );
        let _ = stop.send(true);
        let _ = task.await;
        assert_eq!(counters.exported.get(), 3);
    }

    #[tokio::test]
    async fn failed_exports_are_counted_and_the_task_goes_on() {
        let recorder = Recorder::default();
        recorder
            .fail
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let counters = counters();
        let (_resource, resource_rx) = watch::channel(resource("svc", true));
        let (stop, stop_rx) = watch::channel(false);
        let pipeline = pipeline(
            Spans(recorder.clone()),
            batching(16),
            counters.clone(),
            resource_rx,
            stop_rx,
        );
        let queue = pipeline.queue.clone();
        let task = tokio::spawn(pipeline.task.run());
        queue.submit(span(1));
        queue.submit(span(2));
        while counters.dropped_export_failed.get() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        recorder
            .fail
            .store(false, std::sync::atomic::Ordering::SeqCst);
        queue.submit(span(3));
        while counters.exported.get() < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = stop.send(true);
        let _ = task.await;
        assert_eq!(counters.dropped_export_failed.get(), 2);
        assert_eq!(counters.exported.get(), 1);
    }

    #[tokio::test]
    async fn spans_wait_for_instance_metadata_and_carry_it() {
        let recorder = Recorder::default();
        let counters = counters();
        let (resource_tx, resource_rx) = watch::channel(resource("before", false));
        let (stop, stop_rx) = watch::channel(false);
        let pipeline = pipeline(
            Spans(recorder.clone()),
            batching(16),
            counters.clone(),
            resource_rx,
            stop_rx,
        );
        let queue = pipeline.queue.clone();
        let task = tokio::spawn(pipeline.task.run());
        queue.submit(span(1));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            counters.exported.get(),
            0,
            "held until the resource is known"
        );
        let _ = resource_tx.send(resource("after", true));
        while counters.exported.get() < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = stop.send(true);
        let _ = task.await;
        let batches = recorder
            .batches
            .lock()
            .map(|b| b.clone())
            .unwrap_or_default();
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].1.as_deref(), Some("after"));
    }
}
