//! The bounded queue between the poll loop and the collector, and the task that empties it.
//!
//! The poll loop only ever does a non-blocking `try_send` of a finished span: when the queue is
//! full (the collector is down or slow and the queue has filled), the span is dropped and counted,
//! so memory stays bounded and the loop never waits. One task on the agent's runtime batches the
//! queue (up to `max_export_batch_size` spans, or what arrived within `schedule_delay`), exports
//! with the exporter's retries inside one timeout, and counts what was exported and what failed.
//! Before the first export it waits for the VM's resource (instance metadata), at most
//! [`RESOURCE_WAIT`]; the resource is updated in the exporter whenever it changes.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::output::metrics::NAMESPACE;

/// Longest time spans wait for instance metadata before they are exported without it.
pub const RESOURCE_WAIT: Duration = Duration::from_secs(60);

/// Slack on top of the export timeout before the task gives up on an export itself.
const TIMEOUT_SLACK: Duration = Duration::from_secs(1);

/// Counters of `..._otlp_spans_*_total`, shared with the metrics registry.
#[derive(Debug, Clone)]
pub struct ExportCounters {
    pub exported: IntCounter,
    pub dropped_queue_full: IntCounter,
    pub dropped_export_failed: IntCounter,
}

impl ExportCounters {
    /// Registers the OTLP export families in `registry`, every series at 0. Only when traces
    /// are on: a fleet pays for every series.
    pub fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let exported = IntCounter::with_opts(
            Opts::new(
                "otlp_spans_exported_total",
                "Spans the OTLP collector accepted (0 while traces are off).",
            )
            .namespace(NAMESPACE),
        )?;
        let dropped = IntCounterVec::new(
            Opts::new(
                "otlp_spans_dropped_total",
                "Spans never exported, by reason: queue_full (the bounded export queue was full), export_failed (the collector refused or did not answer, retries included).",
            )
            .namespace(NAMESPACE),
            &["reason"],
        )?;
        let counters = Self {
            exported: exported.clone(),
            dropped_queue_full: dropped.with_label_values(&["queue_full"]),
            dropped_export_failed: dropped.with_label_values(&["export_failed"]),
        };
        registry.register(Box::new(exported))?;
        registry.register(Box::new(dropped))?;
        Ok(counters)
    }
}

/// The sending side: cheap to clone, never blocks.
#[derive(Debug, Clone)]
pub struct SpanQueue {
    sender: mpsc::Sender<SpanData>,
    counters: ExportCounters,
}

impl SpanQueue {
    /// Queues a finished span, or drops and counts it when the queue is full.
    pub fn submit(&self, span: SpanData) {
        if self.sender.try_send(span).is_err() {
            // Full, or closed after shutdown: either way the span will not be exported.
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
    pub max_export_batch_size: usize,
    pub schedule_delay: Duration,
    pub timeout: Duration,
}

/// A queue and the task that exports from it.
#[derive(Debug)]
pub struct Pipeline<E> {
    pub queue: SpanQueue,
    pub task: ExportTask<E>,
}

/// Creates the queue and its (not yet spawned) task.
pub fn pipeline<E: SpanExporter>(
    exporter: E,
    batching: Batching,
    counters: ExportCounters,
    resource: watch::Receiver<ResourceState>,
    stop: watch::Receiver<bool>,
) -> Pipeline<E> {
    let (sender, receiver) = mpsc::channel(batching.max_queue_size.max(1));
    Pipeline {
        queue: SpanQueue {
            sender,
            counters: counters.clone(),
        },
        task: ExportTask {
            exporter,
            receiver,
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
pub struct ExportTask<E> {
    exporter: E,
    receiver: mpsc::Receiver<SpanData>,
    batching: Batching,
    counters: ExportCounters,
    resource: watch::Receiver<ResourceState>,
    stop: watch::Receiver<bool>,
    failing: bool,
}

impl<E: SpanExporter> ExportTask<E> {
    /// Exports until told to stop, then exports what is still queued and returns.
    pub async fn run(mut self) {
        let started = Instant::now();
        let mut resource_applied = false;
        loop {
            let first = tokio::select! {
                span = self.receiver.recv() => span,
                _ = self.stop.wait_for(|s| *s) => None,
            };
            let Some(first) = first else { break };
            let mut batch = vec![first];
            let deadline = Instant::now() + self.batching.schedule_delay;
            while batch.len() < self.batching.max_export_batch_size {
                tokio::select! {
                    span = self.receiver.recv() => match span {
                        Some(span) => batch.push(span),
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
        while let Ok(span) = self.receiver.try_recv() {
            batch.push(span);
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

    async fn export(&mut self, batch: Vec<SpanData>) {
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
                    tracing::info!("OTLP export works again");
                }
            }
            Err(error) => {
                self.counters.dropped_export_failed.inc_by(count);
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(
                        %error,
                        spans = count,
                        "OTLP export failed after retries; spans are dropped (counted in azure_scheduled_events_otlp_spans_dropped_total) until the collector answers"
                    );
                }
            }
        }
    }
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
            recorder.clone(),
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
    async fn failed_exports_are_counted_and_the_task_goes_on() {
        let recorder = Recorder::default();
        recorder
            .fail
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let counters = counters();
        let (_resource, resource_rx) = watch::channel(resource("svc", true));
        let (stop, stop_rx) = watch::channel(false);
        let pipeline = pipeline(
            recorder.clone(),
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
            recorder.clone(),
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
