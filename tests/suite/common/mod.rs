//! A simulator and an agent wired together over loopback, and readers of the exposition.

#![allow(
    dead_code,
    reason = "each test binary uses a different part of the harness"
)]

pub mod pki;
pub mod process;
pub mod wait;

use std::time::Duration;

use azure_scheduled_events_exporter::config::{Cli, LogFormat};
use azure_scheduled_events_exporter::output::telemetry::Telemetry;
use azure_scheduled_events_exporter::shell::agent::{self, RunningAgent};
use azure_scheduled_events_simulator::{RunningSimulator, SimulatorHandle, example_compute};
use clap::Parser;

pub use wait::wait;

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The simulated VM's compute.name.
pub const THIS_VM: &str = "test-vmss_0";

/// How long a test waits for the agent to reach a state before it fails.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A simulated IMDS on 127.0.0.1:0, playing VM [`THIS_VM`].
pub struct Imds {
    pub sim: SimulatorHandle,
    running: RunningSimulator,
}

impl Imds {
    pub async fn start() -> Result<Self, Box<dyn std::error::Error>> {
        Self::start_as(example_compute(THIS_VM)).await
    }

    /// A simulated IMDS playing the VM `compute` describes.
    pub async fn start_as(
        compute: azure_scheduled_events_exporter::azure::wire::Compute,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let sim = SimulatorHandle::new(compute);
        let running = RunningSimulator::start(sim.clone()).await?;
        Ok(Self { sim, running })
    }

    pub fn url(&self) -> String {
        self.running.url()
    }

    /// Waits until the agent has polled `polls` more times, for a test that checks that nothing
    /// happened meanwhile: the simulator has received `polls` + 1 more scheduled-events GETs than
    /// when this was called. The agent keeps one GET in flight, so by then it has had `polls`
    /// answers and done what each called for, and at least `polls` poll intervals have passed.
    /// Counts every client of this simulator: a test with one agent only. Fails after
    /// [`PATIENCE`].
    pub async fn polled(&self, polls: usize) -> Result<(), String> {
        let mark = self.sim.requests();
        wait(&format!("{polls} polls"))
            .until(async || {
                let gets = self
                    .sim
                    .request_log()
                    .iter()
                    .filter(|r| r.number > mark && r.is_get())
                    .count();
                gets > polls
            })
            .await
    }
}

/// An agent in this process polling `imds` fast, configured by `extra` flags.
pub struct Agent {
    pub running: Option<RunningAgent>,
    pub http: reqwest::Client,
    pub base: String,
}

impl Agent {
    pub async fn start(imds: &Imds, extra: &[&str]) -> Result<Self, Box<dyn std::error::Error>> {
        Self::start_with_env(imds, extra, None).await
    }

    /// As [`Agent::start`], with traces configured by the `--otlp.*` flags in `extra` and the
    /// `OTEL_*` variables in `otel` (never the process environment).
    pub async fn start_traced(
        imds: &Imds,
        extra: &[&str],
        otel: &[(&str, &str)],
    ) -> Result<Self, Box<dyn std::error::Error>> {
        Self::start_with_env(imds, extra, Some(otel.iter().copied().collect())).await
    }

    async fn start_with_env(
        imds: &Imds,
        extra: &[&str],
        otel: Option<std::collections::HashMap<&str, &str>>,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let url = format!("--imds.url={}", imds.url());
        let mut args = vec![
            "azure-scheduled-events-exporter",
            &url,
            "--web.listen-address=127.0.0.1:0",
            "--poll.interval=50ms",
            "--imds.timeout=1s",
            "--imds.first-timeout=5s",
            "--imds.max-backoff=200ms",
            // In memory: tests never share, or touch, the machine's state file.
            "--state.file=",
        ];
        args.extend_from_slice(extra);
        let config = Cli::try_parse_from(args)?.agent.validate(LogFormat::Json)?;
        let running = match otel {
            None => agent::start(config).await?,
            Some(env) => {
                let otlp = config.otlp.resolve(&env)?;
                agent::start_with(config, Telemetry::new(otlp)).await?
            }
        };
        let base = format!("http://{}", running.address());
        let http = reqwest::Client::builder().no_proxy().build()?;
        Ok(Self {
            running: Some(running),
            http,
            base,
        })
    }

    pub async fn get(&self, path: &str) -> Result<(u16, String), reqwest::Error> {
        let response = self.http.get(format!("{}{path}", self.base)).send().await?;
        let status = response.status().as_u16();
        Ok((status, response.text().await?))
    }

    pub async fn metrics(&self) -> Result<Exposition, reqwest::Error> {
        Ok(Exposition(self.get("/metrics").await?.1))
    }

    /// Scrapes until `condition` holds, returning that exposition; fails with the last one.
    pub async fn wait_for(
        &self,
        what: &str,
        condition: impl Fn(&Exposition) -> bool,
    ) -> Result<Exposition, String> {
        let mut last = String::new();
        wait(what)
            .until(async || {
                let exposition = self.metrics().await?;
                if condition(&exposition) {
                    return Ok::<_, reqwest::Error>(Some(exposition));
                }
                last = exposition.0;
                Ok(None)
            })
            .await
            .map_err(|e| format!("{e}; last scrape:\n{last}"))
    }

    pub async fn stop(mut self) -> Result<(), Box<dyn std::error::Error>> {
        if let Some(running) = self.running.take() {
            running.stop().await?;
        }
        Ok(())
    }
}

/// One scrape of `/metrics`.
#[derive(Debug, Clone)]
pub struct Exposition(pub String);

impl Exposition {
    /// The value of the series written exactly as `name{labels}` (labels in alphabetical order,
    /// as the encoder writes them), or `name` alone.
    pub fn value(&self, series: &str) -> Option<f64> {
        self.0.lines().find_map(|line| {
            let rest = line.strip_prefix(series)?.strip_prefix(' ')?;
            rest.trim().parse().ok()
        })
    }

    /// Like [`Exposition::value`], 0 when the series is absent.
    pub fn get(&self, series: &str) -> f64 {
        self.value(series).unwrap_or(0.0)
    }

    /// Whether any series line contains `needle`.
    pub fn has(&self, needle: &str) -> bool {
        self.0
            .lines()
            .any(|line| !line.starts_with('#') && line.contains(needle))
    }

    pub fn up(&self) -> Option<f64> {
        self.value("azure_scheduled_events_up")
    }

    pub fn failures(&self, reason: &str) -> f64 {
        self.get(&format!(r#"azure_scheduled_events_imds_request_failures_total{{operation="events",reason="{reason}"}}"#))
    }

    pub fn transitions(&self, event_type: &str, transition: &str) -> f64 {
        self.get(&format!(r#"azure_scheduled_events_transitions_total{{event_type="{event_type}",transition="{transition}"}}"#))
    }

    pub fn pending(&self, event_type: &str, status: &str, affects: &str) -> f64 {
        self.get(&format!(
            r#"azure_scheduled_events_pending{{affects_this_vm="{affects}",event_status="{status}",event_type="{event_type}"}}"#
        ))
    }

    /// `event_info` series of `event_id`, if present.
    pub fn event_info(&self, event_id: &str) -> Option<&str> {
        let needle = format!(r#"event_id="{event_id}""#);
        self.0
            .lines()
            .find(|l| l.starts_with("azure_scheduled_events_event_info{") && l.contains(&needle))
    }

    pub fn event_value(&self, metric: &str, event_id: &str) -> Option<f64> {
        self.value(&format!(
            r#"azure_scheduled_events_{metric}{{event_id="{event_id}"}}"#
        ))
    }
}

/// A scheduled-events document at `incarnation` holding `events`, as the simulator then serves
/// it verbatim.
pub fn document(incarnation: u64, events: &[serde_json::Value]) -> bytes::Bytes {
    bytes::Bytes::from(
        serde_json::json!({"DocumentIncarnation": incarnation, "Events": events}).to_string(),
    )
}

/// `count` Freeze events of this VM, years ahead, with distinct EventIds: a large document.
pub fn freeze_events(count: usize) -> Vec<serde_json::Value> {
    (0..count)
        .map(|i| {
            serde_json::json!({
                "EventId": format!("E0000000-0000-4000-8000-{i:012}"),
                "EventStatus": "Scheduled",
                "EventType": "Freeze",
                "ResourceType": "VirtualMachine",
                "Resources": [THIS_VM],
                "NotBefore": "Mon, 11 Apr 2050 22:26:58 GMT",
                "Description": "Host server is undergoing routine maintenance.",
                "EventSource": "Platform",
                "DurationInSeconds": 9,
            })
        })
        .collect()
}

/// A directory of its own for a test, removed when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(name: &str) -> std::io::Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!("ase-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }

    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
