//! Traces can never stop the metrics: the built binary with each bad `OTEL_*` value keeps
//! answering `/metrics` (and says what it ignored), a bad `--otlp.*` flag still exits 64, and
//! traces reach a real OTLP receiver over TLS with a private CA and a client certificate, gzipped.

use crate::common;
use crate::otlp;

use std::sync::Arc;

use azure_scheduled_events_simulator::Scenario;
use common::pki::Ca;
use common::process::{AgentProcess, command};
use common::{Imds, THIS_VM, TempDir, TestResult};
use otlp::Receiver;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

type Error = Box<dyn std::error::Error>;

const EVENT: &str = "5E2A3F1C-6B1D-4C8E-9D0A-7F3B2C1D0E9F";

async fn imds_with_one_event() -> Result<Imds, Error> {
    let imds = Imds::start().await?;
    imds.sim.load_scenario(Scenario::parse(&format!(
        "events:\n  - {{ id: \"{EVENT}\", type: Reboot, resources: [{THIS_VM}], notice: 10m }}\n"
    ))?);
    Ok(imds)
}

/// The binary polling `imds`, with `env` set (and nothing else from this process' environment).
fn agent(imds: &Imds, env: &[(&str, &str)], flags: &[&str]) -> Result<AgentProcess, Error> {
    let url = format!("--imds.url={}", imds.url());
    let mut args = vec![
        url.as_str(),
        "--web.listen-address=127.0.0.1:0",
        // Not faster: below 200 ms the agent warns, and this test counts warnings.
        "--poll.interval=200ms",
    ];
    args.extend_from_slice(flags);
    let mut command = command(&args);
    command.envs(env.iter().copied());
    AgentProcess::spawn(command)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_otel_value_keeps_metrics_answering_and_is_reported_once() -> TestResult {
    let receiver = Receiver::start().await?;
    let imds = Imds::start().await?;
    let endpoint = receiver.http_url();
    for (name, value, effect) in [
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", "is ignored"),
        ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "br", "is ignored"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s", "is ignored"),
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "-1", "is ignored"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0", "is ignored"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "many", "is ignored"),
        ("OTEL_BSP_SCHEDULE_DELAY", "1s", "is ignored"),
        ("OTEL_RESOURCE_ATTRIBUTES", "=nokey", "is ignored"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "traces are off"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "udp",
            "traces are off",
        ),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "authorization",
            "traces are off",
        ),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "collector:4318",
            "traces are off",
        ),
        (
            "OTEL_EXPORTER_OTLP_CLIENT_KEY",
            "/etc/key.pem",
            "traces are off",
        ),
        (
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            "/nonexistent/ca.pem",
            "traces are off",
        ),
    ] {
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            (name, value),
        ];
        let mut agent = agent(&imds, &env, &[])?;
        let warning = agent
            .next_line_where(|l| l["level"] == "WARN")
            .map_err(|e| format!("{name}={value}: {e}"))?;
        let text = warning.to_string();
        assert!(
            text.contains(name) && text.contains(effect),
            "{name}={value}: {text}"
        );
        agent
            .wait_for_metrics(&format!("{name}={value}: a first document"), |m| {
                m.contains("azure_scheduled_events_up 1")
            })
            .await?;
        let warnings = agent
            .lines_so_far()?
            .into_iter()
            .filter(|l| l["level"] == "WARN")
            .count();
        assert_eq!(warnings, 0, "{name}={value}: warned more than once");
        let status = tokio::task::spawn_blocking(move || agent.terminate()).await??;
        assert!(status.success(), "{name}={value}: {status:?}");
    }
    Ok(())
}

#[test]
fn a_bad_otlp_flag_still_exits_64() -> TestResult {
    for (args, flag) in [
        (&["--otlp.endpoint=collector:4318"][..], "--otlp.endpoint"),
        (&["--otlp.headers=novalue"], "--otlp.headers"),
        (&["--otlp.timeout=0s"], "--otlp.timeout"),
        (&["--otlp.protocol=http/json"], "--otlp.protocol"),
    ] {
        let output = command(args).output()?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
    Ok(())
}

/// A receiver's TLS: a server certificate for 127.0.0.1 from `ca`, client certificates of `ca`
/// required.
fn receiver_tls(ca: &Ca) -> Result<Arc<rustls::ServerConfig>, Error> {
    let server = ca.server("collector", &["127.0.0.1"])?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.pem().as_bytes())?)?;
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::clone(&provider),
    )
    .build()?;
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![CertificateDer::from_pem_slice(server.cert.as_bytes())?],
            PrivateKeyDer::from_pem_slice(server.key.as_bytes())?,
        )?;
    Ok(Arc::new(config))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traces_reach_a_collector_over_mutual_tls_with_a_private_ca_gzipped() -> TestResult {
    let dir = TempDir::new("otlp-tls")?;
    let ca = Ca::new("collector CA")?;
    let ca_file = dir.path("ca.pem");
    std::fs::write(&ca_file, ca.pem())?;
    let (client_cert, client_key) = ca.client("agent")?.write(&dir.0, "agent")?;
    let receiver = Receiver::start_tls(receiver_tls(&ca)?).await?;
    let imds = imds_with_one_event().await?;
    let endpoint = receiver.https_url();
    let ca_path = ca_file.display().to_string();
    let cert_path = client_cert.display().to_string();
    let key_path = client_key.display().to_string();
    let mut agent = agent(
        &imds,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", &ca_path),
            ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", &cert_path),
            ("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", &key_path),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ],
        &[],
    )?;
    let span = receiver.span_named("Reboot scheduled").await?;
    assert_eq!(span.trace_id, EVENT.replace('-', "").to_lowercase());
    assert_eq!(
        span.headers.get("content-encoding").map(String::as_str),
        Some("gzip")
    );
    let status = tokio::task::spawn_blocking(move || agent.terminate()).await??;
    assert!(status.success(), "{status:?}");

    // Without the client certificate the collector refuses the agent: the spans are dropped and
    // counted, and the metrics go on.
    let before = receiver.spans().len();
    let mut refused = agent_without_identity(&imds, &endpoint, &ca_path)?;
    refused
        .wait_for_metrics("exports refused by the collector", |m| {
            m.lines().any(|l| {
                l.starts_with(
                    r#"azure_scheduled_events_otlp_spans_dropped_total{reason="export_failed"}"#,
                ) && !l.ends_with(" 0")
            }) && m.contains("azure_scheduled_events_up 1")
        })
        .await?;
    assert_eq!(
        receiver.spans().len(),
        before,
        "a span got through without a certificate"
    );
    let status = tokio::task::spawn_blocking(move || refused.terminate()).await??;
    assert!(status.success(), "{status:?}");
    Ok(())
}

fn agent_without_identity(imds: &Imds, endpoint: &str, ca: &str) -> Result<AgentProcess, Error> {
    agent(
        imds,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", ca),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
        ],
        &[],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_over_grpc_reaches_the_collector() -> TestResult {
    let receiver = Receiver::start().await?;
    let imds = imds_with_one_event().await?;
    let endpoint = receiver.grpc_url();
    let mut agent = agent(
        &imds,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip"),
        ],
        &[],
    )?;
    let span = receiver.span_named("Reboot scheduled").await?;
    assert_eq!(span.via, "grpc");
    assert_eq!(
        span.headers.get("grpc-encoding").map(String::as_str),
        Some("gzip"),
        "{:?}",
        span.headers
    );
    let status = tokio::task::spawn_blocking(move || agent.terminate()).await??;
    assert!(status.success(), "{status:?}");
    Ok(())
}
