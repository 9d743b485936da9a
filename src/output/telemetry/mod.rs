//! OpenTelemetry over OTLP: traces, and log-based events when configured: configuration,
//! resource, exporters and the export queues.
//!
//! Each signal is off unless configured ([`crate::config::otlp`]). [`Telemetry::new`] runs before
//! the log subscriber so the `tracing` bridges (debug-level IMDS request spans, and the event
//! lines as log records: [`events`]) can be installed with it; [`Telemetry::start`] runs inside
//! the agent, builds the exporters on the agent's runtime and returns the [`Traces`] handle the
//! poll loop submits event spans to (see `crate::output::spans`) and the [`Logs`] handle that
//! keeps the log records' resource (see `crate::output::log_events`). Shutdown flushes what is
//! queued, within the export timeout.

pub mod events;
pub mod export;
pub mod http_client;
pub mod resource;

use std::sync::{Arc, OnceLock};

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::logs::{SdkLogRecord, SdkLoggerProvider};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, Tracer};
use prometheus::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use crate::config::otlp::{EnvSource, OtlpArgs, OtlpConfig, ProcessEnv, Protocol, Signal};
pub use events::EventsLayer;
pub use export::ExportCounters;
pub use resource::VmIdentity;

use crate::config::{lenient, otlp};
use export::{
    Batching, Exporter, LogRecords, Queue, QueueProcessor, ResourceState, SpanQueue, Spans,
};

/// The instrumentation scope of every span and log record.
pub const SCOPE: &str = "azure-scheduled-events-exporter";

/// Traces and log events as configured, before the agent starts.
#[derive(Debug, Default)]
pub struct Telemetry {
    config: Option<OtlpConfig>,
    provider: Option<SdkTracerProvider>,
    queue: Arc<OnceLock<SpanQueue>>,
    logs: Option<OtlpConfig>,
    logger_provider: Option<SdkLoggerProvider>,
    log_queue: Arc<OnceLock<Queue<SdkLogRecord>>>,
    /// `OTEL_*` values that were ignored ([`crate::config::lenient`]), logged once at start.
    warnings: Vec<String>,
}

impl Telemetry {
    /// No traces, no log events.
    pub fn disabled() -> Self {
        Self::default()
    }

    /// Traces to `config`'s collector, or none; no log events.
    pub fn new(config: Option<OtlpConfig>) -> Self {
        let queue = Arc::new(OnceLock::new());
        // The SDK's provider only serves the `tracing` bridge. Sampling is fixed (every span is
        // kept: a VM missing from an event's trace would look like a VM that did not see it).
        let provider = config.as_ref().map(|_| {
            SdkTracerProvider::builder()
                .with_sampler(Sampler::AlwaysOn)
                .with_span_processor(QueueProcessor(Arc::clone(&queue)))
                .build()
        });
        Self {
            config,
            provider,
            queue,
            ..Self::default()
        }
    }

    /// As it is, with log events to `logs`' collector (or none).
    pub fn with_logs(self, logs: Option<OtlpConfig>) -> Self {
        let log_queue = Arc::new(OnceLock::new());
        let logger_provider = logs
            .as_ref()
            .map(|_| events::provider(Arc::clone(&log_queue)));
        Self {
            logs,
            logger_provider,
            log_queue,
            ..self
        }
    }

    /// Traces and log events as [`lenient::resolve_signal`] found them, with its warnings.
    pub fn resolved(traces: lenient::Resolved, logs: lenient::Resolved) -> Self {
        let mut warnings = traces.warnings;
        for warning in logs.warnings {
            // A generic variable both signals read is said once.
            if !warnings.contains(&warning) {
                warnings.push(warning);
            }
        }
        Self {
            warnings,
            ..Self::new(traces.config).with_logs(logs.config)
        }
    }

    /// The traces' settings, when they are on.
    pub fn config(&self) -> Option<&OtlpConfig> {
        self.config.as_ref()
    }

    /// The log events' settings, when they are on.
    pub fn logs_config(&self) -> Option<&OtlpConfig> {
        self.logs.as_ref()
    }

    /// The tracer for the `tracing` bridge, when traces are on.
    pub fn tracer(&self) -> Option<Tracer> {
        self.provider.as_ref().map(|p| p.tracer(SCOPE))
    }

    /// The layer that turns event lines into log records, when log events are on.
    pub fn events_layer(&self) -> Option<EventsLayer> {
        self.logger_provider.as_ref().map(EventsLayer::new)
    }

    /// What the log subscriber bridges to OpenTelemetry.
    pub fn bridges(&self) -> Bridges {
        Bridges {
            tracer: self.tracer(),
            events: self.events_layer(),
        }
    }

    /// Registers the export counters in `registry`, builds the exporters and starts the export
    /// tasks on the current runtime. An exporter that cannot be built (an unreadable
    /// certificate, say) is a warning and no such signal: the agent runs on without it.
    pub fn start(self, registry: &Registry, vm: VmIdentity<'_>) -> Started {
        for warning in &self.warnings {
            tracing::warn!(warning = %warning, "ignoring an OTEL_* setting");
        }
        let traces = self.config.and_then(|config| {
            let exporter = span_exporter(&config);
            let (queue, running) = run(Signal::Traces, exporter, config, registry, vm)?;
            let _ = self.queue.set(queue.clone());
            Some(Traces {
                queue,
                running,
                _provider: self.provider,
            })
        });
        let logs = self.logs.and_then(|config| {
            let exporter = log_exporter(&config);
            let (queue, running) = run(Signal::Logs, exporter, config, registry, vm)?;
            let _ = self.log_queue.set(queue);
            Some(Logs {
                running,
                _provider: self.logger_provider,
            })
        });
        Started { traces, logs }
    }
}

/// What the log subscriber hands to OpenTelemetry besides writing lines: none by default.
#[derive(Debug, Default)]
pub struct Bridges {
    /// The agent's own `tracing` spans, when traces are on.
    pub tracer: Option<Tracer>,
    /// The event lines as log records, when log events are on.
    pub events: Option<EventsLayer>,
}

/// What [`Telemetry::start`] started.
#[derive(Debug, Default)]
pub struct Started {
    pub traces: Option<Traces>,
    pub logs: Option<Logs>,
}

/// Registers `signal`'s counters and spawns its export task; `None` (and a warning) when either
/// cannot be done.
fn run<E: Exporter>(
    signal: Signal,
    exporter: anyhow::Result<E>,
    config: OtlpConfig,
    registry: &Registry,
    vm: VmIdentity<'_>,
) -> Option<(Queue<E::Item>, Running)> {
    let counters = match ExportCounters::register(registry, signal) {
        Ok(counters) => counters,
        Err(error) => {
            tracing::warn!(error = %error, "{} are off: their metrics cannot be registered", signal.what());
            return None;
        }
    };
    let exporter = match exporter
        .with_context(|| format!("cannot set up OTLP export to {}", config.endpoint))
    {
        Ok(exporter) => exporter,
        Err(error) => {
            tracing::warn!(error = format!("{error:#}"), "{}", signal.off());
            return None;
        }
    };
    let (resource_tx, resource_rx) = watch::channel(ResourceState {
        resource: resource::resource(&config, vm),
        complete: vm.compute.is_some(),
    });
    let (stop, stop_rx) = watch::channel(false);
    let batching = Batching {
        max_queue_size: config.max_queue_size,
        max_queue_bytes: match signal {
            Signal::Traces => usize::MAX,
            Signal::Logs => otlp::MAX_LOG_QUEUE_BYTES,
        },
        max_export_batch_size: config.max_export_batch_size,
        schedule_delay: config.schedule_delay,
        timeout: config.timeout,
    };
    let pipeline = export::pipeline(exporter, batching, counters, resource_rx, stop_rx);
    let task = tokio::spawn(pipeline.task.run());
    Some((
        pipeline.queue,
        Running {
            resource: resource_tx,
            stop,
            task,
            config,
        },
    ))
}

/// One signal's running export: its resource, and the task to stop.
#[derive(Debug)]
struct Running {
    resource: watch::Sender<ResourceState>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    config: OtlpConfig,
}

impl Running {
    fn set_vm(&self, vm: VmIdentity<'_>) {
        let _ = self.resource.send(ResourceState {
            resource: resource::resource(&self.config, vm),
            complete: vm.compute.is_some(),
        });
    }

    async fn shutdown(self) {
        let _ = self.stop.send(true);
        let limit = self.config.timeout + std::time::Duration::from_secs(1);
        let mut task = self.task;
        if tokio::time::timeout(limit, &mut task).await.is_err() {
            task.abort();
            tracing::warn!(timeout = ?limit, "OTLP flush at shutdown did not finish in time");
        }
    }
}

/// Running traces: where the poll loop hands finished spans.
#[derive(Debug)]
pub struct Traces {
    queue: SpanQueue,
    running: Running,
    _provider: Option<SdkTracerProvider>,
}

impl Traces {
    /// Queues a finished span; never blocks.
    pub fn submit(&self, span: SpanData) {
        self.queue.submit(span);
    }

    /// Instance metadata was read: the resource now describes this VM.
    pub fn set_vm(&self, vm: VmIdentity<'_>) {
        self.running.set_vm(vm);
    }

    /// Exports what is queued (bounded by the export timeout) and stops.
    pub async fn shutdown(self) {
        self.running.shutdown().await;
    }
}

/// Running log events: the records come from the event lines ([`events`]); this keeps their
/// resource and flushes them at the end.
#[derive(Debug)]
pub struct Logs {
    running: Running,
    _provider: Option<SdkLoggerProvider>,
}

impl Logs {
    /// Instance metadata was read: the resource now describes this VM.
    pub fn set_vm(&self, vm: VmIdentity<'_>) {
        self.running.set_vm(vm);
    }

    /// Exports what is queued (bounded by the export timeout) and stops.
    pub async fn shutdown(self) {
        self.running.shutdown().await;
    }
}

/// Builds the exporter as [`Telemetry::start`] does (certificate files read, TLS and the HTTP
/// client set up) and drops it: nothing is sent and no connection opened (gRPC connects lazily).
/// For `check-config`; must run on the async runtime.
pub fn check_exporter(signal: Signal, config: &OtlpConfig) -> anyhow::Result<()> {
    match signal {
        Signal::Traces => span_exporter(config).map(drop),
        Signal::Logs => log_exporter(config).map(drop),
    }
}

fn span_exporter(config: &OtlpConfig) -> anyhow::Result<Spans<opentelemetry_otlp::SpanExporter>> {
    let builder = opentelemetry_otlp::SpanExporter::builder();
    let exporter = match config.protocol {
        Protocol::Grpc => grpc(builder.with_tonic(), config, Signal::Traces)?.build()?,
        Protocol::HttpProtobuf => http(builder.with_http(), config, Signal::Traces)?.build()?,
    };
    Ok(Spans(exporter))
}

fn log_exporter(
    config: &OtlpConfig,
) -> anyhow::Result<LogRecords<opentelemetry_otlp::LogExporter>> {
    let builder = opentelemetry_otlp::LogExporter::builder();
    let exporter = match config.protocol {
        Protocol::Grpc => grpc(builder.with_tonic(), config, Signal::Logs)?.build()?,
        Protocol::HttpProtobuf => http(builder.with_http(), config, Signal::Logs)?.build()?,
    };
    Ok(LogRecords {
        exporter,
        scope: events::scope(),
    })
}

/// An exporter builder over gRPC, as `config` says.
fn grpc<B: WithExportConfig + WithTonicConfig>(
    builder: B,
    config: &OtlpConfig,
    signal: Signal,
) -> anyhow::Result<B> {
    let headers = otlp::http_headers(&config.headers);
    // An interceptor runs after the library has added OTEL_EXPORTER_OTLP_HEADERS, so the
    // resolved headers (a flag over the variable) have the last word.
    let interceptor = move |mut request: tonic::Request<()>| {
        for (name, value) in &headers {
            if let (Ok(key), Ok(value)) = (
                tonic::metadata::MetadataKey::from_bytes(name.as_str().as_bytes()),
                tonic::metadata::MetadataValue::try_from(value.as_bytes()),
            ) {
                request.metadata_mut().insert(key, value);
            }
        }
        Ok(request)
    };
    let mut builder = builder
        .with_endpoint(&config.endpoint)
        .with_protocol(opentelemetry_otlp::Protocol::Grpc)
        .with_timeout(config.timeout)
        .with_interceptor(interceptor);
    if config.gzip {
        builder = builder.with_compression(opentelemetry_otlp::Compression::Gzip);
    }
    if config.endpoint.starts_with("https:") {
        let mut tls = tonic::transport::ClientTlsConfig::new().with_webpki_roots();
        let pem = tls_pem(&config.tls, signal)?;
        if let Some(ca) = pem.ca {
            tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(ca));
        }
        if let Some((cert, key)) = pem.identity {
            tls = tls.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        builder = builder.with_tls_config(tls);
    }
    Ok(builder)
}

/// An exporter builder over HTTP/protobuf, as `config` says.
fn http<B: WithExportConfig + WithHttpConfig>(
    builder: B,
    config: &OtlpConfig,
    signal: Signal,
) -> anyhow::Result<B> {
    let mut builder = builder
        .with_http_client(http_client::ReqwestClient::new(
            config.timeout,
            otlp::http_headers(&config.headers),
            tls_pem(&config.tls, signal)?,
        )?)
        .with_endpoint(&config.endpoint)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_timeout(config.timeout);
    if config.gzip {
        builder = builder.with_compression(opentelemetry_otlp::Compression::Gzip);
    }
    Ok(builder)
}

/// The contents of the TLS files, read and checked before the exporter is built.
#[derive(Debug, Default)]
pub struct TlsPem {
    pub ca: Option<Vec<u8>>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

fn tls_pem(files: &otlp::TlsFiles, signal: Signal) -> anyhow::Result<TlsPem> {
    let read = |path: &std::path::Path, variable: &str| {
        crate::config::file_input::read(path, crate::config::file_input::OTLP_PEM).with_context(
            || {
                format!(
                    "cannot read {} (OTEL_EXPORTER_OTLP_{variable} or its {} form)",
                    path.display(),
                    signal.infix()
                )
            },
        )
    };
    let ca = files
        .certificate
        .as_deref()
        .map(|path| read(path, "CERTIFICATE"))
        .transpose()?;
    let identity = match (&files.client_certificate, &files.client_key) {
        (Some(cert), Some(key)) => {
            Some((read(cert, "CLIENT_CERTIFICATE")?, read(key, "CLIENT_KEY")?))
        }
        _ => None,
    };
    Ok(TlsPem { ca, identity })
}
