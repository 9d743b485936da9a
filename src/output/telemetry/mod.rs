//! OpenTelemetry traces over OTLP: configuration, resource, exporter and the export queue.
//!
//! Off unless an endpoint is configured ([`crate::config::otlp`]). [`Telemetry::new`] runs before the log
//! subscriber so the `tracing` bridge (debug-level IMDS request spans) can be installed with it;
//! [`Telemetry::start`] runs inside the agent, builds the exporter on the agent's runtime and
//! returns the [`Traces`] handle the poll loop submits event spans to (see
//! `crate::output::spans`). Shutdown flushes what is queued, within the export timeout.

pub mod export;
pub mod http_client;
pub mod resource;

use std::sync::{Arc, OnceLock};

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, Tracer};
use prometheus::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use crate::config::otlp::{EnvSource, OtlpArgs, OtlpConfig, ProcessEnv, Protocol};
pub use export::ExportCounters;
pub use resource::VmIdentity;

use crate::config::{lenient, otlp};
use export::{Batching, QueueProcessor, ResourceState, SpanQueue};

/// The instrumentation scope of every span.
pub const SCOPE: &str = "azure-scheduled-events-exporter";

/// Traces as configured, before the agent starts.
#[derive(Debug, Default)]
pub struct Telemetry {
    config: Option<OtlpConfig>,
    provider: Option<SdkTracerProvider>,
    queue: Arc<OnceLock<SpanQueue>>,
    /// `OTEL_*` values that were ignored ([`crate::config::lenient`]), logged once at start.
    warnings: Vec<String>,
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
            warnings: Vec::new(),
        }
    }

    /// Traces as [`lenient::resolve`] found them, with its warnings.
    pub fn resolved(resolved: lenient::Resolved) -> Self {
        Self {
            warnings: resolved.warnings,
            ..Self::new(resolved.config)
        }
    }

    pub fn config(&self) -> Option<&OtlpConfig> {
        self.config.as_ref()
    }

    /// The tracer for the `tracing` bridge, when traces are on.
    pub fn tracer(&self) -> Option<Tracer> {
        self.provider.as_ref().map(|p| p.tracer(SCOPE))
    }

    /// Registers the export counters in `registry`, builds the exporter and starts the export
    /// task on the current runtime. An exporter that cannot be built (an unreadable
    /// certificate, say) is a warning and no traces: the agent runs on without them.
    pub fn start(self, registry: &Registry, vm: VmIdentity<'_>) -> Option<Traces> {
        for warning in &self.warnings {
            tracing::warn!(warning = %warning, "ignoring an OTEL_* setting");
        }
        let config = self.config?;
        let counters = match ExportCounters::register(registry) {
            Ok(counters) => counters,
            Err(error) => {
                tracing::warn!(error = %error, "traces are off: their metrics cannot be registered");
                return None;
            }
        };
        let exporter = match exporter(&config)
            .with_context(|| format!("cannot set up OTLP export to {}", config.endpoint))
        {
            Ok(exporter) => exporter,
            Err(error) => {
                tracing::warn!(
                    error = format!("{error:#}"),
                    "traces are off; metrics and logs go on"
                );
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
            max_export_batch_size: config.max_export_batch_size,
            schedule_delay: config.schedule_delay,
            timeout: config.timeout,
        };
        let pipeline = export::pipeline(exporter, batching, counters, resource_rx, stop_rx);
        let _ = self.queue.set(pipeline.queue.clone());
        let task = tokio::spawn(pipeline.task.run());
        Some(Traces {
            queue: pipeline.queue,
            resource: resource_tx,
            stop,
            task,
            config,
            _provider: self.provider,
        })
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

/// Builds the exporter as [`Telemetry::start`] does (certificate files read, TLS and the HTTP
/// client set up) and drops it: nothing is sent and no connection opened (gRPC connects lazily).
/// For `check-config`; must run on the async runtime.
pub fn check_exporter(config: &OtlpConfig) -> anyhow::Result<()> {
    exporter(config).map(drop)
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
            if config.gzip {
                builder = builder.with_compression(opentelemetry_otlp::Compression::Gzip);
            }
            if config.endpoint.starts_with("https:") {
                let mut tls = tonic::transport::ClientTlsConfig::new().with_webpki_roots();
                let pem = tls_pem(&config.tls)?;
                if let Some(ca) = pem.ca {
                    tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(ca));
                }
                if let Some((cert, key)) = pem.identity {
                    tls = tls.identity(tonic::transport::Identity::from_pem(cert, key));
                }
                builder = builder.with_tls_config(tls);
            }
            builder.build()?
        }
        Protocol::HttpProtobuf => {
            let mut builder = builder
                .with_http()
                .with_http_client(http_client::ReqwestClient::new(
                    config.timeout,
                    otlp::http_headers(&config.headers),
                    tls_pem(&config.tls)?,
                )?)
                .with_endpoint(&config.endpoint)
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_timeout(config.timeout);
            if config.gzip {
                builder = builder.with_compression(opentelemetry_otlp::Compression::Gzip);
            }
            builder.build()?
        }
    };
    Ok(exporter)
}

/// The contents of the TLS files, read and checked before the exporter is built.
#[derive(Debug, Default)]
pub struct TlsPem {
    pub ca: Option<Vec<u8>>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

fn tls_pem(files: &otlp::TlsFiles) -> anyhow::Result<TlsPem> {
    let read = |path: &std::path::Path, variable: &str| {
        crate::config::file_input::read(path, crate::config::file_input::OTLP_PEM).with_context(
            || {
                format!(
                    "cannot read {} (OTEL_EXPORTER_OTLP_{variable} or its _TRACES_ form)",
                    path.display()
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
