//! OpenTelemetry traces over OTLP: configuration, resource, exporter and the export queue.
//!
//! Off unless an endpoint is configured ([`crate::config::otlp`]). [`Telemetry::new`] runs before the log
//! subscriber so the `tracing` bridge (debug-level IMDS request spans) can be installed with it;
//! [`Telemetry::start`] runs inside the agent, builds the exporter on the agent's runtime and
//! returns the [`Traces`] handle the poll loop submits event spans to (see
//! [`crate::event_span`]). Shutdown flushes what is queued, within the export timeout.

pub mod export;
pub mod http_client;
pub mod resource;

use std::sync::{Arc, OnceLock};

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, Tracer};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use crate::config::otlp::{EnvSource, OtlpArgs, OtlpConfig, ProcessEnv, Protocol};
pub use export::ExportCounters;
pub use resource::VmIdentity;

use crate::config::otlp;
use export::{Batching, QueueProcessor, ResourceState, SpanQueue};

/// The instrumentation scope of every span.
pub const SCOPE: &str = "azure-scheduled-events-exporter";

/// Traces as configured, before the agent starts.
#[derive(Debug, Default)]
pub struct Telemetry {
    config: Option<OtlpConfig>,
    provider: Option<SdkTracerProvider>,
    queue: Arc<OnceLock<SpanQueue>>,
}

impl Telemetry {
    /// No traces.
    pub fn disabled() -> Self {
        Self::default()
    }

    /// Traces to `config`'s collector, or none.
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
        }
    }

    pub fn config(&self) -> Option<&OtlpConfig> {
        self.config.as_ref()
    }

    /// The tracer for the `tracing` bridge, when traces are on.
    pub fn tracer(&self) -> Option<Tracer> {
        self.provider.as_ref().map(|p| p.tracer(SCOPE))
    }

    /// Builds the exporter and starts the export task on the current runtime.
    pub fn start(
        self,
        counters: ExportCounters,
        vm: VmIdentity<'_>,
    ) -> anyhow::Result<Option<Traces>> {
        let Some(config) = self.config else {
            return Ok(None);
        };
        let exporter = exporter(&config)
            .with_context(|| format!("cannot set up OTLP export to {}", config.endpoint))?;
        let (resource_tx, resource_rx) = watch::channel(ResourceState {
            resource: resource::resource(&config, vm),
            complete: vm.compute.is_some(),
        });
        let (stop, stop_rx) = watch::channel(false);
        let batching = Batching {
            max_queue_size: config.max_queue_size,
            max_export_batch_size: config.max_export_batch_size,
            schedule_delay: config.schedule_delay,
            timeout: config.timeout,
        };
        let pipeline = export::pipeline(exporter, batching, counters, resource_rx, stop_rx);
        let _ = self.queue.set(pipeline.queue.clone());
        let task = tokio::spawn(pipeline.task.run());
        Ok(Some(Traces {
            queue: pipeline.queue,
            resource: resource_tx,
            stop,
            task,
            config,
            _provider: self.provider,
        }))
    }
}

/// Running traces: where the poll loop hands finished spans.
#[derive(Debug)]
pub struct Traces {
    queue: SpanQueue,
    resource: watch::Sender<ResourceState>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    config: OtlpConfig,
    _provider: Option<SdkTracerProvider>,
}

impl Traces {
    /// Queues a finished span; never blocks.
    pub fn submit(&self, span: SpanData) {
        self.queue.submit(span);
    }

    /// Instance metadata was read: the resource now describes this VM.
    pub fn set_vm(&self, vm: VmIdentity<'_>) {
        let _ = self.resource.send(ResourceState {
            resource: resource::resource(&self.config, vm),
            complete: vm.compute.is_some(),
        });
    }

    /// Exports what is queued (bounded by the export timeout) and stops.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let limit = self.config.timeout + std::time::Duration::from_secs(1);
        let mut task = self.task;
        if tokio::time::timeout(limit, &mut task).await.is_err() {
            task.abort();
            tracing::warn!(timeout = ?limit, "OTLP flush at shutdown did not finish in time");
        }
    }
}

fn exporter(config: &OtlpConfig) -> anyhow::Result<opentelemetry_otlp::SpanExporter> {
    let builder = opentelemetry_otlp::SpanExporter::builder();
    let exporter = match config.protocol {
        Protocol::Grpc => {
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
                .with_tonic()
                .with_endpoint(&config.endpoint)
                .with_protocol(opentelemetry_otlp::Protocol::Grpc)
                .with_timeout(config.timeout)
                .with_interceptor(interceptor);
            if config.endpoint.starts_with("https:") {
                builder = builder
                    .with_tls_config(tonic::transport::ClientTlsConfig::new().with_webpki_roots());
            }
            builder.build()?
        }
        Protocol::HttpProtobuf => builder
            .with_http()
            .with_http_client(http_client::ReqwestClient::new(
                config.timeout,
                otlp::http_headers(&config.headers),
            )?)
            .with_endpoint(&config.endpoint)
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_timeout(config.timeout)
            .build()?,
    };
    Ok(exporter)
}
